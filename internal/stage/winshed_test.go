package stage

import (
	"testing"
	"time"
)

// A window that saw a record sampled by load shedding (of any key) hands
// every key's accumulator to Shed with the lowest keep rate before it is
// emitted, also keys with no sampled record of their own; a window that
// saw none does not, and the rate survives a checkpoint.
func TestWindowShedMarksEveryKey(t *testing.T) {
	keep := 1.0
	sc := &Ctx{Name: "w", C: new(Counters), BatchSize: 16, Keep: func() float64 { return keep }}
	type out struct {
		k     int64
		start int64
		sum   int64
		shed  float64
	}
	type acc struct {
		Sum  int64
		Shed float64
	}
	fns := WinFns[int64, int64, acc, out]{
		Key:  func(v int64) int64 { return v % 2 },
		Zero: func() acc { return acc{} },
		Add:  func(a acc, v int64) acc { a.Sum += v; return a },
		Shed: func(a acc, k float64) acc { a.Shed = k; return a },
		Emit: func(k, start, end int64, a acc, emit func(out)) { emit(out{k, start, a.Sum, a.Shed}) },
	}
	sink := &sinkPusher[out]{}
	sec := int64(time.Second)
	w := NewWinStage(fns, Tumbling(time.Second), 0, sink, sc)
	// window [0, 1 s): keys 0 and 1 at keep 1, then key 1 alone at 0.5 and 0.25
	w.Push(&Batch[int64]{Vs: []int64{2, 3}, Ts: []int64{1, 2}})
	keep = 0.5
	w.Push(&Batch[int64]{Vs: []int64{5}, Ts: []int64{3}})
	keep = 0.25
	w.Push(&Batch[int64]{Vs: []int64{7}, Ts: []int64{4}})
	// window [1 s, 2 s): nothing sampled
	keep = 1
	w.Push(&Batch[int64]{Vs: []int64{4, 9}, Ts: []int64{sec + 1, sec + 2}})
	// a checkpoint and a restore in between keep the window's rate
	st, err := w.SnapshotState(1)
	if err != nil {
		t.Fatal(err)
	}
	w = NewWinStage(fns, Tumbling(time.Second), 0, sink, sc)
	if err := w.RestoreState(st); err != nil {
		t.Fatal(err)
	}
	w.Watermark(2 * sec)
	want := map[[2]int64]out{
		{0, 0}: {0, 0, 2, 0.25}, {1, 0}: {1, 0, 15, 0.25},
		{0, sec}: {0, sec, 4, 0}, {1, sec}: {1, sec, 9, 0},
	}
	if len(sink.got) != len(want) {
		t.Fatalf("emitted %+v, want %d results", sink.got, len(want))
	}
	for _, o := range sink.got {
		if w := want[[2]int64{o.k, o.start}]; o != w {
			t.Errorf("key %d window %d: %+v, want %+v", o.k, o.start, o, w)
		}
	}
}
