package engine

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/supervision"
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
	// SpillPending is the records in the input's spill now; Stashed the
	// envelopes the instance took from its mailbox and has not processed
	// (held behind back-pressure or an aligning barrier; 0 for an
	// instance in another process).
	SpillPending int64
	Stashed      int
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
					l := x.lats[id][in.idx]
					_, st.Busy = l.handledBusy(l.proc.count())
					st.BusyKnown = true
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
			st.Spilled, st.SpillPending = s.Spilled, s.SpillPending
			if x.local(in.self) {
				st.Stashed = int(in.stashed.Load())
			}
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
	// Unaligned, InFlightBytes and SpillRanges: as for InProgressCheckpoint,
	// of the checkpoint stored.
	Unaligned     bool
	InFlightBytes int64
	SpillRanges   int
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
	bytes     int64
	states    int
	unaligned bool
	inFlight  int64
	refs      int
}

// noteSize keeps the size of checkpoint id, stored now, for its entry in
// the history when it completes. A checkpoint stored that never completes
// leaves its entry behind: the map is cleared beyond a few.
func (j *jobActor) noteSize(id uint64, states, chans map[string][]byte, unaligned bool) {
	if j.sizes == nil || len(j.sizes) >= 16 {
		j.sizes = make(map[uint64]cpSize)
	}
	var s cpSize
	for _, b := range states {
		s.bytes += int64(len(b))
		s.states++
	}
	s.unaligned = unaligned
	s.inFlight, s.refs = channelSizes(chans)
	j.sizes[id] = s
}

// DeadLetterInfo is a dead letter as RecentDeadLetters reports it: where
// and why, without the record.
type DeadLetterInfo struct {
	Seq      uint64
	Operator string
	Instance int
	Error    string
	Attempts int
	Time     time.Time
	TraceID  string
}

// RecentDeadLetters reports the newest dead letters (up to 64) that the
// run's operators gave to the dead-letter store in this process, oldest
// first (nil when no operator has a dead-letter policy, or for another
// kind of job). The store keeps them all; this is for a page to show.
func RecentDeadLetters(run *actors.Run) []DeadLetterInfo {
	if x, ok := run.Execution().(*execution); ok && x.recentDead != nil {
		return x.recentDead.recent()
	}
	return nil
}

// recentDeadLetters is a dead-letter store that remembers the newest
// letters added through it.
type recentDeadLetters struct {
	supervision.DeadLetterStore
	mu   sync.Mutex
	last []DeadLetterInfo
}

func (r *recentDeadLetters) Add(d supervision.DeadLetter) (uint64, error) {
	seq, err := r.DeadLetterStore.Add(d)
	if err == nil {
		info := DeadLetterInfo{Seq: seq, Operator: d.Operator, Instance: d.Instance,
			Error: d.Error, Attempts: d.Attempts, Time: d.Time, TraceID: d.TraceID}
		r.mu.Lock()
		// In the order of Seq, though instances add concurrently: the
		// newest maxHistory by Seq are kept.
		i, _ := slices.BinarySearchFunc(r.last, seq, func(e DeadLetterInfo, s uint64) int { return cmp.Compare(e.Seq, s) })
		r.last = slices.Insert(r.last, i, info)
		if len(r.last) > maxHistory {
			r.last = slices.Delete(r.last, 0, len(r.last)-maxHistory)
		}
		r.mu.Unlock()
	}
	return seq, err
}

func (r *recentDeadLetters) recent() []DeadLetterInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.last)
}
