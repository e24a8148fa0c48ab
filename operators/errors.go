package operators

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/internal/graph"
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

// ErrAborted is the outcome of a job that was stopped before it finished.
var ErrAborted = errors.New("operators: job stopped before it finished")

// kinds gives each of the engine's kinds of invalid topology its sentinel.
var kinds = map[graph.Kind]error{
	graph.KindDuplicateName: ErrDuplicateName,
	graph.KindCycle:         ErrCycle,
	graph.KindUnconnected:   ErrUnconnected,
	graph.KindTypeMismatch:  ErrTypeMismatch,
	graph.KindParallelism:   ErrParallelism,
	graph.KindForeignStream: ErrForeignStream,
	graph.KindUnknown:       ErrUnknown,
	graph.KindInvalid:       ErrInvalid,
	graph.KindNoSource:      ErrNoSource,
}

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

// errorKit makes the engine report errors of this package's types.
var errorKit = graph.Errors{
	Topology: func(topology, op string, kind graph.Kind, detail string) error {
		k, ok := kinds[kind]
		if !ok {
			k = fmt.Errorf("%v", kind)
		}
		return &TopologyError{Topology: topology, Operator: op, Kind: k, Detail: detail}
	},
	Operator: func(topology, op string, instance int, err error) error {
		return &OperatorError{Topology: topology, Operator: op, Instance: instance, Err: err}
	},
	Panic:   func(v any) error { return &PanicError{Value: v} },
	Aborted: ErrAborted,
}
