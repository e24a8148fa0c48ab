package graph

import (
	"errors"
	"fmt"
)

// Kind is a way a topology can be invalid; package operators gives each its
// sentinel error.
type Kind uint8

const (
	KindDuplicateName Kind = iota + 1
	KindCycle
	KindUnconnected
	KindTypeMismatch
	KindParallelism
	KindForeignStream
	KindUnknown
	KindInvalid
	KindNoSource
)

var kindNames = [...]string{KindDuplicateName: "duplicate operator name", KindCycle: "cycle", KindUnconnected: "unconnected",
	KindTypeMismatch: "type mismatch", KindParallelism: "invalid parallelism", KindForeignStream: "stream from another topology",
	KindUnknown: "unknown operator", KindInvalid: "invalid operator", KindNoSource: "no source"}

func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Errors builds the errors the engine reports, so that they are of the
// user API's types (package operators gives its own; the engine never names
// them).
type Errors struct {
	// Topology is one reason a topology is invalid: op is empty when it
	// concerns the whole topology.
	Topology func(topology, op string, kind Kind, detail string) error
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
	Topology: func(topology, op string, kind Kind, detail string) error {
		if op == "" {
			return fmt.Errorf("topology %q: %v: %s", topology, kind, detail)
		}
		return fmt.Errorf("topology %q: operator %q: %v: %s", topology, op, kind, detail)
	},
	Operator: func(topology, op string, instance int, err error) error {
		return fmt.Errorf("topology %q: operator %q instance %d: %w", topology, op, instance, err)
	},
	Panic:   func(v any) error { return fmt.Errorf("panic: %v", v) },
	Aborted: ErrAborted,
}

// ErrAborted is the outcome of a job stopped before it finished, for a
// topology built without a kit.
var ErrAborted = errors.New("job stopped before it finished")

func opErr(t *Topology, op string, kind Kind, detail string) error {
	return t.kit.Topology(t.tname, op, kind, detail)
}
