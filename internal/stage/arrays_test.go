package stage

import (
	"reflect"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
)

func TestArraysLent(t *testing.T) {
	var a Arrays
	if l := arraysFor[int64](nil, 4, true); l != nil {
		t.Fatal("the nil Arrays lent a list")
	}
	if l := arraysFor[int64](&a, 4, false); l != nil {
		t.Fatal("a sink found a list no source made")
	}
	src := arraysFor[int64](&a, 4, true)
	if got := arraysFor[int64](&a, 4, false); got != src {
		t.Fatal("the sink's list is not the source's")
	}
	if arraysFor[int32](&a, 4, false) != nil || arraysFor[int64](&a, 8, false) != nil {
		t.Fatal("a list of another type or size was found")
	}
	if src.get() != nil {
		t.Fatal("an empty list lent an array")
	}
	vs := make([]int64, 4)
	src.put(vs[:2])
	got := src.get()
	if len(got) != 0 || cap(got) != 4 || &got[:1][0] != &vs[0] {
		t.Fatalf("got len %d cap %d, want the array put back, empty", len(got), cap(got))
	}
	for range keptArrays + 10 {
		src.put(make([]int64, 4))
	}
	if n := len(src.list.free); n != keptArrays {
		t.Fatalf("%d arrays kept, want at most %d", n, keptArrays)
	}
}

// An array of pointers is cleared when it is returned, so that it keeps
// nothing alive; one of plain values is not (the source overwrites it).
func TestArraysClearPointers(t *testing.T) {
	var a Arrays
	ps := arraysFor[*int](&a, 2, true)
	x := 1
	arr := []*int{&x, &x}
	ps.put(arr[:1])
	if arr[0] != nil || arr[1] != nil {
		t.Fatal("a returned array of pointers still holds them")
	}
	ns := arraysFor[int](&a, 2, true)
	vs := []int{1, 2}
	ns.put(vs)
	if vs[0] != 1 {
		t.Fatal("an array of ints was cleared")
	}
}

func TestHasPointers(t *testing.T) {
	type plain struct {
		A int64
		B [2]float64
	}
	type withString struct {
		A int
		S string
	}
	for _, c := range []struct {
		t    reflect.Type
		want bool
	}{
		{reflect.TypeFor[int64](), false},
		{reflect.TypeFor[plain](), false},
		{reflect.TypeFor[[0]*int](), false},
		{reflect.TypeFor[string](), true},
		{reflect.TypeFor[withString](), true},
		{reflect.TypeFor[[]byte](), true},
		{reflect.TypeFor[any](), true},
		{reflect.TypeFor[[3]*int](), true},
	} {
		if got := hasPointers(c.t); got != c.want {
			t.Errorf("hasPointers(%v) = %v, want %v", c.t, got, c.want)
		}
	}
}

// An envelope an emitter shipped goes back to it once Release says the
// receiver handled it, emptied (no reference to the records it carried),
// and carries the emitter's next batch; one still in flight is never
// reused, and one no emitter made is left alone.
func TestEnvelopesReleased(t *testing.T) {
	c := newOutCapture()
	e := NewEmitter[int64]([]Output{{Part: Forward, Targets: 1}}, 4, c)
	push := func(vs ...int64) *actors.Envelope {
		e.Push(&Batch[int64]{Vs: vs})
		e.Flush()
		envs := c.envs[0]
		return envs[len(envs)-1]
	}
	first := push(1, 2)
	second := push(3)
	if first == second {
		t.Fatal("an envelope in flight was reused")
	}
	Release(first)
	if first.Payload != nil || first.Count != 0 {
		t.Fatalf("a released envelope still holds %v (%d records)", first.Payload, first.Count)
	}
	third := push(4, 5, 6)
	if third != first {
		t.Fatal("the released envelope was not reused")
	}
	if b := third.Payload.(*Batch[int64]); third.Kind != actors.Data || third.Count != 3 || !slices.Equal(b.Vs, []int64{4, 5, 6}) {
		t.Fatalf("the reused envelope carries %v (%d records), want 4 5 6", b.Vs, third.Count)
	}
	Release(third)
	Release(third) // twice: kept once
	if n := e.free.len(); n != 1 {
		t.Fatalf("%d envelopes kept after releasing one twice, want 1", n)
	}
	foreign := &actors.Envelope{Kind: actors.Data, Count: 1, Payload: &Batch[int64]{Vs: []int64{7}}}
	Release(foreign)
	if foreign.Count != 1 || e.free.len() != 1 {
		t.Fatal("an envelope no emitter made was released")
	}
}

// len is how many envelopes r holds (tests: nothing may push meanwhile).
func (r *returns[T]) len() int {
	n := 0
	for x := r.head.Load(); x != nil; x = x.next {
		n++
	}
	return n
}

// Receivers on several goroutines give envelopes back while the emitter
// takes them and sends them out again: every envelope comes back exactly
// once per trip, none lost, none twice (the same envelope pushed again
// after the emitter took it is the case a lock-free stack gets wrong).
func TestReturnsConcurrent(t *testing.T) {
	const envs, receivers, trips = 256, 4, 200
	r := &returns[int64]{}
	out := make([]chan *shipped[int64], receivers)
	done := make(chan struct{})
	defer close(done)
	for i := range out {
		out[i] = make(chan *shipped[int64], envs)
		go func(in chan *shipped[int64]) {
			for {
				select {
				case x := <-in:
					r.push(x)
				case <-done:
					return
				}
			}
		}(out[i])
	}
	all := make([]*shipped[int64], envs)
	for i := range all {
		all[i] = &shipped[int64]{home: r}
	}
	deadline := time.After(time.Minute)
	for trip := range trips {
		for i, x := range all {
			out[(i+trip)%receivers] <- x
		}
		seen := map[*shipped[int64]]bool{}
		for len(seen) < envs {
			x := r.head.Swap(nil)
			for ; x != nil; x = x.next {
				if seen[x] {
					t.Fatalf("trip %d: an envelope came back twice", trip)
				}
				seen[x] = true
			}
			if len(seen) < envs {
				select {
				case <-deadline:
					t.Fatalf("trip %d: %d of %d envelopes came back", trip, len(seen), envs)
				default:
					runtime.Gosched()
				}
			}
		}
	}
}
