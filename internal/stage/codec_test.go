package stage

import (
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/actors"
)

type point struct {
	X, Y int
	Tag  string
}

func roundTrip[T any](t *testing.T, vs []T, ts []int64, headers map[string]string) {
	t.Helper()
	c := Codec[T]{}
	in := &actors.Envelope{Kind: actors.Data, Channel: 3, Seq: 77, Count: len(vs), Payload: &Batch[T]{Vs: vs, Ts: ts}, Headers: headers}
	data, err := c.Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	out := got.(*actors.Envelope)
	b := out.Payload.(*Batch[T])
	if out.Channel != 3 || out.Seq != 77 || out.Count != len(vs) || !reflect.DeepEqual(b.Vs, vs) ||
		!reflect.DeepEqual(b.Ts, ts) || len(out.Headers) != len(headers) {
		t.Fatalf("round trip of %T: got %+v / %+v", vs, out, b)
	}
	for k, v := range headers {
		if out.Headers[k] != v {
			t.Fatalf("header %q = %q, want %q", k, out.Headers[k], v)
		}
	}
}

func TestEnvelopeCodecRoundTrips(t *testing.T) {
	roundTrip(t, []int64{0, -1, 1 << 62}, nil, nil)
	roundTrip(t, []int{5, -5}, []int64{100, 200}, map[string]string{"traceparent": "00-abc"})
	roundTrip(t, []float64{1.5, -0.25}, nil, nil)
	roundTrip(t, []string{"", "héllo", "x"}, nil, nil)
	roundTrip(t, []point{{1, 2, "a"}, {3, 4, ""}}, []int64{1, 2}, nil)

	c := Codec[int64]{}
	for _, kind := range []actors.Kind{actors.EndOfStream, actors.Barrier, actors.Watermark} {
		data, err := c.Encode(&actors.Envelope{Kind: kind, Channel: 1, Seq: 9, Mark: -42})
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		if e := got.(*actors.Envelope); e.Kind != kind || e.Mark != -42 || e.Seq != 9 || e.Payload != nil {
			t.Fatalf("control round trip: %+v", e)
		}
	}
}

func TestEnvelopeCodecRefusesDamage(t *testing.T) {
	c := Codec[string]{}
	data, _ := c.Encode(&actors.Envelope{Kind: actors.Data, Count: 2, Payload: &Batch[string]{Vs: []string{"ab", "cd"}}})
	for i := range len(data) {
		if _, err := c.Decode(data[:i]); err == nil {
			t.Fatalf("decoding the first %d of %d bytes succeeded", i, len(data))
		}
	}
	// A count of a billion records in a few bytes is refused before any allocation.
	huge := []byte{byte(actors.Data), 0, 0, 0, 0x80, 0x94, 0xeb, 0xdc, 0x03, 0, 1, 'x'}
	if _, err := c.Decode(huge); err == nil {
		t.Fatal("a billion-record header was accepted")
	}
}

