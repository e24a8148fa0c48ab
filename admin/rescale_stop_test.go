package admin_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/persistence"
)

// TestStopDuringRescale: a stop, an input change or a pause asked for
// while a rescale is under way is refused (ErrRefused). It used to drain the run the rescale was stopping,
// report the job stopped ("applied", with a final checkpoint), and the
// rescale then started the job again: it ran on after a stop said done.
func TestStopDuringRescale(t *testing.T) {
	sys, ctx := newSystem(t)
	top := operators.NewTopology("clicks")
	src := operators.Source(top, "src", operators.Generate(operators.Unbounded, func(i int64) int64 { return i }))
	keyed := operators.KeyBy(src, "by-user", func(v int64) int64 { return v % 10 }, operators.Parallelism(2))
	operators.Sink(operators.Count(keyed, "count"), "sink", operators.SinkFunc(func(operators.KV[int64, int64]) error { return nil }))
	opts := []operators.TopologyOption{operators.Checkpoints(time.Hour), operators.CheckpointStore(persistence.NewMemoryCheckpointStore())}
	job, err := operators.Start(ctx, sys, top, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := admin.New(admin.Options{Token: testToken, SavepointDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	start := admin.TopologyStarter(sys, top, opts...)
	var stopErr, inputErr, pauseErr error
	if err := srv.AddRestartable(job.Run(), func(sctx context.Context, r admin.Restart) (*actors.Run, error) {
		// Between the old run's stop and the new run's start: a stop, and
		// changes the rescale would lose (it carries over the settings it
		// read before the stop).
		_, stopErr = srv.Stop(ctx, "test", "clicks")
		inputErr = srv.SetInput(ctx, "test", "clicks", "count", admin.Input{Capacity: 4096})
		pauseErr = srv.Pause(ctx, "test", "clicks", "src", true)
		return start(sctx, r)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Rescale(ctx, "test", "clicks", map[string]int{"count": 3}); err != nil {
		t.Fatal(err)
	}
	run, err := srv.Current("clicks")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = run.Drain(ctx)
		_ = run.Wait(ctx)
	}()
	select {
	case <-run.Done():
	default:
		if stopErr == nil {
			t.Fatal("the stop asked for during the rescale was reported applied, and the rescaled job runs")
		}
	}
	if !errors.Is(stopErr, admin.ErrRefused) {
		t.Fatalf("the stop during the rescale: %v, want ErrRefused", stopErr)
	}
	if !errors.Is(inputErr, admin.ErrRefused) || !errors.Is(pauseErr, admin.ErrRefused) ||
		!strings.Contains(inputErr.Error(), "rescale is under way") || !strings.Contains(pauseErr.Error(), "rescale is under way") {
		t.Fatalf("changes during the rescale: input %v, pause %v; want both ErrRefused", inputErr, pauseErr)
	}
}
