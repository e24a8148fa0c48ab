package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
)

// benchLatency runs the unfused 4-stage pipeline with latency measured (the
// default) and without (NoLatencyStats), in alternating rounds of one run,
// so that both see the same machine.
func benchLatency(ctx context.Context, e *env) ([]Result, error) {
	n := e.n(10_000_000)
	measure := func(opts []operators.TopologyOption) (time.Duration, time.Duration, error) {
		sys, err := actors.NewSystem(actors.Config{Name: "latency"})
		if err != nil {
			return 0, 0, err
		}
		defer sys.Stop(ctx)
		var sum int64
		t := operators.NewTopology("latency", opts...)
		src := operators.Source(t, "source", operators.Generate(int64(n), pipeGen), operators.NoFusion())
		m := operators.Map(src, "map", pipeMap, operators.NoFusion())
		f := operators.Filter(m, "filter", pipeFilter, operators.NoFusion())
		operators.Sink(f, "sink", operators.SinkFunc(func(v int64) error { sum += v; return nil }), operators.NoFusion())
		start, cpu0 := time.Now(), processCPU()
		run, err := sys.Run(ctx, t)
		if err != nil {
			return 0, 0, err
		}
		if err := run.Wait(ctx); err != nil {
			return 0, 0, err
		}
		if sum != expectedSum(n) {
			return 0, 0, fmt.Errorf("latency bench: wrong sum")
		}
		return time.Since(start), processCPU() - cpu0, nil
	}
	// The variants: off, the default (one batch in
	// graph.DefaultLatencyEvery timed) and every batch timed.
	variants := [][]operators.TopologyOption{{operators.NoLatencyStats()}, nil, {operators.LatencyEvery(1)}}
	// Rounds run the three in turn, the first rotating, so that none
	// always runs first; each round gives a ratio of each measured variant
	// to off, and a result is the median of a variant's ratios with their
	// spread, and the median records/s of each variant.
	rates := make([][]float64, len(variants))
	ratios := make([][]float64, len(variants))
	cpuRatios := make([][]float64, len(variants))
	for r := range e.rounds {
		var rate, cpuRate [3]float64
		for k := range variants {
			i := (r + k) % len(variants)
			runtime.GC()
			d, cpu, err := measure(variants[i])
			if err != nil {
				return nil, err
			}
			rate[i], cpuRate[i] = float64(n)/d.Seconds(), float64(n)/cpu.Seconds()
			rates[i] = append(rates[i], rate[i])
		}
		for i := 1; i < len(variants); i++ {
			ratios[i] = append(ratios[i], rate[i]/rate[0])
			cpuRatios[i] = append(cpuRatios[i], cpuRate[i]/cpuRate[0])
		}
	}
	spread := func(vs []float64) string {
		return fmt.Sprintf("median of %d rounds, %.0f-%.0f", len(vs), slices.Min(vs), slices.Max(vs))
	}
	off := Result{Name: "latency/off", Value: median(rates[0]), Unit: "records/s", Note: "unfused pipeline, NoLatencyStats; " + spread(rates[0])}
	out := []Result{off}
	for i, v := range []struct{ name, what, aim string }{
		{"latency/on", "latency measured (the default: one batch in 8 timed)", "aim: <= 3 % throughput"},
		{"latency/every-batch", "every batch timed (LatencyEvery(1), as under a LatencyTarget)", "context"},
	} {
		i++
		r := Result{Name: v.name, Value: median(rates[i]), Unit: "records/s", Note: "unfused pipeline, " + v.what + "; " + spread(rates[i])}.against(off)
		// The ratio reported is the median of the rounds' ratios, not the
		// ratio of the medians: each round saw the same moment of the
		// machine.
		r.Ratio = median(ratios[i])
		r.Note += fmt.Sprintf("; ratio: median of %d rounds, spread %.3f-%.3f (%s)", len(ratios[i]), slices.Min(ratios[i]), slices.Max(ratios[i]), v.aim)
		// Records per CPU second of the process ÷ off: what measuring
		// costs in work, less sensitive than wall time to other processes
		// on a loaded machine.
		cpu := Result{Name: v.name + "-cpu", Value: median(cpuRatios[i]), Unit: "ratio",
			Note: fmt.Sprintf("records per CPU second (user+system) ÷ off; median of %d rounds, spread %.3f-%.3f",
				len(cpuRatios[i]), slices.Min(cpuRatios[i]), slices.Max(cpuRatios[i]))}
		out = append(out, r, cpu)
	}
	return out, nil
}

// processCPU is the CPU time (user and system) the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// median is the middle value of vs (the mean of the two middle ones for an
// even count), 0 for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(vs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
