package supervision

import (
	"errors"
	"fmt"
	"time"
)

// Directive is what a supervisor does with a component that failed.
type Directive uint8

const (
	// Restart replaces the component with a fresh instance (its in-memory
	// state is reset), after the strategy's backoff delay, while the
	// restart budget lasts.
	Restart Directive = iota + 1
	// Resume keeps the component and its state and skips the record that
	// failed (which the runtime may keep as a dead letter).
	Resume
	// Stop stops the component for good.
	Stop
	// Escalate passes the failure to the supervisor's own supervisor, as if
	// the supervisor itself had failed.
	Escalate
)

func (d Directive) String() string {
	switch d {
	case Restart:
		return "restart"
	case Resume:
		return "resume"
	case Stop:
		return "stop"
	case Escalate:
		return "escalate"
	}
	return fmt.Sprintf("Directive(%d)", uint8(d))
}

func (d Directive) valid() bool { return d >= Restart && d <= Escalate }

// Decider chooses the directive for a failure. It must be a pure function
// of the error, safe for concurrent use. A runtime that catches a panic
// passes an error describing it.
type Decider func(err error) Directive

// DefaultDecider restarts on every failure, as protoactor's default
// strategy does.
func DefaultDecider(error) Directive { return Restart }

// DecideOn returns a Decider that answers d for the errors that match
// target (errors.Is) and leaves the others to next (DefaultDecider when
// nil). Chain calls to build a table:
//
//	DecideOn(ErrPermanent, Resume, DecideOn(io.ErrUnexpectedEOF, Stop, nil))
func DecideOn(target error, d Directive, next Decider) Decider {
	if next == nil {
		next = DefaultDecider
	}
	return func(err error) Directive {
		if errors.Is(err, target) {
			return d
		}
		return next(err)
	}
}

// Scope says which components a Restart applies to.
type Scope uint8

const (
	// OneForOne (the default) restarts only the component that failed, and
	// keeps a restart budget per component.
	OneForOne Scope = iota
	// AllForOne restarts every component under the same supervisor (all
	// instances of an operator, say) when one fails, and keeps one budget
	// for the group.
	AllForOne
)

func (s Scope) String() string {
	switch s {
	case OneForOne:
		return "one-for-one"
	case AllForOne:
		return "all-for-one"
	}
	return fmt.Sprintf("Scope(%d)", uint8(s))
}

// Defaults of NewStrategy.
const (
	DefaultMaxRestarts = 10
	DefaultWithin      = time.Minute
)

// Strategy is a supervision strategy as plain data, for the runtime to
// consult when a component fails (see OnFailure). Build one with
// NewStrategy, which applies defaults and validates; a literal is taken as
// written (MaxRestarts 0 allows no restart) and checked by Validate.
type Strategy struct {
	Scope   Scope
	Decider Decider // nil: DefaultDecider
	Backoff Backoff // the delay before each restart
	// MaxRestarts restarts are allowed within any window of Within; one
	// more stops the component (or the group, under AllForOne).
	MaxRestarts int
	Within      time.Duration
}

// Option configures NewStrategy.
type Option func(*Strategy)

// WithScope sets the scope of restarts. Default OneForOne.
func WithScope(s Scope) Option { return func(st *Strategy) { st.Scope = s } }

// WithDecider sets the decider. Default DefaultDecider.
func WithDecider(d Decider) Option { return func(st *Strategy) { st.Decider = d } }

// WithBackoff sets the delay before restarts. Default: the zero Backoff (100
// ms doubling to 30 s, equal jitter).
func WithBackoff(b Backoff) Option { return func(st *Strategy) { st.Backoff = b } }

// WithRestartBudget allows at most n restarts within any window of length
// within. Default DefaultMaxRestarts within DefaultWithin. n 0 stops a
// component at its first failure whatever the decider says.
func WithRestartBudget(n int, within time.Duration) Option {
	return func(st *Strategy) { st.MaxRestarts, st.Within = n, within }
}

// NewStrategy returns a validated strategy. Invalid options return an
// error wrapping ErrInvalidConfig.
func NewStrategy(opts ...Option) (Strategy, error) {
	s := Strategy{Decider: DefaultDecider, MaxRestarts: DefaultMaxRestarts, Within: DefaultWithin}
	for _, o := range opts {
		if o == nil {
			return Strategy{}, errorf(ErrInvalidConfig, "supervision: strategy: nil option")
		}
		o(&s)
	}
	if err := s.Validate(); err != nil {
		return Strategy{}, err
	}
	return s, nil
}

// Validate reports a field out of range, wrapping ErrInvalidConfig.
func (s Strategy) Validate() error {
	if s.Scope > AllForOne {
		return errorf(ErrInvalidConfig, "supervision: strategy: unknown scope %v", s.Scope)
	}
	if err := s.Backoff.Validate(); err != nil {
		return fmt.Errorf("supervision: strategy: %w", err)
	}
	if _, err := NewBudget(s.MaxRestarts, s.Within); err != nil {
		return fmt.Errorf("supervision: strategy: restart %w", err)
	}
	return nil
}

// NewBudget returns a fresh restart budget for one component (OneForOne)
// or one group (AllForOne).
func (s Strategy) NewBudget() (*Budget, error) { return NewBudget(s.MaxRestarts, s.Within) }

// Decide asks the decider. A nil decider is DefaultDecider; a directive the
// decider makes up (not one of the four) is taken as Escalate.
func (s Strategy) Decide(err error) Directive {
	dec := s.Decider
	if dec == nil {
		dec = DefaultDecider
	}
	d := dec(err)
	if !d.valid() {
		return Escalate
	}
	return d
}

// Decision is what a supervisor does about one failure.
type Decision struct {
	Directive Directive
	// Delay is the wait before the restart (Restart only), from the
	// strategy's Backoff for the Restarts-th restart in the window.
	Delay time.Duration
	// Restarts is the number of restarts within the window, counting this
	// one (Restart only).
	Restarts int
	// Exhausted says that the decider chose Restart but the budget was
	// spent, so the directive became Stop.
	Exhausted bool
}

// OnFailure decides what to do about err at time now, charging a Restart
// to budget (the component's under OneForOne, the group's under AllForOne;
// nil allows no restart).
// The backoff grows with the restarts still inside the window and falls
// back to the initial delay once the component has been healthy for a
// whole window. Only restarts count against the budget; a runtime that
// wants to bound resumes keeps a Budget of its own for them.
func (s Strategy) OnFailure(err error, budget *Budget, now time.Time) Decision {
	d := s.Decide(err)
	if d != Restart {
		return Decision{Directive: d}
	}
	if budget == nil || !budget.Allow(now) {
		return Decision{Directive: Stop, Exhausted: true}
	}
	n := budget.Used(now)
	return Decision{Directive: Restart, Delay: s.Backoff.Delay(n), Restarts: n}
}
