package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/dist"
	"github.com/sluicehq/sluice/internal/graph"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/mailbox"
)

// Live changes of a distributed job (DESIGN.md, Control plane). The
// coordinator's process checks a change as for a job in one process, then
// hands it to the Distributor (dist.Changer), which asks every process
// hosting instances of the operator to check it and, once all agreed, to
// apply it; the coordinator applies its own part between the two. Each
// process applies it as in one process: every instance, in its own actor,
// reconfigures its mailbox, and the credit gates are told to senders in
// other processes with wire.Gate instead of gateMsg. A process that
// refuses makes the whole change rejected and the processes that applied
// it put their instances back.

// MaxWireCapacity bounds the capacity of an input set from another
// process (wire.Input): far above any useful mailbox, far below one whose
// bookkeeping would exhaust memory.
const MaxWireCapacity = 1 << 24

var overflowByName = map[string]mailbox.Overflow{
	"block": mailbox.OverflowBlock, "drop-newest": mailbox.OverflowDropNewest, "drop-oldest": mailbox.OverflowDropOldest,
	"sample": mailbox.OverflowSample, "throttle": mailbox.OverflowThrottle, "spill": mailbox.OverflowSpill,
}

// InputToWire is an input's settings as they cross processes.
func InputToWire(c mailbox.Config) wire.Input {
	return wire.Input{Policy: c.Overflow.String(), Capacity: c.Capacity, HighWater: c.HighWater, SampleEvery: c.SampleEvery, Rate: c.Rate}
}

// ErrBadInput: input settings from another process are out of range.
var ErrBadInput = errors.New("operators: input settings from another process refused")

