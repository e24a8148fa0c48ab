package cluster

import (
	"fmt"
	"slices"
	"strings"
)

// A live change of a distributed job (the engine's SetInput in the job's
// coordinator's process) reaches every process hosting instances of the
// operator in two phases, as a pure state machine: change.Step(event)
// returns the next state and the actions (send a phase to a node, arm the
// deadline, finish), and the coordinator's driver (distributor.Change)
// feeds back the nodes' answers, their departures and the deadline.
// Transcripts in testdata/change.
//
//   - prepare: every node checks the change and keeps it; the coordinator's
//     own process is one of the nodes (it checked the change already);
//   - once every node prepared it: commit, every node applies it to its
//     instances (each instance in its actor, as in one process);
//   - a node that refuses (a NACK, with its reason), does not answer
//     before the deadline or leaves makes the change rejected with that
//     reason: the nodes are told to abort, which forgets a prepared change
//     and puts an applied one back; the change ends once every node that
//     may have applied it confirmed the abort (or the undo's own deadline
//     passed, which the reason then says).

type changePhase uint8

const (
	changeIdle changePhase = iota
	changePreparing
	changeCommitting
	changeUndoing // rejected after a node may have applied it: waiting for the aborts
	changeDone
)

func (p changePhase) String() string {
	return [...]string{"idle", "preparing", "committing", "undoing", "done"}[p]
}

// changeNodeState is where one node stands in a change.
type changeNodeState uint8

const (
	nodeAsked    changeNodeState = iota // sent the phase, no answer yet
	nodePrepared                        // checked and kept the change
	nodeApplied                         // applied it
	nodeRefused                         // refused it (prepare or commit)
	nodeGone                            // left the cluster
	nodeAborting                        // told to abort, its answer awaited
	nodeAborted                         // confirmed the abort
)

func (s changeNodeState) String() string {
	return [...]string{"asked", "prepared", "applied", "refused", "gone", "aborting", "aborted"}[s]
}

type changeNode struct {
	Addr  string
	State changeNodeState
}

// change is the coordinator's state of one change in flight.
type change struct {
	Phase  changePhase
	Nodes  []changeNode // by address
	Reason string       // why it was rejected
}

// Events.
type (
	// changeStart: begin the change on these nodes (the coordinator's
	// process among them).
	changeStart struct{ Nodes []string }
	// changeAnswered: a node answered a phase; Err is its refusal.
	changeAnswered struct {
		Addr, Phase, Err string
	}
	// changeLeft: a node left the cluster (or its connection broke).
	changeLeft struct{ Addr string }
	// changeTimeout: the deadline armed last passed.
	changeTimeout struct{}
)

// Actions.
type (
	// changeSend: send phase ("prepare", "commit", "abort") to a node.
	changeSend struct{ Addr, Phase string }
	// changeArm: (re)arm the deadline.
	changeArm struct{}
	// changeFinish: the change is over; Err empty when it is in force on
	// every node.
	changeFinish struct{ Err string }
)

const (
	phasePrepare = "prepare"
	phaseCommit  = "commit"
	phaseAbort   = "abort"
)

func (c change) clone() change {
	c.Nodes = slices.Clone(c.Nodes)
	return c
}

func (c *change) node(addr string) *changeNode {
	for i := range c.Nodes {
		if c.Nodes[i].Addr == addr {
			return &c.Nodes[i]
		}
	}
	return nil
}

func (c *change) all(s changeNodeState) bool {
	for _, n := range c.Nodes {
		if n.State != s {
			return false
		}
	}
	return true
}

// reject starts the abort: every node that may hold the change (asked,
// prepared, applied) is told to abort it. Before any commit was sent
// nothing is applied anywhere and the change ends at once; after, it ends
// when the aborts are confirmed.
func (c change) reject(why string) (change, []any) {
	c.Reason = why
	var acts []any
	committed := c.Phase == changeCommitting
	for i := range c.Nodes {
		n := &c.Nodes[i]
		switch n.State {
		case nodeAsked, nodePrepared, nodeApplied:
			acts = append(acts, changeSend{Addr: n.Addr, Phase: phaseAbort})
			n.State = nodeAborting
		}
	}
	if !committed || c.waiting() == 0 {
		c.Phase = changeDone
		return c, append(acts, changeFinish{Err: why})
	}
	c.Phase = changeUndoing
	return c, append(acts, changeArm{})
}

