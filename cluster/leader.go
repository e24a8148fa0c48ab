package cluster

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/cluster/replication"
)

// ErrNotEnoughReplicas: a write cannot commit because fewer replicas than
// it needs are live (or members, when the leader starts).
var ErrNotEnoughReplicas = errors.New("cluster: not enough replicas")

// ReplicaStatus is the leader's view of one replica.
type ReplicaStatus struct {
	Name    string
	Phase   string // syncing, in-sync, lagging, retrying, failed
	Match   uint64 // the last entry it acknowledged
	Lag     uint64 // entries it lacks: the leader's last minus Match
	Attempt int    // failed attempts in a row
}

// LogStatus is the state of a replicated log this node leads.
type LogStatus struct {
	Log                 string
	Role                string // leading, stepped-down
	Epoch               uint64
	First, Last, Commit uint64
	Replicas            []ReplicaStatus
}

// Messages of a leader actor (local, never on the wire).
type (
	writeRequest struct {
		// build returns the entry to append, given the last one's data
		// (nil when none) and the log's replicas now; its error refuses
		// the write.
		build func(last []byte, replicas []string) ([]byte, error)
		done  chan error
	}
	leaderTimer struct {
		replica string
		id      uint64
	}
	leaderMember struct{ ev MemberEvent }
	leaderStop   struct{}
)

type timer struct {
	id   uint64
	stop func() bool
}

type waiter struct {
	index uint64
	done  chan error
}

// leader drives replication.Step for one log: it writes entries to the
// local log, sends appends through the codec, runs the timers on the
// node's clock, and answers the writers when their entries commit.
type leader struct {
	n           *Node
	clock       clock.Clock
	log         string
	cfg         replication.Config
	state       replication.State
	timers      map[string]timer // the running timer of each replica
	waiting     []waiter
	down        error // set once stepped down or stopped: every write fails with it
	status      *leaderStatus
	onChange    func(ReplicaTransition)
	transitions []ReplicaTransition // of the current step, reported after it
	claimed     uint64              // >0: take office in this epoch, won by election
	want        int                 // >0: add members that join as replicas, up to this many
}

// leaderStatus is the leader's state as others may read it.
type leaderStatus struct {
	mu sync.Mutex
	st LogStatus
}

func (s *leaderStatus) get() LogStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.Replicas = slices.Clone(st.Replicas)
	return st
}

func (l *leader) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		logs, err := l.n.logs()
		var epoch uint64
		var info replication.LogInfo
		if err == nil {
			if l.claimed > 0 {
				epoch, info, err = l.claimed, logs.info(l.log), logs.takeOfficeAt(l.log, l.claimed, l.n.cfg.Name)
			} else {
				epoch, info, err = logs.takeOffice(l.log)
			}
		}
		if err != nil {
			l.down = fmt.Errorf("cluster: log %q: take office: %w", l.log, err)
			l.n.log.Error("replication: cannot lead", "log", l.log, "err", err)
			l.publish()
			return
		}
		l.state = replication.New(l.cfg, epoch, info)
		l.n.log.Info("replication: leading", "log", l.log, "epoch", epoch, "replicas", l.cfg.Replicas, "last", info.Last)
		l.step(ctx, replication.Start{})
	case *writeRequest:
		l.write(ctx, m)
	case leaderTimer:
		if tm, ok := l.timers[m.replica]; ok && tm.id == m.id {
			delete(l.timers, m.replica) // fired
		}
		l.step(ctx, replication.TimerFired{Replica: m.replica, Timer: m.id})
	case *appendResponse:
		if m.Log != l.log {
			return
		}
		if why := l.answers(m); why != "" {
			l.n.refusals.refuse(refusedAppend, why, "log", l.log, "replica", m.Replica, "epoch", m.Epoch, "seq", m.Seq)
			return
		}
		if m.Err != "" {
			l.n.log.Warn("replication: replica failed to apply", "log", l.log, "replica", m.Replica, "err", m.Err)
			l.step(ctx, replication.Unreachable{Replica: m.Replica})
			return
		}
		reply := replication.Reply{Result: replication.Result(m.Result), Epoch: m.Epoch, Seq: m.Seq, Match: m.Match, Prev: m.Prev, Last: m.Last}
		l.step(ctx, reply.Event(m.Replica))
	case *actor.DeadLetterResponse:
		// The replica's node has no replica actor, or cannot be reached.
		if m.Target != nil {
			for _, r := range l.state.Config.Replicas {
				if mem, ok := l.n.Member(r); ok && mem.Address == m.Target.Address {
					l.step(ctx, replication.Unreachable{Replica: r})
				}
			}
		}
	case leaderMember:
		name := m.ev.Member.Name
		if !slices.Contains(l.state.Config.Replicas, name) {
			if m.ev.Kind == Joined && name != l.n.cfg.Name && len(l.state.Config.Replicas) < l.want && l.down == nil {
				l.n.log.Info("replication: a member joined: replicating to it", "log", l.log, "replica", name)
				l.step(ctx, replication.AddReplica{Replica: name})
			}
			return
		}
		switch m.ev.Kind {
		case Joined:
			l.step(ctx, replication.Reachable{Replica: m.ev.Member.Name})
		case Left:
			if _, still := l.n.Member(m.ev.Member.Name); !still { // not replaced by a new run
				l.step(ctx, replication.Unreachable{Replica: m.ev.Member.Name})
			}
		}
	case leaderStop:
		l.fail(ErrStopped)
		l.stopTimers()
		ctx.Respond(struct{}{})
	case *actor.Stopping:
		l.fail(ErrStopped)
		l.stopTimers()
	}
}

