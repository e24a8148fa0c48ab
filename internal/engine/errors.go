package engine

import (
	"errors"
	"fmt"
)

// Sentinel errors for the ways a topology can be invalid (package operators
// exports them).
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

// Errors builds the errors the engine reports, so that they are of the
// user API's types (package operators gives its own; the engine never names
// them).
type Errors struct {
	// Topology is one reason a topology is invalid: op is empty when it
	// concerns the whole topology; kind is one of the Err* sentinels.
	Topology func(topology, op string, kind error, detail string) error
	// Operator is a failure of one operator instance while the job runs.
	Operator func(topology, op string, instance int, err error) error
	// Panic is the error of user code that panicked with v.
	Panic func(v any) error
	// Aborted is the outcome of a job stopped before it finished.
	Aborted error
}

// plainErrors are the errors of a topology built without a kit (tests of
// this package, the orphan topology of a zero stream).
var plainErrors = Errors{
	Topology: func(topology, op string, kind error, detail string) error {
		if op == "" {
			return fmt.Errorf("topology %q: %w: %s", topology, kind, detail)
		}
		return fmt.Errorf("topology %q: operator %q: %w: %s", topology, op, kind, detail)
	},
	Operator: func(topology, op string, instance int, err error) error {
		return fmt.Errorf("topology %q: operator %q instance %d: %w", topology, op, instance, err)
	},
	Panic:   func(v any) error { return fmt.Errorf("panic: %v", v) },
	Aborted: ErrAborted,
}

func opErr(t *Topology, op string, kind error, detail string) error {
	return t.kit.Topology(t.name, op, kind, detail)
}