func (c *change) waiting() int {
	w := 0
	for _, n := range c.Nodes {
		if n.State == nodeAborting {
			w++
		}
	}
	return w
}

// pending names the nodes in state s.
func (c *change) pending(s changeNodeState) string {
	var out []string
	for _, n := range c.Nodes {
		if n.State == s {
			out = append(out, n.Addr)
		}
	}
	return strings.Join(out, ", ")
}

// Step returns the state after ev and the actions to perform. It does not
// change c.
func (c change) Step(ev any) (change, []any) {
	c = c.clone()
	switch e := ev.(type) {
	case changeStart:
		if c.Phase != changeIdle {
			return c, nil
		}
		addrs := slices.Clone(e.Nodes)
		slices.Sort(addrs)
		addrs = slices.Compact(addrs)
		c.Nodes = nil
		acts := []any{changeArm{}}
		for _, a := range addrs {
			c.Nodes = append(c.Nodes, changeNode{Addr: a})
			acts = append(acts, changeSend{Addr: a, Phase: phasePrepare})
		}
		c.Phase = changePreparing
		if len(c.Nodes) == 0 {
			c.Phase = changeDone
			return c, []any{changeFinish{Err: "no node hosts the operator"}}
		}
		return c, acts
	case changeAnswered:
		n := c.node(e.Addr)
		if n == nil {
			return c, nil // not one of the change's nodes
		}
		switch {
		case c.Phase == changePreparing && e.Phase == phasePrepare && n.State == nodeAsked:
			if e.Err != "" {
				n.State = nodeRefused
				return c.reject(fmt.Sprintf("node %s refused the change: %s", e.Addr, e.Err))
			}
			n.State = nodePrepared
			if !c.all(nodePrepared) {
				return c, nil
			}
			c.Phase = changeCommitting
			acts := []any{changeArm{}}
			for i := range c.Nodes {
				c.Nodes[i].State = nodeAsked
				acts = append(acts, changeSend{Addr: c.Nodes[i].Addr, Phase: phaseCommit})
			}
			return c, acts
		case c.Phase == changeCommitting && e.Phase == phaseCommit && n.State == nodeAsked:
			if e.Err != "" {
				n.State = nodeRefused
				return c.reject(fmt.Sprintf("node %s could not apply the change: %s", e.Addr, e.Err))
			}
			n.State = nodeApplied
			if c.all(nodeApplied) {
				c.Phase = changeDone
				return c, []any{changeFinish{}}
			}
			return c, nil
		case c.Phase == changeUndoing && e.Phase == phaseAbort && n.State == nodeAborting:
			n.State = nodeAborted
			if e.Err != "" {
				c.Reason += fmt.Sprintf("; node %s could not put it back: %s", e.Addr, e.Err)
			}
			if c.waiting() == 0 {
				c.Phase = changeDone
				return c, []any{changeFinish{Err: c.Reason}}
			}
		}
		return c, nil // late, repeated or out of place
	case changeLeft:
		n := c.node(e.Addr)
		if n == nil || n.State == nodeGone {
			return c, nil
		}
		prev := n.State
		n.State = nodeGone
		switch c.Phase {
		case changePreparing, changeCommitting:
			return c.reject(fmt.Sprintf("node %s left during the change", e.Addr))
		case changeUndoing:
			if prev == nodeAborting && c.waiting() == 0 {
				c.Phase = changeDone
				return c, []any{changeFinish{Err: c.Reason}}
			}
		}
		return c, nil
	case changeTimeout:
		switch c.Phase {
		case changePreparing, changeCommitting:
			what := "prepare"
			if c.Phase == changeCommitting {
				what = "apply"
			}
			return c.reject(fmt.Sprintf("node %s did not %s the change in time", c.pending(nodeAsked), what))
		case changeUndoing:
			c.Reason += fmt.Sprintf("; node %s did not confirm putting it back in time", c.pending(nodeAborting))
			c.Phase = changeDone
			return c, []any{changeFinish{Err: c.Reason}}
		}
	}
	return c, nil
}
