package persistence

import (
	"context"
	"errors"
	"time"
)

// Errors, for errors.Is.
var (
	// ErrSeqConflict: an Append whose first sequence number is not the
	// journal's highest plus one (a stale writer, or a gap).
	ErrSeqConflict = errors.New("persistence: sequence number conflict")
	// ErrRecoveredToPast: a command to an event-sourced actor recovered to
	// an older point (Behavior.RecoverTo), which is read only.
	ErrRecoveredToPast = errors.New("persistence: recovered to an older point: read only")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("persistence: closed")
	// ErrDecode: a stored event, snapshot or checkpoint does not decode.
	ErrDecode = errors.New("persistence: cannot decode")
	// ErrStaleCheckpoint: Complete of a checkpoint older than the job's
	// newest completed one (a stale coordinator).
	ErrStaleCheckpoint = errors.New("persistence: stale checkpoint")
)

// Event is one persisted event of a persistence id.
type Event struct {
	Seq  uint64 // 1, 2, 3, ... within its persistence id
	Type string // the registered name of the payload's type
	Data []byte // the payload, msgpack-encoded
	Time time.Time
}

// Journal stores the events of many persistence ids.
//
// The contract, checked by the conformance suite (persisttest): Append is
// atomic (all events or none) and durable when it returns; events replay in
// sequence order; HighestSeq never decreases, even after DeleteTo removes
// events (up to and including everything).
type Journal interface {
	// Append adds events whose sequence numbers continue the journal of id:
	// the first must be HighestSeq(id)+1 and they must be consecutive, or
	// the append fails with ErrSeqConflict and writes nothing.
	Append(ctx context.Context, id string, events []Event) error
	// Replay calls fn for the events of id with from <= Seq <= to, in
	// order, at most max of them (max < 0: no limit; max == 0: none). It
	// stops at fn's first error and returns it. An unknown id, or from > to,
	// replays nothing.
	Replay(ctx context.Context, id string, from, to uint64, max int, fn func(Event) error) error
	// HighestSeq is the sequence number of the last event ever appended for
	// id (0 for an unknown id), deleted or not.
	HighestSeq(ctx context.Context, id string) (uint64, error)
	// DeleteTo removes the events of id with Seq <= to.
	DeleteTo(ctx context.Context, id string, to uint64) error
}

// Snapshot is the state of a persistence id as of an event.
type Snapshot struct {
	Seq  uint64 // the last event the state includes
	Data []byte
	Time time.Time
}

// SnapshotStore keeps snapshots of many persistence ids.
type SnapshotStore interface {
	// Save stores a snapshot of id as of seq.
	Save(ctx context.Context, id string, s Snapshot) error
	// Latest returns the newest snapshot of id, and false when there is none.
	Latest(ctx context.Context, id string) (Snapshot, bool, error)
	// DeleteTo removes the snapshots of id with Seq <= to.
	DeleteTo(ctx context.Context, id string, to uint64) error
	// Select returns the newest snapshot of id that c admits (Seq at most
	// c.MaxSeq, Time at most c.MaxTime), and false when there is none.
	Select(ctx context.Context, id string, c SnapshotCriteria) (Snapshot, bool, error)
	// Delete removes the snapshot of id at seq; none there is no error.
	Delete(ctx context.Context, id string, seq uint64) error
}

// SnapshotCriteria selects snapshots: those with Seq <= MaxSeq and Time
// <= MaxTime. A zero field does not bound (the zero value selects every
// snapshot, so the newest).
type SnapshotCriteria struct {
	MaxSeq  uint64
	MaxTime time.Time
}

// admits says whether c selects s.
func (c SnapshotCriteria) admits(s Snapshot) bool {
	return (c.MaxSeq == 0 || s.Seq <= c.MaxSeq) && (c.MaxTime.IsZero() || !s.Time.After(c.MaxTime))
}

// Checkpoint is a completed checkpoint of a job: the state of every
// operator instance and the position of every source partition, recorded
// together so that recovery restores one consistent cut.
type Checkpoint struct {
	ID      uint64
	Time    time.Time
	States  map[string][]byte // by operator instance ("count/2")
	Offsets map[string]int64  // by source partition ("lines/0"); operators also mark finished instances ("count/2#finished")
	// Channels are the in-flight records of an unaligned checkpoint, by
	// input channel ("count/2/in0"): a restored instance processes them
	// before its inputs. Empty for an aligned checkpoint.
	Channels map[string][]byte
}

// CheckpointStore records the completed checkpoints of jobs.
type CheckpointStore interface {
	// Complete records cp as the newest completed checkpoint of job,
	// atomically, and may drop older ones. A checkpoint whose ID is lower
	// than the newest completed one's is refused with ErrStaleCheckpoint;
	// completing the newest again replaces it.
	Complete(ctx context.Context, job string, cp Checkpoint) error
	// Latest returns the newest completed checkpoint of job, and false when
	// there is none.
	Latest(ctx context.Context, job string) (Checkpoint, bool, error)
	// Clear removes every checkpoint of job (a job that ran to its end
	// starts afresh next time).
	Clear(ctx context.Context, job string) error
}
