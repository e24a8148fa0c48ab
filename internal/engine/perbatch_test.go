package engine

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/internal/graph"
)

// countingClock is the system clock counting its readings.
type countingClock struct {
	clock.Clock
	reads atomic.Int64
}

func (c *countingClock) Now() time.Time {
	c.reads.Add(1)
	return c.Clock.Now()
}

// hop runs numbers(n) -> out on its own actor and returns the run.
func hop(t *testing.T, sys *actors.System, n int64, opts ...graph.TopologyOption) *actors.Run {
	t.Helper()
	top := graph.NewTopology("hop", opts...)
	src := graph.Source[int64](top, "numbers", numbers(n))
	graph.Sink[int64](src, "out", discard{}, graph.NoFusion())
	ctx, cancel := context.WithTimeout(context.Background(), timeoutStop)
	defer cancel()
	run, err := sys.Run(ctx, Job{top})
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	return run
}

func newTestSystem(t *testing.T) *actors.System {
	t.Helper()
	sys, err := actors.NewSystem(actors.Config{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeoutStop)
		defer cancel()
		if err := sys.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return sys
}

// Latency is measured with few readings of the clock: the source reads it
// once per batch (the end of one step starts the next), and a receiver
// stamps what it sends with the start of its batch and carries the end of
// one batch over as the start of the next it takes straight after. A hop
// (source -> sink) read the clock five times per batch before (source:
// start, sent, end; sink: start, end); timing every batch
// (LatencyEvery(1)) it reads it at most about three times (the sink, when
// idle between batches, reads start and end), and measures every record.
// By default the source still times every step (about one reading each:
// the end of one step starts the next) and stamps every batch with its
// ingestion time, but stamps one in graph.DefaultLatencyEvery as sent,
// and the sink times only those: about that share of the records is
// measured there, and the clock read about 1.4 times per batch.
func TestClockReadsPerBatch(t *testing.T) {
	sys := newTestSystem(t)
	// reads runs n records over the hop and returns the clock's readings
	// and the records the sink measured (queue wait, end to end and
	// processing alike).
	reads := func(n int64, opts ...graph.TopologyOption) (int64, int64) {
		c := &countingClock{Clock: clock.Real()}
		run := hop(t, sys, n, append(opts, graph.WithClock(c))...)
		got := c.reads.Load()
		var out actors.OperatorStats
		for _, s := range run.Stats() {
			if s.Name == "out" {
				out = s
			}
		}
		l := out.Latency
		if l.QueueWait.Count != l.EndToEnd.Count || l.EndToEnd.Count != l.Processing.Count {
			t.Errorf("n %d: queue wait, end to end and processing measured %d, %d, %d records; want as many",
				n, l.QueueWait.Count, l.EndToEnd.Count, l.Processing.Count)
		}
		return got, l.Processing.Count
	}
	const small, large = 50, 1050 // batches of 256
	every := graph.LatencyEvery(1)
	rs, ms := reads(small*256, every)
	rl, ml := reads(large*256, every)
	perBatch := float64(rl-rs) / (large - small)
	t.Logf("every batch timed: %.2f clock readings per batch hop", perBatch)
	if perBatch > 3.3 {
		t.Errorf("every batch timed: %.2f clock readings per batch over one hop, want at most 3.3", perBatch)
	}
	if ms != small*256 || ml != large*256 {
		t.Errorf("every batch timed: %d and %d records measured, want %d and %d", ms, ml, small*256, large*256)
	}
	rs, _ = reads(small * 256)
	rl, ml = reads(large * 256)
	perBatch = float64(rl-rs) / (large - small)
	share := float64(ml) / (large * 256)
	t.Logf("by default: %.2f clock readings per batch hop, %.3f of the records measured", perBatch, share)
	if perBatch > 1.7 {
		t.Errorf("by default: %.2f clock readings per batch over one hop, want at most 1.7", perBatch)
	}
	// 1050 batches, each timed with probability 1/8: 131 expected, and
	// fewer than 80 or more than 190 is over 4.5 standard deviations off.
	if want := 1.0 / graph.DefaultLatencyEvery; share < want*80/131 || share > want*190/131 {
		t.Errorf("by default: %.3f of the records measured, want about %.3f", share, want)
	}
}

// The engine allocates almost nothing per batch over a hop: what a batch
// costs is its records' array (the source's), plus a share of a credit
// message (one per half window) and of a tick (one per 16 batches read).
// Its envelope is the emitter's again once the receiver handled it
// (stage.Release).
func TestAllocsPerBatchHop(t *testing.T) {
	sys := newTestSystem(t)
	mallocs := func(n int64) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		hop(t, sys, n)
		runtime.ReadMemStats(&after)
		return after.Mallocs - before.Mallocs
	}
	mallocs(256) // warm up: the system's pools and workers
	const small, large = 50, 2050
	d := float64(mallocs(large*256)) - float64(mallocs(small*256))
	perBatch := d / (large - small)
	t.Logf("%.2f allocations per batch hop", perBatch)
	if perBatch > 1.5 {
		t.Errorf("%.2f allocations per batch over one hop, want at most 1.5 (records, shares of credits and ticks)", perBatch)
	}
}

