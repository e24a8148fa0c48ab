package supervision

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/clock"
)

// Retryer runs an operation until it succeeds, with retries under a
// RetryPolicy: it drives the retry state machine (Step) with real timers
// (or a clock's: WithRetryClock). Attempts run on the caller's goroutine,
// one at a time; between them Do waits on a timer, the context and the
// deadline, and starts no goroutine.
// A Retryer holds only configuration: it is safe for concurrent use when its
// Backoff's random source is (the default one is).
type Retryer struct {
	policy     RetryPolicy
	maxElapsed time.Duration
	retryable  func(error) bool
	onRetry    func(attempt int, delay time.Duration, err error)
	clock      clock.Clock // nil: time.NewTimer
}

// RetryOption configures NewRetryer.
type RetryOption func(*Retryer)

// WithMaxAttempts bounds the attempts, the first included. Default
// DefaultMaxAttempts.
func WithMaxAttempts(n int) RetryOption { return func(r *Retryer) { r.policy.MaxAttempts = n } }

// WithRetryBackoff sets the delay between attempts. Default: the zero
// Backoff (100 ms doubling to 30 s, equal jitter).
func WithRetryBackoff(b Backoff) RetryOption { return func(r *Retryer) { r.policy.Backoff = b } }

// WithMaxElapsed bounds the time from the start of Do after which no new
// attempt starts (an attempt in flight may still succeed, and should bound
// its own duration). Default 0: no bound but the attempts.
func WithMaxElapsed(d time.Duration) RetryOption { return func(r *Retryer) { r.maxElapsed = d } }

// WithRetryable decides which errors are worth another attempt. Default:
// all but those marked with Permanent.
func WithRetryable(f func(error) bool) RetryOption { return func(r *Retryer) { r.retryable = f } }

// WithOnRetry calls f before each wait between attempts, on Do's goroutine,
// with the number of the attempt that failed, the delay and its error: the
// hook for metrics, logs and span events.
func WithOnRetry(f func(attempt int, delay time.Duration, err error)) RetryOption {
	return func(r *Retryer) { r.onRetry = f }
}

// WithRetryClock makes the waits between attempts and the maximum elapsed
// time run on c instead of the system's timers: tests pass a
// clocktest.Manual and advance it. Default (and nil): time.NewTimer, and Do
// starts no goroutine; with a clock, its AfterFunc may (clock.Real's does).
func WithRetryClock(c clock.Clock) RetryOption { return func(r *Retryer) { r.clock = c } }

// NewRetryer returns a validated Retryer. Invalid options return an error
// wrapping ErrInvalidConfig.
func NewRetryer(opts ...RetryOption) (*Retryer, error) {
	r := &Retryer{policy: RetryPolicy{MaxAttempts: DefaultMaxAttempts}}
	for _, o := range opts {
		if o == nil {
			return nil, errorf(ErrInvalidConfig, "supervision: retryer: nil option")
		}
		o(r)
	}
	if err := r.policy.Validate(); err != nil {
		return nil, err
	}
	if r.maxElapsed < 0 {
		return nil, errorf(ErrInvalidConfig, "supervision: retry: negative maximum elapsed time %v", r.maxElapsed)
	}
	if r.retryable == nil {
		r.retryable = func(err error) bool { return !IsPermanent(err) }
	}
	return r, nil
}

// Policy is the policy the Retryer feeds to the state machine.
func (r *Retryer) Policy() RetryPolicy { return r.policy }

// Do calls attempt until it returns nil, an error that is not retryable,
// the attempts run out, the maximum elapsed time passes, or ctx ends. It
// returns nil on success and a *RetryError otherwise (errors.As gives the
// Outcome with the number of attempts; errors.Is matches the reason and the
// last attempt's error). When ctx ends, Do returns at once if it is waiting
// between attempts, or as soon as the attempt in flight returns; the error
// then wraps context.Cause(ctx). An attempt that returns nil succeeds even
// if ctx ended meanwhile; one that fails after ctx ended is not retried.
func (r *Retryer) Do(ctx context.Context, attempt func(ctx context.Context) error) error {
	if attempt == nil {
		return errorf(ErrInvalidConfig, "supervision: retry: nil attempt function")
	}
	s := NewRetryState(r.policy)
	var queue []Action
	feed := func(ev Event) {
		var acts []Action
		s, acts = Step(s, ev)
		queue = append(queue, acts...)
	}

	var stopTimer func() bool
	var timerC <-chan time.Time
	timerFor := 0
	defer func() {
		if stopTimer != nil {
			stopTimer()
		}
	}()
	var deadline <-chan time.Time
	if r.maxElapsed > 0 {
		dc, stop := r.after(r.maxElapsed)
		defer stop()
		deadline = dc
	}

	if ctx.Err() != nil {
		feed(Cancel{Cause: context.Cause(ctx)})
	} else {
		feed(Start{})
	}
	for {
		for len(queue) > 0 {
			a := queue[0]
			queue = queue[1:]
			switch a := a.(type) {
			case RunAttempt:
				err := attempt(ctx)
				select {
				case <-deadline:
					deadline = nil
					feed(DeadlineExceeded{})
				default:
				}
				switch {
				case err == nil:
					feed(AttemptSucceeded{Attempt: a.Attempt})
				case ctx.Err() != nil:
					feed(Cancel{Cause: context.Cause(ctx)})
				default:
					feed(AttemptFailed{Attempt: a.Attempt, Err: err, Retryable: r.retryable(err)})
				}
			case ScheduleTimer:
				if r.onRetry != nil {
					r.onRetry(a.Attempt-1, a.Delay, s.LastErr)
				}
				if stopTimer != nil {
					stopTimer()
				}
				timerC, stopTimer = r.after(a.Delay)
				timerFor = a.Attempt
			case StopTimer:
				if stopTimer != nil {
					stopTimer()
				}
				timerC = nil
			case AbortAttempt:
				// Attempts run inline: the attempt has already returned.
			case Report:
				return a.Outcome.Error()
			}
		}
		if s.Phase != Retrying {
			// Cannot happen: every other phase has an action in flight.
			return fmt.Errorf("supervision: retry: internal error: %v with nothing to wait for", s)
		}
		select {
		case <-ctx.Done():
			feed(Cancel{Cause: context.Cause(ctx)})
		case <-timerC:
			timerC = nil
			feed(TimerFired{Attempt: timerFor})
		case <-deadline:
			deadline = nil
			feed(DeadlineExceeded{})
		}
	}
}

// after starts a timer of d on the Retryer's clock, and returns its channel
// and its Stop.
func (r *Retryer) after(d time.Duration) (<-chan time.Time, func() bool) {
	if r.clock == nil {
		t := time.NewTimer(d)
		return t.C, t.Stop
	}
	return clock.After(r.clock, d)
}