// InputFromWire checks input settings from another process and returns
// them as a mailbox configuration. Spill is refused: a distributed job's
// processes have no spill store in common.
func InputFromWire(w wire.Input) (mailbox.Config, error) {
	o, ok := overflowByName[w.Policy]
	switch {
	case !ok:
		return mailbox.Config{}, fmt.Errorf("%w: policy %.40q: not one of block, drop-newest, drop-oldest, sample, throttle", ErrBadInput, w.Policy)
	case o == mailbox.OverflowSpill:
		return mailbox.Config{}, fmt.Errorf("%w: spill: a distributed job's processes have no spill store in common", ErrBadInput)
	case w.Capacity < 1 || w.Capacity > MaxWireCapacity:
		return mailbox.Config{}, fmt.Errorf("%w: capacity %d: must be between 1 and %d", ErrBadInput, w.Capacity, MaxWireCapacity)
	case w.SampleEvery < 0 || w.SampleEvery > MaxWireCapacity:
		return mailbox.Config{}, fmt.Errorf("%w: sample_every %d: must be between 0 and %d", ErrBadInput, w.SampleEvery, MaxWireCapacity)
	case math.IsNaN(w.Rate) || math.IsInf(w.Rate, 0) || w.Rate < 0:
		return mailbox.Config{}, fmt.Errorf("%w: rate %v: must be a finite number, not negative", ErrBadInput, w.Rate)
	}
	c := mailbox.Config{Overflow: o, Capacity: w.Capacity, HighWater: w.HighWater, SampleEvery: w.SampleEvery, Rate: w.Rate}
	if err := c.Validate(); err != nil {
		return mailbox.Config{}, fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	return c, nil
}

// checkDistInput checks a live change of the input of task id of a
// distributed job, in whichever of its processes.
func (x *execution) checkDistInput(id int, cfg mailbox.Config) error {
	op := x.plan.Chains[id][0].Name()
	if x.plan.Chains[id][0].Role() == graph.RoleSource {
		return fmt.Errorf("%w: operator %q is a source: it has no input", ErrNoLiveChange, op)
	}
	if cfg.Overflow == mailbox.OverflowSpill {
		return fmt.Errorf("%w: operator %q: spill: job %q is distributed, and its processes have no spill store in common", ErrNoLiveChange, op, x.topo.Name())
	}
	if pol := x.topo.Config().CheckpointPolicy; (pol.Unaligned || pol.AlignmentTimeout > 0) && cfg.Overflow != mailbox.OverflowBlock {
		return fmt.Errorf("%w: operator %q: job %q takes unaligned checkpoints, and a %s input's drops would make the in-flight records a checkpoint holds disagree with what the operator processes; use Block",
			ErrNoLiveChange, op, x.topo.Name(), cfg.Overflow)
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("operator %q: %w", op, err)
	}
	return nil
}

// setInputDist is SetInput for a distributed job, in its coordinator's
// process.
func (x *execution) setInputDist(ctx context.Context, id int, cfg mailbox.Config, version uint64) error {
	op := x.plan.Chains[id][0].Name()
	ch, ok := x.dist.(dist.Changer)
	if !ok {
		return fmt.Errorf("%w: job %q is distributed, and its cluster carries no live changes", ErrNoLiveChange, x.topo.Name())
	}
	if x.jobPID == nil || x.jobPID.Address != x.dist.Address() {
		return fmt.Errorf("%w: job %q: this process hosts instances of it; change it in its coordinator's process", ErrNoLiveChange, x.topo.Name())
	}
	cfg = public(cfg)
	if err := x.checkDistInput(id, cfg); err != nil {
		return err
	}
	select {
	case <-x.done:
		return fmt.Errorf("%w: job %q has ended", ErrNoLiveChange, x.topo.Name())
	default:
	}
	x.live.change.Lock() // one change at a time
	defer x.live.change.Unlock()
	prev, had := x.live.setInput(id, cfg, true) // a restart during the change builds with it
	done := false
	defer func() {
		if !done {
			x.live.setInput(id, prev, had)
		}
	}()
	x.instMu.RLock()
	gen := x.instGen
	hostSet := map[string]bool{}
	for _, in := range x.instances[id] {
		if !x.local(in.self) {
			hostSet[in.self.Address] = true
		}
	}
	x.instMu.RUnlock()
	hosts := make([]string, 0, len(hostSet))
	for h := range hostSet {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	x.live.mu.Lock()
	x.live.seq++
	seq := x.live.seq
	x.live.mu.Unlock()
	in := InputToWire(cfg)
	c := &wire.Change{Job: x.topo.Name(), JobAddress: x.jobPID.Address, JobID: x.jobPID.Id, Gen: gen, ID: seq, Version: version, Task: id, Op: op, Input: &in}
	var undo []setInputReply
	err := ch.Change(ctx, c, hosts, dist.LocalChange{
		Apply: func(ctx context.Context) error {
			var err error
			undo, err = x.applyLocal(ctx, id, cfg)
			return err
		},
		Undo: func(ctx context.Context) error { return x.undoLocal(ctx, undo) },
	})
	if err != nil {
		return fmt.Errorf("%w: operator %q: %w", ErrNoLiveChange, op, err)
	}
	done = true
	now := x.topo.Config().Now()
	x.live.mu.Lock()
	if x.live.nodes == nil {
		x.live.nodes = map[string]NodeApplied{}
	}
	for _, addr := range append(hosts, x.dist.Address()) {
		x.live.nodes[addr] = NodeApplied{Address: addr, Change: seq, Version: version, Operator: op, At: now}
	}
	x.live.mu.Unlock()
	return nil
}

// NodeApplied is the latest live change a process of a distributed job
// applied (reported by the job's coordinator).
type NodeApplied struct {
	Address  string
	Change   uint64    // the coordinator's count of its live changes
	Version  uint64    // the desired-state version it applied (0: a change of its own)
	Operator string    // the operator it changed
	At       time.Time // when the coordinator heard every process had applied it
}

// AppliedOf lists, by address, the latest live change each process of a
// distributed run applied (nil for a run in one process, or before any).
func AppliedOf(run *actors.Run) []NodeApplied {
	x, ok := run.Execution().(*execution)
	if !ok {
		return nil
	}
	x.live.mu.Lock()
	defer x.live.mu.Unlock()
	out := make([]NodeApplied, 0, len(x.live.nodes))
	for _, n := range x.live.nodes {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b NodeApplied) int {
		switch {
		case a.Address < b.Address:
			return -1
		case a.Address > b.Address:
			return 1
		}
		return 0
	})
	return out
}

// applyLocal applies cfg to the instances of task id in this process,
// whole or not at all here; it returns what undoes it.
func (x *execution) applyLocal(ctx context.Context, id int, cfg mailbox.Config) ([]setInputReply, error) {
	x.instMu.RLock()
	var insts []*instance
	for _, in := range x.instances[id] {
		if x.local(in.self) {
			insts = append(insts, in)
		}
	}
	x.instMu.RUnlock()
	return x.setInputs(ctx, x.plan.Chains[id][0].Name(), insts, func(*instance) mailbox.Config { return cfg })
}

// setInputs sends each instance of insts its new input (cfgOf) and waits
// for all of them: whole or not at all, the instances that changed put
// back when one refuses; it returns what undoes the change (undoLocal).
func (x *execution) setInputs(ctx context.Context, op string, insts []*instance, cfgOf func(*instance) mailbox.Config) ([]setInputReply, error) {
	replies := make(chan setInputReply, len(insts))
	for _, in := range insts {
		x.root.Send(in.self, &setInputMsg{cfg: cfgOf(in), reply: replies})
	}
	var errs []error
	var done []setInputReply
	for range insts {
		select {
		case r := <-replies:
			if r.err != nil {
				errs = append(errs, r.err)
			} else {
				done = append(done, r)
			}
		case <-x.done:
			return done, fmt.Errorf("%w: job %q ended during the change", ErrNoLiveChange, x.topo.Name())
		case <-ctx.Done():
			return done, fmt.Errorf("operator %q: set input: %w", op, context.Cause(ctx))
		}
	}
	if err := errors.Join(errs...); err != nil {
		if uerr := x.undoLocal(ctx, done); uerr != nil {
			errs = append(errs, uerr)
		}
		return nil, errors.Join(errs...)
	}
	return done, nil
}

// undoLocal puts the instances a change reached back as they were.
func (x *execution) undoLocal(ctx context.Context, done []setInputReply) error {
	back := make(chan setInputReply, len(done))
	for _, r := range done {
		x.root.Send(r.in.self, &setInputMsg{cfg: r.prev, reply: back})
	}
	var errs []error
	for range done {
		select {
		case r := <-back:
			if r.err != nil {
				errs = append(errs, fmt.Errorf("undo: %w", r.err))
			}
		case <-x.done:
			return errors.Join(errs...)
		case <-ctx.Done():
			return errors.Join(append(errs, fmt.Errorf("undo: %w", context.Cause(ctx)))...)
		}
	}
	return errors.Join(errs...)
}

// Host is this process's part of a generation of a distributed job
// coordinated in another process (HostGeneration).
type Host struct {
	x   *execution
	pid *actor.PID
	mu  sync.Mutex // one change at a time
}

// PID is the actor that parents the instances here: stopping it stops
// them.
func (h *Host) PID() *actor.PID { return h.pid }

// CheckChange checks a live change the coordinator asks of this process:
// the task and operator must be this plan's, the settings valid (as the
// coordinator checked them). It returns the input to set.
func (h *Host) CheckChange(c *wire.Change) (mailbox.Config, error) {
	x := h.x
	if c.Task < 0 || c.Task >= len(x.plan.Chains) || x.plan.Chains[c.Task][0].Name() != c.Op {
		return mailbox.Config{}, fmt.Errorf("%w: job %q has no task %d headed by operator %.60q", ErrNoLiveChange, x.topo.Name(), c.Task, c.Op)
	}
	if c.Input == nil {
		return mailbox.Config{}, fmt.Errorf("%w: operator %q: the change sets no input", ErrNoLiveChange, c.Op)
	}
	cfg, err := InputFromWire(*c.Input)
	if err != nil {
		return mailbox.Config{}, fmt.Errorf("operator %q: %w", c.Op, err)
	}
	if err := x.checkDistInput(c.Task, cfg); err != nil {
		return mailbox.Config{}, err
	}
	return cfg, nil
}

// ApplyChange applies a checked change to the instances here and returns
// what puts them back.
func (h *Host) ApplyChange(ctx context.Context, c *wire.Change) (undo func(context.Context) error, err error) {
	cfg, err := h.CheckChange(c)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	done, err := h.x.applyLocal(ctx, c.Task, cfg)
	if err != nil {
		return nil, fmt.Errorf("operator %q: %w", c.Op, err)
	}
	return func(ctx context.Context) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.x.undoLocal(ctx, done)
	}, nil
}