// answers says why an append's answer is refused ("" when it is not): it
// must come from a replica of the log (the guard checked that the
// connection's peer is the member it names), answer an append sent to it
// (a sequence number it was given), of this epoch unless it says the
// replica promised a newer one, with indexes below replication.Limit.
func (l *leader) answers(m *appendResponse) string {
	if l.state.Epoch == 0 {
		return "an answer before the leader took office"
	}
	r, ok := l.state.Replica(m.Replica)
	switch {
	case !ok:
		return "an append answer from a node that is not a replica of the log"
	case m.Seq == 0 || m.Seq > r.Seq:
		return "an append answer to no append sent"
	case !replication.InRange(m.Epoch, m.Match, m.Prev, m.Last):
		return "an append answer with an epoch or an index out of range"
	case replication.Result(m.Result) == replication.Stale && m.Err == "":
		if m.Epoch <= l.state.Epoch {
			return "a stale answer naming an epoch not newer than the leader's"
		}
	case replication.Result(m.Result) > replication.Stale:
		return "an append answer with an unknown result"
	case m.Epoch != l.state.Epoch:
		return "an append answer of another epoch"
	}
	return ""
}

func (l *leader) write(ctx actor.Context, w *writeRequest) {
	if l.down != nil {
		w.done <- l.down
		return
	}
	logs, err := l.n.logs()
	var index uint64
	if err == nil {
		replicas := slices.Clone(l.state.Config.Replicas)
		index, err = logs.appendEntry(l.log, l.state.Epoch, func(last []byte) ([]byte, error) { return w.build(last, replicas) })
	}
	if errors.Is(err, ErrFenced) {
		// A newer leader wrote to this node's copy as a replica.
		l.down = fmt.Errorf("cluster: log %q: %w", l.log, err)
		l.fail(l.down)
		l.stopTimers()
		l.publish() // before the writer hears of it: its Status shows it
		w.done <- l.down
		return
	}
	if err != nil {
		w.done <- err
		return
	}
	l.waiting = append(l.waiting, waiter{index: index, done: w.done})
	l.step(ctx, replication.Appended{Last: index})
}

// step feeds ev and carries out the actions, feeding the events they
// cause in turn.
func (l *leader) step(ctx actor.Context, ev replication.Event) {
	if l.down != nil {
		return
	}
	queue := []replication.Event{ev}
	for len(queue) > 0 {
		var acts []replication.Action
		l.state, acts = replication.Step(l.state, queue[0])
		queue = queue[1:]
		for _, a := range acts {
			queue = append(queue, l.act(ctx, a)...)
		}
	}
	l.publish()
	// Reported after publishing, so that Status already shows them.
	if l.onChange != nil {
		for _, tr := range l.transitions {
			l.onChange(tr)
		}
	}
	l.transitions = l.transitions[:0]
}

