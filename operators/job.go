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
	// RestoredSpillRefs counts those of them held in the checkpoint as a
	// range of a Spill input's queue (referred to, not copied).
	RestoredSpillRefs int
	// Restarts counts RestartOnFailure's restarts of the job, and
	// RestartDelays the backoff before each.
	Restarts      int
	RestartDelays []time.Duration
	// RestartCauses are the newest restarts (up to 64), oldest first.
	RestartCauses []RestartCause
	// InProgress are the checkpoints in flight, oldest first.
	InProgress []InProgressCheckpoint
	// History are the newest completed checkpoints (up to 64), oldest
	// first.
	History []CompletedCheckpoint
}

// CompletedCheckpoint is one completed checkpoint: its id, when it
// completed, how long it took from injecting its barriers to stored, and
// the operator state it stored (bytes, and instance states).
type CompletedCheckpoint struct {
	ID        uint64
	Time      time.Time
	Duration  time.Duration
	Size      int64
	Instances int
	// Unaligned, InFlightBytes and SpillRanges: as for
	// InProgressCheckpoint, of the checkpoint stored.
	Unaligned     bool
	InFlightBytes int64
	SpillRanges   int
}

// RestartCause is one restart of a job (RestartOnFailure): when, the
// failure that caused it, and the backoff before it.
type RestartCause struct {
	Time  time.Time
	Err   string
	Delay time.Duration
}

// InstanceStats are the figures of one task instance (a subtask): what
// actors.Run.Stats sums over the instances of a task, kept apart so that
// skew between them shows.
type InstanceStats struct {
	Task, Instance int
	// Host is the process the instance runs in ("" in this process).
	Host string
	// In and Out are per operator of the task's chain, in chain order.
	In, Out []int64
	// The input mailbox (zero for a source).
	Policy                      string
	Capacity, Queued, HighWater int
	Dropped, Spilled            int64
	// Blocked is the time spent without credit to send, in total;
	// Backpressured says whether the instance is without credit now.
	Blocked       time.Duration
	Backpressured bool
	// Busy is the time spent handling batches (reading, for a source), in
	// total; BusyKnown is false when it is not measured (NoLatencyStats,
	// or an instance in another process).
	Busy      time.Duration
	BusyKnown bool
	Watermark time.Time
}

// DeadLetterInfo is a dead letter as RecentDeadLetters reports it: its
// sequence number in the store, the operator instance that gave it up, the
// failure, the attempts, when, and the record's trace id if it was sampled;
// not the record itself (read it from the store by Seq).
type DeadLetterInfo struct {
	Seq      uint64
	Operator string
	Instance int
	Error    string
	Attempts int
	Time     time.Time
	TraceID  string
}

// RecentDeadLetters reports the newest dead letters (up to 64) the run's
// operators gave to the dead-letter store in this process, oldest first;
// nil when no operator has OnRecordFailure. The store keeps every one.
func RecentDeadLetters(run *actors.Run) []DeadLetterInfo {
	var out []DeadLetterInfo
	for _, d := range engine.RecentDeadLetters(run) {
		out = append(out, DeadLetterInfo(d))
	}
	return out
}

// InstanceStatsOf reports every task instance of a topology's run, task by
// task and instance by instance (nil for another kind of job).
func InstanceStatsOf(run *actors.Run) []InstanceStats {
	var out []InstanceStats
	for _, s := range engine.InstanceStatsOf(run) {
		out = append(out, InstanceStats(s))
	}
	return out
}

// InProgressCheckpoint is a checkpoint being taken: since when, which
// operator instances (numbered in the job) acknowledged it, and how many
// have not yet.
type InProgressCheckpoint struct {
	ID      uint64
	Started time.Time
	Acked   []int
	Pending int
	// Unaligned: started unaligned, or switched to unaligned after its
	// AlignmentTimeout. InFlightBytes: the bytes of in-flight records the
	// instances that acknowledged it recorded (copies); SpillRanges: the
	// input channels whose in-flight records it holds as a range of their
	// Spill input's queue instead (not copied).
	Unaligned     bool
	InFlightBytes int64
	SpillRanges   int
}

// CheckpointStatsOf reports the checkpoints of a topology's run (zero
// statistics for another kind of job).
func CheckpointStatsOf(run *actors.Run) CheckpointStats {
	s := engine.CheckpointStatsOf(run)
	st := CheckpointStats{Completed: s.Completed, Failed: s.Failed, TimedOut: s.TimedOut, LastFailure: s.LastFailure,
		LastID: s.LastID, LastDuration: s.LastDuration, LastTime: s.LastTime, RestoredFrom: s.RestoredFrom,
		RestoredTime: s.RestoredTime, RestoredInFlight: s.RestoredInFlight, RestoredSpillRefs: s.RestoredSpillRefs,
		Restarts: s.Restarts, RestartDelays: s.RestartDelays}
	for _, p := range s.InProgress {
		st.InProgress = append(st.InProgress, InProgressCheckpoint(p))
	}
	for _, h := range s.History {
		st.History = append(st.History, CompletedCheckpoint(h))
	}
	for _, r := range s.RestartCauses {
		st.RestartCauses = append(st.RestartCauses, RestartCause(r))
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

// RunParallelism runs operator op at parallelism n in this run, as if it
// had been built with Parallelism(n) (on a KeyBy: its keyed consumers;
// operators after it that set none follow it, as always). With
// FromSavepoint it rescales a job: the savepoint's per-key state is
// redistributed by key group over the new instances. An unknown operator
// or n below 1 makes Start fail, naming it.
//
//	job, err := operators.Start(ctx, sys, top, operators.FromSavepoint(dir), operators.RunParallelism("count", 4))
func RunParallelism(op string, n int) TopologyOption {
	return TopologyOption{graph.RunParallelism(op, n)}
}

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
