package supervision

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The retry state machine of one delivery (see the package documentation
// for its diagram). Step is pure: no I/O, no clock, no goroutine; its only
// input besides the state and the event is the random source of the
// policy's Backoff, drawn once per retry. A driver (Retryer, or an actor)
// feeds it events and carries out the actions it returns.

// Phase is where a delivery stands.
type Phase uint8

const (
	Pending   Phase = iota // not started
	Running                // attempt number Attempt is in flight
	Retrying               // attempt Attempt failed; a timer will start the next
	Succeeded              // terminal: an attempt succeeded
	Failed                 // terminal: given up (see Outcome.Reason)
	Cancelled              // terminal: the caller cancelled
)

func (p Phase) String() string {
	switch p {
	case Pending:
		return "pending"
	case Running:
		return "running"
	case Retrying:
		return "retrying"
	case Succeeded:
		return "succeeded"
	case Failed:
		return "failed"
	case Cancelled:
		return "cancelled"
	}
	return fmt.Sprintf("Phase(%d)", uint8(p))
}

// Terminal says whether no event can change the phase any more.
func (p Phase) Terminal() bool { return p >= Succeeded }

// DefaultMaxAttempts is the number of attempts of a Retryer without
// WithMaxAttempts.
const DefaultMaxAttempts = 5

// RetryPolicy is the configuration the state machine consults.
type RetryPolicy struct {
	// MaxAttempts bounds the attempts, the first included. Step takes a
	// value below 1 as 1; Validate refuses it.
	MaxAttempts int
	// Backoff gives the delay after each failed attempt.
	Backoff Backoff
}

// Validate reports a field out of range, wrapping ErrInvalidConfig.
func (p RetryPolicy) Validate() error {
	if p.MaxAttempts < 1 {
		return errorf(ErrInvalidConfig, "supervision: retry: %d attempts: want at least 1", p.MaxAttempts)
	}
	if err := p.Backoff.Validate(); err != nil {
		return fmt.Errorf("supervision: retry: %w", err)
	}
	return nil
}

// RetryState is the state of one delivery. Treat it as a value: Step
// returns a new one and never modifies its argument.
type RetryState struct {
	Policy  RetryPolicy
	Phase   Phase
	Attempt int           // attempts started so far
	Delay   time.Duration // Retrying: the wait before attempt Attempt+1
	LastErr error         // the error of the last failed attempt
	// Expired is set when the deadline passes while an attempt runs: that
	// attempt may still succeed, but none follows it.
	Expired bool
	// Outcome is set in the terminal phases.
	Outcome Outcome
}

// NewRetryState returns the pending state of a delivery under p.
func NewRetryState(p RetryPolicy) RetryState { return RetryState{Policy: p} }

func (s RetryState) String() string {
	switch s.Phase {
	case Pending:
		return "pending"
	case Running:
		if s.Expired {
			return fmt.Sprintf("running attempt %d (deadline passed)", s.Attempt)
		}
		return fmt.Sprintf("running attempt %d", s.Attempt)
	case Retrying:
		return fmt.Sprintf("retrying after attempt %d in %v", s.Attempt, s.Delay)
	}
	return s.Outcome.String()
}

// Event is an input of Step: Start, AttemptSucceeded, AttemptFailed,
// TimerFired, Cancel or DeadlineExceeded.
type Event interface {
	retryEvent()
	String() string
}

type (
	// Start begins the delivery.
	Start struct{}
	// AttemptSucceeded reports that attempt number Attempt succeeded.
	AttemptSucceeded struct{ Attempt int }
	// AttemptFailed reports that attempt number Attempt failed with Err;
	// Retryable says whether another attempt may succeed.
	AttemptFailed struct {
		Attempt   int
		Err       error
		Retryable bool
	}
	// TimerFired reports that the timer of ScheduleTimer{Attempt} fired.
	TimerFired struct{ Attempt int }
	// Cancel abandons the delivery; Cause says why (nil: context.Canceled).
	Cancel struct{ Cause error }
	// DeadlineExceeded says that the time allowed for the delivery passed:
	// no new attempt starts, though one in flight may still succeed.
	DeadlineExceeded struct{}
)

func (Start) retryEvent()            {}
func (AttemptSucceeded) retryEvent() {}
func (AttemptFailed) retryEvent()    {}
func (TimerFired) retryEvent()       {}
func (Cancel) retryEvent()           {}
func (DeadlineExceeded) retryEvent() {}

func (Start) String() string              { return "start" }
func (e AttemptSucceeded) String() string { return fmt.Sprintf("attempt %d succeeded", e.Attempt) }
func (e AttemptFailed) String() string {
	kind := "permanent"
	if e.Retryable {
		kind = "retryable"
	}
	return fmt.Sprintf("attempt %d failed (%s): %v", e.Attempt, kind, e.Err)
}
func (e TimerFired) String() string { return fmt.Sprintf("timer for attempt %d fired", e.Attempt) }
func (e Cancel) String() string     { return fmt.Sprintf("cancel: %v", e.cause()) }
func (DeadlineExceeded) String() string {
	return "deadline exceeded"
}

func (e Cancel) cause() error {
	if e.Cause == nil {
		return context.Canceled
	}
	return e.Cause
}

// Action is an output of Step: RunAttempt, ScheduleTimer, StopTimer,
// AbortAttempt or Report.
type Action interface {
	retryAction()
	String() string
}

type (
	// RunAttempt: start attempt number Attempt, and feed its result back as
	// AttemptSucceeded or AttemptFailed with the same number.
	RunAttempt struct{ Attempt int }
	// ScheduleTimer: after Delay, feed TimerFired{Attempt}.
	ScheduleTimer struct {
		Attempt int
		Delay   time.Duration
	}
	// StopTimer: stop the timer of ScheduleTimer{Attempt}; if it fires
	// anyway, the TimerFired is ignored.
	StopTimer struct{ Attempt int }
	// AbortAttempt: cancel attempt number Attempt, which is in flight. Its
	// result, if it still comes, is ignored: the delivery is cancelled even
	// if the attempt succeeded (an HTTP request may have been delivered).
	AbortAttempt struct{ Attempt int }
	// Report: the delivery ended with Outcome. It is always the last action.
	Report struct{ Outcome Outcome }
)

func (RunAttempt) retryAction()    {}
func (ScheduleTimer) retryAction() {}
func (StopTimer) retryAction()     {}
func (AbortAttempt) retryAction()  {}
func (Report) retryAction()        {}

func (a RunAttempt) String() string { return fmt.Sprintf("run attempt %d", a.Attempt) }
func (a ScheduleTimer) String() string {
	return fmt.Sprintf("schedule timer %v for attempt %d", a.Delay, a.Attempt)
}
func (a StopTimer) String() string    { return fmt.Sprintf("stop timer for attempt %d", a.Attempt) }
func (a AbortAttempt) String() string { return fmt.Sprintf("abort attempt %d", a.Attempt) }
func (a Report) String() string       { return "report " + a.Outcome.String() }

// Outcome is how a delivery ended.
type Outcome struct {
	Phase    Phase // Succeeded, Failed or Cancelled
	Attempts int   // attempts started
	// Err is the error of the last failed attempt, nil if none failed.
	Err error
	// Reason says why a delivery did not succeed: ErrPermanent,
	// ErrAttemptsExhausted, ErrDeadline, or the cause of a cancellation.
	Reason error
}

func (o Outcome) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v after %d attempt", o.Phase, o.Attempts)
	if o.Attempts != 1 {
		b.WriteByte('s')
	}
	switch {
	case o.Reason == nil:
	case errors.Is(o.Reason, ErrPermanent):
		b.WriteString(" (permanent)")
	case errors.Is(o.Reason, ErrAttemptsExhausted):
		b.WriteString(" (attempts exhausted)")
	case errors.Is(o.Reason, ErrDeadline):
		b.WriteString(" (deadline passed)")
	default:
		fmt.Fprintf(&b, " (%v)", o.Reason)
	}
	if o.Err != nil && o.Phase != Succeeded {
		fmt.Fprintf(&b, ": %v", o.Err)
	}
	return b.String()
}

