package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
)

// benchCheckpoint measures a keyed counting job with checkpoints every
// second against the same job without checkpoints.
func benchCheckpoint(ctx context.Context, e *env) ([]Result, error) {
	n := e.n(30_000_000)
	measure := func(interval time.Duration) (float64, int64, error) {
		var completed int64
		v, err := best(e.rounds, n, func() (time.Duration, error) {
			dir, err := os.MkdirTemp("", "sluice-cp-bench-")
			if err != nil {
				return 0, err
			}
			defer os.RemoveAll(dir)
			sys, err := actors.NewSystem(actors.Config{Name: "cp-bench", Store: filepath.Join(dir, "store.db")})
			if err != nil {
				return 0, err
			}
			defer sys.Stop(ctx)
			var opts []operators.TopologyOption
			if interval > 0 {
				opts = append(opts, operators.Checkpoints(interval))
			}
			var sum int64
			t := operators.NewTopology("cp-bench", opts...)
			src := operators.Source(t, "numbers", operators.Generate(int64(n), func(i int64) int64 { return i }))
			by := operators.KeyBy(src, "by-key", func(v int64) int64 { return v % 1000 }, operators.Parallelism(2))
			counts := operators.Count(by, "count", operators.Emit(operators.EmitAtEnd))
			operators.Sink(counts, "sum", operators.SinkFunc(func(kv operators.KV[int64, int64]) error { sum += kv.Value; return nil }), operators.Parallelism(1))
			start := time.Now()
			run, err := sys.Run(ctx, t)
			if err != nil {
				return 0, err
			}
			if err := run.Wait(ctx); err != nil {
				return 0, err
			}
			d := time.Since(start)
			if sum != int64(n) {
				return 0, fmt.Errorf("checkpoint bench: counted %d of %d", sum, n)
			}
			completed = operators.CheckpointStatsOf(run).Completed
			return d, nil
		})
		return v, completed, err
	}
	none, _, err := measure(0)
	if err != nil {
		return nil, err
	}
	with, completed, err := measure(time.Second)
	if err != nil {
		return nil, err
	}
	base := Result{Name: "checkpoint/none", Value: none, Unit: "records/s", Note: "keyed count, 2 instances, no checkpoints"}
	return []Result{base,
		Result{Name: "checkpoint/every-1s", Value: with, Unit: "records/s",
			Note: fmt.Sprintf("same job, checkpoints every second into a bbolt store (%d completed in the last round)", completed)}.against(base),
	}, nil
}

// benchUnaligned measures a job under Block back-pressure (a consumer
// about ten times slower than the source, its inputs full all the time)
// with unaligned checkpoints every second against the same job without
// checkpoints, and reports how long the checkpoints took.
func benchUnaligned(ctx context.Context, e *env) ([]Result, error) {
	n := e.n(2_000_000)
	type outcome struct {
		completed int64
		last      time.Duration
		worst     time.Duration
		durations []time.Duration // of the checkpoints seen complete
		underLoad int             // of those, completed while the spill held 100 000 records or more
		maxSpill  int64
	}
	// With spill the consumer is slower still (the spill path writes at a
	// few hundred thousand records a second, which bounds the source), so
	// that the spill holds 100 000 records and more.
	measure := func(spill bool, opts ...operators.TopologyOption) (float64, outcome, error) {
		n, rounds := n, 3000
		if spill {
			n, rounds = e.n(1_000_000), 30_000
		}
		var out outcome
		v, err := best(e.rounds, n, func() (time.Duration, error) {
			dir, err := os.MkdirTemp("", "sluice-ua-bench-")
			if err != nil {
				return 0, err
			}
			defer os.RemoveAll(dir)
			sys, err := actors.NewSystem(actors.Config{Name: "ua-bench", Store: filepath.Join(dir, "store.db")})
			if err != nil {
				return 0, err
			}
			defer sys.Stop(ctx)
			var sum atomic.Int64
			t := operators.NewTopology("ua-bench", append([]operators.TopologyOption{operators.Capacity(1024)}, opts...)...)
			src := operators.Source(t, "numbers", operators.Generate(int64(n), func(i int64) int64 { return i }))
			by := operators.KeyBy(src, "by-key", func(v int64) int64 { return v % 1000 }, operators.Parallelism(2))
			var copts []operators.AggregateOption
			if spill {
				copts = append(copts, operators.Input(mailbox.Spill(1024, mailbox.SpillOptions{})))
			}
			counts := operators.Count(by, "count", copts...)
			slow := operators.Map(counts, "slow", func(kv operators.KV[int64, int64]) operators.KV[int64, int64] {
				kv.Value = work(kv.Value, rounds)
				return kv
			})
			// The sink is fused with the count (no edge after it): the count's
			// input is where records wait.
			operators.Sink(slow, "updates", operators.SinkFunc(func(operators.KV[int64, int64]) error { sum.Add(1); return nil }))
			start := time.Now()
			run, err := sys.Run(ctx, t)
			if err != nil {
				return 0, err
			}
			out = outcome{}
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			var lastID uint64
			for done := false; !done; {
				select {
				case <-run.Done():
					done = true
				case <-tick.C:
					st := operators.CheckpointStatsOf(run)
					var pending int64
					for _, o := range run.Stats() {
						pending += o.SpillPending
					}
					out.maxSpill = max(out.maxSpill, pending)
					if st.LastID != lastID {
						lastID = st.LastID
						out.durations = append(out.durations, st.LastDuration)
						if pending >= 100_000 {
							out.underLoad++
						}
					}
					if st.LastDuration > out.worst {
						out.worst = st.LastDuration
					}
				}
			}
			if err := run.Wait(ctx); err != nil {
				return 0, err
			}
			d := time.Since(start)
			if sum.Load() != int64(n) {
				return 0, fmt.Errorf("unaligned bench: counted %d of %d", sum.Load(), n)
			}
			st := operators.CheckpointStatsOf(run)
			out.completed, out.last = st.Completed, st.LastDuration
			return d, nil
		})
		return v, out, err
	}
	none, _, err := measure(false)
	if err != nil {
		return nil, err
	}
	aligned, ao, err := measure(false, operators.Checkpoints(time.Second))
	if err != nil {
		return nil, err
	}
	unaligned, uo, err := measure(false, operators.Checkpoints(time.Second), operators.UnalignedCheckpoints())
	if err != nil {
		return nil, err
	}
	spilled, so, err := measure(true, operators.Checkpoints(500*time.Millisecond), operators.UnalignedCheckpoints())
	if err != nil {
		return nil, err
	}
	slices.Sort(so.durations)
	var p99 time.Duration
	if len(so.durations) > 0 {
		p99 = so.durations[min(len(so.durations)-1, len(so.durations)*99/100)]
	}
	base := Result{Name: "checkpoint/backpressure-none", Value: none, Unit: "records/s", Note: "keyed count and a consumer ~10x slower than the source (Block, capacity 1024), no checkpoints"}
	return []Result{base,
		Result{Name: "checkpoint/backpressure-aligned-1s", Value: aligned, Unit: "records/s",
			Note: fmt.Sprintf("aligned checkpoints every second: %d completed, slowest seen %v", ao.completed, ao.worst.Round(time.Millisecond))}.against(base),
		Result{Name: "checkpoint/backpressure-unaligned-1s", Value: unaligned, Unit: "records/s",
			Note: fmt.Sprintf("unaligned checkpoints every second: %d completed, slowest seen %v", uo.completed, uo.worst.Round(time.Millisecond))}.against(base),
		Result{Name: "checkpoint/spill-unaligned-500ms", Value: spilled, Unit: "records/s",
			Note: fmt.Sprintf("%d records, a consumer 10x slower still, its input spilling (Spill 1024), unaligned checkpoints every 500 ms: %d completed, %d of them while the spill held >= 100k records (at most %d), p99 duration %v", e.n(1_000_000),
				so.completed, so.underLoad, so.maxSpill, p99.Round(time.Millisecond))}.against(base),
	}, nil
}

