package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/samples/nexmark"
)

// flinkPerCore is Flink 1.11's published throughput per core (the
// nexmark/nexmark README), given as context only: it was measured on three
// machines with RocksDB state, exactly-once checkpoints every 3 minutes, in
// a steady state after a warm-up, from a generator inside the job; none of
// that is what runs here, so it is no baseline. q6 has no Flink figure.
var flinkPerCore = map[string]float64{
	"q0": 235_000, "q1": 228_000, "q2": 258_000, "q3": 198_000, "q4": 26_000,
	"q5": 26_000, "q7": 12_000, "q8": 135_000, "q9": 14_000, "q11": 40_000,
}

// nexmarkQuery is one query: run builds it over a source of the events into
// a collecting sink, runs it and checks its output against the model's;
// model runs the single-goroutine reference model on the events.
type nexmarkQuery struct {
	name string
	// run checkpoints every cp when cp > 0.
	run   func(ctx context.Context, e *env, evs []nexmark.Event, p nexmark.Params, par int, cp time.Duration) (nexmarkRun, error)
	model func(evs []nexmark.Event) (time.Duration, int)
}

// nexmarkRun is what one run of a query's topology measured.
type nexmarkRun struct {
	d           time.Duration // from Run to the end of Wait
	results     int
	checkpoints int64 // completed, the final one included
}

// nexmarkCase builds a nexmarkQuery from the query's typed builder, its
// model, the canonical form its output is compared in (the tests' own:
// sorted, or the last update per key for q4 and q6) and equality.
func nexmarkCase[T any](name string, build func(operators.Stream[nexmark.Event], nexmark.Params) operators.Stream[T],
	model func([]nexmark.Event) []T, canon func([]T) []T, eq func(a, b T) bool) nexmarkQuery {
	var want []T // the model's output, kept from its timed run
	return nexmarkQuery{
		name: name,
		model: func(evs []nexmark.Event) (time.Duration, int) {
			start := time.Now()
			want = model(evs)
			return time.Since(start), len(want)
		},
		run: func(ctx context.Context, e *env, evs []nexmark.Event, p nexmark.Params, par int, cp time.Duration) (nexmarkRun, error) {
			cfg := actors.Config{Name: "nexmark-bench", Logger: e.log}
			var opts []operators.TopologyOption
			if cp > 0 { // checkpoints every cp into a bbolt store
				dir, err := os.MkdirTemp("", "sluice-nexmark-cp-")
				if err != nil {
					return nexmarkRun{}, err
				}
				defer os.RemoveAll(dir)
				cfg.Store = filepath.Join(dir, "store.db")
				opts = append(opts, operators.Checkpoints(cp))
			}
			sys, err := actors.NewSystem(cfg)
			if err != nil {
				return nexmarkRun{}, err
			}
			defer sys.Stop(ctx)
			t := operators.NewTopology("nexmark-"+name, opts...)
			events := operators.Source(t, "events", operators.FromSlice(evs), operators.Parallelism(par))
			col := operators.NewCollector[T]()
			operators.Sink(build(events, p), "out", col)
			run, d, err := runTimed(ctx, sys, t)
			if err != nil {
				return nexmarkRun{}, err
			}
			r := nexmarkRun{d: d, results: col.Len()}
			if cp > 0 {
				st := operators.CheckpointStatsOf(run)
				if st.Failed > 0 {
					return nexmarkRun{}, fmt.Errorf("%d checkpoints failed: %s", st.Failed, st.LastFailure)
				}
				r.checkpoints = st.Completed
			}
			for _, st := range run.Stats() {
				if st.Late > 0 {
					return nexmarkRun{}, fmt.Errorf("%d late records in %s", st.Late, st.Name)
				}
			}
			got, w := canon(col.Items()), canon(want)
			if len(w) == 0 {
				return nexmarkRun{}, fmt.Errorf("the model has no results: too few events to compare")
			}
			if !slices.EqualFunc(got, w, eq) {
				i := 0
				for i < len(got) && i < len(w) && eq(got[i], w[i]) {
					i++
				}
				return nexmarkRun{}, fmt.Errorf("output differs from the model: %d results, model %d, first difference at %d", len(got), len(w), i)
			}
			return r, nil
		},
	}
}

func same[T comparable](a, b T) bool { return a == b }

// nexmarkInterval is the checkpoint interval of a run of n events whose
// best rate without checkpoints is rate: a tenth of that run, within
// [10 ms, 1 s] (rounded to the millisecond).
func nexmarkInterval(rate float64, n int) time.Duration {
	d := time.Second
	if rate > 0 {
		d = time.Duration(float64(n) / rate / 10 * float64(time.Second))
	}
	return min(max(d, 10*time.Millisecond), time.Second).Round(time.Millisecond)
}

