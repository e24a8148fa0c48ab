package admin_test

import (
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
)

// TestPolicyChurn changes the input of a keyed operator fed by two source
// instances over and over while the job runs at full speed (no pause),
// through every policy and Block windows of several sizes: credits are
// resynchronised on every channel each time (the job never stalls), the
// accounting is exact at every look, and once the job is stopped every
// record produced was delivered or counted as dropped.
func TestPolicyChurn(t *testing.T) {
	const n = 1 << 40 // never reached: the test stops the job
	sys, ctx := newSystem(t)
	var got atomic.Int64
	top := operators.NewTopology("churn", operators.BatchSize(32))
	src := operators.Source(top, "src", operators.Generate(n, func(i int64) int64 { return i }), operators.Parallelism(2))
	keyed := operators.KeyBy(src, "by-key", func(v int64) int64 { return v % 7 }, operators.Parallelism(3))
	work := operators.Process(keyed, "work", func(c *operators.ProcessContext[int64, struct{}, int64], v int64) { c.Emit(spin(v)) }, nil,
		operators.Input(mailbox.Block(512)))
	operators.Sink(work, "sink", operators.SinkFunc(func(int64) error { got.Add(1); return nil }))
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := admin.New(admin.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Add(run); err != nil {
		t.Fatal(err)
	}
	cycle := []admin.Input{
		{Policy: "drop-oldest", Capacity: 512},
		{Policy: "block", Capacity: 256},
		{Policy: "block", Capacity: 2048}, // a new window: regated
		{Policy: "spill", Capacity: 256},
		{Policy: "block", Capacity: 2048},
		{Policy: "block", Capacity: 96},
		{Policy: "sample", Capacity: 512, SampleEvery: 3},
		{Policy: "block", Capacity: 128},
		{Policy: "throttle", Capacity: 512, Rate: 20_000},
		{Policy: "drop-newest", Capacity: 128},
		{Policy: "block", Capacity: 512},
	}
	look := func(step string) mailbox.Stats {
		t.Helper()
		st, err := engine.InputStatsOf(run, "work")
		if err != nil {
			t.Fatal(err)
		}
		if st.Posted != st.Delivered+st.DroppedTotal()+int64(st.Depth)+st.SpillPending {
			t.Fatalf("%s: posted %d != delivered %d + dropped %d + queued %d + spilled %d",
				step, st.Posted, st.Delivered, st.DroppedTotal(), st.Depth, st.SpillPending)
		}
		return st
	}
	changes := 0
	for round := 0; ; round++ {
		in := cycle[round%len(cycle)]
		if round >= 3*len(cycle) {
			in = admin.Input{Policy: "block", Capacity: 512}
		}
		if err := srv.SetInput(ctx, "test", "churn", "work", in); err != nil {
			t.Fatalf("round %d: %v: %v", round, in, err)
		}
		changes++
		if round >= 3*len(cycle) {
			break
		}
		// Let some records through under this policy before the next.
		from := look(in.Policy).Posted
		waitFor(t, "records under "+in.String(), func() bool {
			return look(in.Policy+" (running)").Posted >= from+2_000
		})
	}
	// Stop with a savepoint: the sources stop, what is in flight finishes.
	if _, err := srv.Stop(ctx, "test", "churn"); err != nil {
		t.Fatal(err)
	}
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	end := look("end")
	produced := stat(t, run, "src").Out
	t.Logf("%d changes; posted %d, delivered %d, dropped %v, overfilled %d", changes, end.Posted, end.Delivered, end.Dropped, end.Overfilled)
	if end.Posted != produced || end.Depth != 0 || end.SpillPending != 0 || end.Delivered != got.Load() || end.Dropped[mailbox.ReasonRefused] != 0 {
		t.Fatalf("end: %+v, sink got %d", end, got.Load())
	}
}
