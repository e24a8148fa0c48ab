package stage

import (
	"encoding/binary"
	"errors"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/msgpacksafe"
)

// Hostile input for the runtime's decoders (the envelope codec of edges
// between processes and of the spill, and the operators' state restored
// from a checkpoint), with record types as applications write them.

type lineItem struct {
	SKU string
	Qty int
	At  time.Time
}

type event struct {
	ID    int64
	At    time.Time
	User  *string
	Attrs map[string]int
	Geo   struct{ Lat, Lon float64 }
	Items []lineItem
}

func sampleEvents() []event {
	u := "ann"
	e := event{ID: 7, At: time.Unix(1_700_000_000, 5).UTC(), User: &u, Attrs: map[string]int{"a": 1},
		Items: []lineItem{{SKU: "x", Qty: 2, At: time.Unix(1_700_000_001, 0).UTC()}}}
	e.Geo.Lat, e.Geo.Lon = 52.5, 13.4
	f := event{ID: 8, Attrs: map[string]int{}, Items: []lineItem{}}
	return []event{e, f}
}

// envelope builds the bytes of a data envelope of count records whose
// values are body, as Codec.Encode lays them out.
func envelope(count uint64, body []byte) []byte {
	b := []byte{byte(actors.Data), 0}
	b = binary.AppendUvarint(b, 0) // channel
	b = binary.AppendUvarint(b, 1) // seq
	b = binary.AppendUvarint(b, count)
	b = binary.AppendVarint(b, 0) // mark
	return append(b, body...)
}

