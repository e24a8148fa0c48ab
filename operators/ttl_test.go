package operators_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/clock/clocktest"
	"github.com/sluicehq/sluice/operators"
)

// ttlJob runs build over a channel source on a manual clock; sent records
// go in one at a time, results come out on the returned channel.
func ttlJob[T any](t *testing.T, build func(operators.Stream[string]) operators.Stream[T], opts ...operators.TopologyOption) (chan<- string, <-chan T, *clocktest.Manual, func() error, *actors.Run) {
	sys, ctx := newSystem(t)
	clock := clocktest.NewManual(time.UnixMilli(0))
	in := make(chan string)
	top := operators.NewTopology(t.Name(), append([]operators.TopologyOption{operators.BatchSize(1), operators.WithClock(clock)}, opts...)...)
	out := make(chan T, 100)
	operators.Sink(build(operators.Source(top, "in", operators.FromChannel(in))), "out", operators.SinkFunc(func(v T) error { out <- v; return nil }))
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	return in, out, clock, func() error { close(in); return run.Wait(ctx) }, run
}

// expireAll lets the TTL sweep run past every key's time.
func expireAll(t *testing.T, clock *clocktest.Manual) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := clock.WaitForTimers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Minute)
	waitFor(t, "the sweep to run", func() bool { return clock.Pending() == 0 })
}

func expect[T comparable](t *testing.T, out <-chan T, want ...T) {
	t.Helper()
	for _, w := range want {
		select {
		case got := <-out:
			if got != w {
				t.Fatalf("got %v, want %v", got, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no result, want %v", w)
		}
	}
}

func byWord(s operators.Stream[string]) operators.KeyedStream[string, string] {
	return operators.KeyBy(s, "by-word", func(w string) string { return w })
}

// backends are the state backends the aggregations' TTL tests run with.
func backends(t *testing.T) map[string][]operators.TopologyOption {
	return map[string][]operators.TopologyOption{
		"memory": nil,
		"disk":   {operators.StateBackend(operators.DiskState(t.TempDir(), 1<<20))},
	}
}

// A count with a state TTL starts a key afresh once its state expired.
func TestCountStateTTL(t *testing.T) {
	for name, opts := range backends(t) {
		t.Run(name, func(t *testing.T) { testCountStateTTL(t, opts) })
	}
}

func testCountStateTTL(t *testing.T, opts []operators.TopologyOption) {
	in, out, clock, end, _ := ttlJob(t, func(s operators.Stream[string]) operators.Stream[operators.KV[string, int64]] {
		return operators.Count(byWord(s), "count", operators.StateTTL(time.Minute))
	}, opts...)
	in <- "a"
	in <- "a"
	expect(t, out, operators.KV[string, int64]{"a", 1}, operators.KV[string, int64]{"a", 2})
	expireAll(t, clock)
	in <- "a"
	expect(t, out, operators.KV[string, int64]{"a", 1})
	if err := end(); err != nil {
		t.Fatal(err)
	}
}

// Under EmitAtEnd a key's result is emitted when its state expires, and
// the key counts afresh after.
func TestCountAtEndStateTTL(t *testing.T) {
	for name, opts := range backends(t) {
		t.Run(name, func(t *testing.T) { testCountAtEndStateTTL(t, opts) })
	}
}

func testCountAtEndStateTTL(t *testing.T, opts []operators.TopologyOption) {
	in, out, clock, end, run := ttlJob(t, func(s operators.Stream[string]) operators.Stream[operators.KV[string, int64]] {
		return operators.Count(byWord(s), "count", operators.Emit(operators.EmitAtEnd), operators.StateTTL(time.Minute))
	}, opts...)
	in <- "a"
	in <- "b"
	in <- "a"
	waitFor(t, "the records to be counted", func() bool { return stat(t, run, "count").In == 3 })
	select {
	case kv := <-out:
		t.Fatalf("a result before the end or an expiry: %v", kv)
	default:
	}
	expireAll(t, clock)
	// In first-seen order from memory, in key-group order from disk.
	var got []operators.KV[string, int64]
	for range 2 {
		select {
		case kv := <-out:
			got = append(got, kv)
		case <-time.After(10 * time.Second):
			t.Fatalf("no result, have %v", got)
		}
	}
	if opts == nil && got[0].Key != "a" {
		t.Fatalf("expired results %v: not in first-seen order", got)
	}
	if !slices.Contains(got, operators.KV[string, int64]{"a", 2}) || !slices.Contains(got, operators.KV[string, int64]{"b", 1}) {
		t.Fatalf("expired results %v, want a 2 and b 1", got)
	}
	in <- "a"
	if err := end(); err != nil {
		t.Fatal(err)
	}
	expect(t, out, operators.KV[string, int64]{"a", 1})
}

// Process with a state TTL sees a zero state for a key whose state
// expired.
func TestProcessStateTTL(t *testing.T) {
	for name, opts := range backends(t) {
		t.Run(name, func(t *testing.T) { testProcessStateTTL(t, opts) })
	}
}

func testProcessStateTTL(t *testing.T, opts []operators.TopologyOption) {
	in, out, clock, end, _ := ttlJob(t, func(s operators.Stream[string]) operators.Stream[int] {
		return operators.Process(byWord(s), "seen", func(c *operators.ProcessContext[string, int, int], _ string) {
			n := c.State()
			*n++
			c.Emit(*n)
		}, nil, operators.StateTTL(time.Minute))
	}, opts...)
	in <- "a"
	in <- "a"
	in <- "b"
	expect(t, out, 1, 2, 1)
	expireAll(t, clock)
	in <- "a"
	expect(t, out, 1)
	if err := end(); err != nil {
		t.Fatal(err)
	}
}
