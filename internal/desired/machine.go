package desired

import (
	"fmt"
	"slices"
)

// Machine applies versions of the desired document. Step takes an event
// and returns the next machine and the actions to carry out; it never does
// I/O. A version is applied whole or not at all: when one of its changes
// fails, the ones already done are undone (Rollback) before the version is
// rejected (Nack), and the last good version stays in force.
type Machine struct {
	// Desired is the newest version read, good or not; Good the newest
	// applied; Rejected the newest rejected, with Reason.
	Desired, Good, Rejected uint64
	Reason                  string
	// Applied is, by job, the version whose settings the job runs.
	Applied map[string]uint64
	// applying is the version in progress: its changes, and the job names
	// of its document.
	applying *inFlight
	// next is the newest document read while a version was in progress.
	next *Read
}

type inFlight struct {
	version uint64
	changes []Change
	jobs    []string
	failed  string // set once a change failed: rolling back
}

// Event is an input of Step.
type Event interface{ event() }

// Read: a document was read, and Parse returned Doc or Err; View is what
// the process runs now.
type Read struct {
	Doc  Document
	Err  error
	View View
}

// Done: every change of Version was applied.
type Done struct{ Version uint64 }

// Failed: change number Index (from 0) of Version failed with Err; the
// changes before it were applied.
type Failed struct {
	Version uint64
	Index   int
	Err     string
}

// RolledBack: the Rollback of Version was carried out (whatever its
// outcome: a change that cannot be undone is reported in Err).
type RolledBack struct {
	Version uint64
	Err     string
}

func (Read) event()       {}
func (Done) event()       {}
func (Failed) event()     {}
func (RolledBack) event() {}

// Action is an output of Step.
type Action interface{ action() }

// Apply the changes of Version, in order; report Done or Failed.
type Apply struct {
	Version uint64
	Changes []Change
}

// Rollback undoes the changes of a failed version, in order; report
// RolledBack.
type Rollback struct {
	Version uint64
	Changes []Change
}

// Ack: Version is in force for Jobs.
type Ack struct {
	Version uint64
	Jobs    []string
}

// Nack: Version (0 when the document could not be read) was rejected; the
// last good version stays in force.
type Nack struct {
	Version uint64
	Reason  string
}

// Ignore: a document of a version already applied or rejected was read
// again.
type Ignore struct{ Version uint64 }

func (Apply) action()    {}
func (Rollback) action() {}
func (Ack) action()      {}
func (Nack) action()     {}
func (Ignore) action()   {}

// Busy says whether a version is being applied.
func (m Machine) Busy() bool { return m.applying != nil }

// Step handles one event.
func (m Machine) Step(ev Event) (Machine, []Action) {
	m.Applied = clone(m.Applied)
	switch e := ev.(type) {
	case Read:
		if m.applying != nil {
			r := e
			m.next = &r
			return m, nil
		}
		return m.read(e)
	case Done:
		if m.applying == nil || e.Version != m.applying.version || m.applying.failed != "" {
			return m, nil
		}
		a := m.applying
		m.applying = nil
		m.Good = a.version
		for _, j := range a.jobs {
			m.Applied[j] = a.version
		}
		return m.resume([]Action{Ack{Version: a.version, Jobs: a.jobs}})
	case Failed:
		if m.applying == nil || e.Version != m.applying.version || m.applying.failed != "" {
			return m, nil
		}
		a := *m.applying
		a.failed = fmt.Sprintf("%s: %s", a.changes[e.Index], e.Err)
		m.applying = &a
		var undo []Change
		for i := e.Index - 1; i >= 0; i-- {
			undo = append(undo, a.changes[i].Undo())
		}
		if len(undo) == 0 {
			return m.rejectInFlight("")
		}
		return m, []Action{Rollback{Version: a.version, Changes: undo}}
	case RolledBack:
		if m.applying == nil || e.Version != m.applying.version || m.applying.failed == "" {
			return m, nil
		}
		return m.rejectInFlight(e.Err)
	}
	return m, nil
}

func (m Machine) rejectInFlight(rollbackErr string) (Machine, []Action) {
	a := m.applying
	m.applying = nil
	reason := a.failed
	if rollbackErr != "" {
		reason += "; rollback: " + rollbackErr
	}
	m.Rejected, m.Reason = a.version, reason
	return m.resume([]Action{Nack{Version: a.version, Reason: reason}})
}

// resume reads the document that arrived during the version just ended.
func (m Machine) resume(acts []Action) (Machine, []Action) {
	if m.next == nil {
		return m, acts
	}
	r := *m.next
	m.next = nil
	m, more := m.read(r)
	return m, append(acts, more...)
}

func (m Machine) read(e Read) (Machine, []Action) {
	if e.Err != nil {
		m.Reason = e.Err.Error()
		return m, []Action{Nack{Reason: m.Reason}}
	}
	v := e.Doc.Version
	if v <= max(m.Good, m.Rejected) {
		return m, []Action{Ignore{Version: v}}
	}
	m.Desired = v
	changes, err := Validate(e.Doc, e.View)
	if err != nil {
		m.Rejected, m.Reason = v, err.Error()
		return m, []Action{Nack{Version: v, Reason: m.Reason}}
	}
	jobs := sorted(e.Doc.Jobs)
	if len(changes) == 0 {
		m.Good = v
		for _, j := range jobs {
			m.Applied[j] = v
		}
		return m, []Action{Ack{Version: v, Jobs: jobs}}
	}
	m.applying = &inFlight{version: v, changes: changes, jobs: jobs}
	return m, []Action{Apply{Version: v, Changes: slices.Clone(changes)}}
}

func clone(m map[string]uint64) map[string]uint64 {
	out := make(map[string]uint64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
