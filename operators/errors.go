package operators

import (
	"errors"
	"fmt"
)

// Sentinel errors for the ways a topology can be invalid; test with
// errors.Is. Every error Validate returns is a *TopologyError that names the
// topology and the operator.
var (
	ErrDuplicateName = errors.New("duplicate operator name")
	ErrCycle         = errors.New("cycle")
	ErrUnconnected   = errors.New("unconnected")
	ErrTypeMismatch  = errors.New("type mismatch")
	ErrParallelism   = errors.New("invalid parallelism")
	ErrForeignStream = errors.New("stream from another topology")
	ErrUnknown       = errors.New("unknown operator")
	ErrInvalid       = errors.New("invalid operator")
	ErrNoSource      = errors.New("no source")
)

// TopologyError is one reason a topology is invalid.
type TopologyError struct {
	Topology string
	Operator string // empty when the error concerns the whole topology
	Kind     error  // one of the Err* sentinels
	Detail   string
}

func (e *TopologyError) Error() string {
	if e.Operator == "" {
		return fmt.Sprintf("operators: topology %q: %v: %s", e.Topology, e.Kind, e.Detail)
	}
	return fmt.Sprintf("operators: topology %q: operator %q: %v: %s", e.Topology, e.Operator, e.Kind, e.Detail)
}

// Unwrap returns the sentinel kind.
func (e *TopologyError) Unwrap() error { return e.Kind }

func opErr(t *Topology, op string, kind error, detail string) error {
	return &TopologyError{Topology: t.name, Operator: op, Kind: kind, Detail: detail}
}

// OperatorError is a failure of one operator instance while a topology runs:
// a panic in user code or an error from a connector.
type OperatorError struct {
	Topology string
	Operator string // the task's operators, joined by " -> ", when the failing stage is unknown
	Instance int
	Err      error
}

func (e *OperatorError) Error() string {
	return fmt.Sprintf("operators: topology %q: operator %q instance %d: %v", e.Topology, e.Operator, e.Instance, e.Err)
}

func (e *OperatorError) Unwrap() error { return e.Err }

// PanicError is the error of an operator whose user code panicked.
type PanicError struct {
	Value any
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }
