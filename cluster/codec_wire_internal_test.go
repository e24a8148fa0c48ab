package cluster

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
	"github.com/sluicehq/sluice/internal/wire"
)

// The hand-written codecs travel under the names the registry gives the
// types: a node of another version finds them there.
func TestWireCodecURLs(t *testing.T) {
	c := hostileCodec(t, nil)
	for v, url := range map[any]string{&wire.Records{}: recordsURL, &wire.Credit{}: creditURL} {
		rn, ok := c.internal.nameOf(reflect.TypeOf(v))
		if !ok || rn.url != url {
			t.Errorf("%T registered as %q, the hand-written codec sends %q", v, rn.url, url)
		}
	}
}

// What the hand-written encoders write, msgpack's reflection decodes into
// the same values (an older node reads it), and what msgpack's reflection
// encoder writes (an older node's), the codec decodes into the same
// values, by the hand-written decoders or the general path.
func TestWireCodecCompatible(t *testing.T) {
	c := hostileCodec(t, nil)
	recs := []*wire.Records{{}, {Seq: 1, Data: []byte{1, 2, 3}}, {Seq: math.MaxUint64, Data: bytes.Repeat([]byte{7}, 70000)},
		{Seq: 300, Data: []byte{}}}
	for _, r := range recs {
		var old wire.Records
		if err := msgpack.Unmarshal(appendRecords(nil, r), &old); err != nil || old.Seq != r.Seq || !bytes.Equal(old.Data, r.Data) {
			t.Errorf("%d bytes, seq %d: msgpack reads %d, %d bytes, %v", len(r.Data), r.Seq, old.Seq, len(old.Data), err)
		}
		if n := len(appendRecords(nil, r)); n > recordsSize(r) {
			t.Errorf("%d bytes, seq %d: %d bytes written, recordsSize says %d", len(r.Data), r.Seq, n, recordsSize(r))
		}
		legacy, err := msgpack.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		for _, data := range [][]byte{legacy, appendRecords(nil, r)} {
			v, err := c.unpack(&anypb.Any{TypeUrl: recordsURL, Value: data})
			got, _ := v.(*wire.Records)
			if err != nil || got == nil || got.Seq != r.Seq || !bytes.Equal(got.Data, r.Data) {
				t.Errorf("seq %d: unpacked %+v, %v", r.Seq, v, err)
			}
		}
		if _, ok := scanRecords(legacy); !ok {
			t.Errorf("seq %d: the hand-written decoder does not read msgpack's reflection encoding", r.Seq)
		}
	}
	for _, cr := range []*wire.Credit{{}, {Out: 3, Total: 4096}, {Out: -1, Total: math.MinInt64}, {Out: math.MaxInt32, Total: math.MaxInt64}} {
		var old wire.Credit
		if err := msgpack.Unmarshal(appendCredit(nil, cr), &old); err != nil || old != *cr {
			t.Errorf("%+v: msgpack reads %+v, %v", cr, old, err)
		}
		legacy, err := msgpack.Marshal(cr)
		if err != nil {
			t.Fatal(err)
		}
		for _, data := range [][]byte{legacy, appendCredit(nil, cr)} {
			v, err := c.unpack(&anypb.Any{TypeUrl: creditURL, Value: data})
			if got, _ := v.(*wire.Credit); err != nil || got == nil || *got != *cr {
				t.Errorf("%+v: unpacked %+v, %v", cr, v, err)
			}
		}
	}
	// Forms the hand-written decoders leave to the general path.
	other := [][]byte{
		{0x82, 0xa4, 'D', 'a', 't', 'a', 0xa2, 'h', 'i', 0xa3, 'S', 'e', 'q', 0x05}, // data as a string
		{0x81, 0xa3, 'S', 'e', 'q', 0x05},                                           // one field
		{0x82, 0xa3, 'S', 'e', 'q', 0x05, 0xa3, 'S', 'e', 'q', 0x06},                // a field twice
		{0x83, 0xa3, 'S', 'e', 'q', 0x05, 0xa1, 'X', 0xc0, 0xa4, 'D', 'a', 't', 'a', 0xc4, 0x00},
	}
	for _, data := range other {
		if _, ok := scanRecords(data); ok {
			t.Errorf("% x: read by hand", data)
		}
		want, werr := msgpacksafe.DecodeAs[wire.Records](data, msgpacksafe.Limits{})
		v, err := c.unpack(&anypb.Any{TypeUrl: recordsURL, Value: data})
		if (err == nil) != (werr == nil) {
			t.Errorf("% x: unpack %v, msgpacksafe %v", data, err, werr)
		} else if err == nil && (v.(*wire.Records).Seq != want.Seq || !bytes.Equal(v.(*wire.Records).Data, want.Data)) {
			t.Errorf("% x: unpack %+v, msgpacksafe %+v", data, v, want)
		}
	}
}

// Packing a batch's records allocates the message and its bytes only.
func TestWireCodecAllocs(t *testing.T) {
	c := hostileCodec(t, nil)
	r := &wire.Records{Seq: 12345, Data: make([]byte, 2100)}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := c.pack(r); err != nil {
			t.Fatal(err)
		}
	}); n > 2 {
		t.Errorf("pack: %v allocations, want at most 2 (the Any and its value)", n)
	}
	a, _ := c.pack(r)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := c.unpack(a); err != nil {
			t.Fatal(err)
		}
	}); n > 1 {
		t.Errorf("unpack: %v allocations, want at most 1 (the Records; its data is the Any's)", n)
	}
}

