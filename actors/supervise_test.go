package actors_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/actors/actortest"
	"github.com/sluicehq/sluice/clock/clocktest"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/supervision"
)

// flaky panics on "boom", counts its starts, and answers "count" with the
// messages it has seen since it started.
type flaky struct {
	starts chan<- struct{}
	seen   int
}

func (f *flaky) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		f.starts <- struct{}{}
	case string:
		switch m {
		case "boom":
			panic("boom")
		case "count":
			c.Respond(f.seen)
		default:
			f.seen++
		}
	}
}

func TestSuperviseBacksOffThenStops(t *testing.T) {
	clock := clocktest.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	sys := newSystemOn(t, clock)
	ctx := timeout(t)
	strategy, err := supervision.NewStrategy(
		supervision.WithBackoff(supervision.Backoff{Initial: 100 * time.Millisecond, Multiplier: 2, Jitter: supervision.NoJitter}),
		supervision.WithRestartBudget(2, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	starts := make(chan struct{}, 8)
	ref, err := sys.Spawn("flaky", func() actor.Actor { return &flaky{starts: starts} },
		actors.Supervise(strategy))
	if err != nil {
		t.Fatal(err)
	}
	probe := actortest.NewProbe(t, sys)
	probe.Watch(ref.PID())
	waitStart := func(what string) {
		t.Helper()
		select {
		case <-starts:
		case <-time.After(waitTimeout):
			t.Fatalf("no start: %s", what)
		}
	}
	waitStart("first")
	var delays []time.Duration
	for i := 1; i <= 2; i++ {
		if err := ref.Send(ctx, "boom"); err != nil {
			t.Fatal(err)
		}
		// The supervisor sets the restart's backoff timer on the clock.
		if err := clock.WaitForTimers(ctx, 1); err != nil {
			t.Fatal(err)
		}
		d, _ := clock.Next()
		delays = append(delays, d)
		clock.Advance(d - time.Millisecond)
		if clock.Pending() != 1 || len(starts) != 0 {
			t.Fatalf("restart %d: the actor restarted %v before its backoff delay of %v", i, time.Millisecond, d)
		}
		clock.Advance(time.Millisecond) // runs the restart
		waitStart("after a restart")
	}
	if want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}; !slices.Equal(delays, want) {
		t.Fatalf("restart delays %v, want %v", delays, want)
	}
	if err := ref.Send(ctx, "boom"); err != nil { // the budget of 2 is spent: stop
		t.Fatal(err)
	}
	actortest.ExpectTerminated(probe, ref.PID(), waitTimeout)
	if !errors.Is(ref.TrySend("hello"), mailbox.ErrClosed) {
		t.Fatal("the actor's mailbox is open after its budget was spent")
	}
	if n := clock.Pending(); n != 0 {
		t.Fatalf("%d restart timers pending after the budget was spent, want none", n)
	}
	select {
	case <-starts:
		t.Fatal("the actor started again after its budget was spent")
	default:
	}
}

func TestSuperviseResumeKeepsState(t *testing.T) {
	sys := newSystem(t)
	ctx := timeout(t)
	strategy, err := supervision.NewStrategy(supervision.WithDecider(func(error) supervision.Directive { return supervision.Resume }))
	if err != nil {
		t.Fatal(err)
	}
	starts := make(chan struct{}, 8)
	ref, err := sys.Spawn("resumer", func() actor.Actor { return &flaky{starts: starts} }, actors.Supervise(strategy))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"a", "boom", "b", "boom", "c"} {
		if err := ref.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ref.Request(ctx, "count")
	if err != nil {
		t.Fatal(err)
	}
	if got != 3 || len(starts) != 1 {
		t.Fatalf("after two resumed failures: seen %v, started %d times; want 3 and 1 (state kept, no restart)", got, len(starts))
	}
}
