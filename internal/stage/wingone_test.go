package stage

import (
	"testing"
	"time"
)

// TestSessionKeysLeftWithoutSessions: a key whose sessions have all fired
// stays in the memory table (an empty list) while such keys are few, gets
// a session again like any key, and is gone from the table at a
// checkpoint, whose restore fires exactly the open sessions.
func TestSessionKeysLeftWithoutSessions(t *testing.T) {
	fns := WinFns[int64, int64, int64, int64]{
		Key:   func(v int64) int64 { return v },
		Zero:  func() int64 { return 0 },
		Add:   func(a, _ int64) int64 { return a + 1 },
		Merge: func(a, b int64) int64 { return a + b },
		Emit:  func(k, start, end int64, a int64, out func(int64)) { out(k) },
	}
	sec := int64(time.Second)
	batch := func(keys []int64, at int64) *Batch[int64] {
		b := &Batch[int64]{Vs: keys, Ts: make([]int64, len(keys))}
		for i := range b.Ts {
			b.Ts[i] = at
		}
		return b
	}
	span := func(lo, hi int64) []int64 {
		var ks []int64
		for k := lo; k < hi; k++ {
			ks = append(ks, k)
		}
		return ks
	}
	sink := &sinkPusher[int64]{}
	s := NewWinStage(fns, Sessions(time.Second), 0, sink, testCtx(0, 1))
	s.Push(batch(span(0, 1000), 100*sec)) // 1000 sessions open until 101 s
	s.Push(batch(span(1000, 1100), 0))    // 100 sessions that end at 1 s
	s.Watermark(2 * sec)
	if len(sink.got) != 100 {
		t.Fatalf("%d sessions fired, want 100", len(sink.got))
	}
	if n := len(s.mem.M); n != 1100 {
		t.Errorf("%d keys in the table after firing 100 of 1100 (the fired ones kept while few), want 1100", n)
	}
	s.Push(batch([]int64{1000}, 3*sec)) // a fired key gets a session again
	s.Watermark(5 * sec)
	if len(sink.got) != 101 || sink.got[100] != 1000 {
		t.Fatalf("key 1000's second session: fired %v", sink.got[100:])
	}
	b, err := s.SnapshotState(1)
	if err != nil {
		t.Fatal(err)
	}
	if n, o := len(s.mem.M), len(s.mem.Order); n != 1000 || o != 1000 {
		t.Errorf("after a checkpoint the table has %d keys (%d in order), want the 1000 with a session", n, o)
	}
	r := &sinkPusher[int64]{}
	restored := NewWinStage(fns, Sessions(time.Second), 0, r, testCtx(0, 1))
	if err := restored.RestoreState(b); err != nil {
		t.Fatal(err)
	}
	restored.Finish()
	if len(r.got) != 1000 {
		t.Errorf("the restored stage fired %d sessions, want 1000", len(r.got))
	}
}
