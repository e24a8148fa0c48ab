package supervision_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/clock/clocktest"
	"github.com/sluicehq/sluice/supervision"
)

// failsafe bounds waits on channels; the tests never wait that long unless
// they are broken.
const failsafe = 10 * time.Second

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), failsafe)
	t.Cleanup(cancel)
	return ctx
}

// nextTimer waits until code on another goroutine has set a timer on c and
// returns how far ahead it is due.
func nextTimer(t *testing.T, c *clocktest.Manual) time.Duration {
	t.Helper()
	if err := c.WaitForTimers(ctxFor(t), 1); err != nil {
		t.Fatal(err)
	}
	d, _ := c.Next()
	return d
}

// The Retryer's waits run on the manual clock: the test sees each backoff
// timer (100, 200, 400 ms), checks that the next attempt does not start a
// moment before it is due, and lets it start by advancing the clock.
func TestRetryerBacksOffOnManualClock(t *testing.T) {
	c := clocktest.NewManual(t0)
	r, err := supervision.NewRetryer(
		supervision.WithMaxAttempts(5),
		supervision.WithRetryBackoff(supervision.Backoff{Initial: 100 * time.Millisecond, Jitter: supervision.NoJitter}),
		supervision.WithRetryClock(c))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var attempts []time.Duration // when each attempt started, on the clock
	errBusy := errors.New("503")
	done := make(chan error, 1)
	go func() {
		done <- r.Do(context.Background(), func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			attempts = append(attempts, clock.Since(c, t0))
			if len(attempts) < 4 {
				return errBusy
			}
			return nil
		})
	}()
	for _, want := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond} {
		if d := nextTimer(t, c); d != want {
			t.Fatalf("backoff timer due in %v, want %v", d, want)
		}
		c.Advance(want - time.Millisecond)
		if c.Pending() != 1 {
			t.Fatalf("the timer of %v fired after %v", want, want-time.Millisecond)
		}
		c.Advance(time.Millisecond)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Do = %v, want success on attempt 4", err)
		}
	case <-time.After(failsafe):
		t.Fatal("Do did not return")
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []time.Duration{0, 100 * time.Millisecond, 300 * time.Millisecond, 700 * time.Millisecond}; !slices.Equal(attempts, want) {
		t.Fatalf("attempts at %v, want %v", attempts, want)
	}
	if c.Pending() != 0 {
		t.Fatalf("%d timers left pending after Do returned", c.Pending())
	}
}

// WithMaxElapsed runs on the same clock: the deadline is a timer the test
// advances past.
func TestRetryerDeadlineOnManualClock(t *testing.T) {
	c := clocktest.NewManual(t0)
	r, err := supervision.NewRetryer(
		supervision.WithMaxAttempts(10),
		supervision.WithMaxElapsed(250*time.Millisecond),
		supervision.WithRetryBackoff(supervision.Backoff{Initial: 100 * time.Millisecond, Jitter: supervision.NoJitter}),
		supervision.WithRetryClock(c))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- r.Do(context.Background(), func(context.Context) error { return errors.New("503") })
	}()
	for _, step := range []time.Duration{100 * time.Millisecond, 150 * time.Millisecond} {
		// The deadline (due at 250 ms) and a backoff (due at 100, then 300 ms).
		if err := c.WaitForTimers(ctxFor(t), 2); err != nil {
			t.Fatal(err)
		}
		c.Advance(step)
	}
	select {
	case err := <-done:
		var re *supervision.RetryError
		if !errors.Is(err, supervision.ErrDeadline) || !errors.As(err, &re) || re.Outcome.Attempts != 2 {
			t.Fatalf("Do = %v, want the deadline after 2 attempts", err)
		}
	case <-time.After(failsafe):
		t.Fatal("Do did not return at the deadline")
	}
	if c.Pending() != 0 {
		t.Fatalf("%d timers left pending after Do returned", c.Pending())
	}
}

// crasher panics on "boom" and reports each start.
type crasher struct{ starts chan<- struct{} }

func (c *crasher) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		c.starts <- struct{}{}
	case string:
		if m == "boom" {
			panic("boom")
		}
		ctx.Respond(m)
	}
}

// A supervised actor's restarts wait on the manual clock: 100, 200 and
// 400 ms, each observed as a timer and let go by advancing the clock; the
// restart budget's window slides on the same clock.
func TestForActorsOnClockBacksOff(t *testing.T) {
	c := clocktest.NewManual(t0)
	sys, err := actors.NewSystem(actors.Config{Clock: c})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), failsafe)
		defer cancel()
		if err := sys.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	strategy, err := supervision.NewStrategy(
		supervision.WithBackoff(supervision.Backoff{Initial: 100 * time.Millisecond, Jitter: supervision.NoJitter}),
		supervision.WithRestartBudget(3, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	starts := make(chan struct{}, 8)
	ref, err := sys.Spawn("crasher", func() actor.Actor { return &crasher{starts: starts} },
		actors.Supervise(strategy))
	if err != nil {
		t.Fatal(err)
	}
	waitStart := func(what string) {
		t.Helper()
		select {
		case <-starts:
		case <-time.After(failsafe):
			t.Fatalf("the actor did not start: %s", what)
		}
	}
	waitStart("first start")
	crash := func(wantDelay time.Duration) {
		t.Helper()
		if err := ref.Send(ctxFor(t), "boom"); err != nil {
			t.Fatal(err)
		}
		if d := nextTimer(t, c); d != wantDelay {
			t.Fatalf("restart due in %v, want %v", d, wantDelay)
		}
		c.Advance(wantDelay - time.Millisecond)
		select {
		case <-starts:
			t.Fatalf("restarted before %v had passed", wantDelay)
		default:
		}
		c.Advance(time.Millisecond) // runs the restart
		waitStart("restart after " + wantDelay.String())
	}
	crash(100 * time.Millisecond)
	crash(200 * time.Millisecond)
	crash(400 * time.Millisecond)
	// A second later on the clock the three restarts have left the
	// budget's window: the next failure is the first again.
	c.Advance(time.Second)
	crash(100 * time.Millisecond)
	if reply, err := ref.Request(ctxFor(t), "still there?"); err != nil || reply != "still there?" {
		t.Fatalf("Request after the restarts = %v, %v", reply, err)
	}
}
