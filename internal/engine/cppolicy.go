package engine

import (
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/coord"
)

// InProgressCheckpoint is a checkpoint being taken: since when, which
// operator instances (by number in the job) acknowledged it, and how many
// have not yet.
type InProgressCheckpoint struct {
	ID      uint64
	Started time.Time
	Acked   []int
	Pending int
	// Unaligned: it was started unaligned or switched to unaligned (its
	// alignment timed out). InFlightBytes are the bytes of in-flight
	// records the instances acknowledged so far recorded (copies), and
	// SpillRanges the input channels they recorded as a range of their
	// spill queue instead.
	Unaligned     bool
	InFlightBytes int64
	SpillRanges   int
}

// cpExpire: the deadline of checkpoint id passed (coord.Inject.Deadline).
type cpExpire struct{ id uint64 }

// cpAlignTimeout: the alignment deadline of checkpoint id passed
// (coord.Inject.AlignBy).
type cpAlignTimeout struct{ id uint64 }

func (*cpAlignTimeout) IsControl() bool { return true }

// armAlignTimeout asks for AlignTimeout{id} at alignBy (zero: never), on the
// job's clock. The timer is not cancelled: the coordinator ignores the
// timeout of a checkpoint that ended.
func (j *jobActor) armAlignTimeout(id uint64, alignBy time.Time) {
	if alignBy.IsZero() {
		return
	}
	root, pid := j.x.root, j.x.jobPID
	stop := j.x.topo.Config().CheckpointAfter(alignBy.Sub(j.x.topo.Config().Now()), func() { root.Send(pid, &cpAlignTimeout{id: id}) })
	j.alignTimers = append(j.alignTimers, stop)
	if len(j.alignTimers) > 64 { // fired long ago: forget them
		j.alignTimers = slices.Delete(j.alignTimers, 0, 32)
	}
}

// cpDeferred: the minimum pause before the next checkpoint passed
// (coord.TickAt).
type cpDeferred struct{}

func (*cpExpire) IsControl() bool   { return true }
func (*cpDeferred) IsControl() bool { return true }

// newCoordinator is the checkpoint coordinator of a generation of total
// instances, with the job's policy.
func (x *execution) newCoordinator(total int) coord.Checkpoints {
	p := x.topo.Config().CheckpointPolicy
	cs := coord.Checkpoints{Instances: total, Timeout: p.Timeout, MaxConcurrent: p.MaxConcurrent, MinPause: p.MinPause,
		Unaligned: p.Unaligned, AlignmentTimeout: p.AlignmentTimeout}
	if x.restored != nil {
		cs.Completed = x.restored.ID
	}
	return cs
}

// armExpiry asks for Expire{id} at deadline, on the job's clock.
func (j *jobActor) armExpiry(id uint64, deadline time.Time) {
	if deadline.IsZero() {
		return
	}
	if j.expiry == nil {
		j.expiry = map[uint64]func() bool{}
	}
	root, pid := j.x.root, j.x.jobPID
	j.expiry[id] = j.x.topo.Config().CheckpointAfter(deadline.Sub(j.x.topo.Config().Now()), func() { root.Send(pid, &cpExpire{id: id}) })
}

// ended forgets checkpoint id: its start and its deadline's timer.
func (j *jobActor) ended(id uint64) {
	delete(j.started, id)
	if stop := j.expiry[id]; stop != nil {
		stop()
		delete(j.expiry, id)
	}
}

// deferTick asks for a tick at at (the minimum pause).
func (j *jobActor) deferTick(at time.Time) {
	if j.deferred != nil {
		j.deferred()
	}
	root, pid := j.x.root, j.x.jobPID
	j.deferred = j.x.topo.Config().CheckpointAfter(at.Sub(j.x.topo.Config().Now()), func() { root.Send(pid, &cpDeferred{}) })
}

// stopPolicyTimers stops the deadlines' and the pause's timers.
func (j *jobActor) stopPolicyTimers() {
	for id := range j.expiry {
		j.ended(id)
	}
	if j.deferred != nil {
		j.deferred()
		j.deferred = nil
	}
	for _, stop := range j.alignTimers {
		stop()
	}
	j.alignTimers = nil
}

// publishInProgress shows the checkpoints in flight in the job's statistics.
func (j *jobActor) publishInProgress() {
	var ps []InProgressCheckpoint
	for _, f := range j.cs.InFlight {
		acked := make([]int, 0, len(f.Acked))
		for i := range f.Acked {
			acked = append(acked, i)
		}
		slices.Sort(acked)
		b, refs := channelSizes(f.Channels)
		ps = append(ps, InProgressCheckpoint{ID: f.ID, Started: f.Started, Acked: acked, Pending: j.cs.Instances - len(acked),
			Unaligned: f.Unaligned, InFlightBytes: b, SpillRanges: refs})
	}
	x := j.x
	x.cpStatsMu.Lock()
	x.cpStats.InProgress = ps
	x.cpStatsMu.Unlock()
}

// noteFailed counts a failed checkpoint and its reason.
func (x *execution) noteFailed(err error) {
	var te *coord.TimeoutError
	x.cpStatsMu.Lock()
	x.cpStats.Failed++
	if errors.As(err, &te) {
		x.cpStats.TimedOut++
	}
	x.cpStats.LastFailure = err.Error()
	x.cpStatsMu.Unlock()
}

// channelSizes sums the bytes of a checkpoint's copied in-flight records
// and counts its channels held as spill ranges.
func channelSizes(chans map[string][]byte) (bytes int64, refs int) {
	for k, v := range chans {
		if strings.HasSuffix(k, spillRefSuffix) {
			refs++
		} else {
			bytes += int64(len(v))
		}
	}
	return bytes, refs
}