// Integers go in the fewest bytes that hold every value of the batch
// (zigzagged, all of one width), or 8 each when a value needs them; every
// width round-trips, at the edges of its range too.
func TestEnvelopeCodecNarrowIntegers(t *testing.T) {
	for width := 1; width <= 8; width++ {
		hi := int64(math.MaxInt64)
		if width < 8 {
			hi = int64(1)<<(8*width-1) - 1 // the largest zigzag value of width bytes is 2*hi+1
		}
		lo := -hi - 1
		vs := []int64{0, hi, lo, 1, -1, hi - 1, lo + 1, 3}
		roundTrip(t, vs, nil, nil)
		ints := make([]int, len(vs))
		for i, v := range vs {
			ints[i] = int(v)
		}
		roundTrip(t, ints, []int64{1, 2, 3, 4, 5, 6, 7, 8}, nil)
		data, err := Codec[int64]{}.Encode(&actors.Envelope{Kind: actors.Data, Count: len(vs), Payload: &Batch[int64]{Vs: vs}})
		if err != nil {
			t.Fatal(err)
		}
		header := 6 // kind, flags, channel, seq, count, mark: one byte each here
		if width < 8 {
			header++ // the width
		}
		if want := header + width*len(vs); len(data) != want {
			t.Fatalf("width %d: %d bytes, want %d", width, len(data), want)
		}
		if narrowed := data[1]&flagNarrow != 0; narrowed != (width < 8) {
			t.Fatalf("width %d: flags %08b", width, data[1])
		}
		for i := range len(data) { // every truncation is refused
			if _, err := (Codec[int64]{}).Decode(data[:i]); err == nil {
				t.Fatalf("width %d: the first %d of %d bytes decoded", width, i, len(data))
			}
		}
	}
	// 256 records of the values of a counter take about what varints take.
	vs := make([]int64, 256)
	for i := range vs {
		vs[i] = 5_000_000 + int64(i)
	}
	data, _ := Codec[int64]{}.Encode(&actors.Envelope{Kind: actors.Data, Count: len(vs), Payload: &Batch[int64]{Vs: vs}})
	if len(data) > 7+4*256 {
		t.Fatalf("256 values near 5 M took %d bytes", len(data))
	}
	// The size a framing caller allocates holds the encoding, with the
	// room its word-at-a-time writes need, so that encoding in place does
	// not grow the buffer.
	env := &actors.Envelope{Kind: actors.Data, Channel: 300, Seq: 1 << 40, Count: len(vs), Mark: -1 << 50, Payload: &Batch[int64]{Vs: vs}}
	size := Codec[int64]{}.EncodedSizeOf(env)
	if size > 2*len(data) {
		t.Fatalf("EncodedSizeOf %d for an encoding of %d bytes", size, len(data))
	}
	buf := make([]byte, 0, size)
	out, err := Codec[int64]{}.AppendEncode(buf, env)
	if err != nil {
		t.Fatal(err)
	}
	if &out[0] != &buf[:1][0] {
		t.Fatalf("AppendEncode grew a buffer of EncodedSizeOf %d bytes (wrote %d)", size, len(out))
	}
}

// A width outside 1 to 7, or narrow integers for records that are not
// integers, is refused by name.
func TestEnvelopeCodecRefusesBadWidth(t *testing.T) {
	data, _ := Codec[int64]{}.Encode(&actors.Envelope{Kind: actors.Data, Count: 2, Payload: &Batch[int64]{Vs: []int64{1, 2}}})
	at := len(data) - 3 // the width byte, then the two values
	if data[at] != 1 {
		t.Fatalf("width byte %d, want 1", data[at])
	}
	for _, w := range []byte{0, 8, 9, 255} {
		bad := append([]byte(nil), data...)
		bad[at] = w
		bad = append(bad, make([]byte, 16)...)
		if _, err := (Codec[int64]{}).Decode(bad); !errors.Is(err, errWidth) {
			t.Fatalf("width %d: %v, want errWidth", w, err)
		}
	}
	if _, err := (Codec[float64]{}).Decode(data); err == nil || !strings.Contains(err.Error(), "narrow integers") {
		t.Fatalf("narrow integers decoded as float64: %v", err)
	}
}

// An envelope encoded for another process gives its array back
// (Reclaim), and the decoder of the next batch takes it, overwriting it.
func TestDecodeLentReclaimed(t *testing.T) {
	var lend Arrays
	free := arraysFor[int64](&lend, 4, true)
	e := &Emitter[int64]{free: &returns[int64]{}}
	x := e.newShipped()
	x.env.Kind, x.env.Count = actors.Data, 4
	x.b.Vs = []int64{9, 9, 9, 9}
	arr := &x.b.Vs[0]
	Reclaim(&x.env, &lend, 4)
	if x.b.Vs != nil || e.free.head.Load() != x {
		t.Fatalf("after Reclaim: batch %v, envelope given back: %v", x.b.Vs, e.free.head.Load() == x)
	}
	in, _ := Codec[int64]{}.Encode(&actors.Envelope{Kind: actors.Data, Count: 3, Payload: &Batch[int64]{Vs: []int64{1, -2, 3}}})
	got, err := Codec[int64]{}.DecodeLent(in, &lend, 4)
	if err != nil {
		t.Fatal(err)
	}
	vs := got.(*actors.Envelope).Payload.(*Batch[int64]).Vs
	if !slices.Equal(vs, []int64{1, -2, 3}) || &vs[0] != arr {
		t.Fatalf("decoded %v (lent array: %v)", vs, &vs[0] == arr)
	}
	if free.get() != nil {
		t.Fatal("the lent array is still in the list")
	}
	// A decoded envelope is no emitter's: Reclaim leaves it alone.
	Reclaim(got.(*actors.Envelope), &lend, 4)
	if free.get() != nil {
		t.Fatal("Reclaim kept the array of a decoded envelope")
	}
}

