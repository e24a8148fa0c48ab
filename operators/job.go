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

// Savepoint takes a checkpoint of the running job now, outside its
// interval, and returns its id once it is complete: the state of every
// operator after every record read before the call, durable in the job's
// checkpoint store. A job of the same name started later resumes from it.
// The job must have been started with Checkpoints.
func Savepoint(ctx context.Context, run *actors.Run) (uint64, error) {
	return engine.Savepoint(ctx, run)
}