// Error is nil for a success and a *RetryError otherwise.
func (o Outcome) Error() error {
	if o.Phase == Succeeded {
		return nil
	}
	return &RetryError{Outcome: o}
}

// RetryError is the error of a delivery that did not succeed. errors.Is
// matches both its Reason (ErrPermanent, ErrAttemptsExhausted, ErrDeadline,
// context.Canceled, ...) and the last attempt's error.
type RetryError struct{ Outcome Outcome }

func (e *RetryError) Error() string {
	o := e.Outcome
	var msg string
	switch {
	case o.Phase == Cancelled:
		msg = fmt.Sprintf("supervision: cancelled after %d attempts: %v", o.Attempts, o.Reason)
		if o.Err != nil {
			msg += fmt.Sprintf(" (last error: %v)", o.Err)
		}
		return msg
	case errors.Is(o.Reason, ErrPermanent):
		msg = fmt.Sprintf("supervision: attempt %d failed permanently", o.Attempts)
	case errors.Is(o.Reason, ErrAttemptsExhausted):
		msg = fmt.Sprintf("supervision: gave up after %d attempts", o.Attempts)
	case errors.Is(o.Reason, ErrDeadline):
		msg = fmt.Sprintf("supervision: retry deadline passed after %d attempts", o.Attempts)
	default:
		msg = fmt.Sprintf("supervision: %v after %d attempts: %v", o.Phase, o.Attempts, o.Reason)
	}
	if o.Err != nil {
		msg += ": " + o.Err.Error()
	}
	return msg
}

