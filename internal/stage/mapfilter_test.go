package stage

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// A map whose next stage is a filter (fused in one actor) maps and
// filters an owned batch in one pass (MapStage.pushFiltered). It must do
// exactly what the two stages do one after the other: the same records,
// in order, the same counters, and a panic put down to the stage whose
// function panicked.

// mapFilterChain is map(f) -> filter(keep) -> emitter, with a context each.
func mapFilterChain(f func(int64) int64, keep func(int64) bool) (Inlet, *Ctx, *Ctx, *Emitter[int64], *outCapture) {
	c := newOutCapture()
	msc, fsc := testCtx(0, 1), testCtx(0, 1)
	msc.Name, fsc.Name = "map", "filter"
	panicErr := func(v any) error { return fmt.Errorf("panic: %v", v) }
	msc.PanicErr, fsc.PanicErr = panicErr, panicErr
	em := NewEmitter[int64]([]Output{{Part: Forward, Targets: 1}}, 16, c)
	in := NewInlet[int64](NewMap(f, NewFilter(keep, em, fsc), msc))
	return in, msc, fsc, em, c
}

func TestMapFilterOnePass(t *testing.T) {
	keep := func(v int64) bool { return v%3 != 0 }
	in, msc, fsc, em, c := mapFilterChain(func(v int64) int64 { return v*5 + 1 }, keep)
	if in.(*TypedInlet[int64]).head.(*MapStage[int64, int64]).filter == nil {
		t.Fatal("the map did not find the filter after it")
	}
	var want []int64
	var n int64
	for k := range 10 {
		vs := make([]int64, 16)
		for i := range vs {
			vs[i] = int64(k*16 + i)
			if k == 4 {
				vs[i] = 3 * int64(i) // maps to 15i+1: kept unless i%3 == 2
			}
			if k == 7 {
				vs[i] = 1 // maps to 6: every record filtered out
			}
			n++
			if w := vs[i]*5 + 1; keep(w) {
				want = append(want, w)
			}
		}
		in.Deliver(&Batch[int64]{Vs: vs})
		em.Flush() // as the instance does after every message
	}
	got := flat(shippedBatches(c)[0])
	if !slices.Equal(got, want) {
		t.Fatalf("shipped %v, want %v", got, want)
	}
	if msc.C.In.Load() != n || msc.C.Out.Load() != n || fsc.C.In.Load() != n || fsc.C.Out.Load() != int64(len(want)) {
		t.Errorf("counters map %d/%d filter %d/%d, want %d/%d %d/%d", msc.C.In.Load(), msc.C.Out.Load(),
			fsc.C.In.Load(), fsc.C.Out.Load(), n, n, n, len(want))
	}
}

// failureOf runs f and returns the operator of the *Failure it panics with.
func failureOf(t *testing.T, f func()) (op string, err error) {
	t.Helper()
	defer func() {
		r := recover()
		fl, ok := r.(*Failure)
		if !ok {
			t.Fatalf("panicked with %v (%T), want a *Failure", r, r)
		}
		op, err = fl.Op(), fl
	}()
	f()
	return "", nil
}

func TestMapFilterOnePassPanics(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		f    func(int64) int64
		keep func(int64) bool
		want string
	}{
		{"map", func(v int64) int64 {
			if v == 5 {
				panic(boom)
			}
			return v
		}, func(int64) bool { return true }, "map"},
		{"filter", func(v int64) int64 { return v }, func(v int64) bool {
			if v == 5 {
				panic(boom)
			}
			return true
		}, "filter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, _, _, _, _ := mapFilterChain(tc.f, tc.keep)
			op, err := failureOf(t, func() { in.Deliver(&Batch[int64]{Vs: []int64{1, 2, 3, 4, 5, 6}}) })
			if op != tc.want || err.Error() != tc.want+": panic: boom" {
				t.Errorf("failure of %q (%v), want of %q", op, err, tc.want)
			}
		})
	}
}
