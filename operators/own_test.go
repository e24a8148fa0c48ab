package operators_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/connector"
	"github.com/sluicehq/sluice/operators"
)

// keeper is a sink whose writers keep the slices they are given, without a
// copy: were an array reused upstream after it was delivered (an emitter
// keeping an array that its producer then refills, or a free list handing
// out one still in use), the kept records would change under it, and the
// race detector would see the producer's writes.
type keeper struct {
	mu   sync.Mutex
	kept [][]int64
}

func (k *keeper) Open(context.Context, int, int) (connector.Writer[int64], error) {
	return keeperW{k}, nil
}

type keeperW struct{ k *keeper }

func (w keeperW) Write(vs []int64) error {
	w.k.mu.Lock()
	defer w.k.mu.Unlock()
	w.k.kept = append(w.k.kept, vs)
	return nil
}
func (keeperW) Close() error { return nil }

func (k *keeper) values() []int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []int64
	for _, vs := range k.kept {
		out = append(out, vs...)
	}
	slices.Sort(out)
	return out
}

// TestDeliveredArraysNotReused runs a pipeline whose batches travel without
// copies (a source's array, mapped in place, filtered in place, split over
// two consumers, stamped with times) into sinks that keep what they get:
// every record arrives once, unchanged.
func TestDeliveredArraysNotReused(t *testing.T) {
	const n = 100_000
	sys, ctx := newSystem(t)
	top := operators.NewTopology("own")
	src := operators.Source(top, "src", operators.Generate(int64(n), func(i int64) int64 { return i }))
	m := operators.Map(src, "map", func(v int64) int64 { return v*3 + 1 }, operators.NoFusion())
	f := operators.Filter(m, "filter", func(v int64) bool { return v%2 == 0 }, operators.NoFusion())
	a, b, c := &keeper{}, &keeper{}, &keeper{}
	operators.Sink(f, "a", a, operators.NoFusion())
	r := operators.Map(operators.Rebalance(f, "spread"), "again", func(v int64) int64 { return v + 1 }, operators.Parallelism(2), operators.NoFusion())
	operators.Sink(r, "b", b, operators.NoFusion())
	ts := operators.Timestamps(f, "times", func(v int64) time.Time { return time.Unix(0, v) })
	operators.Sink(operators.Map(ts, "cast", func(v int64) int32 { return int32(v) }, operators.NoFusion()), "c",
		operators.SinkFunc(func(v int32) error { c.kept = append(c.kept, []int64{int64(v)}); return nil }), operators.NoFusion())
	runToEnd(t, sys, ctx, top)
	var want, want1 []int64
	for i := int64(0); i < n; i++ {
		if v := i*3 + 1; v%2 == 0 {
			want, want1 = append(want, v), append(want1, v+1)
		}
	}
	if got := a.values(); !slices.Equal(got, want) {
		t.Errorf("sink a: %d records, not those sent (%d)", len(got), len(want))
	}
	if got := b.values(); !slices.Equal(got, want1) {
		t.Errorf("sink b: %d records, not those sent (%d)", len(got), len(want1))
	}
	if got := c.values(); !slices.Equal(got, want) {
		t.Errorf("sink c: %d records, not those sent (%d)", len(got), len(want))
	}
}