// Unwrap returns the reason and the last attempt's error.
func (e *RetryError) Unwrap() []error {
	var errs []error
	for _, err := range []error{e.Outcome.Reason, e.Outcome.Err} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// Step is the transition function of the retry state machine. Events that
// do not apply to the phase (see the table in the package documentation),
// and results or timers of an attempt other than the current one, are
// no-ops: Step returns s unchanged and no action. Step never modifies s
// and never panics.
func Step(s RetryState, ev Event) (RetryState, []Action) {
	switch s.Phase {
	case Pending:
		switch e := ev.(type) {
		case Start:
			s.Phase, s.Attempt = Running, 1
			return s, []Action{RunAttempt{Attempt: 1}}
		case Cancel:
			return end(s, Cancelled, e.cause())
		case DeadlineExceeded:
			return end(s, Failed, ErrDeadline)
		}
	case Running:
		switch e := ev.(type) {
		case AttemptSucceeded:
			if e.Attempt != s.Attempt {
				break
			}
			return end(s, Succeeded, nil)
		case AttemptFailed:
			if e.Attempt != s.Attempt {
				break
			}
			s.LastErr = e.Err
			switch {
			case !e.Retryable:
				return end(s, Failed, ErrPermanent)
			case s.Expired:
				return end(s, Failed, ErrDeadline)
			case s.Attempt >= max(s.Policy.MaxAttempts, 1):
				return end(s, Failed, ErrAttemptsExhausted)
			}
			s.Phase, s.Delay = Retrying, s.Policy.Backoff.Delay(s.Attempt)
			return s, []Action{ScheduleTimer{Attempt: s.Attempt + 1, Delay: s.Delay}}
		case Cancel:
			n := s.Attempt
			s, acts := end(s, Cancelled, e.cause())
			return s, append([]Action{AbortAttempt{Attempt: n}}, acts...)
		case DeadlineExceeded:
			if s.Expired {
				break
			}
			s.Expired = true
			return s, nil
		}
	case Retrying:
		switch e := ev.(type) {
		case TimerFired:
			if e.Attempt != s.Attempt+1 {
				break
			}
			s.Phase, s.Attempt, s.Delay = Running, s.Attempt+1, 0
			return s, []Action{RunAttempt{Attempt: s.Attempt}}
		case Cancel:
			n := s.Attempt + 1
			s, acts := end(s, Cancelled, e.cause())
			return s, append([]Action{StopTimer{Attempt: n}}, acts...)
		case DeadlineExceeded:
			n := s.Attempt + 1
			s, acts := end(s, Failed, ErrDeadline)
			return s, append([]Action{StopTimer{Attempt: n}}, acts...)
		}
	}
	return s, nil
}

// end moves s to a terminal phase and reports the outcome.
func end(s RetryState, p Phase, reason error) (RetryState, []Action) {
	s.Phase, s.Delay = p, 0
	s.Outcome = Outcome{Phase: p, Attempts: s.Attempt, Err: s.LastErr, Reason: reason}
	return s, []Action{Report{Outcome: s.Outcome}}
}
