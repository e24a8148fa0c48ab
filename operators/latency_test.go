package operators_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
)

// Latency is measured at each task's first operator (queue wait and
// processing) and at the sink (end to end), weighted by records, with
// percentiles in order: of every record with LatencyEvery(1), of the
// records of one batch in about eight by default (the same records at
// every operator); NoLatencyStats measures nothing.
func TestLatencyStats(t *testing.T) {
	sys, ctx := newSystem(t)
	const n = 20_000
	build := func(opts ...operators.TopologyOption) *operators.Topology {
		top := operators.NewTopology("latency", opts...)
		src := operators.Source(top, "src", operators.Generate(n, func(i int64) int64 { return i }))
		m := operators.Map(src, "double", func(v int64) int64 { return 2 * v }, operators.NoFusion())
		operators.Sink(m, "out", operators.SinkFunc(func(int64) error { return nil }), operators.NoFusion())
		return top
	}
	for _, every := range []int{1, 0} {
		var opts []operators.TopologyOption
		if every > 0 {
			opts = append(opts, operators.LatencyEvery(every))
		}
		run := runToEnd(t, sys, ctx, build(opts...))
		in, out := stat(t, run, "double"), stat(t, run, "out")
		measured := in.Latency.Processing.Count
		switch {
		case every == 1 && measured != n:
			t.Errorf("every batch timed: %d records measured, want %d", measured, n)
		case every == 0 && (measured <= 0 || measured > n/3):
			t.Errorf("by default: %d of %d records measured, want about an eighth", measured, n)
		}
		for _, c := range []struct {
			what string
			p    actors.Percentiles
		}{{"double queue wait", in.Latency.QueueWait}, {"double processing", in.Latency.Processing},
			{"out queue wait", out.Latency.QueueWait}, {"out end to end", out.Latency.EndToEnd}} {
			if c.p.Count != measured {
				t.Errorf("every %d: %s: %d records measured, want %d, as the others", every, c.what, c.p.Count, measured)
			}
			if !(c.p.P50 <= c.p.P95 && c.p.P95 <= c.p.P99 && c.p.P99 <= c.p.Max) || c.p.Max <= 0 {
				t.Errorf("every %d: %s: percentiles out of order or empty: %v", every, c.what, c.p)
			}
		}
		if in.Latency.EndToEnd.Count != 0 {
			t.Errorf("end-to-end latency on a map: %v", in.Latency.EndToEnd)
		}
		// End to end covers the queue waits and processing on the way: the
		// largest end-to-end latency is at least the largest sink queue wait.
		if out.Latency.EndToEnd.Max < out.Latency.QueueWait.Max {
			t.Errorf("end to end max %v < the sink's queue wait max %v", out.Latency.EndToEnd.Max, out.Latency.QueueWait.Max)
		}
		if s := stat(t, run, "src"); s.SampleRate != 1 || s.Shed != 0 {
			t.Errorf("source without a target: sample rate %v, shed %d", s.SampleRate, s.Shed)
		}
	}

	off := runToEnd(t, sys, ctx, build(operators.NoLatencyStats()))
	if s := stat(t, off, "out"); s.Latency.EndToEnd.Count != 0 || s.Latency.QueueWait.Count != 0 {
		t.Errorf("NoLatencyStats measured %v", s.Latency)
	}
}

// Event-time lag is the job's clock less the operator's watermark.
func TestEventTimeLag(t *testing.T) {
	sys, ctx := newSystem(t)
	top := operators.NewTopology("lag")
	src := operators.Source(top, "src", operators.Generate(1000, func(i int64) int64 { return i }))
	ts := operators.Timestamps(src, "ts", func(v int64) time.Time { return time.Unix(v, 0) })
	operators.Sink(ts, "out", operators.SinkFunc(func(int64) error { return nil }), operators.NoFusion())
	run := runToEnd(t, sys, ctx, top)
	s := stat(t, run, "out")
	// The watermark is 1970 plus 999 s at most: the lag is most of the
	// time since the epoch.
	if s.Watermark.IsZero() || s.EventTimeLag < time.Since(time.Unix(1000, 0))-time.Hour {
		t.Errorf("watermark %v, event-time lag %v", s.Watermark, s.EventTimeLag)
	}
}