// ones is a msgpack array of n one-byte elements (nil), about n bytes.
func ones(n int) []byte {
	b := []byte{0xdd, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	for range n {
		b = append(b, 0xc0)
	}
	return b
}

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// utc returns es with every time in UTC (msgpack decodes times in Local).
func utc(es []event) []event {
	out := make([]event, len(es))
	for i, e := range es {
		e.At = e.At.UTC()
		e.Items = slices.Clone(e.Items)
		for j := range e.Items {
			e.Items[j].At = e.Items[j].At.UTC()
		}
		out[i] = e
	}
	return out
}

func TestEnvelopeRealisticRoundTrip(t *testing.T) {
	c := Codec[event]{}
	in := sampleEvents()
	data, err := c.Encode(&actors.Envelope{Kind: actors.Data, Seq: 4, Count: len(in), Payload: &Batch[event]{Vs: in, Ts: []int64{1, 2}}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	b := got.(*actors.Envelope).Payload.(*Batch[event])
	if !reflect.DeepEqual(utc(b.Vs), utc(in)) || !slices.Equal(b.Ts, []int64{1, 2}) {
		t.Fatalf("round trip: got %+v, want %+v", b.Vs, in)
	}
}

// TestEnvelopeNilTime: nil where a record's time.Time is (msgpack v5.4.1
// panics on it), at the top of the record and nested in a slice of
// structs: refused with an error that names the type and the field.
func TestEnvelopeNilTime(t *testing.T) {
	for _, c := range []struct {
		rec  map[string]any
		path string
	}{
		{map[string]any{"ID": 1, "At": nil}, "[0].At"},
		{map[string]any{"ID": 1, "Items": []map[string]any{{"SKU": "x", "At": nil}}}, "[0].Items[0].At"},
	} {
		body, err := msgpack.Marshal([]map[string]any{c.rec})
		if err != nil {
			t.Fatal(err)
		}
		_, err = Codec[event]{}.Decode(envelope(1, body))
		var me *msgpacksafe.Error
		if !errors.As(err, &me) || !errors.Is(err, msgpacksafe.ErrMalformed) {
			t.Fatalf("%v: error %v, want a msgpacksafe.ErrMalformed", c.rec, err)
		}
		if me.Path != c.path || !strings.Contains(err.Error(), "stage.event") || !strings.Contains(err.Error(), "envelope seq 1") {
			t.Fatalf("error %q (path %q) does not name the type, the envelope and %s", err, me.Path, c.path)
		}
	}
}

// TestEnvelopeOneByteElements: 1 MiB of one-byte elements, for records
// that take far more memory each, allocates less than 8 MiB whichever
// path decodes them (msgpack, the []string fast path, the header's count).
func TestEnvelopeOneByteElements(t *testing.T) {
	const n = 1 << 20
	const limit = 8 << 20
	cases := []struct {
		name string
		data []byte
		dec  func([]byte) (any, error)
	}{
		{"msgpack array of nils for []event", envelope(n, ones(n)), Codec[event]{}.Decode},
		{"msgpack array of nils for []lineItem", envelope(n, ones(n)), Codec[lineItem]{}.Decode},
		{"empty strings", envelope(n, make([]byte, n)), Codec[string]{}.Decode},
		{"header count for []event over a small body", envelope(n, ones(16)), Codec[event]{}.Decode},
	}
	for _, c := range cases {
		var err error
		a := allocated(func() { _, err = c.dec(c.data) })
		if err == nil {
			t.Fatalf("%s: accepted", c.name)
		}
		if a >= limit {
			t.Fatalf("%s: %d bytes in allocated %d bytes (limit %d)", c.name, len(c.data), a, limit)
		}
		t.Logf("%s: %d bytes in, %d bytes allocated, refused: %v", c.name, len(c.data), a, err)
	}
}

// TestEnvelopeHugeCounts: counts of 2^62 records or headers in a few bytes
// are refused before anything is allocated for them.
func TestEnvelopeHugeCounts(t *testing.T) {
	for name, dec := range map[string]func([]byte) (any, error){
		"event": Codec[event]{}.Decode, "string": Codec[string]{}.Decode, "int64": Codec[int64]{}.Decode,
	} {
		data := envelope(1<<62, []byte{0x91, 0xc0})
		var err error
		if a := allocated(func() { _, err = dec(data) }); err == nil || a > 1<<16 {
			t.Fatalf("%s: 2^62 records: error %v, %d bytes allocated", name, err, a)
		}
		hdr := []byte{byte(actors.Data), flagHeaders, 0, 1, 0, 0}
		hdr = binary.AppendUvarint(hdr, 1<<62)
		hdr = append(hdr, 1, 'k', 1, 'v')
		if a := allocated(func() { _, err = dec(hdr) }); err == nil || a > 1<<16 {
			t.Fatalf("%s: 2^62 headers: error %v, %d bytes allocated", name, err, a)
		}
	}
	// A msgpack array header of 2^32-1 elements in five bytes.
	if _, err := (Codec[event]{}).Decode(envelope(0, []byte{0xdd, 0xff, 0xff, 0xff, 0xff})); !errors.Is(err, msgpacksafe.ErrMalformed) {
		t.Fatalf("array of 2^32-1 in 5 bytes: %v", err)
	}
}

// keyedState is the memory backend's format of a keyed aggregation's state
// (internal/state.Mem).
type keyedState[K comparable, A any] struct {
	Keys []K `msgpack:"k"`
	Accs []A `msgpack:"a"`
}

// stateDecoders decode every kind of operator state with decodeState, as
// the operators' RestoreState do, with realistic types.
var stateDecoders = map[string]func([]byte) error{
	"per-key": func(b []byte) error { var st keyedState[string, event]; return decodeState(b, &st, "per-key state") },
	"window":  func(b []byte) error { var st winState[string, event]; return decodeState(b, &st, "window state") },
	"process": func(b []byte) error { var st processState[string, event]; return decodeState(b, &st, "process state") },
	"join":    func(b []byte) error { var st keyedBufs[string, []lineItem]; return decodeState(b, &st, "join state") },
}

func TestStateRestoresHostile(t *testing.T) {
	// nil where a time.Time is.
	nilTime, err := msgpack.Marshal(map[string]any{"k": []string{"a"}, "a": []map[string]any{{"At": nil}}})
	if err != nil {
		t.Fatal(err)
	}
	var st keyedState[string, event]
	err = decodeState(nilTime, &st, "per-key state")
	var me *msgpacksafe.Error
	if !errors.As(err, &me) || me.Path != ".a[0].At" || !strings.Contains(err.Error(), "per-key state") {
		t.Fatalf("nil time in per-key state: %v", err)
	}
	// 1 MiB of one-byte elements where accumulators are, and a count of
	// 2^32-1 in a few bytes.
	// The field of each state that holds a slice of records.
	field := map[string]byte{"per-key": 'a', "window": 'p', "process": 's', "join": 'b'}
	for name, dec := range stateDecoders {
		big := append([]byte{0x82, 0xa1, 'k', 0x90, 0xa1, field[name]}, ones(1<<20)...)
		huge := []byte{0x82, 0xa1, 'k', 0x90, 0xa1, field[name], 0xdd, 0xff, 0xff, 0xff, 0xff}
		for what, data := range map[string][]byte{"1 MiB of one-byte elements": big, "2^32-1 elements": huge} {
			var err error
			a := allocated(func() { err = dec(data) })
			if err == nil || a >= 8<<20 {
				t.Fatalf("%s state, %s: error %v, %d bytes allocated", name, what, err, a)
			}
			t.Logf("%s state, %s: %d bytes allocated: %v", name, what, a, err)
		}
	}
}

func FuzzEnvelopeDecodeEvent(f *testing.F) {
	c := Codec[event]{}
	seed, err := c.Encode(&actors.Envelope{Kind: actors.Data, Count: 2, Payload: &Batch[event]{Vs: sampleEvents(), Ts: []int64{1, 2}},
		Headers: map[string]string{"traceparent": "00-x"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add(envelope(1, []byte{0x91, 0x82, 0xa2, 'I', 'D', 0x01, 0xa2, 'A', 't', 0xc0}))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := c.Decode(data)
		if err != nil {
			return
		}
		e := got.(*actors.Envelope)
		if e.Kind == actors.Data {
			if b, ok := e.Payload.(*Batch[event]); !ok || len(b.Vs) != e.Count {
				t.Fatalf("data envelope of %d records with payload %#v", e.Count, e.Payload)
			}
		}
	})
}

func FuzzStateDecode(f *testing.F) {
	u := "bob"
	ev := sampleEvents()
	seeds := []any{
		keyedState[string, event]{Keys: []string{"a", "b"}, Accs: ev},
		winState[string, event]{Wm: 5, Panes: []paneState[string, event]{{End: 10, Keys: []string{"a"}, Accs: ev[:1]}}},
		processState[string, event]{Wm: 1, Keys: []string{u}, States: ev[:1], TKeys: []string{u}, TAt: []int64{3}},
		keyedBufs[string, []lineItem]{Wm: 2, Keys: []string{"a"}, Bufs: [][]lineItem{ev[0].Items}},
	}
	for _, s := range seeds {
		b, err := msgpack.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, dec := range stateDecoders {
			_ = dec(data) // must not panic, hang or allocate past the budget
		}
	})
}
