package supervision

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// attemptLog records when each attempt started, in the bubble's fake time.
type attemptLog struct {
	start time.Time
	at    []time.Duration
}

func (l *attemptLog) mark() int {
	l.at = append(l.at, time.Since(l.start))
	return len(l.at)
}

func newRetryer(t *testing.T, opts ...RetryOption) *Retryer {
	t.Helper()
	r, err := NewRetryer(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// advance lets d pass on the bubble's fake clock (it returns at once in
// real time, when every other goroutine of the bubble is blocked).
func advance(d time.Duration) { <-time.After(d) }

var errTransient = errors.New("503 service unavailable")

func TestRetryerExactSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Equal jitter with the source at 0.5: delays 3/4 of 10, 20, 40ms.
		r := newRetryer(t, WithMaxAttempts(5), WithRetryBackoff(Backoff{Initial: 10 * time.Millisecond, Rand: func() float64 { return 0.5 }}))
		l := &attemptLog{start: time.Now()}
		type retry struct {
			attempt int
			delay   time.Duration
			err     error
		}
		var retries []retry
		r.onRetry = func(a int, d time.Duration, err error) { retries = append(retries, retry{a, d, err}) }
		err := r.Do(t.Context(), func(ctx context.Context) error {
			if l.mark() < 4 {
				return errTransient
			}
			return nil
		})
		if err != nil {
			t.Fatalf("Do = %v, want success on attempt 4", err)
		}
		ms := time.Millisecond
		if want := []time.Duration{0, 7500 * time.Microsecond, 22500 * time.Microsecond, 52500 * time.Microsecond}; !slices.Equal(l.at, want) {
			t.Errorf("attempts at %v, want %v", l.at, want)
		}
		if want := []retry{{1, 7500 * time.Microsecond, errTransient}, {2, 15 * ms, errTransient}, {3, 30 * ms, errTransient}}; !slices.Equal(retries, want) {
			t.Errorf("OnRetry calls %v, want %v", retries, want)
		}
	})
}

func TestRetryerGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRetryer(t, WithMaxAttempts(3), WithRetryBackoff(Backoff{Initial: time.Second, Jitter: NoJitter}))
		l := &attemptLog{start: time.Now()}
		err := r.Do(t.Context(), func(context.Context) error { l.mark(); return errTransient })
		var re *RetryError
		if !errors.Is(err, ErrAttemptsExhausted) || !errors.Is(err, errTransient) || !errors.As(err, &re) || re.Outcome.Attempts != 3 {
			t.Fatalf("Do = %v, want attempts exhausted after 3 wrapping the last error", err)
		}
		if want := []time.Duration{0, time.Second, 3 * time.Second}; !slices.Equal(l.at, want) {
			t.Errorf("attempts at %v, want %v", l.at, want)
		}
		if time.Since(l.start) != 3*time.Second {
			t.Errorf("Do returned %v after the start, want right after the last attempt", time.Since(l.start))
		}
	})
}

func TestRetryerPermanentAndRetryable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errBad := errors.New("400 bad request")
		r := newRetryer(t, WithRetryBackoff(Backoff{Initial: time.Millisecond}))
		n := 0
		err := r.Do(t.Context(), func(context.Context) error { n++; return Permanent(errBad) })
		if n != 1 || !errors.Is(err, ErrPermanent) || !errors.Is(err, errBad) {
			t.Fatalf("permanent error: %d attempts, %v; want 1 and ErrPermanent", n, err)
		}
		// A custom classifier: only errTransient is worth retrying.
		r = newRetryer(t, WithRetryable(func(err error) bool { return errors.Is(err, errTransient) }), WithRetryBackoff(Backoff{Initial: time.Millisecond}))
		n = 0
		err = r.Do(t.Context(), func(context.Context) error {
			n++
			if n == 1 {
				return errTransient
			}
			return errBad
		})
		if n != 2 || !errors.Is(err, ErrPermanent) || !errors.Is(err, errBad) {
			t.Fatalf("classifier: %d attempts, %v; want 2 and ErrPermanent", n, err)
		}
	})
}

func TestRetryerCancelWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRetryer(t, WithMaxAttempts(10), WithRetryBackoff(Backoff{Initial: time.Hour, Jitter: NoJitter}))
		ctx, cancel := context.WithCancelCause(t.Context())
		errStop := errors.New("job draining")
		start := time.Now()
		done := make(chan error)
		n := 0
		go func() { done <- r.Do(ctx, func(context.Context) error { n++; return errTransient }) }()
		synctest.Wait() // Do waits on its timer
		if n != 1 {
			t.Fatalf("%d attempts before the wait, want 1", n)
		}
		advance(time.Minute)
		cancel(errStop)
		err := <-done
		if !errors.Is(err, errStop) || !errors.Is(err, errTransient) || n != 1 {
			t.Fatalf("Do = %v after %d attempts, want cancelled by the cause, with the last error", err, n)
		}
		if el := time.Since(start); el != time.Minute {
			t.Errorf("Do returned after %v, want at the cancel (1m), not at the timer (1h)", el)
		}
		var re *RetryError
		if !errors.As(err, &re) || re.Outcome.Phase != Cancelled {
			t.Errorf("outcome %v, want cancelled", re)
		}
	})
}

func TestRetryerCancelDuringAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRetryer(t, WithRetryBackoff(Backoff{Initial: time.Millisecond}))
		ctx, cancel := context.WithCancel(t.Context())
		n := 0
		err := r.Do(ctx, func(ctx context.Context) error {
			n++
			cancel() // as if the job stopped while the request was in flight
			return ctx.Err()
		})
		if n != 1 || !errors.Is(err, context.Canceled) {
			t.Fatalf("Do = %v after %d attempts, want cancelled after 1", err, n)
		}
		// An attempt that succeeds although ctx ended meanwhile succeeded.
		ctx, cancel = context.WithCancel(t.Context())
		if err := r.Do(ctx, func(context.Context) error { cancel(); return nil }); err != nil {
			t.Errorf("success during cancellation: %v", err)
		}
		// A context that has already ended runs nothing.
		n = 0
		if err := r.Do(ctx, func(context.Context) error { n++; return nil }); !errors.Is(err, context.Canceled) || n != 0 {
			t.Errorf("ended context: %v after %d attempts, want cancelled after 0", err, n)
		}
	})
}

func TestRetryerMaxElapsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Attempts at 0, 1s, 3s, 7s; the deadline at 5s falls in the wait
		// before the fourth: Do returns at 5s.
		r := newRetryer(t, WithMaxAttempts(10), WithMaxElapsed(5*time.Second), WithRetryBackoff(Backoff{Initial: time.Second, Jitter: NoJitter}))
		l := &attemptLog{start: time.Now()}
		err := r.Do(t.Context(), func(context.Context) error { l.mark(); return errTransient })
		if !errors.Is(err, ErrDeadline) || !errors.Is(err, errTransient) {
			t.Fatalf("Do = %v, want the retry deadline", err)
		}
		if want := []time.Duration{0, time.Second, 3 * time.Second}; !slices.Equal(l.at, want) {
			t.Errorf("attempts at %v, want %v", l.at, want)
		}
		if el := time.Since(l.start); el != 5*time.Second {
			t.Errorf("Do returned after %v, want 5s", el)
		}
		// The deadline passes during a slow attempt that then succeeds.
		r = newRetryer(t, WithMaxElapsed(time.Second), WithRetryBackoff(Backoff{Initial: time.Millisecond}))
		err = r.Do(t.Context(), func(ctx context.Context) error {
			advance(2 * time.Second) // a slow request
			return nil
		})
		if err != nil {
			t.Errorf("slow success past the deadline: %v", err)
		}
		// ... or fails: no attempt follows.
		n := 0
		err = r.Do(t.Context(), func(ctx context.Context) error {
			n++
			advance(2 * time.Second)
			return errTransient
		})
		if n != 1 || !errors.Is(err, ErrDeadline) {
			t.Errorf("slow failure past the deadline: %v after %d attempts, want the deadline after 1", err, n)
		}
	})
}

func TestNewRetryerValidates(t *testing.T) {
	bad := [][]RetryOption{
		{WithMaxAttempts(0)},
		{WithMaxElapsed(-time.Second)},
		{WithRetryBackoff(Backoff{Initial: -1})},
		{nil},
	}
	for _, opts := range bad {
		if _, err := NewRetryer(opts...); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("NewRetryer: %v, want ErrInvalidConfig", err)
		}
	}
	r := newRetryer(t)
	if p := r.Policy(); p.MaxAttempts != DefaultMaxAttempts {
		t.Errorf("default policy %+v", p)
	}
	if err := r.Do(context.Background(), nil); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("nil attempt: %v", err)
	}
}
