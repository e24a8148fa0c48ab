package engine

import (
	"context"
	"sync"
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/graph"
	"github.com/sluicehq/sluice/internal/wire"
)

// Two actor systems in one process, joined by a bridge that stands for
// protoactor's remote: each system has an address of its own, and what an
// actor of one sends to a PID of the other is delivered by the bridge's
// goroutine (as protoactor's gRPC stream goroutine would), in order, with
// no recover: a panic there ends the test binary, as it would end a node.
// protoactor's remote itself cannot run twice in one process (it sets
// gRPC's global logger; see package cluster's tests).

// link is one direction of the bridge: messages for the PIDs of to.
type link struct {
	to *actor.ActorSystem

	mu    sync.Mutex
	queue []delivery
	wake  chan struct{} // signalled when the queue grows
	done  chan struct{} // closed to stop the goroutine
	ended chan struct{} // closed when it has
}

type delivery struct {
	pid    *actor.PID
	msg    any
	system bool
	stop   bool
}

func newLink(to *actor.ActorSystem) *link {
	l := &link{to: to, wake: make(chan struct{}, 1), done: make(chan struct{}), ended: make(chan struct{})}
	go l.run()
	return l
}

func (l *link) post(d delivery) {
	l.mu.Lock()
	l.queue = append(l.queue, d)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *link) run() {
	defer close(l.ended)
	for {
		l.mu.Lock()
		q := l.queue
		l.queue = nil
		l.mu.Unlock()
		for _, d := range q {
			p, ok := l.to.ProcessRegistry.GetLocal(d.pid.Id)
			switch {
			case !ok: // no such actor (any more): protoactor drops it too
			case d.stop:
				p.Stop(d.pid)
			case d.system:
				p.SendSystemMessage(d.pid, d.msg)
			default:
				p.SendUserMessage(d.pid, d.msg)
			}
		}
		if len(q) > 0 {
			continue
		}
		select {
		case <-l.wake:
		case <-l.done:
			return
		}
	}
}

func (l *link) close() {
	close(l.done)
	<-l.ended
}

// SendUserMessage, SendSystemMessage and Stop make a link the actor.Process
// of every PID of the other system.
func (l *link) SendUserMessage(pid *actor.PID, msg any) { l.post(delivery{pid: pid, msg: msg}) }
func (l *link) SendSystemMessage(pid *actor.PID, msg any) {
	l.post(delivery{pid: pid, msg: msg, system: true})
}
func (l *link) Stop(pid *actor.PID) { l.post(delivery{pid: pid, stop: true}) }

// bridgedNode is one of the two systems and its Distributor: the job's
// coordinator runs in a, and every task that neither reads a source nor
// writes a sink runs in b.
type bridgedNode struct {
	addr  string
	sys   *actors.System
	build func() *graph.Topology // the topology, built the same in both systems
	peer  *bridgedNode

	mu          sync.Mutex
	hosted      map[int]*actor.PID // generation: its host actor, in this system
	undecodable []error
}

// bridged starts the two systems a:1 and b:1, joined both ways.
func bridged(t *testing.T, build func() *graph.Topology, cfg actors.Config) (a, b *bridgedNode) {
	t.Helper()
	a = &bridgedNode{addr: "a:1", build: build, hosted: map[int]*actor.PID{}}
	b = &bridgedNode{addr: "b:1", build: build, hosted: map[int]*actor.PID{}}
	a.peer, b.peer = b, a
	for _, n := range []*bridgedNode{a, b} {
		c := cfg
		c.Name = t.Name() + "-" + n.addr
		sys, err := actors.NewSystem(c)
		if err != nil {
			t.Fatal(err)
		}
		sys.ActorSystem().ProcessRegistry.Address = n.addr
		n.sys = sys
	}
	ab, ba := newLink(b.sys.ActorSystem()), newLink(a.sys.ActorSystem())
	for _, c := range []struct {
		n    *bridgedNode
		l    *link
		peer string
	}{{a, ab, b.addr}, {b, ba, a.addr}} {
		l, peer := c.l, c.peer
		c.n.sys.ActorSystem().ProcessRegistry.RegisterAddressResolver(func(pid *actor.PID) (actor.Process, bool) {
			return l, pid.Address == peer
		})
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeoutStop)
		defer cancel()
		for _, n := range []*bridgedNode{a, b} {
			if err := n.sys.Stop(ctx); err != nil {
				t.Errorf("stop %s: %v", n.addr, err)
			}
		}
		ab.close()
		ba.close()
	})
	return a, b
}

func (n *bridgedNode) Address() string                   { return n.addr }
func (n *bridgedNode) Root() *actor.RootContext          { return n.sys.Root() }
func (n *bridgedNode) Props(p *actor.Props) *actor.Props { return p }
func (n *bridgedNode) Watch(func(string)) func()         { return func() {} }
func (n *bridgedNode) Unpack(msg any) (any, error)       { return msg, nil }

func (n *bridgedNode) Place(_ string, _ int, task graph.Task, _ int) string {
	for _, k := range task.Kinds {
		if k == "source" || k == "sink" {
			return ""
		}
	}
	return "b:1"
}

func (n *bridgedNode) Deploy(_ context.Context, addr string, d *wire.Deploy) error {
	h := n.peer
	host, err := HostGeneration(h.sys, h, h.build(), d)
	if err != nil {
		return err
	}
	pid := host.PID()
	h.mu.Lock()
	h.hosted[d.Gen] = pid
	h.mu.Unlock()
	return nil
}

func (n *bridgedNode) StopOn(_ string, s *wire.StopGen) {
	h := n.peer
	h.mu.Lock()
	pid := h.hosted[s.Gen]
	delete(h.hosted, s.Gen)
	h.mu.Unlock()
	if pid != nil {
		h.sys.Root().Stop(pid)
	}
}

// Undecodable implements dist.UndecodableCounter.
func (n *bridgedNode) Undecodable(err error) {
	n.mu.Lock()
	n.undecodable = append(n.undecodable, err)
	n.mu.Unlock()
}

func (n *bridgedNode) undecodables() []error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]error(nil), n.undecodable...)
}
