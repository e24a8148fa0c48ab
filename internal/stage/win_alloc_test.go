package stage

import (
	"testing"
	"time"
)

// sumWindows is the window functions of a sum of int64 records over keys
// keys (the record mod keys), emitting each window's sum.
func sumWindows(keys int64) WinFns[int64, int64, int64, int64] {
	return WinFns[int64, int64, int64, int64]{
		Key:  func(v int64) int64 { return v % keys },
		Zero: func() int64 { return 0 },
		Add:  func(a, v int64) int64 { return a + v },
		Emit: func(k, start, end int64, a int64, out func(int64)) { out(a) },
	}
}

// TestWindowMemoryNoAllocs: with the memory backend, adding a batch of
// records of keys already in their window allocates nothing; a window
// after window of the same keys (each fired by the watermark) allocates
// per window, not per record (the fired keys' slot lists are reused).
func TestWindowMemoryNoAllocs(t *testing.T) {
	fns := sumWindows(100)
	sink := &sinkPusher[int64]{}
	s := NewWinStage(fns, Tumbling(time.Second), 0, sink, testCtx(0, 1))
	b := &Batch[int64]{Vs: make([]int64, 256), Ts: make([]int64, 256)}
	for i := range b.Vs {
		b.Vs[i] = int64(i)
	}
	s.Push(b) // every key seen once
	if n := testing.AllocsPerRun(100, func() { s.Push(b) }); n != 0 {
		t.Errorf("%v allocations per batch in an open window", n)
	}
	sec := int64(time.Second)
	w := int64(1)
	next := func() {
		sink.got = sink.got[:0]
		for i := range b.Ts {
			b.Ts[i] = w * sec
		}
		s.Push(b)
		s.Watermark(w*sec + sec - 1) // fires the window
		w++
	}
	next()
	if n := testing.AllocsPerRun(100, next); n > 8 {
		t.Errorf("%v allocations per window of 256 records", n)
	}
	if len(sink.got) != 100 {
		t.Fatalf("a window emitted %d results, want 100", len(sink.got))
	}
}
