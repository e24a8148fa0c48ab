package supervision

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the transcripts in testdata/retry")

// tablePolicy: 3 attempts, nominal delays 10ms, 20ms, 40ms, equal jitter
// with a source fixed at 0.5, so the delays are 7.5ms, 15ms, 30ms.
var tablePolicy = RetryPolicy{MaxAttempts: 3, Backoff: Backoff{Initial: 10 * time.Millisecond, Max: 40 * time.Millisecond, Rand: func() float64 { return 0.5 }}}

// view is the part of a RetryState that the table compares (the policy holds
// a func, which reflect.DeepEqual cannot compare).
type view struct {
	Phase   Phase
	Attempt int
	Delay   time.Duration
	LastErr error
	Expired bool
	Outcome Outcome
}

func viewOf(s RetryState) view {
	return view{s.Phase, s.Attempt, s.Delay, s.LastErr, s.Expired, s.Outcome}
}

// TestStepTable runs every event against every phase (and the variants of a
// phase that behave differently: the last attempt, an expired attempt). A
// combination without a row is expected to be a no-op: the state comes back
// unchanged, with no action.
func TestStepTable(t *testing.T) {
	errA := errors.New("connection reset")
	errOld := errors.New("earlier failure")
	errCause := errors.New("job stopping")
	st := func(v view) RetryState {
		return RetryState{Policy: tablePolicy, Phase: v.Phase, Attempt: v.Attempt, Delay: v.Delay, LastErr: v.LastErr, Expired: v.Expired, Outcome: v.Outcome}
	}
	states := []struct {
		name string
		s    RetryState
	}{
		{"pending", NewRetryState(tablePolicy)},
		{"running 1", st(view{Phase: Running, Attempt: 1})},
		{"running 3 of 3", st(view{Phase: Running, Attempt: 3, LastErr: errOld})},
		{"running 2 expired", st(view{Phase: Running, Attempt: 2, LastErr: errOld, Expired: true})},
		{"retrying after 1", st(view{Phase: Retrying, Attempt: 1, Delay: 7500 * time.Microsecond, LastErr: errOld})},
		{"succeeded", st(view{Phase: Succeeded, Attempt: 1, Outcome: Outcome{Phase: Succeeded, Attempts: 1}})},
		{"failed", st(view{Phase: Failed, Attempt: 3, LastErr: errOld, Outcome: Outcome{Phase: Failed, Attempts: 3, Err: errOld, Reason: ErrAttemptsExhausted}})},
		{"cancelled", st(view{Phase: Cancelled, Attempt: 1, Outcome: Outcome{Phase: Cancelled, Attempts: 1, Reason: context.Canceled}})},
	}
	// Events relative to the state's attempt n: "current" ones name n (or
	// n+1 for a timer), "stale" ones another attempt.
	events := []struct {
		name string
		ev   func(n int) Event
	}{
		{"start", func(int) Event { return Start{} }},
		{"succeeded", func(n int) Event { return AttemptSucceeded{Attempt: n} }},
		{"succeeded stale", func(n int) Event { return AttemptSucceeded{Attempt: n - 1} }},
		{"failed retryable", func(n int) Event { return AttemptFailed{Attempt: n, Err: errA, Retryable: true} }},
		{"failed permanent", func(n int) Event { return AttemptFailed{Attempt: n, Err: errA} }},
		{"failed stale", func(n int) Event { return AttemptFailed{Attempt: n + 1, Err: errA, Retryable: true} }},
		{"timer", func(n int) Event { return TimerFired{Attempt: n + 1} }},
		{"timer stale", func(n int) Event { return TimerFired{Attempt: n} }},
		{"cancel", func(int) Event { return Cancel{Cause: errCause} }},
		{"cancel no cause", func(int) Event { return Cancel{} }},
		{"deadline", func(int) Event { return DeadlineExceeded{} }},
	}
	type want struct {
		v    view
		acts []Action
	}
	fail := func(attempts int, last, reason error) want {
		o := Outcome{Phase: Failed, Attempts: attempts, Err: last, Reason: reason}
		return want{view{Phase: Failed, Attempt: attempts, LastErr: last, Outcome: o}, []Action{Report{o}}}
	}
	cancelled := func(attempts int, last, cause error, first Action) want {
		o := Outcome{Phase: Cancelled, Attempts: attempts, Err: last, Reason: cause}
		acts := []Action{Report{o}}
		if first != nil {
			acts = append([]Action{first}, acts...)
		}
		return want{view{Phase: Cancelled, Attempt: attempts, LastErr: last, Outcome: o}, acts}
	}
	succeeded := func(attempts int, last error) want {
		o := Outcome{Phase: Succeeded, Attempts: attempts, Err: last}
		return want{view{Phase: Succeeded, Attempt: attempts, LastErr: last, Outcome: o}, []Action{Report{o}}}
	}
	expired := func(w want) want { w.v.Expired = true; return w }
	transitions := map[string]want{
		"pending/start":           {view{Phase: Running, Attempt: 1}, []Action{RunAttempt{1}}},
		"pending/cancel":          cancelled(0, nil, errCause, nil),
		"pending/cancel no cause": cancelled(0, nil, context.Canceled, nil),
		"pending/deadline":        fail(0, nil, ErrDeadline),

		"running 1/succeeded":        succeeded(1, nil),
		"running 1/failed retryable": {view{Phase: Retrying, Attempt: 1, Delay: 7500 * time.Microsecond, LastErr: errA}, []Action{ScheduleTimer{Attempt: 2, Delay: 7500 * time.Microsecond}}},
		"running 1/failed permanent": fail(1, errA, ErrPermanent),
		"running 1/cancel":           cancelled(1, nil, errCause, AbortAttempt{1}),
		"running 1/cancel no cause":  cancelled(1, nil, context.Canceled, AbortAttempt{1}),
		"running 1/deadline":         {view{Phase: Running, Attempt: 1, Expired: true}, nil},

		"running 3 of 3/succeeded":        succeeded(3, errOld),
		"running 3 of 3/failed retryable": fail(3, errA, ErrAttemptsExhausted),
		"running 3 of 3/failed permanent": fail(3, errA, ErrPermanent),
		"running 3 of 3/cancel":           cancelled(3, errOld, errCause, AbortAttempt{3}),
		"running 3 of 3/cancel no cause":  cancelled(3, errOld, context.Canceled, AbortAttempt{3}),
		"running 3 of 3/deadline":         {view{Phase: Running, Attempt: 3, LastErr: errOld, Expired: true}, nil},

		// The terminal states remember that the deadline had passed.
		"running 2 expired/succeeded":        expired(succeeded(2, errOld)),
		"running 2 expired/failed retryable": expired(fail(2, errA, ErrDeadline)),
		"running 2 expired/failed permanent": expired(fail(2, errA, ErrPermanent)),
		"running 2 expired/cancel":           expired(cancelled(2, errOld, errCause, AbortAttempt{2})),
		"running 2 expired/cancel no cause":  expired(cancelled(2, errOld, context.Canceled, AbortAttempt{2})),
		// "running 2 expired/deadline": already expired, a no-op.

		"retrying after 1/timer":           {view{Phase: Running, Attempt: 2, LastErr: errOld}, []Action{RunAttempt{2}}},
		"retrying after 1/cancel":          cancelled(1, errOld, errCause, StopTimer{2}),
		"retrying after 1/cancel no cause": cancelled(1, errOld, context.Canceled, StopTimer{2}),
		"retrying after 1/deadline": func() want {
			w := fail(1, errOld, ErrDeadline)
			w.acts = append([]Action{StopTimer{2}}, w.acts...)
			return w
		}(),
	}
	used := map[string]bool{}
	phases := map[Phase]bool{}
	for _, s := range states {
		phases[s.s.Phase] = true
		for _, e := range events {
			key := s.name + "/" + e.name
			t.Run(key, func(t *testing.T) {
				before := viewOf(s.s)
				ev := e.ev(s.s.Attempt)
				got, acts := Step(s.s, ev)
				w, ok := transitions[key]
				used[key] = ok
				if !ok {
					w = want{before, nil} // no-op
				}
				if g := viewOf(got); !reflect.DeepEqual(g, w.v) {
					t.Errorf("%v on %v:\n state  %+v\n want   %+v", ev, s.s, g, w.v)
				}
				if !reflect.DeepEqual(acts, w.acts) {
					t.Errorf("%v on %v: actions %v, want %v", ev, s.s, acts, w.acts)
				}
				if !reflect.DeepEqual(viewOf(s.s), before) {
					t.Errorf("Step modified its input state")
				}
				if got.Phase.Terminal() != (len(acts) > 0 && isReport(acts[len(acts)-1])) && ok {
					t.Errorf("a transition into a terminal phase must end with Report, and only those: %v -> %v, %v", s.s.Phase, got.Phase, acts)
				}
			})
		}
	}
	for key := range transitions {
		if !used[key] {
			t.Errorf("table row %q matches no state and event", key)
		}
	}
	for p := Pending; p <= Cancelled; p++ {
		if !phases[p] {
			t.Errorf("phase %v has no state in the table", p)
		}
	}
}

