package engine

import (
	"strconv"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/internal/dist"
)

// Every message between the processes of a distributed job is checked
// against the process it came from. The cluster's guard authenticates the
// peer of each connection and names it in every envelope's
// dist.FromHeader; here, a message that speaks for an instance must come
// from the process the generation's placement puts that instance in, and
// one that speaks for the job actor from the job actor's process. A
// message that does not is dropped and counted (dist.ForgeryCounter): one
// member cannot acknowledge a checkpoint with state of its own making for
// an instance it does not run, inject records into a channel it does not
// send on, or grant credits for a receiver it does not host.

// sentFrom is the process a message came from: the address the guard
// named, "" for a message sent in this process.
func sentFrom(h actor.ReadonlyMessageHeader) string {
	if h == nil {
		return ""
	}
	return h.Get(dist.FromHeader)
}

// fromProcess says whether a message that came from process from
// (sentFrom) may speak for an actor at address addr.
func (x *execution) fromProcess(from, addr string) bool {
	if from == "" || x.dist == nil {
		return true // sent in this process, or nothing crosses processes
	}
	return from == addr
}

// fromInstance says whether a message that came from process from may
// speak for instance number num of generation gen. Generations older than
// those kept (placedGens) are not checked against a placement: only the
// current and the few before it are, and messages of older ones only
// update statistics of generations long replaced.
func (x *execution) fromInstance(from string, gen, num int) bool {
	if from == "" || x.dist == nil {
		return true
	}
	p, ok := x.placedGens[gen]
	if !ok {
		if gen == x.gen {
			p = x.placement
		} else {
			return gen < x.gen-keptPlacements
		}
	}
	return num >= 0 && num < len(p) && p[num] == from
}

// keptPlacements is how many generations before the current one keep
// their placement for fromInstance.
const keptPlacements = 4

// notePlacement keeps a copy of the current generation's placement.
func (x *execution) notePlacement() {
	if x.placement == nil {
		return
	}
	if x.placedGens == nil {
		x.placedGens = map[int][]string{}
	}
	x.placedGens[x.gen] = append([]string(nil), x.placement...)
	for g := range x.placedGens {
		if g < x.gen-keptPlacements {
			delete(x.placedGens, g)
		}
	}
}

// instanceNum is the number of instance idx of task (instances are
// numbered task by task), or -1.
func (x *execution) instanceNum(task, idx int) int {
	if task < 0 || task >= len(x.plan.Chains) || idx < 0 || idx >= x.plan.Par[x.plan.Chains[task][0]] {
		return -1
	}
	n := idx
	for t := range task {
		n += x.plan.Par[x.plan.Chains[t][0]]
	}
	return n
}

// forged drops a message that speaks for what its process does not host.
func (x *execution) forged(what, from, claim string) {
	if c, ok := x.dist.(dist.ForgeryCounter); ok {
		c.Forged(what, from, claim)
		return
	}
	x.sys.Logger().Warn("operators: message refused: its process does not host what it speaks for",
		"job", x.topo.Name(), "message", what, "from", from, "claims", claim)
}

func itoa(n int) string { return strconv.Itoa(n) }

// fromJob says whether the message c holds came from the job actor's
// process (barriers, commits and drains speak for the job actor).
func (in *instance) fromJob(c actor.Context) bool {
	x := in.exec
	from := sentFrom(c.MessageHeader())
	if x.fromProcess(from, x.jobPID.Address) {
		return true
	}
	x.forged("job control message", from, "the job actor at "+x.jobPID.Address)
	return false
}

// fromReceiver says whether the message c holds (a credit or a gate for
// output out) came from the process of that output's receiver; an output
// that does not exist is left to the handler, which ignores it.
func (in *instance) fromReceiver(c actor.Context, what string, out int) bool {
	if out < 0 || out >= len(in.outs) {
		return true
	}
	x := in.exec
	from, at := sentFrom(c.MessageHeader()), in.outs[out].target.Address
	if x.fromProcess(from, at) {
		return true
	}
	x.forged(what, from, "the receiver of output "+itoa(out)+" at "+at)
	return false
}