// A batch changes hands without copies (stage.Batch.Own): over source ->
// map -> filter -> sink, each on its own actor, a batch costs the source's
// array of its records (2 KiB of int64), not a copy of the records at
// every emitter (three copies before: about 6 KiB per batch) nor an
// envelope per hop (about 200 bytes each before they were reused).
func TestBytesPerBatchPipeline(t *testing.T) {
	sys := newTestSystem(t)
	run := func(n int64) {
		top := graph.NewTopology("pipe")
		src := graph.Source[int64](top, "numbers", numbers(n))
		m := graph.Map(src, "map", func(v int64) int64 { return v*3 + 1 }, graph.NoFusion())
		f := graph.Filter(m, "filter", func(v int64) bool { return v%2 == 0 }, graph.NoFusion())
		graph.Sink[int64](f, "out", discard{}, graph.NoFusion())
		ctx, cancel := context.WithTimeout(context.Background(), timeoutStop)
		defer cancel()
		r, err := sys.Run(ctx, Job{top})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	bytes := func(n int64) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		run(n)
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	bytes(256) // warm up
	const small, large = 50, 1050
	perBatch := (float64(bytes(large*256)) - float64(bytes(small*256))) / (large - small)
	t.Logf("%.0f bytes allocated per batch over three hops", perBatch)
	if perBatch > 2304 {
		t.Errorf("%.0f bytes allocated per batch over three hops, want at most 2304 (the source's array)", perBatch)
	}
}

// A sink whose writer keeps no records (stage.KeepsNoRecords) lends the
// arrays of the batches it wrote back to the source, which reads into
// them instead of a new array: over source -> map -> filter -> sink a
// batch then costs next to nothing (shares of credits and ticks), not the
// source's 2 KiB array. The records still arrive right: the arrays come
// back only after the sink wrote them.
func TestBytesPerBatchPipelineLent(t *testing.T) {
	sys := newTestSystem(t)
	run := func(n int64) {
		var sum int64
		top := graph.NewTopology("pipe")
		src := graph.Source[int64](top, "numbers", numbers(n))
		m := graph.Map(src, "map", func(v int64) int64 { return v*3 + 1 }, graph.NoFusion())
		f := graph.Filter(m, "filter", func(v int64) bool { return v%2 == 0 }, graph.NoFusion())
		graph.Sink[int64](f, "out", summer{&sum}, graph.NoFusion())
		ctx, cancel := context.WithTimeout(context.Background(), timeoutStop)
		defer cancel()
		r, err := sys.Run(ctx, Job{top})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		var want int64
		for i := range n {
			if v := i*3 + 1; v%2 == 0 {
				want += v
			}
		}
		if sum != want {
			t.Fatalf("%d records: sum %d, want %d", n, sum, want)
		}
	}
	bytes := func(n int64) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		run(n)
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	bytes(256) // warm up
	const small, large = 50, 1050
	perBatch := (float64(bytes(large*256)) - float64(bytes(small*256))) / (large - small)
	t.Logf("%.0f bytes allocated per batch over three hops, arrays lent", perBatch)
	if perBatch > 256 {
		t.Errorf("%.0f bytes allocated per batch over three hops with a sink that keeps no records, want at most 256 (the source's array is lent back, the envelopes reused)", perBatch)
	}
}
