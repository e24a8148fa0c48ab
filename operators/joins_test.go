package operators_test

import (
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clock/clocktest"
	"github.com/sluicehq/sluice/operators"
)

type pair struct {
	K      string
	LT, RT int64
}

func comparePairs(a, b pair) int {
	return cmp.Or(cmp.Compare(a.K, b.K), cmp.Compare(a.LT, b.LT), cmp.Compare(a.RT, b.RT))
}

// joinTopology runs left and right through build and collects the pairs.
func runJoin(t *testing.T, left, right []tev, build func(l, r operators.Stream[tev]) operators.Stream[pair]) ([]pair, operators.Stream[pair]) {
	t.Helper()
	sys, ctx := newSystem(t)
	top := operators.NewTopology(t.Name(), operators.BatchSize(8))
	l := operators.Timestamps(operators.Source(top, "left", operators.FromSlice(left)), "ts-left", tevTime)
	r := operators.Timestamps(operators.Source(top, "right", operators.FromSlice(right)), "ts-right", tevTime)
	out := build(l, r)
	col := operators.NewCollector[pair]()
	operators.Sink(out, "out", col)
	runToEnd(t, sys, ctx, top)
	got := col.Items()
	slices.SortFunc(got, comparePairs)
	return got, out
}

func mkPair(l, r tev) pair { return pair{l.K, l.T, r.T} }

func TestIntervalJoinMatchesModel(t *testing.T) {
	left, right := randomEvents(3, 3000, 5, 0), randomEvents(4, 3000, 5, 0)
	lower, upper := int64(-50), int64(100)
	var want []pair
	for _, l := range left {
		for _, r := range right {
			if l.K == r.K && r.T >= l.T+lower && r.T <= l.T+upper {
				want = append(want, mkPair(l, r))
			}
		}
	}
	slices.SortFunc(want, comparePairs)
	got, _ := runJoin(t, left, right, func(l, r operators.Stream[tev]) operators.Stream[pair] {
		return operators.IntervalJoin(l, r, "join", tevKey, tevKey, time.Duration(lower)*time.Millisecond, time.Duration(upper)*time.Millisecond, mkPair,
			operators.Parallelism(2))
	})
	if !slices.Equal(got, want) {
		t.Fatalf("%d pairs, model %d: %s", len(got), len(want), firstDiff(got, want))
	}
}

func TestWindowJoinMatchesModel(t *testing.T) {
	left, right := randomEvents(5, 2000, 4, 0), randomEvents(6, 2000, 4, 0)
	var want []pair
	for _, l := range left {
		for _, r := range right {
			if l.K == r.K && l.T/500 == r.T/500 {
				want = append(want, mkPair(l, r))
			}
		}
	}
	slices.SortFunc(want, comparePairs)
	got, _ := runJoin(t, left, right, func(l, r operators.Stream[tev]) operators.Stream[pair] {
		return operators.WindowJoin(l, r, "join", tevKey, tevKey, operators.Tumbling(500*time.Millisecond), mkPair)
	})
	if !slices.Equal(got, want) {
		t.Fatalf("%d pairs, model %d: %s", len(got), len(want), firstDiff(got, want))
	}
}

func TestUnboundedJoinEachPairOnce(t *testing.T) {
	// Keys appear on both sides in any order; every pair is joined once.
	var left, right []tev
	for i := range 200 {
		left = append(left, tev{fmt.Sprintf("k%d", i%13), int64(i)})
		right = append(right, tev{fmt.Sprintf("k%d", i%7), int64(1000 - i)})
	}
	var want []pair
	for _, l := range left {
		for _, r := range right {
			if l.K == r.K {
				want = append(want, mkPair(l, r))
			}
		}
	}
	slices.SortFunc(want, comparePairs)
	got, _ := runJoin(t, left, right, func(l, r operators.Stream[tev]) operators.Stream[pair] {
		return operators.Join(l, r, "join", tevKey, tevKey, mkPair, operators.Parallelism(2))
	})
	if !slices.Equal(got, want) {
		t.Fatalf("%d pairs, model %d: %s", len(got), len(want), firstDiff(got, want))
	}
}

// With a state TTL a key that saw nothing for the TTL is forgotten: a later
// record of it finds no partner.
func TestJoinStateTTL(t *testing.T) {
	for name, opts := range backends(t) {
		t.Run(name, func(t *testing.T) { testJoinStateTTL(t, opts) })
	}
}

func testJoinStateTTL(t *testing.T, opts []operators.TopologyOption) {
	sys, ctx := newSystem(t)
	clock := clocktest.NewManual(time.UnixMilli(0))
	lc, rc := make(chan tev), make(chan tev)
	top := operators.NewTopology(t.Name(), append([]operators.TopologyOption{operators.BatchSize(1), operators.WithClock(clock)}, opts...)...)
	l := operators.Source(top, "left", operators.FromChannel(lc))
	r := operators.Source(top, "right", operators.FromChannel(rc))
	j := operators.Join(l, r, "join", tevKey, tevKey, mkPair, operators.StateTTL(time.Minute))
	got := make(chan pair, 10)
	operators.Sink(j, "out", operators.SinkFunc(func(p pair) error { got <- p; return nil }))
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	lc <- tev{"a", 1}
	rc <- tev{"a", 2}
	if p := <-got; p != (pair{"a", 1, 2}) {
		t.Fatalf("got %v", p)
	}
	if err := clock.WaitForTimers(ctx, 1); err != nil { // the TTL sweep
		t.Fatal(err)
	}
	clock.Advance(2 * time.Minute)
	waitFor(t, "the sweep to run", func() bool { return clock.Pending() == 0 })
	rc <- tev{"a", 3} // "a" was forgotten: no partner
	lc <- tev{"b", 4}
	rc <- tev{"b", 5}
	if p := <-got; p != (pair{"b", 4, 5}) {
		t.Fatalf("got %v, want the pair of b (a's state should have expired)", p)
	}
	close(lc)
	close(rc)
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		t.Fatalf("unexpected pair %v", p)
	default:
	}
}