func (l *leader) act(ctx actor.Context, a replication.Action) []replication.Event {
	switch a := a.(type) {
	case replication.Send:
		mem, ok := l.n.Member(a.Replica)
		if !ok {
			return []replication.Event{replication.Unreachable{Replica: a.Replica}}
		}
		req := &appendRequest{Log: l.log, Leader: l.n.cfg.Name, Epoch: a.Epoch, Seq: a.Seq, Prev: a.Prev, PrevEpoch: a.PrevEpoch, Commit: a.Commit, Reset: a.Reset}
		if a.To >= a.From {
			logs, err := l.n.logs()
			var entries []replication.Entry
			if err == nil {
				entries, err = logs.entries(l.log, a.From, a.To)
			}
			if err != nil {
				l.n.log.Error("replication: read entries", "log", l.log, "from", a.From, "to", a.To, "err", err)
				return []replication.Event{replication.Unreachable{Replica: a.Replica}}
			}
			for _, e := range entries {
				req.Entries = append(req.Entries, wireEntry{Index: e.Index, Epoch: e.Epoch, Data: e.Data})
			}
		}
		ctx.Request(actor.NewPID(mem.Address, replicaActorName), req)
	case replication.SetTimer:
		if tm, ok := l.timers[a.Replica]; ok {
			tm.stop()
		}
		self, root, r, id := ctx.Self(), l.n.root, a.Replica, a.Timer
		l.timers[a.Replica] = timer{id: id, stop: l.clock.AfterFunc(a.Delay, func() { root.Send(self, leaderTimer{replica: r, id: id}) })}
	case replication.StopTimer:
		if tm, ok := l.timers[a.Replica]; ok && tm.id == a.Timer {
			tm.stop()
			delete(l.timers, a.Replica)
		}
	case replication.Commit:
		keep := l.waiting[:0]
		for _, w := range l.waiting {
			if w.index <= a.Index {
				w.done <- nil
			} else {
				keep = append(keep, w)
			}
		}
		l.waiting = keep
		// Every entry is a full checkpoint: the committed one is all a
		// lagging replica needs.
		if logs, err := l.n.logs(); err == nil {
			if err := logs.compact(l.log, a.Index); err != nil {
				l.n.log.Warn("replication: compact", "log", l.log, "err", err)
			} else {
				return []replication.Event{replication.Compacted{First: a.Index}}
			}
		}
	case replication.Unavailable:
		err := fmt.Errorf("%w: log %q: %d of %d replicas live, entries %d..%d cannot commit",
			ErrNotEnoughReplicas, l.log, a.Live, a.Acks, a.Commit+1, a.Last)
		keep := l.waiting[:0]
		for _, w := range l.waiting {
			if w.index > a.Commit {
				w.done <- err
			} else {
				keep = append(keep, w)
			}
		}
		l.waiting = keep
	case replication.StepDown:
		l.down = fmt.Errorf("cluster: log %q: %w (epoch %d; a leader of epoch %d exists)", l.log, ErrFenced, l.state.Epoch, a.Epoch)
		l.n.log.Warn("replication: stepped down", "log", l.log, "epoch", l.state.Epoch, "newer", a.Epoch)
		l.fail(l.down)
		l.stopTimers()
	case replication.Transition:
		lvl := l.n.log.Info
		if a.To == replication.Failed || a.To == replication.Retrying {
			lvl = l.n.log.Warn
		}
		lvl("replication: replica "+a.To.String(), "log", l.log, "replica", a.Replica, "from", a.From.String())
		l.transitions = append(l.transitions, ReplicaTransition{Log: l.log, Replica: a.Replica, From: a.From.String(), To: a.To.String()})
	}
	return nil
}

func (l *leader) fail(err error) {
	for _, w := range l.waiting {
		w.done <- err
	}
	l.waiting = nil
}

func (l *leader) stopTimers() {
	for r, tm := range l.timers {
		tm.stop()
		delete(l.timers, r)
	}
}

func (l *leader) publish() {
	st := LogStatus{Log: l.log, Role: l.state.Role.String(), Epoch: l.state.Epoch, First: l.state.First, Last: l.state.Last, Commit: l.state.Commit}
	if l.down != nil {
		st.Role = "stopped"
		if errors.Is(l.down, ErrFenced) {
			st.Role = replication.SteppedDown.String()
		}
	}
	for _, r := range l.state.Replicas {
		st.Replicas = append(st.Replicas, ReplicaStatus{Name: r.Name, Phase: r.Phase.String(), Match: r.Match, Lag: l.state.Last - min(r.Match, l.state.Last), Attempt: r.Attempt})
	}
	l.status.mu.Lock()
	l.status.st = st
	l.status.mu.Unlock()
}

// ReplicaTransition reports a replica's change of phase.
type ReplicaTransition struct {
	Log, Replica string
	From, To     string
}
