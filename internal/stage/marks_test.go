package stage

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/actors"
)

func testMark(i int32, id string, b byte) Mark {
	tid, sid := trace.TraceID{b, 1, 2, 3}, trace.SpanID{b, 9}
	return Mark{I: i, ID: id, SC: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})}
}

// markedEnvelope is a batch of events whose second and third records are
// sampled.
func markedEnvelope() *actors.Envelope {
	return &actors.Envelope{Kind: actors.Data, Seq: 5, Count: 3, Payload: &Batch[event]{Vs: append(sampleEvents(), sampleEvents()[0]),
		Ts: []int64{1, 2, 3}, Tr: []Mark{testMark(1, "read/0/41", 7), testMark(2, "read/0/42", 8)}}}
}

// TestEnvelopeCodecCarriesMarks: a batch's sampled records cross the wire
// with their ids and trace contexts, and an unsampled batch carries none.
func TestEnvelopeCodecCarriesMarks(t *testing.T) {
	c := Codec[event]{}
	in := markedEnvelope()
	data, err := c.Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	want := in.Payload.(*Batch[event]).Tr
	if tr := got.(*actors.Envelope).Payload.(*Batch[event]).Tr; !reflect.DeepEqual(tr, want) {
		t.Fatalf("marks after the round trip: %+v, want %+v", tr, want)
	}
	plain, _ := Codec[int64]{}.Encode(&actors.Envelope{Kind: actors.Data, Count: 1, Payload: &Batch[int64]{Vs: []int64{1}}})
	back, err := Codec[int64]{}.Decode(plain)
	if err != nil || back.(*actors.Envelope).Payload.(*Batch[int64]).Tr != nil {
		t.Fatalf("an unsampled batch decoded with marks: %v, %v", back, err)
	}
}

// TestEnvelopeCodecRefusesBadMarks: marks out of the batch, out of order,
// with an invalid trace context, an id too long, or cut short are refused
// with an error naming the envelope.
func TestEnvelopeCodecRefusesBadMarks(t *testing.T) {
	c := Codec[int64]{}
	enc := func(ms ...Mark) []byte {
		t.Helper()
		data, err := c.Encode(&actors.Envelope{Kind: actors.Data, Seq: 9, Count: 3, Payload: &Batch[int64]{Vs: []int64{1, 2, 3}, Tr: ms}})
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	good := enc(testMark(0, "a", 1), testMark(2, "b", 2))
	for i := range len(good) {
		if _, err := c.Decode(good[:i]); err == nil {
			t.Fatalf("decoding the first %d of %d bytes succeeded", i, len(good))
		}
	}
	for name, data := range map[string][]byte{
		"out of order": enc(testMark(2, "a", 1), testMark(1, "b", 2)),
		"duplicate":    enc(testMark(1, "a", 1), testMark(1, "b", 2)),
		"invalid":      enc(Mark{I: 0, ID: "x"}),
		"id too long":  longMarkID(enc(testMark(0, strings.Repeat("x", maxMarkID), 1))),
	} {
		if _, err := c.Decode(data); err == nil || !strings.Contains(err.Error(), "envelope seq 9") {
			t.Errorf("%s: decoded (err %v)", name, err)
		}
	}
	if _, err := c.Encode(&actors.Envelope{Kind: actors.Data, Count: 1, Payload: &Batch[int64]{Vs: []int64{1}, Tr: []Mark{testMark(3, "a", 1)}}}); err == nil {
		t.Fatal("a mark beyond the batch was encoded")
	}
}

// longMarkID makes the envelope data, whose one mark's id is maxMarkID
// bytes of x, say an id a byte longer (Encode refuses to write one).
func longMarkID(data []byte) []byte {
	x := []byte(strings.Repeat("x", maxMarkID))
	i := bytes.Index(data, x)
	n := binary.PutUvarint(make([]byte, binary.MaxVarintLen64), maxMarkID)
	out := binary.AppendUvarint(slices.Clone(data[:i-n]), maxMarkID+1)
	out = append(append(out, 'x'), data[i:]...)
	return out
}

func FuzzEnvelopeDecodeMarks(f *testing.F) {
	c := Codec[event]{}
	seed, err := c.Encode(markedEnvelope())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := c.Decode(data)
		if err != nil {
			return
		}
		e := got.(*actors.Envelope)
		if e.Kind != actors.Data {
			return
		}
		b := e.Payload.(*Batch[event])
		last := int32(-1)
		for _, m := range b.Tr {
			if m.I <= last || int(m.I) >= len(b.Vs) || !m.SC.IsValid() || len(m.ID) > maxMarkID {
				t.Fatalf("decoded a bad mark %+v in a batch of %d", m, len(b.Vs))
			}
			last = m.I
		}
	})
}