func isReport(a Action) bool { _, ok := a.(Report); return ok }

func TestStepClampsMaxAttempts(t *testing.T) {
	// A policy built by hand with MaxAttempts 0 allows one attempt, and
	// Step does not panic on it.
	s, _ := Step(NewRetryState(RetryPolicy{}), Start{})
	s, acts := Step(s, AttemptFailed{Attempt: 1, Err: errors.New("x"), Retryable: true})
	if s.Phase != Failed || !errors.Is(s.Outcome.Reason, ErrAttemptsExhausted) || len(acts) != 1 {
		t.Fatalf("got %v, %v; want failed, attempts exhausted", s, acts)
	}
	if err := (RetryPolicy{}).Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Validate of 0 attempts = %v, want ErrInvalidConfig", err)
	}
}

func TestRetryErrorMessagesAndIs(t *testing.T) {
	errA := errors.New("status 503")
	cases := []struct {
		o    Outcome
		msg  string
		is   []error
		isnt []error
	}{
		{Outcome{Phase: Failed, Attempts: 5, Err: errA, Reason: ErrAttemptsExhausted}, "supervision: gave up after 5 attempts: status 503",
			[]error{errA, ErrAttemptsExhausted}, []error{ErrPermanent, ErrDeadline}},
		{Outcome{Phase: Failed, Attempts: 1, Err: errA, Reason: ErrPermanent}, "supervision: attempt 1 failed permanently: status 503",
			[]error{errA, ErrPermanent}, []error{ErrAttemptsExhausted}},
		{Outcome{Phase: Failed, Attempts: 2, Err: errA, Reason: ErrDeadline}, "supervision: retry deadline passed after 2 attempts: status 503",
			[]error{errA, ErrDeadline}, nil},
		{Outcome{Phase: Cancelled, Attempts: 2, Err: errA, Reason: context.Canceled}, "supervision: cancelled after 2 attempts: context canceled (last error: status 503)",
			[]error{errA, context.Canceled}, []error{ErrPermanent}},
		{Outcome{Phase: Cancelled, Reason: context.DeadlineExceeded}, "supervision: cancelled after 0 attempts: context deadline exceeded",
			[]error{context.DeadlineExceeded}, nil},
	}
	for _, c := range cases {
		err := c.o.Error()
		if err == nil || err.Error() != c.msg {
			t.Errorf("%+v: error %q, want %q", c.o, err, c.msg)
			continue
		}
		for _, target := range c.is {
			if !errors.Is(err, target) {
				t.Errorf("%q: errors.Is(%v) = false", err, target)
			}
		}
		for _, target := range c.isnt {
			if errors.Is(err, target) {
				t.Errorf("%q: errors.Is(%v) = true", err, target)
			}
		}
		var re *RetryError
		if !errors.As(err, &re) || re.Outcome.Attempts != c.o.Attempts {
			t.Errorf("%q: errors.As *RetryError = %v", err, re)
		}
	}
	if err := (Outcome{Phase: Succeeded, Attempts: 1}).Error(); err != nil {
		t.Errorf("success: error %v, want nil", err)
	}
}

