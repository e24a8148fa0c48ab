package persistence

import (
	"bytes"
	"testing"
	"time"
)

// The record decoders read bytes from disk: whatever the bytes, they return
// a value or an error, never panic nor allocate what the input cannot hold
// (msgpacksafe.Check runs first), and what they accept re-encodes to a
// record that decodes to the same value.
//
//	go test -fuzz FuzzDecodeEvent ./persistence

var fuzzTime = time.Date(2024, 5, 1, 12, 0, 0, 999999999, time.UTC)

func FuzzDecodeEvent(f *testing.F) {
	f.Add(encodeEvent(Event{Type: "deposited", Data: []byte{0x81, 0xa1, 0x61, 0x01}, Time: fuzzTime}))
	f.Add(encodeEvent(Event{Type: string(bytes.Repeat([]byte("t"), 300)), Data: bytes.Repeat([]byte{1}, 300)}))
	f.Add(encodeEvent(Event{}))
	f.Add([]byte{0x95, 0x02, 0xa0, 0xc0, 0x00, 0x00}) // a newer version
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff})       // an array header of 4G elements
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := decodeEvent(data)
		if err != nil {
			return
		}
		again, err := decodeEvent(encodeEvent(e))
		if err != nil {
			t.Fatalf("a decoded event does not re-encode: %v", err)
		}
		if again.Type != e.Type || !bytes.Equal(again.Data, e.Data) || !again.Time.Equal(e.Time) {
			t.Fatalf("round trip changed %+v into %+v", e, again)
		}
	})
}

func FuzzDecodeSnapshot(f *testing.F) {
	f.Add(encodeSnapshot(Snapshot{Data: []byte("state"), Time: fuzzTime}))
	f.Add(encodeSnapshot(Snapshot{}))
	f.Add([]byte{0x94, 0x01, 0xc4, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := decodeSnapshot(data)
		if err != nil {
			return
		}
		again, err := decodeSnapshot(encodeSnapshot(s))
		if err != nil {
			t.Fatalf("a decoded snapshot does not re-encode: %v", err)
		}
		if !bytes.Equal(again.Data, s.Data) || !again.Time.Equal(s.Time) {
			t.Fatalf("round trip changed %+v into %+v", s, again)
		}
	})
}

func FuzzDecodeCheckpoint(f *testing.F) {
	f.Add(encodeCheckpoint(Checkpoint{ID: 7, Time: fuzzTime,
		States:  map[string][]byte{"count/0": []byte("s"), "count/1": nil},
		Offsets: map[string]int64{"lines/0": 1 << 40, "lines/1": -3}}))
	f.Add(encodeCheckpoint(Checkpoint{}))
	f.Add(encodeCheckpoint(Checkpoint{ID: 9, Time: fuzzTime, States: map[string][]byte{"count/0": []byte("s")},
		Channels: map[string][]byte{"count/0/in0": []byte("records"), "count/0/in1": {}}}))
	f.Add([]byte{0x96, 0x01, 0x01, 0x00, 0x00, 0xdf, 0x7f, 0xff, 0xff, 0xff, 0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		cp, err := decodeCheckpoint(data)
		if err != nil {
			return
		}
		again, err := decodeCheckpoint(encodeCheckpoint(cp))
		if err != nil {
			t.Fatalf("a decoded checkpoint does not re-encode: %v", err)
		}
		if again.ID != cp.ID || !again.Time.Equal(cp.Time) || len(again.States) != len(cp.States) || len(again.Offsets) != len(cp.Offsets) {
			t.Fatalf("round trip changed %+v into %+v", cp, again)
		}
		for k, v := range cp.States {
			if !bytes.Equal(again.States[k], v) {
				t.Fatalf("state %q: %q became %q", k, v, again.States[k])
			}
		}
		for k, v := range cp.Offsets {
			if again.Offsets[k] != v {
				t.Fatalf("offset %q: %d became %d", k, v, again.Offsets[k])
			}
		}
		if len(again.Channels) != len(cp.Channels) {
			t.Fatalf("round trip changed the channels %v into %v", cp.Channels, again.Channels)
		}
		for k, v := range cp.Channels {
			if !bytes.Equal(again.Channels[k], v) {
				t.Fatalf("channel %q: %q became %q", k, v, again.Channels[k])
			}
		}
	})
}