// work is deterministic CPU work per record (rounds of xorshift).
func work(v int64, rounds int) int64 {
	x := uint64(v) | 1
	for range rounds {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return v + int64(x&0)
}

// benchIngress measures an application feeding a checkpointed keyed count
// through the durable ingress (each batch durable before SendBatch
// returns) against the same records sent through a Spill mailbox into a
// store of its own (fsynced per group), the spill path.
func benchIngress(ctx context.Context, e *env) ([]Result, error) {
	n := e.n(1_000_000)
	const batch = 4096 // the spill commits a group every 4096 messages: like with like
	ingress, err := best(e.rounds, n, func() (time.Duration, error) {
		dir, err := os.MkdirTemp("", "sluice-ingress-bench-")
		if err != nil {
			return 0, err
		}
		defer os.RemoveAll(dir)
		sys, err := actors.NewSystem(actors.Config{Name: "ingress-bench", Store: filepath.Join(dir, "store.db")})
		if err != nil {
			return 0, err
		}
		defer sys.Stop(ctx)
		in, err := operators.NewDurableIngress[int64](sys, "numbers", operators.DurableIngressConfig{})
		if err != nil {
			return 0, err
		}
		var sum int64
		t := operators.NewTopology("ingress-bench", operators.Checkpoints(time.Second))
		by := operators.KeyBy(operators.Source(t, "numbers", in), "by-key", func(v int64) int64 { return v % 1000 })
		counts := operators.Count(by, "count", operators.Emit(operators.EmitAtEnd))
		operators.Sink(counts, "sum", operators.SinkFunc(func(kv operators.KV[int64, int64]) error { sum += kv.Value; return nil }))
		start := time.Now()
		run, err := sys.Run(ctx, t)
		if err != nil {
			return 0, err
		}
		buf := make([]int64, 0, batch)
		for i := int64(0); i < int64(n); i++ {
			if buf = append(buf, i); len(buf) == batch || i == int64(n)-1 {
				if err := in.SendBatch(ctx, buf); err != nil {
					return 0, err
				}
				buf = buf[:0]
			}
		}
		if err := in.Close(); err != nil {
			return 0, err
		}
		if err := run.Wait(ctx); err != nil {
			return 0, err
		}
		if sum != int64(n) {
			return 0, fmt.Errorf("ingress bench: counted %d of %d", sum, n)
		}
		return time.Since(start), nil
	})
	if err != nil {
		return nil, err
	}
	spill, err := spillPath(ctx, e, n)
	if err != nil {
		return nil, err
	}
	base := Result{Name: "checkpoint/spill-path", Value: spill, Unit: "records/s", Note: "records through a Spill mailbox into a store of its own (fsynced per group) to a consumer"}
	return []Result{base,
		Result{Name: "checkpoint/durable-ingress", Value: ingress, Unit: "records/s",
			Note: fmt.Sprintf("SendBatch of %d, durable before it returns, into a checkpointed keyed count (checkpoints every second)", batch)}.against(base),
	}, nil
}