// TestRetryTranscripts replays the deliveries scripted in testdata/retry
// and compares every action and state with the recorded transcript (run
// with -update to rewrite them after an intended change, and review the
// diff). Commands:
//
//	policy attempts=N initial=D max=D jitter=equal|full|none rand=F
//	start | ok N | fail N retryable|permanent MSG | fire N | cancel [CAUSE] | deadline
func TestRetryTranscripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "retry", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			got, err := replayTranscript(string(data))
			if err != nil {
				t.Fatal(err)
			}
			if *update {
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != string(data) {
				t.Errorf("%s differs from the replay (-update rewrites it); replay:\n%s", file, got)
			}
		})
	}
}

// replayTranscript reads blocks of "command\n----\noutput\n\n", runs the
// commands and returns the file with the outputs regenerated.
func replayTranscript(in string) (string, error) {
	var out strings.Builder
	var s RetryState
	sc := bufio.NewScanner(strings.NewReader(in))
	inOutput := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case inOutput:
			if line == "" {
				inOutput = false
				out.WriteString("\n")
			}
			continue // regenerated
		case line == "" || strings.HasPrefix(line, "#"):
			out.WriteString(line + "\n")
			continue
		case line == "----":
			return "", fmt.Errorf("---- without a command")
		}
		out.WriteString(line + "\n")
		if !sc.Scan() || sc.Text() != "----" {
			return "", fmt.Errorf("command %q: want ---- on the next line", line)
		}
		out.WriteString("----\n")
		inOutput = true
		res, err := runCommand(&s, line)
		if err != nil {
			return "", fmt.Errorf("command %q: %w", line, err)
		}
		out.WriteString(res)
	}
	if inOutput {
		out.WriteString("\n")
	}
	return strings.TrimSuffix(out.String(), "\n"), sc.Err()
}