func FuzzEnvelopeDecode(f *testing.F) {
	c := Codec[point]{}
	seed, _ := c.Encode(&actors.Envelope{Kind: actors.Data, Count: 1, Payload: &Batch[point]{Vs: []point{{1, 2, "z"}}}, Headers: map[string]string{"a": "b"}})
	f.Add(seed)
	s := Codec[string]{}
	seed2, _ := s.Encode(&actors.Envelope{Kind: actors.Data, Count: 2, Payload: &Batch[string]{Vs: []string{"x", "y"}, Ts: []int64{1, 2}}})
	f.Add(seed2)
	// With latency: ingestion and send times, a sampling rate.
	seed3, _ := s.Encode(&actors.Envelope{Kind: actors.Data, Count: 1, Payload: &Batch[string]{Vs: []string{"x"}, Ts: []int64{5}},
		Born: 1_700_000_000_000_000_000, Sent: 1_700_000_000_001_000_000, Keep: 0.25})
	f.Add(seed3)
	seed4, _ := c.Encode(&actors.Envelope{Kind: actors.Watermark, Mark: 7, Born: 1_700_000_000_000_000_000})
	f.Add(seed4)
	// Narrow integers (3 bytes each).
	seed5, _ := Codec[int64]{}.Encode(&actors.Envelope{Kind: actors.Data, Count: 3, Payload: &Batch[int64]{Vs: []int64{-70000, 5, 80000}}})
	f.Add(seed5)
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, dec := range []func([]byte) (any, error){c.Decode, s.Decode, Codec[int64]{}.Decode} {
			got, err := dec(data)
			if err != nil {
				continue
			}
			e := got.(*actors.Envelope)
			if e.Kind == actors.Data && e.Payload == nil {
				t.Fatalf("data envelope without payload: %+v", e)
			}
			if e.Born < 0 || e.Sent < 0 || !(e.Keep >= 0 && e.Keep <= 1) {
				t.Fatalf("latency out of range decoded: born %d, sent %d, keep %v", e.Born, e.Sent, e.Keep)
			}
		}
		// Decoded into a lent array full of other values, the records and
		// the error are Decode's.
		var lend Arrays
		dirty := arraysFor[int64](&lend, 4, true)
		dirty.put([]int64{-1, -2, -3, -4})
		want, werr := Codec[int64]{}.Decode(data)
		lent, lerr := Codec[int64]{}.DecodeLent(data, &lend, 4)
		if (werr == nil) != (lerr == nil) || werr != nil && werr.Error() != lerr.Error() {
			t.Fatalf("DecodeLent: %v, Decode: %v", lerr, werr)
		}
		if werr == nil {
			w, l := want.(*actors.Envelope), lent.(*actors.Envelope)
			if w.Kind == actors.Data && !slices.Equal(w.Payload.(*Batch[int64]).Vs, l.Payload.(*Batch[int64]).Vs) {
				t.Fatalf("DecodeLent decoded %v, Decode %v", l.Payload.(*Batch[int64]).Vs, w.Payload.(*Batch[int64]).Vs)
			}
		}
		// Integers that decode encode again to the same values (narrow or not).
		if got, err := (Codec[int64]{}).Decode(data); err == nil {
			e := got.(*actors.Envelope)
			if e.Kind != actors.Data {
				return
			}
			again, err := Codec[int64]{}.Encode(e)
			if err != nil {
				t.Fatalf("re-encode: %v", err)
			}
			back, err := Codec[int64]{}.Decode(again)
			if err != nil {
				t.Fatalf("decode of the re-encoding: %v", err)
			}
			if !reflect.DeepEqual(back.(*actors.Envelope).Payload.(*Batch[int64]).Vs, e.Payload.(*Batch[int64]).Vs) {
				t.Fatalf("values changed through a re-encoding")
			}
		}
	})
}