func nexmarkQueries() []nexmarkQuery {
	return []nexmarkQuery{
		nexmarkCase("q0", nexmark.BuildQ0, nexmark.ModelQ0, nexmark.SortedEvents,
			func(a, b nexmark.Event) bool { return nexmark.CompareEvents(a, b) == 0 }),
		nexmarkCase("q1", nexmark.BuildQ1, nexmark.ModelQ1, nexmark.Sorted[nexmark.Q1], same[nexmark.Q1]),
		nexmarkCase("q2", nexmark.BuildQ2, nexmark.ModelQ2, nexmark.Sorted[nexmark.Q2], same[nexmark.Q2]),
		nexmarkCase("q3", nexmark.BuildQ3, nexmark.ModelQ3, nexmark.Sorted[nexmark.Q3], same[nexmark.Q3]),
		nexmarkCase("q4", nexmark.BuildQ4, nexmark.ModelQ4, nexmark.LastPerKeyQ4, same[nexmark.Q4]),
		nexmarkCase("q5", nexmark.BuildQ5, nexmark.ModelQ5, nexmark.Sorted[nexmark.Q5], same[nexmark.Q5]),
		nexmarkCase("q6", nexmark.BuildQ6, nexmark.ModelQ6, nexmark.LastPerKeyQ6, same[nexmark.Q6]),
		nexmarkCase("q7", nexmark.BuildQ7, nexmark.ModelQ7, nexmark.Sorted[nexmark.Q7], same[nexmark.Q7]),
		nexmarkCase("q8", nexmark.BuildQ8, nexmark.ModelQ8, nexmark.Sorted[nexmark.Q8], same[nexmark.Q8]),
		nexmarkCase("q9", nexmark.BuildQ9, nexmark.ModelQ9, nexmark.Sorted[nexmark.Q9], same[nexmark.Q9]),
		nexmarkCase("q11", nexmark.BuildQ11, nexmark.ModelQ11, nexmark.Sorted[nexmark.Q11], same[nexmark.Q11]),
	}
}

// benchNexmark generates the events once (Beam's default configuration:
// 10 000 events/s of event time over 100 generators), holds them in memory,
// and runs every query on them three ways: as a topology read by parallel
// source instances with parallel keyed operators, the same topology with
// periodic checkpoints into a bbolt store, and as the query's
// single-goroutine reference model (the one the tests compare with). Each
// topology's output is checked against its model's; a difference fails the
// benchmark. The ratio is sluice's events/s over the model's, on the same
// events: what running on every core buys over one goroutine; and the
// checkpointed runs' over the runs without. The checkpoint interval is
// scaled to the run (at 2 M events most queries run for well under a
// second, so checkpoints every second took only the final one, at the end
// of the input): a tenth of the best run without checkpoints so far, within
// [10 ms, 1 s], so a run takes about ten besides the final one; the note
// gives the intervals and the checkpoints each run completed.
func benchNexmark(ctx context.Context, e *env) ([]Result, error) {
	n := e.n(2_000_000)
	cores := runtime.GOMAXPROCS(0)
	cfg := nexmark.DefaultConfig()
	cfg.NumEvents = int64(n)
	par := cores
	st, err := nexmark.NewStream(cfg)
	if err != nil {
		return nil, err
	}
	evs := make([]nexmark.Event, 0, n)
	for ev := range st.All() {
		evs = append(evs, ev)
	}
	p := nexmark.ParamsOf(cfg, par)
	var out []Result
	for _, q := range nexmarkQueries() {
		if e.cases != nil && !e.cases.MatchString(q.name) {
			continue
		}
		var results, modelResults int
		model, err := best(e.rounds, n, func() (time.Duration, error) {
			runtime.GC()
			d, k := q.model(evs)
			modelResults = k
			return d, nil
		})
		if err != nil {
			return nil, err
		}
		// The runs with and without checkpoints alternate, the first
		// without in even rounds; the best of each counts.
		// The first run is one without (r = 0, i = 0): it sets the interval.
		var rate, cpRate float64
		var checkpoints []int64
		var intervals []time.Duration
		for r := range max(e.rounds, 1) {
			for i := range 2 {
				var cp time.Duration
				if (r+i)%2 == 1 {
					cp = nexmarkInterval(rate, n)
				}
				runtime.GC()
				res, err := q.run(ctx, e, evs, p, par, cp)
				if err != nil {
					return nil, fmt.Errorf("nexmark %s (checkpoints every %v): %w", q.name, cp, err)
				}
				v := float64(n) / res.d.Seconds()
				if cp > 0 {
					cpRate = max(cpRate, v)
					checkpoints = append(checkpoints, res.checkpoints)
					intervals = append(intervals, cp)
				} else {
					rate = max(rate, v)
					results = res.results
				}
			}
		}
		base := Result{Name: "nexmark/" + q.name + "/base-model", Value: model, Unit: "events/s",
			Note: fmt.Sprintf("the query's single-goroutine reference model on the same %d in-memory events, %d results", n, modelResults)}
		out = append(out, base, Result{Name: "nexmark/" + q.name + "/sluice-vs-model", Value: rate, Unit: "events/s",
			Note: fmt.Sprintf("%d in-memory events, %d source instances, keyed parallelism %d, %d cores, %d results equal to the model's (aim >= 0.5x)",
				n, par, par, cores, results)}.against(base))
		plain := out[len(out)-1]
		out = append(out, Result{Name: "nexmark/" + q.name + "/checkpoints-vs-none", Value: cpRate, Unit: "events/s",
			Note: fmt.Sprintf("the same runs with checkpoints every %v (a tenth of the run without, 10 ms to 1 s) into a bbolt store (memory state), output checked; checkpoints completed per run, the final one included: %v; best of %d against the best of %d without (aim >= 0.9x)",
				intervals, checkpoints, len(checkpoints), len(checkpoints))}.against(plain))
		if f, ok := flinkPerCore[q.name]; ok {
			out = append(out, Result{Name: "nexmark/" + q.name + "/context-flink-1.11-per-core", Value: f, Unit: "events/s/core",
				Note: fmt.Sprintf("published, not measured here (3 machines, RocksDB, exactly-once checkpoints every 3 min, steady state); sluice here: %.0f events/s/core", rate/float64(cores))})
		}
	}
	return out, nil
}
