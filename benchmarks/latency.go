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
	measure := func(on bool) (time.Duration, time.Duration, error) {
		sys, err := actors.NewSystem(actors.Config{Name: "latency"})
		if err != nil {
			return 0, 0, err
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
	// Rounds alternate off and on (the first of each pair switching, so
	// that neither always runs second); each pair gives a ratio on ÷ off,
	// and the result is the median of the ratios with their spread, and
	// the median records/s of each side.
	var ons, offs, ratios, cpuRatios []float64
	for r := range e.rounds {
		order := []bool{false, true}
		if r%2 == 1 {
			order = []bool{true, false}
		}
		var pair, cpuPair [2]float64
		for _, on := range order {
			runtime.GC()
			d, cpu, err := measure(on)
			if err != nil {
				return nil, err
			}
			v := float64(n) / d.Seconds()
			if on {
				cpuPair[1] = float64(n) / cpu.Seconds()
				pair[1] = v
				ons = append(ons, v)
			} else {
				cpuPair[0] = float64(n) / cpu.Seconds()
				pair[0] = v
				offs = append(offs, v)
			}
		}
		ratios = append(ratios, pair[1]/pair[0])
		cpuRatios = append(cpuRatios, cpuPair[1]/cpuPair[0])
	}
	off := Result{Name: "latency/off", Value: median(offs), Unit: "records/s",
		Note: fmt.Sprintf("unfused pipeline, NoLatencyStats; median of %d rounds, %.0f-%.0f", len(offs), slices.Min(offs), slices.Max(offs))}
	on := Result{Name: "latency/on", Value: median(ons), Unit: "records/s",
		Note: fmt.Sprintf("unfused pipeline, latency measured (default); median of %d rounds, %.0f-%.0f", len(ons), slices.Min(ons), slices.Max(ons))}.against(off)
	// The ratio reported is the median of the pairs' ratios, not the ratio
	// of the medians: each pair saw the same moment of the machine.
	on.Ratio = median(ratios)
	on.Note += fmt.Sprintf("; ratio: median of %d alternated pairs, spread %.3f-%.3f", len(ratios), slices.Min(ratios), slices.Max(ratios))
	// Records per CPU second of the process, on ÷ off: what measuring
	// costs in work, less sensitive than wall time to other processes on
	// a loaded machine.
	cpu := Result{Name: "latency/on-cpu", Value: median(cpuRatios), Unit: "ratio",
		Note: fmt.Sprintf("records per CPU second (user+system) on ÷ off; median of %d alternated pairs, spread %.3f-%.3f",
			len(cpuRatios), slices.Min(cpuRatios), slices.Max(cpuRatios))}
	return []Result{off, on, cpu}, nil
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
