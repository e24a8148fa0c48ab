package operators_test

import (
	"context"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/clock/clocktest"
	"github.com/sluicehq/sluice/operators"
)

// A checkpoint whose barrier cannot pass a stuck operator is in progress
// (visible in the statistics and the in-progress gauge) until its timeout,
// then fails with "timed out after 5s"; the job goes on, the stuck
// operator's late acknowledgement is ignored, and the job ends with its
// final checkpoint complete.
func TestCheckpointTimeout(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sys, err := actors.NewSystem(actors.Config{Name: t.Name(), MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop(ctx)
	defer mp.Shutdown(ctx)

	clock := clocktest.NewManual(time.Unix(1000, 0))
	store := &memCheckpoints{}
	gate, entered, open := stuckGate()
	defer open()
	top := operators.NewTopology("timeout", operators.Checkpoints(10*time.Second), operators.CheckpointTimeout(5*time.Second),
		operators.CheckpointStore(store), operators.WithClock(clock))
	src := operators.Source(top, "numbers", operators.Generate(100, func(i int64) int64 { return i }))
	stuck := operators.Map(src, "stuck", gate, operators.NoFusion())
	operators.Sink(stuck, "out", discard[int64]())
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	<-entered                                           // the map holds a record: the barriers come after it
	if err := clock.WaitForTimers(ctx, 1); err != nil { // the interval's
		t.Fatal(err)
	}
	started := clock.Now().Add(10 * time.Second)
	clock.Advance(10 * time.Second) // checkpoint 1 starts; the map holds its barrier
	var rm metricdata.ResourceMetrics
	waitFor(t, "checkpoint 1 in progress", func() bool {
		if err := reader.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		return len(operators.CheckpointStatsOf(run).InProgress) == 1 && gaugeOf(rm, "sluice.checkpoints.in_progress") == 1
	})
	p := operators.CheckpointStatsOf(run).InProgress[0]
	if p.ID != 1 || !p.Started.Equal(started) || p.Pending < 2 || p.Pending+len(p.Acked) != 3 {
		t.Fatalf("in progress %+v, want checkpoint 1 since %v with the map and the sink pending", p, started)
	}
	clock.Advance(5 * time.Second) // its deadline
	waitFor(t, "checkpoint 1 timed out", func() bool { return operators.CheckpointStatsOf(run).Failed == 1 })
	st := operators.CheckpointStatsOf(run)
	if st.TimedOut != 1 || st.LastFailure != "timed out after 5s" || len(st.InProgress) != 0 || st.Completed != 0 {
		t.Fatalf("after the timeout: %+v", st)
	}
	open() // the map goes on, acknowledges checkpoint 1 late, and the job ends
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	st = operators.CheckpointStatsOf(run)
	if st.Failed != 1 || st.Completed < 1 || len(st.InProgress) != 0 {
		t.Fatalf("at the end: %+v", st)
	}
}

// One checkpoint in flight at a time (the default, and always with a
// minimum pause): intervals that elapse while it is in flight start none.
// (The pause itself is in internal/coord's transcripts.)
func TestCheckpointConcurrencyAndPause(t *testing.T) {
	sys, ctx := newSystem(t)
	clock := clocktest.NewManual(time.Unix(1000, 0))
	store := &memCheckpoints{}
	gate, entered, open := stuckGate()
	t.Cleanup(open)
	top := operators.NewTopology("paused", operators.Checkpoints(time.Second), operators.MinPauseBetweenCheckpoints(time.Minute),
		operators.CheckpointTimeout(0), operators.CheckpointStore(store), operators.WithClock(clock))
	src := operators.Source(top, "numbers", operators.Generate(100, func(i int64) int64 { return i }))
	stuck := operators.Map(src, "stuck", gate, operators.NoFusion())
	operators.Sink(stuck, "out", discard[int64]())
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	for i := 0; i < 5; i++ { // five intervals: checkpoint 1 stays alone in flight
		if err := clock.WaitForTimers(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
		waitFor(t, "checkpoint 1 in progress", func() bool { return len(operators.CheckpointStatsOf(run).InProgress) == 1 })
	}
	if p := operators.CheckpointStatsOf(run).InProgress; len(p) != 1 || p[0].ID != 1 {
		t.Fatalf("in progress %+v, want checkpoint 1 alone", p)
	}
	open()
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if st := operators.CheckpointStatsOf(run); st.Failed != 0 || st.Completed < 1 {
		t.Fatalf("at the end: %+v", st)
	}
}

// stuckGate is a map function that holds every record until open is
// called, and entered, closed when it first holds one.
func stuckGate() (fn func(int64) int64, entered <-chan struct{}, open func()) {
	gate, in := make(chan struct{}), make(chan struct{})
	var once, opened sync.Once
	fn = func(v int64) int64 {
		once.Do(func() { close(in) })
		<-gate
		return v
	}
	return fn, in, func() { opened.Do(func() { close(gate) }) }
}

func gaugeOf(rm metricdata.ResourceMetrics, name string) int64 {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == name {
				for _, dp := range g.DataPoints {
					return dp.Value
				}
			}
		}
	}
	return -1
}
