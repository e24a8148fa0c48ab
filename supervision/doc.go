// Package supervision is what sluice does when something fails: deciders
// and strategies for supervisors, restart budgets, exponential backoff with
// jitter, the retry state machine of a delivery and a Retryer that drives
// it, and the store of dead letters (records given up on).
//
// It is policy as plain data plus small pure functions; the runtime (the
// actors that host operators) consults it and carries out its decisions.
// It imports nothing of sluice's but internal helpers and the clock package.
//
// # Basics
//
// A Backoff computes delays: the nominal delay of attempt n is
// min(Max, Initial·Multiplierⁿ⁻¹), randomised by equal jitter (the default:
// half fixed, half random, so a retry never comes sooner than half the
// nominal delay) or full jitter (anywhere from zero to the nominal delay).
// Its random source is injectable, which makes schedules exact in tests:
//
//	b := supervision.Backoff{Initial: 10 * time.Millisecond, Max: time.Second, Rand: supervision.SeededRand(1)}
//	b.Delay(1) // between 5 and 10 ms
//
// A Budget allows at most N events within any sliding window, with the
// clock passed in by the caller. A Strategy combines a Decider (an error to
// a Directive: Restart, Resume, Stop or Escalate), a Backoff, a restart
// budget and a Scope (OneForOne or AllForOne). When a component fails, the
// supervisor asks:
//
//	budget, _ := strategy.NewBudget() // one per component (OneForOne) or group (AllForOne)
//	d := strategy.OnFailure(err, budget, time.Now())
//	// d.Directive: Restart after d.Delay, Resume, Stop (d.Exhausted: the
//	// budget is spent) or Escalate.
//
// A Retryer retries one operation, a delivery to a remote system say:
//
//	r, err := supervision.NewRetryer(supervision.WithMaxAttempts(5))
//	err = r.Do(ctx, func(ctx context.Context) error { return post(ctx, rec) })
//
// Errors wrapped with Permanent are not retried; ctx's end cancels the
// retries. A record given up on becomes a DeadLetter in a DeadLetterStore:
// MemoryDeadLetters, or BoltDeadLetters in the "deadletters" bucket of a
// sluice store file, which the sluice deadletters command lists, shows,
// replays and purges.
//
// # The retry state machine
//
// A delivery is a pure state machine, as DESIGN.md asks of coordination
// logic: Step(state, event) returns the next state and the actions to carry
// out, and does no I/O, reads no clock and starts no goroutine. Its phases:
//
//	            Start                 AttemptFailed(retryable, attempts left)
//	Pending ───────────▶ Running(n) ───────────────────────────▶ Retrying(n, delay)
//	   │                  │  ▲                                       │
//	   │                  │  └──────── TimerFired(n+1) ──────────────┘
//	   │                  │
//	   │                  ├─ AttemptSucceeded(n) ─────────────────▶ Succeeded
//	   │                  ├─ AttemptFailed(permanent) ────────────▶ Failed (ErrPermanent)
//	   │                  ├─ AttemptFailed, n = MaxAttempts ──────▶ Failed (ErrAttemptsExhausted)
//	   │                  └─ AttemptFailed after DeadlineExceeded ▶ Failed (ErrDeadline)
//	   │
//	   └─ Cancel from Pending, Running or Retrying ───────────────▶ Cancelled
//	      DeadlineExceeded from Pending or Retrying ──────────────▶ Failed (ErrDeadline)
//
// The actions: RunAttempt(n) on entering Running(n); ScheduleTimer(n+1,
// delay) on entering Retrying, the delay from the policy's Backoff;
// StopTimer when Retrying ends by Cancel or DeadlineExceeded; AbortAttempt
// when Running ends by Cancel; and Report(outcome), always last, on
// entering a terminal phase. DeadlineExceeded while Running only marks the
// state Expired: the attempt in flight may still succeed, but no other
// follows it.
//
// Every other combination is a no-op (the state is returned unchanged,
// with no action): Start after the start; a result or timer of another
// attempt than the current one (late, stale or duplicated); a result while
// Retrying or a timer while Running; any event in a terminal phase. A
// driver can therefore feed events as they come, without filtering races
// between a timer and a cancellation. The table test (retry_test.go)
// checks every phase against every event, and the transcripts in
// testdata/retry/ check whole deliveries.
//
// The Retryer is one driver: attempts run on the caller's goroutine, and
// between them it waits on a timer, the context and the deadline. An actor
// is another: it feeds the machine its messages and timer ticks.
//
// # Caveats
//
//   - Retries make a delivery at-least-once: an attempt whose response was
//     lost is retried though it took effect. The receiver must be
//     idempotent, e.g. dedup by an idempotency key that stays the same
//     across the retries of a record.
//   - A cancelled delivery may have been delivered: AbortAttempt cannot
//     recall a request already sent.
//   - Step draws from the Backoff's random source once per retry; with a
//     fixed source (SeededRand, or a func returning a constant) it is fully
//     deterministic. A Backoff shared between goroutines needs a source
//     safe for concurrent use; the default and SeededRand are.
//   - A Budget refuses without recording: a component that fails again and
//     again after its budget is spent does not push its own recovery out.
//     Only restarts count against a Strategy's budget, not resumes.
//   - A Strategy literal is taken as written (MaxRestarts 0 allows no
//     restart); NewStrategy applies the documented defaults.
//   - BoltDeadLetters' List and filtered Purge decode every record they
//     pass: they are meant for inspection, not for a hot path. A record that
//     does not decode is reported with the file and its sequence number,
//     never by a panic, and an unfiltered Purge or Delete removes it.
package supervision
