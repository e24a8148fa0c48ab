package operators_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/persistence"
)

// TestStartSettingsApplyToOneRun: the settings given to Start apply to that
// run and leave the topology as it was: started again without them, it
// takes no checkpoints.
func TestStartSettingsApplyToOneRun(t *testing.T) {
	sys, ctx := newSystem(t)
	store := persistence.NewMemoryCheckpointStore()
	top := operators.NewTopology("handle")
	src := operators.Source(top, "numbers", operators.Generate(operators.Unbounded, func(i int64) int64 { return i }))
	out := operators.NewCollector[int64]()
	operators.Sink(operators.Map(src, "inc", func(v int64) int64 { return v + 1 }), "out", out)

	job, err := operators.Start(ctx, sys, top, operators.Checkpoints(10*time.Millisecond), operators.CheckpointStore(store))
	if err != nil {
		t.Fatal(err)
	}
	id, err := job.CheckpointNow(ctx)
	if err != nil {
		t.Fatalf("Savepoint: %v", err)
	}
	if st := job.Checkpoints(); st.LastID < id || st.Completed == 0 {
		t.Fatalf("checkpoints after savepoint %d: %+v", id, st)
	}
	if p := job.Placement(); p != nil {
		t.Fatalf("placement of a job in one process: %v, want nil", p)
	}
	if err := job.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := job.Wait(ctx); !errors.Is(err, operators.ErrAborted) {
		t.Fatalf("Wait after Stop = %v, want ErrAborted", err)
	}
	if job.Name() != "handle" || len(job.Stats()) == 0 || job.Run() == nil {
		t.Fatalf("handle: name %q, stats %v", job.Name(), job.Stats())
	}
	select {
	case <-job.Done():
	default:
		t.Fatal("Done not closed after Wait")
	}

	// The same topology, started without settings: no checkpoints.
	job2, err := operators.Start(ctx, sys, top)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := job2.CheckpointNow(ctx); err == nil || !strings.Contains(err.Error(), "takes no checkpoints") {
		t.Fatalf("a savepoint of a run started without Checkpoints: %v, want that it takes none", err)
	}
	if err := job2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := job2.Wait(ctx); !errors.Is(err, operators.ErrAborted) {
		t.Fatalf("Wait after Stop = %v, want ErrAborted", err)
	}
}

// Start runs a topology and returns its handle; run settings such as
// checkpoints go to Start.
func ExampleStart() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		panic(err)
	}
	defer sys.Stop(ctx)

	t := operators.NewTopology("squares")
	nums := operators.Source(t, "numbers", operators.FromSlice([]int{1, 2, 3}))
	out := operators.NewCollector[int]()
	operators.Sink(operators.Map(nums, "square", func(v int) int { return v * v }), "collect", out)

	job, err := operators.Start(ctx, sys, t)
	if err != nil {
		panic(err)
	}
	if err := job.Wait(ctx); err != nil {
		panic(err)
	}
	fmt.Println(out.Items())
	// Output: [1 4 9]
}