type visit struct {
	Key int
	At  int64 // event time, ms
}

// Approximate counts downstream of sampling are honest: over 250 windows of
// 4 keys sampled at 30 % (a fixed rate, with the shedding's seeded random
// numbers: the run is deterministic), the true count lies within the
// reported 95 % bound in at least 93 % of the key-windows, every one of
// them is marked approximate, and the sampled records are counted as shed.
func TestEstimatesWithinBounds(t *testing.T) {
	sys, ctx := newSystem(t)
	const windows, keys, perKey = 250, 4, 200
	const n = windows * keys * perKey
	top := operators.NewTopology("estimates", operators.FixedShed(0.3, false))
	src := operators.Source(top, "clicks", operators.Generate(n, func(i int64) visit {
		return visit{Key: int(i % keys), At: i * 1000 / (keys * perKey)}
	}))
	ts := operators.Timestamps(src, "ts", func(c visit) time.Time { return time.UnixMilli(c.At) })
	by := operators.KeyBy(ts, "by-key", func(c visit) int { return c.Key })
	est := operators.WindowCountEstimate(by, "count", operators.Tumbling(time.Second))
	got := operators.NewCollector[operators.Windowed[int, operators.Estimate]]()
	operators.Sink(est, "out", got)
	run := runToEnd(t, sys, ctx, top)
	items := got.Items()
	if len(items) != windows*keys {
		t.Fatalf("%d key-windows, want %d", len(items), windows*keys)
	}
	within, approx := 0, 0
	for _, w := range items {
		if w.Value.Contains(perKey) {
			within++
		}
		if w.Value.Approximate {
			approx++
		}
	}
	if frac := float64(within) / float64(len(items)); frac < 0.93 {
		t.Errorf("the true count lies within the 95 %% bound in %.1f %% of %d key-windows, want >= 93 %%", 100*frac, len(items))
	} else {
		t.Logf("the true count lies within the 95 %% bound in %.1f %% of %d key-windows", 100*frac, len(items))
	}
	if approx != len(items) {
		t.Errorf("%d of %d key-windows marked approximate", approx, len(items))
	}
	s := stat(t, run, "clicks")
	seen := stat(t, run, "count").In
	if s.Shed != n-seen || s.ShedBy["latency-sampled"] != s.Shed || s.SampleRate != 0.3 {
		t.Errorf("shed %d (%v) at rate %v; the count saw %d of %d", s.Shed, s.ShedBy, s.SampleRate, seen, n)
	}
}

// Without sampling, an estimate is exact: bound 0, not approximate.
func TestEstimateExactWithoutSampling(t *testing.T) {
	sys, ctx := newSystem(t)
	top := operators.NewTopology("exact")
	src := operators.Source(top, "clicks", operators.Generate(1000, func(i int64) visit { return visit{Key: int(i % 2), At: i} }))
	ts := operators.Timestamps(src, "ts", func(c visit) time.Time { return time.UnixMilli(c.At) })
	by := operators.KeyBy(ts, "by-key", func(c visit) int { return c.Key })
	est := operators.WindowSumEstimate(by, "sum", operators.Tumbling(time.Second), func(c visit) float64 { return 2 })
	got := operators.NewCollector[operators.Windowed[int, operators.Estimate]]()
	operators.Sink(est, "out", got)
	runToEnd(t, sys, ctx, top)
	for _, w := range got.Items() {
		if w.Value.Value != 1000 || w.Value.Bound != 0 || w.Value.Approximate || w.Value.Seen != 500 {
			t.Errorf("key %d: %+v, want exactly 1000 from 500 records", w.Key, w.Value)
		}
	}
}
