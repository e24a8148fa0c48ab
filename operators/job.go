package operators

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/graph"
	"github.com/sluicehq/sluice/internal/savepoint"
)

// CheckpointStats are a job's checkpoints and restarts so far.
type CheckpointStats struct {
	Completed    int64         // checkpoints completed in this run
	Failed       int64         // checkpoints that failed: their store failed or they timed out
	TimedOut     int64         // of Failed, those that timed out (CheckpointTimeout)
	LastFailure  string        // the reason of the newest failed checkpoint
	LastID       uint64        // the newest completed checkpoint
	LastDuration time.Duration // from injecting its barriers to stored
	LastTime     time.Time
	RestoredFrom uint64    // the checkpoint this run resumed from, 0 if none
	RestoredTime time.Time // when that checkpoint was taken (zero if none)
	// RestoredInFlight counts the input channels whose in-flight records,
	// recorded by an unaligned checkpoint, the run processed first.
	RestoredInFlight int
	// Restarts counts RestartOnFailure's restarts of the job, and
	// RestartDelays the backoff before each.
	Restarts      int
	RestartDelays []time.Duration
	// InProgress are the checkpoints in flight, oldest first.
	InProgress []InProgressCheckpoint
}

// InProgressCheckpoint is a checkpoint being taken: since when, which
// operator instances (numbered in the job) acknowledged it, and how many
// have not yet.
type InProgressCheckpoint struct {
	ID      uint64
	Started time.Time
	Acked   []int
	Pending int
}

// CheckpointStatsOf reports the checkpoints of a topology's run (zero
// statistics for another kind of job).
func CheckpointStatsOf(run *actors.Run) CheckpointStats {
	s := engine.CheckpointStatsOf(run)
	st := CheckpointStats{Completed: s.Completed, Failed: s.Failed, TimedOut: s.TimedOut, LastFailure: s.LastFailure,
		LastID: s.LastID, LastDuration: s.LastDuration, LastTime: s.LastTime, RestoredFrom: s.RestoredFrom,
		RestoredTime: s.RestoredTime, RestoredInFlight: s.RestoredInFlight,
		Restarts: s.Restarts, RestartDelays: s.RestartDelays}
	for _, p := range s.InProgress {
		st.InProgress = append(st.InProgress, InProgressCheckpoint(p))
	}
	return st
}

// CheckpointNow takes a checkpoint of the running job now, outside its
// interval, and returns its id once it is complete: the state of every
// operator after every record read before the call, durable in the job's
// checkpoint store. A job of the same name started later on the same store
// resumes from it. The job must have been started with Checkpoints.
func CheckpointNow(ctx context.Context, run *actors.Run) (uint64, error) {
	return engine.CheckpointNow(ctx, run)
}

// SavepointInfo describes a savepoint: where it is, the checkpoint it
// holds and the plan that took it.
type SavepointInfo struct {
	Dir        string
	ID         string // unique to the savepoint
	Job        string
	Checkpoint uint64
	Taken      time.Time
	// Parallelism of every operator when it was taken.
	Parallelism map[string]int
	// Fingerprint identifies the topology whatever its parallelism: a job
	// starts from the savepoint only with the same.
	Fingerprint string
}

func savepointInfo(sp *savepoint.Savepoint) SavepointInfo {
	m := sp.Manifest
	info := SavepointInfo{Dir: sp.Dir, ID: m.ID, Job: m.Job, Checkpoint: m.Checkpoint, Taken: sp.Taken(),
		Parallelism: map[string]int{}, Fingerprint: m.Plan.Fingerprint}
	for _, o := range m.Plan.Operators {
		info.Parallelism[o.Name] = o.Parallelism
	}
	return info
}

// ReadSavepoint opens the savepoint in dir read-only and checks it whole
// (kind, format version, every file's size and checksum, every state
// file's content): the savepoint a job would start from, or why it would
// not.
func ReadSavepoint(dir string) (SavepointInfo, error) {
	sp, err := savepoint.Open(dir)
	if err != nil {
		return SavepointInfo{}, fmt.Errorf("operators: %w", err)
	}
	return savepointInfo(sp), nil
}

// FromSavepoint starts the job from the savepoint in dir, written by
// Job.Savepoint from a job of the same topology (the same operators wired
// the same way, Fingerprint) at any parallelism: an operator's per-key
// state is redistributed by key group over its new instances, and a
// source's offsets by its connector (FromSlice and Generate can when every
// partition read the same share; others keep their parallelism). The
// savepoint replaces the job's checkpoints in its store; a later start
// with the same option, once the job has checkpointed since, resumes from
// its newest checkpoint instead (a restart after a crash). The savepoint
// is only read. The job must take checkpoints (Checkpoints). A savepoint
// that is damaged, truncated, of another program or of a newer format is
// refused by Start, naming the file.
func FromSavepoint(dir string) TopologyOption { return TopologyOption{graph.FromSavepoint(dir)} }

// ShedStats describe a LatencyTarget's controller now (DESIGN.md, Latency
// and shedding).
type ShedStats struct {
	Target     time.Duration
	Point      string  // where it sheds: the sources ("clicks"), or an edge ("parse->count"); "" when it sheds nothing
	Keep       float64 // the fraction of records kept there (1: nothing shed)
	Drop       bool    // it drops whole batches, since an operator downstream is Selective; else it samples
	Bottleneck string  // the busiest task (its first operator) in the latest window
	Infeasible string  // why the target cannot be held now, "" while it can
}

// ShedStatsOf reports a topology run's LatencyTarget controller: zero
// statistics for a run without one. What it shed is in each operator's
// OperatorStats (Shed, ShedBy, SampleRate).
func ShedStatsOf(run *actors.Run) ShedStats { return ShedStats(engine.ShedStatsOf(run)) }
