package cluster

import (
	"fmt"
	"slices"
	"time"
)

// No split brain: leases on coordination.
//
// A coordinator cut off from the majority of its job's copies must stop
// before another copy takes the job over, or both would run sources and
// sinks. So (with the static-peers provider, whose pongs tell when each
// peer was last heard from):
//
//   - a coordinator that has not heard from enough copies of a job's log,
//     within its lease (9/10 of FailureTimeout: the window in which a peer
//     stays a member), for the others to elect a coordinator without it
//     (the copies it has not heard from are a majority of them) stops that
//     job: its sources and sinks stop, the job is not restarted here, and
//     its log is left to the others (checked every FailureTimeout/10);
//   - a copy stands for a job only once it has not heard from the
//     coordinator for electionWait (two FailureTimeouts): the lease, plus
//     the time between pings, plus the coordinator's check, with room for
//     the job to stop.
//
// Both sides measure on their own clocks the time since their last
// exchange, so only the rates of the clocks matter, not their offsets.

// lease is how long a coordinator may go without hearing from the copies
// that could elect another.
func (n *Node) lease() time.Duration { return n.cfg.FailureTimeout * 9 / 10 }

// electionWait is how long a copy must not have heard from a coordinator
// before standing for its job.
func (n *Node) electionWait() time.Duration { return 2 * n.cfg.FailureTimeout }

// noteHeard records an answer from the member with that id.
func (n *Node) noteHeard(id string, at time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.heard == nil {
		n.heard = map[string]heardFrom{}
	}
	n.heard[id] = heardFrom{name: nameOfID(id), at: at}
}

type heardFrom struct {
	name string
	at   time.Time
}

// lastHeard returns when the member with that id last answered (zero:
// never).
func (n *Node) lastHeard(id string) time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.heard[id].at
}

// heardNames returns the names of the nodes heard from since since.
func (n *Node) heardNames(since time.Time) map[string]bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[string]bool{}
	for id, h := range n.heard {
		if h.at.After(since) {
			out[h.name] = true
		} else if h.at.Before(since.Add(-10 * n.cfg.FailureTimeout)) {
			delete(n.heard, id) // long gone: the map stays small
		}
	}
	return out
}

// checkLeases stops the jobs this node coordinates whose copies it has
// not heard from enough (see the top of this file). The membership actor
// calls it on every tick.
func (n *Node) checkLeases(now time.Time) {
	jobs := n.Jobs()
	if len(jobs) == 0 {
		return
	}
	heard := n.heardNames(now.Add(-n.lease()))
	for _, j := range jobs {
		_, run, err := n.lastRecord("checkpoints/" + j.Job)
		if err != nil || run == nil || !run.Running || run.CoordinatorID != n.ID() || run.Namespace != "" {
			continue // not a log the others would take over
		}
		var silent []string
		for _, c := range run.Copies {
			if c != n.cfg.Name && !heard[c] {
				silent = append(silent, c)
			}
		}
		if len(silent) < len(run.Copies)/2+1 {
			continue
		}
		slices.Sort(silent)
		n.abandon(j.Job, fmt.Errorf("cluster: job %q: %w: node %s has not heard from %v, a majority of the job's copies %v, within its lease of %v: they may elect another coordinator",
			j.Job, ErrFenced, n.cfg.Name, silent, run.Copies, n.lease()))
	}
}
