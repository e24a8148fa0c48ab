package main

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/samples/nexmark"
)

// flinkPerCore is Flink 1.11's published throughput per core (nexmark/nexmark
// README, 3 × 8-core machines, generator included); q6 has no Flink figure.
var flinkPerCore = map[string]float64{
	"q0": 235_000, "q1": 228_000, "q2": 258_000, "q3": 198_000, "q4": 26_000,
	"q5": 26_000, "q7": 12_000, "q8": 135_000, "q9": 14_000, "q11": 40_000,
}

// nexmarkQuery adds query q over events and a sink that discards its results
// (Flink's blackhole), counting them.
type nexmarkQuery struct {
	name  string
	build func(events operators.Stream[nexmark.Event], p nexmark.Params, n *atomic.Int64)
}

func blackhole[T any](s operators.Stream[T], n *atomic.Int64) {
	operators.Sink(s, "blackhole", operators.SinkFunc(func(T) error { n.Add(1); return nil }))
}

func nexmarkQueries() []nexmarkQuery {
	return []nexmarkQuery{
		{"q0", func(e operators.Stream[nexmark.Event], p nexmark.Params, n *atomic.Int64) {
			blackhole(nexmark.BuildQ0(e, p), n)
		}},
		{"q1", func(e operators.Stream[nexmark.Event], p nexmark.Params, n *atomic.Int64) {
			blackhole(nexmark.BuildQ1(e, p), n)
		}},
		{"q2", func(e operators.Stream[nexmark.Event], p nexmark.Params, n *atomic.Int64) {
			blackhole(nexmark.BuildQ2(e, p), n)
		}},
		{"q3", func(e operators.Stream[nexmark.Event], p nexmark.Params, n *atomic.Int64) {
			blackhole(nexmark.BuildQ3(e, p), n)
		}},
		{"q4", func(e operators.Stream[nexmark.Event], p nexmark.Params, n *atomic.Int64) {
			blackhole(nexmark.BuildQ4(e, p), n)
		}},
		{"q5", func(e operators.Stream[nexmark.Event], p nexmark.Params, n *atomic.Int64) {
			blackhole(nexmark.BuildQ5(e, p), n)
		}},
		{"q6", func(e operators.Stream[nexmark.Event], p nexmark.Params, n *atomic.Int64) {
			blackhole(nexmark.BuildQ6(e, p), n)
		}},
		{"q7", func(e operators.Stream[nexmark.Event], p nexmark.Params, n *atomic.Int64) {
			blackhole(nexmark.BuildQ7(e, p), n)
		}},
		{"q8", func(e operators.Stream[nexmark.Event], p nexmark.Params, n *atomic.Int64) {
			blackhole(nexmark.BuildQ8(e, p), n)
		}},
		{"q9", func(e operators.Stream[nexmark.Event], p nexmark.Params, n *atomic.Int64) {
			blackhole(nexmark.BuildQ9(e, p), n)
		}},
		{"q11", func(e operators.Stream[nexmark.Event], p nexmark.Params, n *atomic.Int64) {
			blackhole(nexmark.BuildQ11(e, p), n)
		}},
	}
}

// benchNexmark runs every query on the live generator in this process
// (Beam's default configuration: 10 000 events/s of event time over 100
// generators) and reports events/s per core, each against Flink's
// published figure per core. The cores are the Go processors the job ran
// on (GOMAXPROCS); the generator's cost is included, as in Flink's figures.
func benchNexmark(ctx context.Context, e *env) ([]Result, error) {
	n := e.n(2_000_000)
	cores := runtime.GOMAXPROCS(0)
	cfg := nexmark.DefaultConfig()
	cfg.NumEvents = int64(n)
	par := cores

	// The generator alone, one goroutine: the cost of the events themselves.
	genRate, err := best(e.rounds, n, func() (time.Duration, error) {
		st, err := nexmark.NewStream(cfg)
		if err != nil {
			return 0, err
		}
		start := time.Now()
		for range st.All() {
		}
		return time.Since(start), nil
	})
	if err != nil {
		return nil, err
	}
	out := []Result{{Name: "nexmark/generator", Value: genRate, Unit: "events/s/core",
		Note: "the event generator alone in one goroutine"}}

	for _, q := range nexmarkQueries() {
		var results atomic.Int64
		rate, err := best(e.rounds, n, func() (time.Duration, error) {
			sys, err := actors.NewSystem(actors.Config{Name: "nexmark-bench", Logger: e.log})
			if err != nil {
				return 0, err
			}
			defer sys.Stop(ctx)
			t := operators.NewTopology("nexmark-" + q.name)
			events := operators.Source(t, "events", nexmark.Source(cfg), operators.Parallelism(par))
			results.Store(0)
			q.build(events, nexmark.ParamsOf(cfg, par), &results)
			start := time.Now()
			run, err := sys.Run(ctx, t)
			if err != nil {
				return 0, err
			}
			if err := run.Wait(ctx); err != nil {
				return 0, err
			}
			d := time.Since(start)
			for _, st := range run.Stats() {
				if st.Late > 0 {
					return 0, fmt.Errorf("nexmark %s: %d late records in %s", q.name, st.Late, st.Name)
				}
			}
			return d, nil
		})
		if err != nil {
			return nil, fmt.Errorf("nexmark %s: %w", q.name, err)
		}
		r := Result{Name: "nexmark/" + q.name, Value: rate / float64(cores), Unit: "events/s/core",
			Note: fmt.Sprintf("%d events, %d results, %d cores, source and keyed parallelism %d", n, results.Load(), cores, par)}
		if f, ok := flinkPerCore[q.name]; ok {
			r = r.against(Result{Name: "flink-1.11/" + q.name, Value: f})
		}
		out = append(out, r)
		e.log.Info("nexmark", "query", q.name, "events/s/core", r.Value)
	}
	return out, nil
}
