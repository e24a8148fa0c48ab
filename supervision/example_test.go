package supervision_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/supervision"
)

// A backoff schedule made exact by a fixed random source: equal jitter
// waits half the nominal delay plus the draw times the other half.
func ExampleBackoff() {
	b := supervision.Backoff{
		Initial:    100 * time.Millisecond,
		Max:        time.Second,
		Multiplier: 2,
		Jitter:     supervision.EqualJitter,
		Rand:       func() float64 { return 0.5 },
	}
	for attempt := 1; attempt <= 6; attempt++ {
		fmt.Printf("after failure %d: nominal %v, wait %v\n", attempt, b.Nominal(attempt), b.Delay(attempt))
	}
	// Output:
	// after failure 1: nominal 100ms, wait 75ms
	// after failure 2: nominal 200ms, wait 150ms
	// after failure 3: nominal 400ms, wait 300ms
	// after failure 4: nominal 800ms, wait 600ms
	// after failure 5: nominal 1s, wait 750ms
	// after failure 6: nominal 1s, wait 750ms
}

func ExampleRetryer() {
	r, err := supervision.NewRetryer(
		supervision.WithMaxAttempts(4),
		supervision.WithRetryBackoff(supervision.Backoff{Initial: time.Millisecond, Jitter: supervision.NoJitter}),
		supervision.WithOnRetry(func(attempt int, delay time.Duration, err error) {
			fmt.Printf("attempt %d failed (%v); retrying in %v\n", attempt, err, delay)
		}),
	)
	if err != nil {
		panic(err)
	}
	calls := 0
	err = r.Do(context.Background(), func(ctx context.Context) error {
		calls++
		if calls < 3 {
			return errors.New("503 service unavailable")
		}
		return nil
	})
	fmt.Println("result:", err, "after", calls, "attempts")

	// A permanent error is not retried.
	err = r.Do(context.Background(), func(ctx context.Context) error {
		return supervision.Permanent(errors.New("400 bad request"))
	})
	fmt.Println(err)
	fmt.Println("permanent:", errors.Is(err, supervision.ErrPermanent))
	// Output:
	// attempt 1 failed (503 service unavailable); retrying in 1ms
	// attempt 2 failed (503 service unavailable); retrying in 2ms
	// result: <nil> after 3 attempts
	// supervision: attempt 1 failed permanently: 400 bad request
	// permanent: true
}

// Driving the retry state machine by hand, as an actor would: feed events,
// carry out actions.
func ExampleStep() {
	p := supervision.RetryPolicy{MaxAttempts: 2, Backoff: supervision.Backoff{Initial: time.Second, Jitter: supervision.NoJitter}}
	s := supervision.NewRetryState(p)
	for _, ev := range []supervision.Event{
		supervision.Start{},
		supervision.AttemptFailed{Attempt: 1, Err: errors.New("timeout"), Retryable: true},
		supervision.TimerFired{Attempt: 2},
		supervision.AttemptFailed{Attempt: 2, Err: errors.New("timeout"), Retryable: true},
	} {
		var acts []supervision.Action
		s, acts = supervision.Step(s, ev)
		fmt.Printf("%v -> %v %v\n", ev, s.Phase, acts)
	}
	// Output:
	// start -> running [run attempt 1]
	// attempt 1 failed (retryable): timeout -> retrying [schedule timer 1s for attempt 2]
	// timer for attempt 2 fired -> running [run attempt 2]
	// attempt 2 failed (retryable): timeout -> failed [report failed after 2 attempts (attempts exhausted): timeout]
}

// A supervisor consulting its strategy: restarts with growing delays until
// the budget of 2 per minute is spent.
func ExampleStrategy_OnFailure() {
	s, err := supervision.NewStrategy(
		supervision.WithRestartBudget(2, time.Minute),
		supervision.WithBackoff(supervision.Backoff{Initial: time.Second, Jitter: supervision.NoJitter}),
	)
	if err != nil {
		panic(err)
	}
	budget, _ := s.NewBudget()
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 3 {
		d := s.OnFailure(errors.New("panic: nil map"), budget, now.Add(time.Duration(i)*time.Second))
		fmt.Printf("%v delay=%v exhausted=%v\n", d.Directive, d.Delay, d.Exhausted)
	}
	// Output:
	// restart delay=1s exhausted=false
	// restart delay=2s exhausted=false
	// stop delay=0s exhausted=true
}