// fuzzWire checks one hand-written decoder against the general path:
// what it reads, msgpacksafe.Decode reads the same; what the codec
// refuses is refused with a named error, never a panic.
func fuzzWire[T any](t *testing.T, c *codec, url string, data []byte, scan func([]byte) (*T, bool)) {
	want, werr := msgpacksafe.DecodeAs[T](data, msgpacksafe.Limits{})
	if got, ok := scan(data); ok {
		if werr != nil {
			t.Fatalf("read by hand as %+v, msgpacksafe refuses it: %v", got, werr)
		}
		if !reflect.DeepEqual(normWire(got), normWire(&want)) {
			t.Fatalf("read by hand as %+v, msgpacksafe reads %+v", got, want)
		}
	}
	v, err := c.unpack(&anypb.Any{TypeUrl: url, Value: data})
	if err != nil {
		if !errors.Is(err, ErrUndecodable) {
			t.Fatalf("error %v is not ErrUndecodable", err)
		}
		if werr == nil {
			t.Fatalf("unpack refuses what msgpacksafe reads (%+v): %v", want, err)
		}
		return
	}
	if werr != nil {
		t.Fatalf("unpack reads %+v, msgpacksafe refuses it: %v", v, werr)
	}
	if !reflect.DeepEqual(normWire(v), normWire(&want)) {
		t.Fatalf("unpack reads %+v, msgpacksafe %+v", v, want)
	}
}

// normWire makes an empty Data and a nil one the same (msgpack makes
// either of an empty binary).
func normWire(v any) any {
	if r, ok := v.(*wire.Records); ok && len(r.Data) == 0 {
		return &wire.Records{Seq: r.Seq}
	}
	return v
}

// FuzzWireRecords: the hand-written decoder of records between processes
// against the general path.
func FuzzWireRecords(f *testing.F) {
	c := hostileCodec(f, nil)
	for _, r := range []*wire.Records{{Seq: 1, Data: []byte{0, 0, 2, 1, 1, 0, 5, 0, 0, 0, 0, 0, 0, 0}}, {Seq: 1 << 40}, {Seq: 7, Data: make([]byte, 300)}} {
		f.Add(appendRecords(nil, r))
		legacy, _ := msgpack.Marshal(r)
		f.Add(legacy)
	}
	f.Add([]byte{0x82, 0xa3, 'S', 'e', 'q', 0xd0, 0xff, 0xa4, 'D', 'a', 't', 'a', 0xc0}) // a negative int8
	f.Add([]byte{0x82, 0xa3, 'S', 'e', 'q', 0x01, 0xa4, 'D', 'a', 't', 'a', 0xc6, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0xdf, 0x7f, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) { fuzzWire(t, c, recordsURL, data, scanRecords) })
}

// FuzzWireCredit: the hand-written decoder of credits against the
// general path.
func FuzzWireCredit(f *testing.F) {
	c := hostileCodec(f, nil)
	for _, cr := range []*wire.Credit{{Out: 2, Total: 2048}, {Out: -3, Total: -1 << 40}, {Total: math.MaxInt64}} {
		f.Add(appendCredit(nil, cr))
		legacy, _ := msgpack.Marshal(cr)
		f.Add(legacy)
	}
	f.Add([]byte{0x82, 0xa3, 'O', 'u', 't', 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xa5, 'T', 'o', 't', 'a', 'l', 0x00})
	f.Add([]byte{0x82, 0xa5, 'T', 'o', 't', 'a', 'l', 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xa3, 'O', 'u', 't', 0x01}) // a float
	f.Fuzz(func(t *testing.T, data []byte) { fuzzWire(t, c, creditURL, data, scanCredit) })
}

// packRecords writes what appendRecords writes for the same envelope, in
// one buffer, for data of every binary header size.
func TestPackRecordsInPlace(t *testing.T) {
	c := hostileCodec(t, nil)
	for _, n := range []int{0, 1, 255, 256, 65535, 65536, 70000} {
		data := bytes.Repeat([]byte{9}, n)
		enc := appendFunc(func(b []byte, _ any) ([]byte, error) { return append(b, data...), nil })
		for _, seq := range []uint64{0, 1, 1 << 20, math.MaxUint64} {
			a, err := c.packRecords(seq, n, enc, nil)
			if err != nil {
				t.Fatal(err)
			}
			if want := appendRecords(nil, &wire.Records{Seq: seq, Data: data}); !bytes.Equal(a.Value, want) || a.TypeUrl != recordsURL {
				t.Fatalf("%d bytes, seq %d: packed %q % x, want % x", n, seq, a.TypeUrl, a.Value[:min(len(a.Value), 32)], want[:min(len(want), 32)])
			}
		}
	}
	r := make([]byte, 2100)
	enc := appendFunc(func(b []byte, _ any) ([]byte, error) { return append(b, r...), nil })
	if n := testing.AllocsPerRun(100, func() {
		if _, err := c.packRecords(7, len(r), enc, nil); err != nil {
			t.Fatal(err)
		}
	}); n > 2 {
		t.Errorf("packRecords: %v allocations, want at most 2 (the Any and its value)", n)
	}
}

type appendFunc func([]byte, any) ([]byte, error)

func (f appendFunc) AppendEncode(b []byte, env any) ([]byte, error) { return f(b, env) }

func (f appendFunc) EncodedSizeOf(any) int { return 0 } // packRecords is given the size