// adoptLive takes over a deployment's live changes: the generation is
// built as the coordinator's running one was.
func (x *execution) adoptLive(d *wire.Deploy) error {
	for task, in := range d.Inputs {
		if task < 0 || task >= len(x.plan.Chains) || x.plan.Chains[task][0].Role() == graph.RoleSource {
			return fmt.Errorf("%w: a live input for task %d, which has no input", ErrBadInput, task)
		}
		cfg, err := InputFromWire(in)
		if err != nil {
			return fmt.Errorf("task %d: %w", task, err)
		}
		x.live.setInput(task, cfg, true)
	}
	for _, task := range d.Paused {
		if task < 0 || task >= len(x.plan.Chains) {
			return fmt.Errorf("%w: task %d paused: no such task", ErrBadInput, task)
		}
		x.live.mu.Lock()
		if x.live.paused == nil {
			x.live.paused = map[int]bool{}
		}
		x.live.paused[task] = true
		x.live.mu.Unlock()
	}
	return nil
}

// liveDeploy adds the live changes in force to a deployment.
func (x *execution) liveDeploy(d *wire.Deploy) {
	x.live.mu.Lock()
	defer x.live.mu.Unlock()
	for task, c := range x.live.inputs {
		if d.Inputs == nil {
			d.Inputs = map[int]wire.Input{}
		}
		d.Inputs[task] = InputToWire(c)
	}
	for task, p := range x.live.paused {
		if p {
			d.Paused = append(d.Paused, task)
		}
	}
	slices.Sort(d.Paused)
}
