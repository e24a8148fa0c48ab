package engine

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/actors"
)

// Settings are a topology run's configuration as the dashboard shows it:
// plain values, read once (they do not change while the job runs, except
// the inputs, which Inputs reports).
type Settings struct {
	BatchSize int
	Capacity  int // the default input capacity, in records
	// Checkpoints: the interval (0: none), the policy's bounds, and the
	// store's type.
	CheckpointInterval time.Duration
	CheckpointTimeout  time.Duration
	MaxConcurrent      int
	MinPause           time.Duration
	Unaligned          bool
	AlignmentTimeout   time.Duration
	CheckpointStore    string
	Savepoint          string // the savepoint the job started from
	DeadLetters        string // the dead-letter store's type, "" without one
	Restart            string // the restart policy, "" without one
	Distributed        bool
	LatencyMeasured    bool
	LatencyWindow      time.Duration
	LatencyTarget      time.Duration
}

// SettingsOf reports the settings of a topology's run; ok is false for
// another kind of job.
func SettingsOf(run *actors.Run) (s Settings, ok bool) {
	x, ok := run.Execution().(*execution)
	if !ok {
		return Settings{}, false
	}
	c := x.topo.Config()
	s = Settings{
		BatchSize: c.BatchSize, Capacity: c.Capacity,
		CheckpointInterval: c.CheckpointInterval, CheckpointTimeout: c.CheckpointPolicy.Timeout,
		MaxConcurrent: c.CheckpointPolicy.MaxConcurrent, MinPause: c.CheckpointPolicy.MinPause,
		Unaligned: c.CheckpointPolicy.Unaligned, AlignmentTimeout: c.CheckpointPolicy.AlignmentTimeout,
		Savepoint: c.Savepoint, Distributed: c.Dist != nil,
		LatencyMeasured: !c.NoLatency, LatencyWindow: c.LatencyWindow, LatencyTarget: c.LatencyTarget,
	}
	if c.CheckpointStore != nil {
		s.CheckpointStore = fmt.Sprintf("%T", c.CheckpointStore)
	}
	if c.DeadLetters != nil {
		s.DeadLetters = fmt.Sprintf("%T", c.DeadLetters)
	}
	if r := c.Restart; r != nil {
		s.Restart = fmt.Sprintf("restart on failure: at most %d within %v, backoff %v up to %v (×%g)",
			r.Budget, r.Within, r.Backoff.Initial, r.Backoff.Max, r.Backoff.Multiplier)
	}
	if s.LatencyMeasured && s.LatencyWindow == 0 {
		s.LatencyWindow = time.Second
	}
	return s, true
}
