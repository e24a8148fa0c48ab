package stage

import (
	"slices"
	"testing"
	"time"
)

// lendingCapture is an outCapture in a job that lends arrays.
type lendingCapture struct {
	*outCapture
	a *Arrays
}

func (c lendingCapture) JobArrays() *Arrays { return c.a }

// TestKeyedArraysLentBack: a window stage gives the arrays of the batches
// it owns and has read back to the job, and an emitter that partitions by
// key fills its buffers with them instead of new ones, with the right
// records in them; arrays of less than a batch are not given back but make
// the emitter allocate whole ones; a batch the stage does not own is not
// given back.
func TestKeyedArraysLentBack(t *testing.T) {
	const size = 4
	var a Arrays
	c := lendingCapture{newOutCapture(), &a}
	e := NewEmitter[int64]([]Output{{Part: Hash, Hasher: func(v int64) uint64 { return uint64(v) * 0x9e3779b97f4a7c15 }, Targets: 2}}, size, c)
	sc := testCtx(0, 1)
	sc.BatchSize, sc.Arrays = size, &a
	fns := sumWindows(5)
	sink := &sinkPusher[int64]{}
	w := NewWinStage(fns, Tumbling(time.Second), 0, sink, sc)
	in := &TypedInlet[int64]{head: w}
	pool := arraysFor[int64](&a, size, false)
	if pool == nil {
		t.Fatal("the emitter made no list of arrays to fill its buffers from")
	}

	// push sends records from..to-1 through the emitter and returns the
	// batches it shipped, with the record arrays they came in.
	push := func(from, to int64) ([]*Batch[int64], map[*int64]bool) {
		clear(c.envs)
		b := &Batch[int64]{}
		for v := from; v < to; v++ {
			b.Vs, b.Ts = append(b.Vs, v), append(b.Ts, 0)
		}
		e.Push(b)
		e.Flush()
		var got []*Batch[int64]
		arrays := map[*int64]bool{}
		for _, ch := range shippedBatches(c.outCapture) {
			for _, sb := range ch {
				got = append(got, sb)
				arrays[&sb.Vs[:1][0]] = true
				arrays[&sb.Ts[:1][0]] = true
			}
		}
		return got, arrays
	}
	values := func(bs []*Batch[int64]) []int64 {
		var vs []int64
		for _, b := range bs {
			vs = append(vs, b.Vs...)
		}
		slices.Sort(vs)
		return vs
	}

	// Batches of fewer records than a batch holds come in arrays sized for
	// them: nothing to give back, but the stage says it wants whole ones.
	small, _ := push(100, 103)
	for _, b := range small {
		if cap(b.Vs) == size {
			t.Fatalf("a buffer of %d records was allocated whole", len(b.Vs))
		}
		in.Deliver(b)
	}
	if n := len(pool.list.free); n != 0 || !pool.wanted.Load() {
		t.Fatalf("after batches in small arrays: %d given back (want 0), wanted %v (want true)", n, pool.wanted.Load())
	}

	first, firstArrays := push(0, 64)
	if got := values(first); len(got) != 64 || got[0] != 0 || got[63] != 63 {
		t.Fatalf("shipped %v, want 0..63", got)
	}
	whole := 0
	for _, b := range first {
		if cap(b.Vs) == size && cap(b.Ts) == size {
			whole++
		}
		in.Deliver(b)
		if cap(b.Vs) == size && b.Vs != nil {
			t.Fatal("a whole batch the stage owned kept its array")
		}
	}
	if whole == 0 {
		t.Fatal("no shipped batch had arrays of a whole batch")
	}
	if n := len(pool.list.free); n != 2*whole {
		t.Fatalf("%d arrays given back, want %d (records and event times of %d whole batches)", n, 2*whole, whole)
	}

	second, secondArrays := push(64, 96)
	if got := values(second); len(got) != 32 || got[0] != 64 || got[31] != 95 {
		t.Fatalf("shipped %v, want 64..95", got)
	}
	for p := range secondArrays {
		if !firstArrays[p] {
			t.Fatal("an emitter allocated an array while the job had some given back")
		}
	}
	for _, b := range second {
		in.Deliver(b)
	}

	// Not owned (a chain that passes its input on, Own false): kept.
	kept := len(pool.list.free)
	w.Push(&Batch[int64]{Vs: make([]int64, size), Ts: make([]int64, size)})
	if n := len(pool.list.free); n != kept {
		t.Fatalf("a batch the stage did not own was given back (%d arrays, want %d)", n, kept)
	}
	w.Watermark(int64(time.Second))
	var sum int64
	for _, v := range sink.got {
		sum += v
	}
	if want := int64(95*96/2 + 100 + 101 + 102); sum != want {
		t.Fatalf("the windows summed %d, want %d", sum, want)
	}
}

// TestKeyedAggregateLendsBack: a keyed aggregation gives back the arrays
// of an owned batch it folded, after its updates went on with the batch's
// event times, which the next stage received intact.
func TestKeyedAggregateLendsBack(t *testing.T) {
	const size = 4
	var a Arrays
	pool := arraysFor[int64](&a, size, true) // as a hash emitter of int64 makes it
	sc := testCtx(0, 1)
	sc.BatchSize, sc.Arrays = size, &a
	next := &timesPusher{}
	k := NewKeyed(func(v int64) int64 { return v % 2 }, func(acc int64, _ bool, v int64) int64 { return acc + v },
		func(_ int64, acc int64) int64 { return acc }, EmitUpdates, Pusher[int64](next), sc).(*KeyedStage[int64, int64, int64, int64])
	b := &Batch[int64]{Vs: []int64{1, 2, 3, 4}, Ts: []int64{10, 20, 30, 40}, Own: true}
	vs, ts := &b.Vs[0], &b.Ts[0]
	k.Push(b)
	if !slices.Equal(next.vs, []int64{1, 2, 4, 6}) || !slices.Equal(next.ts, []int64{10, 20, 30, 40}) {
		t.Fatalf("updates %v at %v, want 1 2 4 6 at 10 20 30 40", next.vs, next.ts)
	}
	got := map[*int64]bool{}
	for range 2 {
		if arr := pool.get(); arr != nil {
			got[&arr[:1][0]] = true
		}
	}
	if !got[vs] || !got[ts] {
		t.Fatal("the aggregation did not give back the arrays of the batch it folded")
	}
	if k.out.Ts != nil {
		t.Fatal("the stage still refers to the times it gave back")
	}
}

// timesPusher keeps copies of the records and times pushed to it.
type timesPusher struct{ vs, ts []int64 }

func (p *timesPusher) Push(b *Batch[int64]) {
	p.vs, p.ts = append(p.vs, b.Vs...), append(p.ts, b.Ts...)
}
func (p *timesPusher) Watermark(int64) {}
func (p *timesPusher) Finish()         {}
