package nexmark

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
)

// BenchmarkGenerator measures one generator (the unit a source actor runs)
// over the default mix: 2 % persons, 6 % auctions, 92 % bids.
func BenchmarkGenerator(b *testing.B) {
	cfg := DefaultConfig()
	cfg.NumEvents = 0 // practically endless
	g := mustGenerator(b, cfg, 0, cfg.NumEventGenerators)
	var bids int
	b.ReportAllocs()
	for b.Loop() {
		ev, ok := g.Next()
		if !ok {
			b.Fatal("generator ran out")
		}
		if ev.Bid != nil {
			bids++
		}
	}
	if bids == 0 {
		b.Fatal("no bids generated")
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkGeneratorKinds measures each kind of event on its own.
func BenchmarkGeneratorKinds(b *testing.B) {
	for _, c := range []struct {
		name   string
		offset int64 // an event id of that kind, with one generator
	}{{"person", 50}, {"auction", 51}, {"bid", 54}} {
		b.Run(c.name, func(b *testing.B) {
			g := mustGenerator(b, oneGeneratorConfig(0), 0, 1)
			b.ReportAllocs()
			for b.Loop() {
				if err := g.SetOffset(c.offset); err != nil {
					b.Fatal(err)
				}
				if ev, _ := g.Next(); eventKind(ev) != c.name {
					b.Fatalf("event %d is a %s", c.offset, eventKind(ev))
				}
			}
		})
	}
}

// BenchmarkEventFileWrite measures the generator writing the event file, as
// `sluice nexmark gen` does, with io.Discard as the file.
func BenchmarkEventFileWrite(b *testing.B) {
	cfg := DefaultConfig()
	cfg.NumEvents = 0
	s := mustStream(b, cfg)
	w := NewWriter(io.Discard)
	b.ReportAllocs()
	for b.Loop() {
		ev, _ := s.Next()
		if err := w.Write(ev); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// benchQueryEvents is the stream of BenchmarkQuery: Beam's default
// configuration (10 000 events/s over 100 generators), 500 000 events.
func benchQueryEvents(b *testing.B) ([]Event, Config) {
	cfg := DefaultConfig()
	cfg.NumEvents = 500_000
	return queryEvents(b, cfg), cfg
}

// BenchmarkQuery runs each query's topology, as the nexmark benchmark does
// (2 source instances over the events in memory, keyed parallelism 2, a
// collecting sink), once per iteration, for its CPU and allocation profile;
// BenchmarkModel runs the models on the same events. A run before the
// measured ones is checked against the model. Both report the process's CPU time per
// run (cpu-ms/op, every goroutine's and the GC's): on a loaded machine a
// steadier figure than the elapsed time.
func BenchmarkQuery(b *testing.B) {
	evs, cfg := benchQueryEvents(b)
	p := ParamsOf(cfg, 2)
	bench := func(name string, run func(b *testing.B, check bool)) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			run(b, true) // checked against the model, not measured
			cpu := cpuTime(b)
			for b.Loop() {
				run(b, false)
			}
			reportCPU(b, cpu)
			b.ReportMetric(float64(len(evs))*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
	bench("q0", benchBuild(evs, p, BuildQ0, func(got []Event) bool { return slices.EqualFunc(SortedEvents(got), ModelQ0(evs), sameEvent) }))
	bench("q3", benchBuild(evs, p, BuildQ3, func(got []Q3) bool { return slices.Equal(Sorted(got), ModelQ3(evs)) }))
	bench("q4", benchBuild(evs, p, BuildQ4, func(got []Q4) bool { return slices.Equal(LastPerKeyQ4(got), ModelQ4(evs)) }))
	bench("q6", benchBuild(evs, p, BuildQ6, func(got []Q6) bool { return slices.Equal(LastPerKeyQ6(got), ModelQ6(evs)) }))
	bench("q7", benchBuild(evs, p, BuildQ7, func(got []Q7) bool { return slices.Equal(Sorted(got), ModelQ7(evs)) }))
	bench("q8", benchBuild(evs, p, BuildQ8, func(got []Q8) bool { return slices.Equal(Sorted(got), ModelQ8(evs)) }))
	bench("q9", benchBuild(evs, p, BuildQ9, func(got []Q9) bool { return slices.Equal(Sorted(got), ModelQ9(evs)) }))
	bench("q11", benchBuild(evs, p, BuildQ11, func(got []Q11) bool { return slices.Equal(Sorted(got), ModelQ11(evs)) }))
}

// benchBuild returns a run of build's topology over evs; the output of a
// run with check set must pass ok.
func benchBuild[T any](evs []Event, p Params, build func(operators.Stream[Event], Params) operators.Stream[T], ok func([]T) bool) func(b *testing.B, check bool) {
	run := benchBuildCheckpointed(evs, p, 0, build, ok)
	return func(b *testing.B, check bool) { run(b, check) }
}

// benchBuildCheckpointed is benchBuild checkpointing every cp into a
// bbolt store when cp > 0; each run returns the checkpoints it completed.
func benchBuildCheckpointed[T any](evs []Event, p Params, cp time.Duration, build func(operators.Stream[Event], Params) operators.Stream[T], ok func([]T) bool) func(b *testing.B, check bool) int64 {
	return func(b *testing.B, check bool) int64 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cfg := actors.Config{Name: b.Name(), Logger: slog.New(slog.DiscardHandler)}
		var opts []operators.TopologyOption
		if cp > 0 {
			cfg.Store = filepath.Join(b.TempDir(), "store.db")
			opts = append(opts, operators.Checkpoints(cp))
		}
		sys, err := actors.NewSystem(cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer sys.Stop(ctx)
		top := operators.NewTopology(b.Name(), opts...)
		col := collectInto(build(operators.Source(top, "events", operators.FromSlice(evs), operators.Parallelism(p.Parallelism)), p), "out")
		run, err := sys.Run(ctx, top)
		if err != nil {
			b.Fatal(err)
		}
		if err := run.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		if check && !ok(col.Items()) {
			b.Fatal("output differs from the model")
		}
		if cp == 0 {
			return 0
		}
		st := operators.CheckpointStatsOf(run)
		if st.Failed > 0 {
			b.Fatalf("%d checkpoints failed: %s", st.Failed, st.LastFailure)
		}
		return st.Completed
	}
}

// BenchmarkQueryCheckpoints runs the stateful queries of BenchmarkQuery
// checkpointing every 20 ms into a bbolt store (memory state), as the
// nexmark benchmark's checkpointed runs do, and reports beside the CPU time
// per run the checkpoints each completed (checkpoints/op, the final one
// included): against BenchmarkQuery's cpu-ms/op, what a checkpoint costs.
func BenchmarkQueryCheckpoints(b *testing.B) {
	evs, cfg := benchQueryEvents(b)
	p := ParamsOf(cfg, 2)
	const every = 20 * time.Millisecond
	bench := func(name string, run func(b *testing.B, check bool) int64) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			run(b, true) // checked against the model, not measured
			var n int64
			cpu := cpuTime(b)
			for b.Loop() {
				n += run(b, false)
			}
			reportCPU(b, cpu)
			b.ReportMetric(float64(n)/float64(b.N), "checkpoints/op")
		})
	}
	bench("q3", benchBuildCheckpointed(evs, p, every, BuildQ3, func(got []Q3) bool { return slices.Equal(Sorted(got), ModelQ3(evs)) }))
	bench("q4", benchBuildCheckpointed(evs, p, every, BuildQ4, func(got []Q4) bool { return slices.Equal(LastPerKeyQ4(got), ModelQ4(evs)) }))
	bench("q6", benchBuildCheckpointed(evs, p, every, BuildQ6, func(got []Q6) bool { return slices.Equal(LastPerKeyQ6(got), ModelQ6(evs)) }))
	bench("q8", benchBuildCheckpointed(evs, p, every, BuildQ8, func(got []Q8) bool { return slices.Equal(Sorted(got), ModelQ8(evs)) }))
	bench("q9", benchBuildCheckpointed(evs, p, every, BuildQ9, func(got []Q9) bool { return slices.Equal(Sorted(got), ModelQ9(evs)) }))
	bench("q11", benchBuildCheckpointed(evs, p, every, BuildQ11, func(got []Q11) bool { return slices.Equal(Sorted(got), ModelQ11(evs)) }))
}

// BenchmarkModel runs the models of BenchmarkQuery's queries on its events.
func BenchmarkModel(b *testing.B) {
	evs, _ := benchQueryEvents(b)
	for _, m := range []struct {
		name string
		run  func([]Event) int
	}{
		{"q0", func(e []Event) int { return len(ModelQ0(e)) }},
		{"q3", func(e []Event) int { return len(ModelQ3(e)) }},
		{"q4", func(e []Event) int { return len(ModelQ4(e)) }},
		{"q6", func(e []Event) int { return len(ModelQ6(e)) }},
		{"q7", func(e []Event) int { return len(ModelQ7(e)) }},
		{"q8", func(e []Event) int { return len(ModelQ8(e)) }},
		{"q9", func(e []Event) int { return len(ModelQ9(e)) }},
		{"q11", func(e []Event) int { return len(ModelQ11(e)) }},
	} {
		b.Run(m.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := cpuTime(b)
			for b.Loop() {
				if m.run(evs) == 0 {
					b.Fatal("no results")
				}
			}
			reportCPU(b, cpu)
			b.ReportMetric(float64(len(evs))*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

func sameEvent(a, b Event) bool { return CompareEvents(a, b) == 0 }

// cpuTime is the process's CPU time so far (user and system).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time since start per iteration.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime(b)-start)/1e6/float64(b.N), "cpu-ms/op")
}
