package operators_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/persistence"
)

// BenchmarkKeyedSmallState runs a small-state keyed job (2 M records
// over 1000 keys, KeyBy -> Count -> sink, checkpoints every 100 ms) with
// the memory backend, with and without its changelog (the changelog's
// small, busy state writes a base at most checkpoints).
func BenchmarkKeyedSmallState(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts func(dir string) []operators.TopologyOption
	}{
		{"memory", func(string) []operators.TopologyOption { return nil }},
		{"changelog", func(dir string) []operators.TopologyOption {
			return []operators.TopologyOption{operators.StateBackend(operators.MemoryState().Changelog(dir))}
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			sys, err := actors.NewSystem(actors.Config{Name: "keyed-bench"})
			if err != nil {
				b.Fatal(err)
			}
			defer sys.Stop(ctx)
			const n = 2_000_000
			b.ResetTimer()
			for range b.N {
				var sum int64
				opts := append([]operators.TopologyOption{operators.Checkpoints(100 * time.Millisecond),
					operators.CheckpointStore(persistence.NewMemoryCheckpointStore())}, tc.opts(b.TempDir())...)
				t := operators.NewTopology("keyed-bench", opts...)
				src := operators.Source(t, "numbers", operators.Generate(n, func(i int64) int64 { return i }))
				by := operators.KeyBy(src, "by-key", func(v int64) int64 { return v % 1000 })
				counts := operators.Count(by, "count", operators.Emit(operators.EmitAtEnd))
				operators.Sink(counts, "sum", operators.SinkFunc(func(kv operators.KV[int64, int64]) error { sum += kv.Value; return nil }))
				run, err := sys.Run(ctx, t)
				if err != nil {
					b.Fatal(err)
				}
				if err := run.Wait(ctx); err != nil {
					b.Fatal(err)
				}
				if sum != n {
					b.Fatalf("counted %d of %d", sum, n)
				}
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