type fuzzDeposited struct {
	Account string
	Amount  int64
	Tags    []string
	Meta    map[string]int
}

// FuzzRegistryDecode: an application's event type decoded from any bytes.
func FuzzRegistryDecode(f *testing.F) {
	r := NewRegistry().Register("deposited", fuzzDeposited{}).Register("ptr", &fuzzDeposited{})
	_, good, err := r.Encode(fuzzDeposited{Account: "a", Amount: 5, Tags: []string{"x"}, Meta: map[string]int{"k": 1}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte{0xdc, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, name := range []string{"deposited", "ptr"} {
			v, err := r.Decode(name, data)
			if err != nil {
				continue
			}
			switch v.(type) {
			case fuzzDeposited, *fuzzDeposited:
			default:
				t.Fatalf("%q decoded to %T", name, v)
			}
		}
	})
}

// FuzzDecodeRunAndGroup: the journal's runs of events and log entries.
func FuzzDecodeRunAndGroup(f *testing.F) {
	rec := encodeEvent(Event{Type: "e", Data: []byte("x"), Time: fuzzTime})
	f.Add(encodeRun([][]byte{rec, rec}))
	f.Add(encodeGroup([]*appendReq{{id: "acct-1", first: 7, recs: [][]byte{rec, rec}}, {id: "b", first: 1, recs: [][]byte{rec}}}))
	f.Add([]byte{0x92, 0x01, 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		if recs, err := decodeRun(data); err == nil {
			again, err := decodeRun(encodeRun(recs))
			if err != nil || len(again) != len(recs) {
				t.Fatalf("a run of %d records re-encodes to %d, %v", len(recs), len(again), err)
			}
			for i := range recs {
				if !bytes.Equal(recs[i], again[i]) {
					t.Fatalf("record %d changed", i)
				}
			}
		}
		if apps, err := decodeGroup(data); err == nil {
			reqs := make([]*appendReq, len(apps))
			for i, a := range apps {
				reqs[i] = &appendReq{id: a.id, first: a.first, recs: a.recs}
			}
			again, err := decodeGroup(encodeGroup(reqs))
			if err != nil || len(again) != len(apps) {
				t.Fatalf("a log entry of %d appends re-encodes to %d, %v", len(apps), len(again), err)
			}
			for i := range apps {
				if again[i].id != apps[i].id || again[i].first != apps[i].first || len(again[i].recs) != len(apps[i].recs) {
					t.Fatalf("append %d changed: %+v became %+v", i, apps[i], again[i])
				}
			}
		}
	})
}

// An unaligned checkpoint's channels survive the store; an aligned one is
// the version-1 record of five fields, as before unaligned checkpoints.
func TestCheckpointChannelsRoundTrip(t *testing.T) {
	cp := Checkpoint{ID: 3, Time: time.Unix(5, 0).UTC(), States: map[string][]byte{"a/0": []byte("x")}, Offsets: map[string]int64{"s/0": 4},
		Channels: map[string][]byte{"a/0/in1": []byte("records")}}
	got, err := decodeCheckpoint(encodeCheckpoint(cp))
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Channels["a/0/in1"]) != "records" || len(got.Channels) != 1 || got.Offsets["s/0"] != 4 {
		t.Fatalf("round trip: %+v", got)
	}
	cp.Channels = nil
	if b := encodeCheckpoint(cp); b[0] != 0x96 {
		t.Fatalf("an aligned checkpoint is a record of %#x, want the 6-element array 0x96", b[0])
	}
}
