package supervision

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// FuzzDecodeDeadLetter: the decoder of stored dead letters never panics
// and never allocates beyond what the data can hold, and what it accepts
// survives a round trip.
func FuzzDecodeDeadLetter(f *testing.F) {
	for i, d := range []DeadLetter{
		{},
		letter("orders", "post", 3),
		{Job: "j", Error: "x", Time: time.Unix(0, 1), Payload: []byte{0xc0}},
	} {
		b, err := encodeDeadLetter(d)
		if err != nil {
			f.Fatal(i, err)
		}
		f.Add(b)
	}
	f.Add([]byte{1, 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{1, 0x81, 0xa4, 't', 'i', 'm', 'e', 0xd6, 0xff, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := decodeDeadLetter(data)
		if err != nil {
			return
		}
		b, err := encodeDeadLetter(d)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", d, err)
		}
		d2, err := decodeDeadLetter(b)
		if err != nil {
			t.Fatalf("decode of re-encoded %x: %v", b, err)
		}
		if !sameLetter(d, d2) {
			t.Fatalf("round trip: %+v became %+v", d, d2)
		}
	})
}

// FuzzDecodePayload: rendering a payload never panics, and what decodes
// renders as JSON.
func FuzzDecodePayload(f *testing.F) {
	for _, v := range []any{nil, 1, "s", []any{1, "a", nil}, map[string]any{"a": []byte{1}}, map[int]any{1: 2.5}, time.Unix(5, 0)} {
		b, err := EncodePayload(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x92, 0xcb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 1, 0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := DeadLetter{Payload: bytes.Clone(data)}.DecodePayload()
		if err != nil {
			return
		}
		if _, err := json.Marshal(v); err != nil {
			t.Fatalf("payload %x decoded to %#v, which JSON refuses: %v", data, v, err)
		}
	})
}