type capture struct{ envs map[int][]*actors.Envelope }

func (c *capture) Enqueue(_, target int, env *actors.Envelope) {
	c.envs[target] = append(c.envs[target], env)
}
func (c *capture) Watermarked(int64) {}

// TestMarksFollowRecords: through a hash shuffle split in batches, a
// rebalance, and Retain (a filter, an overflow policy shedding records),
// every mark stays on its record.
func TestMarksFollowRecords(t *testing.T) {
	vs := make([]int64, 20)
	var marks []Mark
	for i := range vs {
		vs[i] = int64(i)
		if i%3 == 0 {
			marks = append(marks, testMark(int32(i), "r/"+string(rune('a'+i)), byte(i+1)))
		}
	}
	idOf := func(v int64) string { return "r/" + string(rune('a'+v)) }
	check := func(what string, b *Batch[int64]) int {
		t.Helper()
		for _, m := range b.Tr {
			if got := idOf(b.Vs[m.I]); got != m.ID {
				t.Fatalf("%s: mark %s on record %d", what, m.ID, b.Vs[m.I])
			}
		}
		return len(b.Tr)
	}
	for _, part := range []Partition{Hash, Rebalance, Forward} {
		c := &capture{envs: map[int][]*actors.Envelope{}}
		e := NewEmitter[int64]([]Output{{Part: part, Hasher: func(v int64) uint64 { return uint64(v) * 0x9e3779b97f4a7c15 }, Targets: 2}}, 4, c)
		if part == Forward {
			e = NewEmitter[int64]([]Output{{Part: part, Targets: 1}}, 4, c)
		}
		e.Push(&Batch[int64]{Vs: slicesClone(vs), Tr: slicesClone(marks)})
		e.Push(&Batch[int64]{Vs: slicesClone(vs), Tr: slicesClone(marks)})
		e.Flush()
		n := 0
		for _, envs := range c.envs {
			for _, env := range envs {
				n += check(part.String(), env.Payload.(*Batch[int64]))
			}
		}
		if n != 2*len(marks) {
			t.Fatalf("%s: %d marks arrived, want %d", part, n, 2*len(marks))
		}
	}
	b := &Batch[int64]{Vs: slicesClone(vs), Tr: slicesClone(marks)}
	b.Retain(func(i int) bool { return i%2 == 0 })
	if n := check("retain", b); n != 4 { // 0, 6, 12, 18 of 0, 3, ..., 18
		t.Fatalf("retain kept %d marks, want 4", n)
	}
	// The marks of the records it took out are kept for the receiver to
	// trace their drop.
	if len(b.Gone) != 3 || b.Gone[0].ID != idOf(3) || b.Gone[2].ID != idOf(15) {
		t.Fatalf("retain's shed marks %+v, want those of 3, 9, 15", b.Gone)
	}
}

func slicesClone[T any](s []T) []T { return append([]T(nil), s...) }

// TestEnvelopeCodecLongMarkID: Encode never writes an envelope that Decode
// refuses. A sampled record's id is its operator's name, instance and
// ordinal, and an operator's name has no bound: an id over maxMarkID used
// to encode (into the spill, or onto the wire) and then fail to decode
// there, losing the batch far from its cause. Encode refuses it, naming
// the record.
func TestEnvelopeCodecLongMarkID(t *testing.T) {
	c := Codec[event]{}
	for _, n := range []int{maxMarkID - 10, maxMarkID, maxMarkID + 1, 4 * maxMarkID} {
		id := strings.Repeat("o", n-2) + "/1"
		in := &actors.Envelope{Kind: actors.Data, Seq: 5, Count: 1, Payload: &Batch[event]{Vs: sampleEvents()[:1], Tr: []Mark{testMark(0, id, 7)}}}
		data, err := c.Encode(in)
		if err != nil {
			if n <= maxMarkID {
				t.Fatalf("id of %d bytes: %v", n, err)
			}
			if !strings.Contains(err.Error(), "id of") {
				t.Fatalf("id of %d bytes: the error does not name the id: %v", n, err)
			}
			continue
		}
		if _, err := c.Decode(data); err != nil {
			t.Fatalf("id of %d bytes: Encode wrote an envelope that Decode refuses: %v", n, err)
		}
	}
}