func runCommand(s *RetryState, line string) (string, error) {
	f := strings.Fields(line)
	num := func(i int) (int, error) {
		if len(f) <= i {
			return 0, fmt.Errorf("missing attempt number")
		}
		return strconv.Atoi(f[i])
	}
	var ev Event
	switch f[0] {
	case "policy":
		p := RetryPolicy{}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			var err error
			switch k {
			case "attempts":
				p.MaxAttempts, err = strconv.Atoi(v)
			case "initial":
				p.Backoff.Initial, err = time.ParseDuration(v)
			case "max":
				p.Backoff.Max, err = time.ParseDuration(v)
			case "jitter":
				p.Backoff.Jitter = map[string]Jitter{"equal": EqualJitter, "full": FullJitter, "none": NoJitter}[v]
			case "rand":
				var r float64
				r, err = strconv.ParseFloat(v, 64)
				p.Backoff.Rand = func() float64 { return r }
			default:
				err = fmt.Errorf("unknown key %q", k)
			}
			if err != nil {
				return "", err
			}
		}
		if err := p.Validate(); err != nil {
			return "", err
		}
		*s = NewRetryState(p)
		return "state: " + s.String() + "\n", nil
	case "start":
		ev = Start{}
	case "ok":
		n, err := num(1)
		if err != nil {
			return "", err
		}
		ev = AttemptSucceeded{Attempt: n}
	case "fail":
		n, err := num(1)
		if err != nil || len(f) < 4 {
			return "", fmt.Errorf("want: fail N retryable|permanent MSG")
		}
		ev = AttemptFailed{Attempt: n, Err: errors.New(strings.Join(f[3:], " ")), Retryable: f[2] == "retryable"}
	case "fire":
		n, err := num(1)
		if err != nil {
			return "", err
		}
		ev = TimerFired{Attempt: n}
	case "cancel":
		var cause error
		if len(f) > 1 {
			cause = errors.New(strings.Join(f[1:], " "))
		}
		ev = Cancel{Cause: cause}
	case "deadline":
		ev = DeadlineExceeded{}
	default:
		return "", fmt.Errorf("unknown command")
	}
	next, acts := Step(*s, ev)
	*s = next
	var b strings.Builder
	if len(acts) == 0 {
		b.WriteString("(no action)\n")
	}
	for _, a := range acts {
		b.WriteString(a.String() + "\n")
	}
	b.WriteString("state: " + s.String() + "\n")
	return b.String(), nil
}
