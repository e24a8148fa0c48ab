package operators_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
)

// A count whose state lives on disk (pebble) behind a cache of 16 KiB: far
// fewer keys fit in memory than the job counts, and the counts are exact.
func ExampleDiskState() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "sluice-disk-state-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		panic(err)
	}
	defer sys.Stop(ctx)

	t := operators.NewTopology("distinct", operators.StateBackend(operators.DiskState(dir, 16<<10)))
	src := operators.Source(t, "numbers", operators.Generate(6_000, func(i int64) int64 { return i % 2_000 }))
	by := operators.KeyBy(src, "by-number", func(v int64) int64 { return v })
	counts := operators.Count(by, "count", operators.Emit(operators.EmitAtEnd))
	var keys, total int64
	operators.Sink(counts, "sum", operators.SinkFunc(func(kv operators.KV[int64, int64]) error {
		keys, total = keys+1, total+kv.Value
		return nil
	}))
	run, err := sys.Run(ctx, t)
	if err != nil {
		panic(err)
	}
	if err := run.Wait(ctx); err != nil {
		panic(err)
	}
	fmt.Println(keys, "keys,", total, "records")
	// Output: 2000 keys, 6000 records
}
