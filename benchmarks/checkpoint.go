package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/actors"
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
