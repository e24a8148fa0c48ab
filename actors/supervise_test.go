package actors_test

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/actors"
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
	sys := newSystem(t)
	ctx := timeout(t)
	var mu sync.Mutex
	var delays []time.Duration
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	strategy, err := supervision.NewStrategy(
		supervision.WithBackoff(supervision.Backoff{Initial: 100 * time.Millisecond, Multiplier: 2, Jitter: supervision.NoJitter}),
		supervision.WithRestartBudget(2, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	sup := supervision.ForActorsWithClock(strategy, func() time.Time { return now }, func(d time.Duration, f func()) {
		mu.Lock()
		delays = append(delays, d)
		mu.Unlock()
		f() // the delay elapses at once
	})
	starts := make(chan struct{}, 8)
	ref, err := sys.Spawn("flaky", func() actor.Actor { return &flaky{starts: starts} }, actors.Supervise(sup))
	if err != nil {
		t.Fatal(err)
	}
	waitStart := func(what string) {
		t.Helper()
		select {
		case <-starts:
		case <-time.After(waitTimeout):
			t.Fatalf("no start: %s", what)
		}
	}
	waitStart("first")
	for i := 1; i <= 2; i++ {
		if err := ref.Send(ctx, "boom"); err != nil {
			t.Fatal(err)
		}
		waitStart("after a restart")
	}
	if err := ref.Send(ctx, "boom"); err != nil { // the budget of 2 is spent: stop
		t.Fatal(err)
	}
	deadline := time.After(waitTimeout)
	for !errors.Is(ref.TrySend("hello"), mailbox.ErrClosed) {
		select {
		case <-deadline:
			t.Fatal("the actor was not stopped after its budget was spent")
		case <-time.After(time.Millisecond):
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}; !slices.Equal(delays, want) {
		t.Fatalf("restart delays %v, want %v", delays, want)
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
	ref, err := sys.Spawn("resumer", func() actor.Actor { return &flaky{starts: starts} }, actors.Supervise(supervision.ForActors(strategy)))
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
