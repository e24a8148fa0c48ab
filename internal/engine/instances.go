package engine

import (
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/wire"
)

// InstanceStats are the figures of one task instance (a subtask, in
// Flink's words): what Stats sums over a task's instances, kept apart so
// that skew between them shows.
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
	// total; BusyKnown is false when it is not measured (a job with
	// NoLatencyStats, or an instance in another process).
	Busy      time.Duration
	BusyKnown bool
	Watermark time.Time
}

// InstanceStatsOf reports every task instance of a topology's run, task by
// task (nil for another kind of job).
func InstanceStatsOf(run *actors.Run) []InstanceStats {
	if x, ok := run.Execution().(*execution); ok {
		return x.InstanceStats()
	}
	return nil
}

// InstanceStats reports every task instance of the current generation.
func (x *execution) InstanceStats() []InstanceStats {
	x.instMu.RLock()
	defer x.instMu.RUnlock()
	x.statsMu.Lock()
	defer x.statsMu.Unlock()
	var out []InstanceStats
	for id := range x.plan.Chains {
		if id >= len(x.instances) {
			break
		}
		for _, in := range x.instances[id] {
			var s wire.InstanceStats
			st := InstanceStats{Task: id, Instance: in.idx}
			if x.local(in.self) {
				s = x.instanceStats(in)
				if id < len(x.lats) && in.idx < len(x.lats[id]) && x.lats[id][in.idx] != nil {
					st.Busy, st.BusyKnown = time.Duration(x.lats[id][in.idx].busy.Load()), true
				}
			} else {
				st.Host = in.self.Address
				if r := x.remoteStats[statsKey{in.gen, id, in.idx}]; r != nil {
					s = *r
				}
			}
			for _, o := range s.Ops {
				st.In, st.Out = append(st.In, o.In), append(st.Out, o.Out)
			}
			st.Policy, st.Capacity, st.Queued, st.HighWater = s.Policy, s.Capacity, s.Depth, s.HighWater
			st.Spilled = s.Spilled
			for _, d := range s.Dropped {
				st.Dropped += d
			}
			st.Blocked, st.Backpressured = time.Duration(s.Blocked), s.Backpressured
			if s.Watermark != 0 {
				st.Watermark = time.Unix(0, s.Watermark)
			}
			out = append(out, st)
		}
	}
	return out
}

// maxHistory bounds CheckpointStats.History and .RestartCauses: the newest
// are kept.
const maxHistory = 64

// CompletedCheckpoint is one checkpoint of CheckpointStats.History.
type CompletedCheckpoint struct {
	ID       uint64
	Time     time.Time     // when it completed
	Duration time.Duration // from injecting its barriers to stored
	// Size is the bytes of operator state it stored; Instances how many
	// instance states it holds.
	Size      int64
	Instances int
}

// RestartCause is one restart of CheckpointStats.RestartCauses.
type RestartCause struct {
	Time  time.Time
	Err   string // the failure that made the job restart
	Delay time.Duration
}

// appendBounded appends v to s, keeping the newest maxHistory.
func appendBounded[T any](s []T, v T) []T {
	s = append(s, v)
	if len(s) > maxHistory {
		s = append(s[:0:0], s[len(s)-maxHistory:]...)
	}
	return s
}

// cpSize is what a stored checkpoint holds, until it completes.
type cpSize struct {
	bytes  int64
	states int
}

// noteSize keeps the size of checkpoint id, stored now, for its entry in
// the history when it completes. A checkpoint stored that never completes
// leaves its entry behind: the map is cleared beyond a few.
func (j *jobActor) noteSize(id uint64, states map[string][]byte) {
	if j.sizes == nil || len(j.sizes) >= 16 {
		j.sizes = make(map[uint64]cpSize)
	}
	var s cpSize
	for _, b := range states {
		s.bytes += int64(len(b))
		s.states++
	}
	j.sizes[id] = s
}
