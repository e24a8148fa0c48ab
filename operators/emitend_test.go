package operators_test

import (
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
)

// TestEmitAtEndBoundedByCredits: a count emitting the results of many
// keys at the end (two instances into one sink, across credit-gated
// channels) sends only as far as the sink has granted room, going on as
// credits come back: at every write the sink sees, what the count has
// emitted and the sink not yet received stays within the channels'
// windows, not the number of keys. Every key's count arrives once; with
// checkpoints, the final checkpoint is answered after the emission.
func TestEmitAtEndBoundedByCredits(t *testing.T) {
	for _, disk := range []bool{false, true} {
		t.Run(fmt.Sprintf("disk=%v", disk), func(t *testing.T) {
			sys, ctx := newSystem(t)
			const keys, batch, capacity = 20_000, 64, 256
			opts := []operators.TopologyOption{operators.BatchSize(batch), operators.Capacity(capacity), operators.Checkpoints(time.Hour)}
			if disk {
				opts = append(opts, operators.StateBackend(operators.DiskState(filepath.Join(t.TempDir(), "state"), 8<<20)))
			}
			top := operators.NewTopology("emit-end", opts...)
			src := operators.Source(top, "numbers", operators.Generate(2*keys, func(i int64) int64 { return i % keys }))
			by := operators.KeyBy(src, "by", func(v int64) int64 { return v }, operators.Parallelism(2))
			counts := operators.Count(by, "count", operators.Emit(operators.EmitAtEnd))
			var run atomic.Pointer[actors.Run]
			var gap, got, wrong atomic.Int64
			operators.Sink(counts, "check", operators.SinkFunc(func(kv operators.KV[int64, int64]) error {
				if kv.Value != 2 {
					wrong.Add(1)
				}
				if got.Add(1)%batch == 1 {
					if r := run.Load(); r != nil {
						var out, in int64
						for _, s := range r.Stats() {
							switch s.Name {
							case "count":
								out += s.Out
							case "check":
								in += s.In
							}
						}
						gap.Store(max(gap.Load(), out-in))
					}
				}
				return nil
			}), operators.Parallelism(1))
			r, err := sys.Run(ctx, top)
			if err != nil {
				t.Fatal(err)
			}
			run.Store(r)
			if err := r.Wait(ctx); err != nil {
				for _, s := range r.Stats() {
					t.Logf("%s: in %d out %d", s.Name, s.In, s.Out)
				}
				t.Fatalf("%v (%d results)", err, got.Load())
			}
			checkAccounts(t, r)
			if got.Load() != keys || wrong.Load() != 0 {
				t.Fatalf("%d results (want %d), %d not 2", got.Load(), keys, wrong.Load())
			}
			// Each channel holds at most its window (the capacity) beside
			// a batch the sink is writing; a count that queued its results
			// instead had nearly all of them emitted ahead of the sink.
			if bound := int64(2 * (capacity + 2*batch)); gap.Load() > bound {
				t.Fatalf("the count emitted up to %d results ahead of the sink, bound %d", gap.Load(), bound)
			}
			t.Logf("max gap %d", gap.Load())
		})
	}
}