// The ingestion time, send time and sampling rate cross processes with the
// envelope (data and control marks alike); a rate outside [0, 1] or a
// truncated latency block is refused with the envelope's sequence number.
func TestEnvelopeLatencyRoundTrip(t *testing.T) {
	c := Codec[int64]{}
	for _, in := range []*actors.Envelope{
		{Kind: actors.Data, Seq: 3, Count: 2, Payload: &Batch[int64]{Vs: []int64{1, 2}}, Born: 1_700_000_000_000_000_000, Sent: 1_700_000_000_002_000_000, Keep: 0.3},
		{Kind: actors.Watermark, Seq: 4, Mark: 99, Born: 1_700_000_000_000_000_000, Sent: 1_700_000_000_003_000_000},
		{Kind: actors.Data, Seq: 5, Count: 1, Payload: &Batch[int64]{Vs: []int64{7}}}, // none: no latency block
	} {
		b, err := c.Encode(in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Decode(b)
		if err != nil {
			t.Fatalf("seq %d: %v", in.Seq, err)
		}
		e := got.(*actors.Envelope)
		if e.Born != in.Born || e.Sent != in.Sent || e.Keep != in.Keep || e.Mark != in.Mark {
			t.Errorf("seq %d: born %d sent %d keep %v mark %d, want %d %d %v %d", in.Seq, e.Born, e.Sent, e.Keep, e.Mark, in.Born, in.Sent, in.Keep, in.Mark)
		}
	}
	if _, err := c.Encode(&actors.Envelope{Kind: actors.Data, Seq: 6, Count: 1, Payload: &Batch[int64]{Vs: []int64{1}}, Keep: 1.5}); err == nil {
		t.Error("a keep rate of 1.5 was encoded")
	}
	b, err := c.Encode(&actors.Envelope{Kind: actors.Watermark, Seq: 8, Mark: 1, Keep: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), b...)
	binary.LittleEndian.PutUint64(bad[len(bad)-8:], math.Float64bits(2))
	if _, err := c.Decode(bad); err == nil || !strings.Contains(err.Error(), "seq 8") || !strings.Contains(err.Error(), "keep 2") {
		t.Errorf("keep 2 decoded: %v", err)
	}
	if _, err := c.Decode(b[:len(b)-3]); err == nil || !strings.Contains(err.Error(), "seq 8") {
		t.Errorf("a truncated latency block decoded: %v", err)
	}
}

// BenchmarkEnvelopeCodecInt64 encodes and decodes a batch of 256 int64s
// whose values need 3 bytes each (narrow) or 8 (fixed).
func BenchmarkEnvelopeCodecInt64(b *testing.B) {
	for _, c := range []struct {
		name string
		base int64
	}{{"narrow", 5_000_000}, {"fixed", 1 << 60}} {
		b.Run(c.name, func(b *testing.B) {
			vs := make([]int64, 256)
			for i := range vs {
				vs[i] = c.base + int64(i)
			}
			env := &actors.Envelope{Kind: actors.Data, Count: len(vs), Payload: &Batch[int64]{Vs: vs}}
			buf := make([]byte, 0, EncodedSize(len(vs)))
			b.ReportAllocs()
			for b.Loop() {
				data, err := Codec[int64]{}.AppendEncode(buf, env)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := (Codec[int64]{}).Decode(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
