package main

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
)

// benchLatency runs the unfused 4-stage pipeline with latency measured (the
// default) and without (NoLatencyStats), in alternating rounds of one run,
// so that both see the same machine.
func benchLatency(ctx context.Context, e *env) ([]Result, error) {
	n := e.n(10_000_000)
	measure := func(on bool) (time.Duration, error) {
		sys, err := actors.NewSystem(actors.Config{Name: "latency"})
		if err != nil {
			return 0, err
		}
		defer sys.Stop(ctx)
		var opts []operators.TopologyOption
		if !on {
			opts = append(opts, operators.NoLatencyStats())
		}
		var sum int64
		t := operators.NewTopology("latency", opts...)
		src := operators.Source(t, "source", operators.Generate(int64(n), pipeGen), operators.NoFusion())
		m := operators.Map(src, "map", pipeMap, operators.NoFusion())
		f := operators.Filter(m, "filter", pipeFilter, operators.NoFusion())
		operators.Sink(f, "sink", operators.SinkFunc(func(v int64) error { sum += v; return nil }), operators.NoFusion())
		start := time.Now()
		run, err := sys.Run(ctx, t)
		if err != nil {
			return 0, err
		}
		if err := run.Wait(ctx); err != nil {
			return 0, err
		}
		if sum != expectedSum(n) {
			return 0, fmt.Errorf("latency bench: wrong sum")
		}
		return time.Since(start), nil
	}
	var bestOn, bestOff float64
	for range e.rounds {
		for _, on := range []bool{false, true} {
			runtime.GC()
			d, err := measure(on)
			if err != nil {
				return nil, err
			}
			v := float64(n) / d.Seconds()
			if on {
				bestOn = max(bestOn, v)
			} else {
				bestOff = max(bestOff, v)
			}
		}
	}
	off := Result{Name: "latency/off", Value: bestOff, Unit: "records/s", Note: "unfused pipeline, NoLatencyStats"}
	return []Result{off, Result{Name: "latency/on", Value: bestOn, Unit: "records/s", Note: "unfused pipeline, latency measured (default)"}.against(off)}, nil
}
