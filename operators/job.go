package operators

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/engine"
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
	RestoredFrom uint64 // the checkpoint this run resumed from, 0 if none
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
		Restarts: s.Restarts, RestartDelays: s.RestartDelays}
	for _, p := range s.InProgress {
		st.InProgress = append(st.InProgress, InProgressCheckpoint(p))
	}
	return st
}

// Savepoint takes a checkpoint of the running job now, outside its
// interval, and returns its id once it is complete: the state of every
// operator after every record read before the call, durable in the job's
// checkpoint store. A job of the same name started later resumes from it.
// The job must have been started with Checkpoints.
func Savepoint(ctx context.Context, run *actors.Run) (uint64, error) {
	return engine.Savepoint(ctx, run)
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
