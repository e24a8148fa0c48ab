package supervision

import (
	"errors"
	"io"
	"testing"
	"time"
)

func TestNewStrategy(t *testing.T) {
	s, err := NewStrategy()
	if err != nil {
		t.Fatal(err)
	}
	if s.Scope != OneForOne || s.MaxRestarts != DefaultMaxRestarts || s.Within != DefaultWithin || s.Decide(io.EOF) != Restart {
		t.Errorf("defaults: %+v", s)
	}
	s, err = NewStrategy(WithScope(AllForOne), WithRestartBudget(2, time.Second), WithDecider(func(error) Directive { return Resume }),
		WithBackoff(Backoff{Initial: time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	if s.Scope != AllForOne || s.MaxRestarts != 2 || s.Within != time.Second || s.Decide(io.EOF) != Resume || s.Backoff.Initial != time.Millisecond {
		t.Errorf("options not applied: %+v", s)
	}
	bad := [][]Option{
		{WithScope(7)},
		{WithRestartBudget(-1, time.Second)},
		{WithRestartBudget(3, 0)},
		{WithBackoff(Backoff{Multiplier: 0.1})},
		{nil},
	}
	for _, opts := range bad {
		if _, err := NewStrategy(opts...); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("NewStrategy(%v) error = %v, want ErrInvalidConfig", opts, err)
		}
	}
}

func TestDecideOn(t *testing.T) {
	errBad := errors.New("bad record")
	d := DecideOn(ErrPermanent, Resume, DecideOn(errBad, Stop, nil))
	cases := []struct {
		err  error
		want Directive
	}{
		{Permanent(errors.New("400")), Resume},
		{errBad, Stop},
		{errors.Join(errors.New("ctx"), errBad), Stop},
		{io.EOF, Restart},
	}
	for _, c := range cases {
		if got := d(c.err); got != c.want {
			t.Errorf("decide(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	// A decider that makes up a directive escalates; a nil one restarts.
	if got := (Strategy{Decider: func(error) Directive { return 0 }}).Decide(io.EOF); got != Escalate {
		t.Errorf("made-up directive: %v, want escalate", got)
	}
	if got := (Strategy{}).Decide(io.EOF); got != Restart {
		t.Errorf("nil decider: %v, want restart", got)
	}
}

func TestStrategyOnFailure(t *testing.T) {
	s, err := NewStrategy(
		WithRestartBudget(3, time.Minute),
		WithBackoff(Backoff{Initial: 100 * time.Millisecond, Jitter: NoJitter}),
		WithDecider(DecideOn(io.ErrUnexpectedEOF, Resume, DecideOn(io.ErrClosedPipe, Escalate, nil))),
	)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.NewBudget()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(0, 0)
	ms := time.Millisecond
	steps := []struct {
		at   time.Duration
		err  error
		want Decision
	}{
		{0, io.EOF, Decision{Directive: Restart, Delay: 100 * ms, Restarts: 1}},
		{time.Second, io.EOF, Decision{Directive: Restart, Delay: 200 * ms, Restarts: 2}},
		{2 * time.Second, io.ErrUnexpectedEOF, Decision{Directive: Resume}}, // resumes do not count
		{3 * time.Second, io.ErrClosedPipe, Decision{Directive: Escalate}},
		{4 * time.Second, io.EOF, Decision{Directive: Restart, Delay: 400 * ms, Restarts: 3}},
		{5 * time.Second, io.EOF, Decision{Directive: Stop, Exhausted: true}},
		// A minute after the first restart, one slot is free again.
		{time.Minute, io.EOF, Decision{Directive: Restart, Delay: 400 * ms, Restarts: 3}},
		// Healthy for a whole window: the backoff starts over.
		{10 * time.Minute, io.EOF, Decision{Directive: Restart, Delay: 100 * ms, Restarts: 1}},
	}
	for _, st := range steps {
		if got := s.OnFailure(st.err, b, t0.Add(st.at)); got != st.want {
			t.Errorf("at %v, %v: %+v, want %+v", st.at, st.err, got, st.want)
		}
	}
	if got := s.OnFailure(io.EOF, nil, t0); got != (Decision{Directive: Stop, Exhausted: true}) {
		t.Errorf("nil budget: %+v, want stop", got)
	}
}

func TestPermanent(t *testing.T) {
	base := errors.New("status 400")
	p := Permanent(base)
	if !IsPermanent(p) || !errors.Is(p, base) || p.Error() != "status 400" {
		t.Errorf("Permanent: %v, is permanent %v, is base %v", p, IsPermanent(p), errors.Is(p, base))
	}
	if IsPermanent(base) || Permanent(nil) != nil {
		t.Error("unmarked error taken as permanent, or Permanent(nil) not nil")
	}
}
