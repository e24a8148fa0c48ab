package cluster

import (
	"context"
	"fmt"
	"sync"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/internal/dist"
	"github.com/sluicehq/sluice/internal/wire"
)

// maxHostedChanges bounds the live changes a node keeps per hosted
// generation (prepared, or applied and still undoable): the coordinator
// sends one at a time, so more means an old one was never finished.
const maxHostedChanges = 8

// hostedChange is a live change prepared (and maybe applied) on a node
// hosting a generation.
type hostedChange struct {
	msg  *wire.Change
	undo func(context.Context) error // once applied
}

// Change carries a live change of a distributed job coordinated here to
// the nodes hosting instances of its operator (dist.Changer), through the
// change machine (change.go).
func (d *distributor) Change(ctx context.Context, c *wire.Change, hosts []string, local dist.LocalChange) error {
	n := d.n
	self := n.Address()
	nodes := append([]string{self}, hosts...)
	// Answers, departures and the deadline arrive here; the buffer holds
	// every answer the change can get (three phases a node) and then some.
	events := make(chan any, 4*len(nodes)+16)
	post := func(ev any) {
		select {
		case events <- ev:
		default: // full: only departures are dropped so, and the deadline covers them
		}
	}
	// The nodes are asked on a context of their own: a caller that gives
	// up rejects the change (as the deadline does), and the aborts still
	// go out.
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	unsub := n.Subscribe(func(ev MemberEvent) {
		if ev.Kind == Left {
			post(changeLeft{Addr: ev.Member.Address})
		}
	})
	defer unsub()
	stopConn := n.watchConnections(func(addr string, up bool) {
		if !up {
			post(changeLeft{Addr: addr})
		}
	})
	defer stopConn()
	timeout := n.cfg.RequestTimeout
	var mu sync.Mutex
	var stopTimer func() bool
	arm := func() {
		mu.Lock()
		defer mu.Unlock()
		if stopTimer != nil {
			stopTimer()
		}
		stopTimer = n.cfg.Clock.AfterFunc(timeout, func() { post(changeTimeout{}) })
	}
	defer func() {
		mu.Lock()
		if stopTimer != nil {
			stopTimer()
		}
		mu.Unlock()
	}()
	localApplied := false
	send := func(addr, phase string) {
		if addr == self { // this process: done here, in order, on this goroutine
			var err error
			switch phase {
			case phaseCommit:
				if err = local.Apply(rctx); err == nil {
					localApplied = true
					n.emitJob(JobEvent{Kind: JobChanged, Job: c.Job, Operator: c.Op, Change: c.ID, Version: c.Version, Time: n.cfg.Clock.Now()})
				}
			case phaseAbort:
				if localApplied {
					err = local.Undo(rctx)
					localApplied = err != nil
				}
			}
			msg := ""
			if err != nil {
				msg = err.Error()
			}
			post(changeAnswered{Addr: self, Phase: phase, Err: msg})
			return
		}
		m := *c
		m.Phase = phase
		wg.Add(1)
		go func() { // owned: the change waits for it (wg), rctx ends it
			defer wg.Done()
			actx, acancel := context.WithTimeout(rctx, timeout)
			defer acancel()
			r, err := n.Request(actx, n.PID(addr, jobsActorName), &m)
			if err != nil {
				if rctx.Err() == nil && actx.Err() == nil { // not a timeout: the deadline says more
					post(changeAnswered{Addr: addr, Phase: phase, Err: err.Error()})
				}
				return
			}
			resp, ok := r.(*wire.Changed)
			if !ok || resp.ID != c.ID || resp.Phase != phase {
				post(changeAnswered{Addr: addr, Phase: phase, Err: fmt.Sprintf("an answer that does not answer change %d's %s: %T", c.ID, phase, r)})
				return
			}
			post(changeAnswered{Addr: addr, Phase: phase, Err: resp.Err})
		}()
	}
	gaveUp := ctx.Done()
	var m change
	m, acts := m.Step(changeStart{Nodes: nodes})
	for {
		for _, a := range acts {
			switch a := a.(type) {
			case changeSend:
				send(a.Addr, a.Phase)
			case changeArm:
				arm()
			case changeFinish:
				if a.Err != "" {
					n.log.Warn("cluster: live change rejected", "job", c.Job, "operator", c.Op, "change", c.ID, "reason", a.Err)
					return fmt.Errorf("%s", a.Err)
				}
				n.log.Info("cluster: live change in force", "job", c.Job, "operator", c.Op, "change", c.ID, "nodes", len(nodes))
				return nil
			}
		}
		var ev any
		select {
		case ev = <-events:
		case <-gaveUp:
			gaveUp, ev = nil, changeTimeout{} // the caller gave up: as the deadline
		}
		m, acts = m.Step(ev)
	}
}

// change carries out a phase of a live change a coordinator asks of this
// node: it answers with its refusal ("" when done). It accepts a change
// only for a generation it hosts now, from that generation's coordinator
// (the guard checked that the message comes from JobAddress): a
// coordinator that lost the job, or an older generation, is refused.
func (a *jobsActor) change(sender *actor.PID, m *wire.Change) string {
	n := a.n
	if sender != nil && sender.Address != m.JobAddress {
		return fmt.Sprintf("node %s: a change of the job at %s asked by %s", n.cfg.Name, m.JobAddress, sender.Address)
	}
	h, ok := a.gens[genKey{m.JobAddress, m.JobID, m.Gen}]
	if !ok || h.info.Job != m.Job {
		return fmt.Sprintf("node %s hosts no generation %d of the job coordinated by %s (a later generation or coordinator fences it)", n.cfg.Name, m.Gen, m.JobAddress)
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.RequestTimeout)
	defer cancel()
	switch m.Phase {
	case phasePrepare:
		if _, err := h.host.CheckChange(m); err != nil {
			return fmt.Sprintf("node %s: %v", n.cfg.Name, err)
		}
		if _, ok := h.changes[m.ID]; !ok && len(h.changes) >= maxHostedChanges {
			oldest := m.ID
			for id := range h.changes {
				oldest = min(oldest, id)
			}
			delete(h.changes, oldest) // never finished by its coordinator
		}
		h.changes[m.ID] = &hostedChange{msg: m}
	case phaseCommit:
		p, ok := h.changes[m.ID]
		if !ok {
			return fmt.Sprintf("node %s: change %d was not prepared here", n.cfg.Name, m.ID)
		}
		if p.undo != nil {
			return "" // asked again
		}
		undo, err := h.host.ApplyChange(ctx, p.msg)
		if err != nil {
			delete(h.changes, m.ID)
			return fmt.Sprintf("node %s: %v", n.cfg.Name, err)
		}
		p.undo = undo
		// The change is in force here; the undo stays possible until the
		// next change (the coordinator aborts one that failed elsewhere).
		for id := range h.changes {
			if id < m.ID && h.changes[id].undo != nil {
				delete(h.changes, id)
			}
		}
		n.emitJob(JobEvent{Kind: JobChanged, Job: h.info.Job, Operator: m.Op, Change: m.ID, Version: m.Version, Time: n.cfg.Clock.Now()})
	case phaseAbort:
		p, ok := h.changes[m.ID]
		if !ok {
			return "" // nothing kept: nothing to put back
		}
		delete(h.changes, m.ID)
		if p.undo != nil {
			if err := p.undo(ctx); err != nil {
				return fmt.Sprintf("node %s: %v", n.cfg.Name, err)
			}
		}
	default:
		return fmt.Sprintf("node %s: change %d: unknown phase %.20q", n.cfg.Name, m.ID, m.Phase)
	}
	return ""
}
