package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/dist"
	"github.com/sluicehq/sluice/internal/graph"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/mailbox"
)

// The engine's side of the control plane (DESIGN.md, Control plane): the
// inputs of a running job and their live change, and pausing sources.
//
// A live change of an input's policy is applied by every instance of the
// operator, in its own actor, to its mailbox (mailbox.Reconfigure: atomic
// with respect to the mailbox's accounting). Credits are what makes a
// change to or from Block more than that:
//
//   - Block → another policy: the receiver stops granting credits and tells
//     each sender (gateMsg, credited false), which sends what waited for
//     credits and from then on sends without them.
//   - another policy → Block (or Block with another window): the receiver's
//     mailbox admits what senders post beyond the capacity until the change
//     settles (mailbox.SetOverfill), and tells each sender (gateMsg, credited
//     true) its new window. The sender resets its credits to the window and
//     sends a Gate envelope on the channel first: the records before it were
//     sent without credits and are not granted back; every record after it
//     is. Once every open channel delivered its Gate, the mailbox refuses
//     overfill again; by then, what is queued is at most the windows.
//
// So the accounting stays exact at every moment (every record is counted
// by the mailbox under exactly one policy), credits never leak, and a Block
// stretch drops nothing. The channels' FIFO order (records, barriers,
// watermarks, gates) is kept, so checkpoints stay consistent across a
// change. In a distributed job, gate messages to senders in other
// processes travel as wire.Gate, and the change itself as wire.Change
// (distcontrol.go).

// ErrNoLiveChange is returned for a change the job cannot make while it
// runs: an unknown operator, one without a mailbox of its own, a
// distributed job.
var ErrNoLiveChange = errors.New("operators: live change refused")

// InputInfo describes the input mailbox of one operator of a running job:
// the head of a task's chain (a fused operator has none of its own).
type InputInfo struct {
	Operator    string         // the chain's head
	Fused       []string       // the operators fused after it, which share its input
	Parallelism int            // instances, one mailbox each
	Config      mailbox.Config // now: its policy, capacity, high-water mark, rates
	Source      bool           // a source: no input to change, it can be paused
	Paused      bool           // a source paused through PauseSource
	Live        bool           // its input can change while the job runs
	Why         string         // when not Live, why not
	Spill       bool           // Spill is possible: the system has a store
}

// Inputs lists the operators of a running topology job and their input
// mailboxes, in plan order.
func Inputs(run *actors.Run) ([]InputInfo, error) {
	x, ok := run.Execution().(*execution)
	if !ok {
		return nil, fmt.Errorf("%w: not a topology's run", ErrNoLiveChange)
	}
	x.instMu.RLock()
	defer x.instMu.RUnlock()
	var out []InputInfo
	for id, chain := range x.plan.Chains {
		head := chain[0]
		info := InputInfo{Operator: head.Name(), Parallelism: x.plan.Par[head], Source: head.Role() == graph.RoleSource,
			// A System always has a store (its file, or a temporary one
			// opened when first needed), so a job in one process can spill.
			Spill: x.dist == nil, Live: true}
		for _, n := range chain[1:] {
			info.Fused = append(info.Fused, n.Name())
		}
		if id < len(x.instances) && len(x.instances[id]) > 0 {
			info.Config = x.inputNow(id)
			x.live.mu.Lock()
			info.Paused = x.live.paused[id]
			x.live.mu.Unlock()
		}
		switch {
		case info.Source:
			info.Live, info.Why = false, "a source has no input"
		case x.dist != nil:
			if _, ok := x.dist.(dist.Changer); !ok {
				info.Live, info.Why = false, "a distributed job whose cluster carries no live changes"
			}
		}
		out = append(out, info)
	}
	return out, nil
}

// inputNow is the input of task id's instances now: a mailbox's of this
// process when one runs here, else (a distributed job whose instances of
// the task all run elsewhere) the live change in force or the input they
// were built with. The caller holds instMu.
func (x *execution) inputNow(id int) mailbox.Config {
	for _, in := range x.instances[id] {
		if mb := in.mb.Load(); mb != nil && x.local(in.self) {
			return public(mb.Config())
		}
	}
	if c, ok := x.liveInput(id); ok {
		return public(c)
	}
	return public(x.instances[id][0].mbCfg) // built elsewhere: written by build only
}

// public strips what a caller cannot use again from a mailbox's
// configuration: callbacks, the clock and the spill's store.
func public(c mailbox.Config) mailbox.Config {
	c.OnOverflow, c.OnError, c.Now, c.Spill = nil, nil, nil, nil
	return c
}

// InputStatsOf sums the statistics of the mailboxes of operator op's
// instances (each instance's counters from one snapshot, so the
// accounting identity holds for the sum).
func InputStatsOf(run *actors.Run, op string) (mailbox.Stats, error) {
	x, id, err := findTask(run, op)
	if err != nil {
		return mailbox.Stats{}, err
	}
	return x.inputStats(id), nil
}

// inputStats sums the statistics of the mailboxes of task id's instances
// in this process.
func (x *execution) inputStats(id int) mailbox.Stats {
	x.instMu.RLock()
	defer x.instMu.RUnlock()
	var sum mailbox.Stats
	for _, in := range x.instances[id] {
		mb := in.mb.Load()
		if mb == nil {
			continue
		}
		s := mb.Stats()
		sum.Policy, sum.Capacity = s.Policy, sum.Capacity+s.Capacity
		sum.Depth += s.Depth
		sum.HighWater = max(sum.HighWater, s.HighWater)
		sum.Posted += s.Posted
		sum.Delivered += s.Delivered
		for i := range s.Dropped {
			sum.Dropped[i] += s.Dropped[i]
		}
		sum.Overfilled += s.Overfilled
		sum.Spilled += s.Spilled
		sum.SpillPending += s.SpillPending
		sum.SpillBytes += s.SpillBytes
		sum.Episodes += s.Episodes
	}
	return sum
}

// findTask finds the task whose chain operator op heads.
func findTask(run *actors.Run, op string) (*execution, int, error) {
	x, ok := run.Execution().(*execution)
	if !ok {
		return nil, 0, fmt.Errorf("%w: not a topology's run", ErrNoLiveChange)
	}
	for id, chain := range x.plan.Chains {
		for pos, n := range chain {
			if n.Name() != op {
				continue
			}
			if pos > 0 {
				return nil, 0, fmt.Errorf("%w: operator %q is fused into %q's chain and has no mailbox of its own (give it an Input or NoFusion)",
					ErrNoLiveChange, op, chain[0].Name())
			}
			return x, id, nil
		}
	}
	return nil, 0, fmt.Errorf("%w: job %q has no operator %q", ErrNoLiveChange, x.topo.Name(), op)
}

// SetInput changes the input mailbox of operator op of a running job: its
// policy, capacity, high-water mark, sample or throttle rate (cfg, as for
// operators.Input; a Spill's options are filled in as at the start). Every
// instance applies it before SetInput returns; a restart of the job keeps
// it. An invalid configuration, or one an instance refuses, changes
// nothing that was not already changed: the error names the instance.
//
// For a distributed job, SetInput is called in its coordinator's process:
// every process hosting instances of op checks the change first, and it is
// applied in all of them or in none (see distcontrol.go); Spill is refused
// there (no spill store in common).
func SetInput(ctx context.Context, run *actors.Run, op string, cfg mailbox.Config) error {
	return SetInputAt(ctx, run, op, cfg, 0)
}

// SetInputAt is SetInput on behalf of a desired-state version (reported
// per process of a distributed job by AppliedOf).
func SetInputAt(ctx context.Context, run *actors.Run, op string, cfg mailbox.Config, version uint64) error {
	x, id, err := findTask(run, op)
	if err != nil {
		return err
	}
	head := x.plan.Chains[id][0]
	switch {
	case head.Role() == graph.RoleSource:
		return fmt.Errorf("%w: operator %q is a source: it has no input", ErrNoLiveChange, op)
	case x.dist != nil:
		return x.setInputDist(ctx, id, cfg, version)
	}
	cfg = public(cfg)
	if pol := x.topo.Config().CheckpointPolicy; (pol.Unaligned || pol.AlignmentTimeout > 0) &&
		cfg.Overflow != mailbox.OverflowBlock && cfg.Overflow != mailbox.OverflowSpill {
		return fmt.Errorf("%w: operator %q: job %q takes unaligned checkpoints, and a %s input's drops would make the in-flight records a checkpoint holds disagree with what the operator processes; use Block or Spill",
			ErrNoLiveChange, op, x.topo.Name(), cfg.Overflow)
	}
	var spill *mailbox.SpillStore
	if cfg.Overflow == mailbox.OverflowSpill {
		st, err := x.sys.SpillStore()
		if err != nil {
			return fmt.Errorf("%w: operator %q: spill: %w", ErrNoLiveChange, op, err)
		}
		spill = st
	}
	// spillFor fills in a Spill's options as at the start (mailboxFor).
	spillFor := func(c mailbox.Config, idx int) mailbox.Config {
		if spill != nil {
			c.Spill = &mailbox.SpillOptions{Store: spill, Codec: head.NewCodec(),
				Queue: x.spillQueue(head.Name(), idx)}
		}
		return c
	}
	if err := spillFor(cfg, 0).Validate(); err != nil {
		return fmt.Errorf("operator %q: %w", op, err)
	}
	if spill != nil {
		cfg.Spill = &mailbox.SpillOptions{} // a restart fills it in (mailboxFor)
	}
	select {
	case <-x.done:
		return fmt.Errorf("%w: job %q has ended", ErrNoLiveChange, x.topo.Name())
	default:
	}
	x.live.change.Lock() // one change at a time
	defer x.live.change.Unlock()
	// Recorded first, so that a restart during the change builds with it;
	// put back when the change fails.
	prev, had := x.live.setInput(id, cfg, true)
	ok := false
	defer func() {
		if !ok {
			x.live.setInput(id, prev, had)
		}
	}()
	x.instMu.RLock()
	insts := append([]*instance(nil), x.instances[id]...)
	x.instMu.RUnlock()
	if _, err := x.setInputs(ctx, op, insts, func(in *instance) mailbox.Config { return spillFor(cfg, in.idx) }); err != nil {
		return err
	}
	ok = true
	return nil
}

// PauseSource stops source op's instances from reading (true) or lets them
// read again (false). A paused source still takes part in checkpoints and
// drains. It returns once every instance has heard: from then on a paused
// source emits nothing more.
func PauseSource(ctx context.Context, run *actors.Run, op string, pause bool) error {
	x, id, err := findTask(run, op)
	if err != nil {
		return err
	}
	if x.plan.Chains[id][0].Role() != graph.RoleSource {
		return fmt.Errorf("%w: operator %q is not a source", ErrNoLiveChange, op)
	}
	x.live.change.Lock()
	defer x.live.change.Unlock()
	x.live.mu.Lock()
	if x.live.paused == nil {
		x.live.paused = map[int]bool{}
	}
	x.live.paused[id] = pause // a restart keeps it
	x.live.mu.Unlock()
	x.instMu.RLock()
	insts := append([]*instance(nil), x.instances[id]...)
	x.instMu.RUnlock()
	replies := make(chan error, len(insts))
	for _, in := range insts {
		x.root.Send(in.self, &pauseMsg{pause: pause, reply: replies})
	}
	for range insts {
		select {
		case <-replies:
		case <-x.done:
			return fmt.Errorf("%w: job %q has ended", ErrNoLiveChange, x.topo.Name())
		case <-ctx.Done():
			return fmt.Errorf("source %q: pause: %w", op, context.Cause(ctx))
		}
	}
	return nil
}

// liveInputs are the changes made to a job while it runs, which a restart
// keeps.
type liveInputs struct {
	change sync.Mutex             // held by the change in progress
	mu     sync.Mutex             // guards the maps; never held while waiting
	inputs map[int]mailbox.Config // by task
	paused map[int]bool           // sources, by task
	seq    uint64                 // distributed: the live changes sent, counted
	nodes  map[string]NodeApplied // distributed: the latest applied, by process
}

// setInput records task's input (or forgets it, !ok) and returns what it
// was.
func (l *liveInputs) setInput(task int, c mailbox.Config, ok bool) (mailbox.Config, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, had := l.inputs[task]
	if !ok {
		delete(l.inputs, task)
		return prev, had
	}
	if l.inputs == nil {
		l.inputs = map[int]mailbox.Config{}
	}
	l.inputs[task] = c
	return prev, had
}

// liveInput is the input a task's instances are built with after a live
// change.
func (x *execution) liveInput(task int) (mailbox.Config, bool) {
	x.live.mu.Lock()
	defer x.live.mu.Unlock()
	c, ok := x.live.inputs[task]
	return c, ok
}

// livePaused says whether source task was paused through PauseSource.
func (x *execution) livePaused(task int) bool {
	x.live.mu.Lock()
	defer x.live.mu.Unlock()
	return x.live.paused[task]
}

// controlMsg is a message of the control plane to an instance.
type controlMsg interface{ control() }

type (
	// setInputMsg asks a receiver to change its input mailbox.
	setInputMsg struct {
		cfg   mailbox.Config
		reply chan<- setInputReply
	}
	// setInputReply: the instance's outcome, and its input before.
	setInputReply struct {
		in   *instance
		prev mailbox.Config
		err  error
	}
	// gateMsg tells a sender that its channel out is credit-gated from now
	// on (with window credits, epoch naming the change) or no longer.
	gateMsg struct {
		out      int
		credited bool
		window   int
		epoch    int64
	}
	// pauseMsg pauses or resumes a source.
	pauseMsg struct {
		pause bool
		reply chan<- error
	}
)

func (*setInputMsg) control() {}
func (*gateMsg) control()     {}
func (*pauseMsg) control()    {}

// The control plane's messages are control messages of the mailbox: never
// counted as records, never dropped.
func (*setInputMsg) IsControl() bool { return true }
func (*gateMsg) IsControl() bool     { return true }
func (*pauseMsg) IsControl() bool    { return true }

// liveGate is a receiver's state of its latest live change to Block.
type liveGate struct {
	epoch   int64
	gated   []bool // channel delivered the change's Gate: its records are granted
	pending int    // open channels whose Gate has not arrived
}

func (in *instance) onControl(m controlMsg) {
	switch m := m.(type) {
	case *setInputMsg:
		prev := in.mbCfg
		if mb := in.mb.Load(); mb != nil {
			prev = mb.Config() // with its spill's options, should it spill
		}
		m.reply <- setInputReply{in: in, prev: prev, err: in.setInput(m.cfg)}
	case *gateMsg:
		in.onGate(m)
	case *pauseMsg:
		if in.src != nil {
			was := in.paused
			in.paused = m.pause
			if was && !m.pause {
				in.scheduleTick()
			}
		}
		m.reply <- nil
	}
}

// setInput applies a live change to this instance's input mailbox.
func (in *instance) setInput(cfg mailbox.Config) error {
	mb := in.mb.Load()
	if mb == nil {
		return fmt.Errorf("operator %q instance %d: no mailbox", in.exec.plan.Chains[in.task][0].Name(), in.idx)
	}
	batch := in.exec.topo.Config().BatchSize
	toBlock := cfg.Overflow == mailbox.OverflowBlock
	if toBlock { // room for every channel's window, as at the start
		cfg.Capacity = max(cfg.Capacity, batch*len(in.ins))
	}
	window := func(c mailbox.Config) int { return max(batch, c.Capacity/max(1, len(in.ins))) }
	regate := toBlock && (!in.credited || window(cfg) != window(in.mbCfg))
	if regate {
		mb.SetOverfill(true)
	}
	if err := mb.Reconfigure(cfg); err != nil {
		if regate {
			mb.SetOverfill(false)
		}
		return fmt.Errorf("operator %q instance %d: %w", in.exec.plan.Chains[in.task][0].Name(), in.idx, err)
	}
	wasBlock := in.credited
	in.mbCfg = cfg
	switch {
	case regate:
		g := &liveGate{gated: make([]bool, len(in.ins))}
		if in.ctl != nil {
			g.epoch = in.ctl.epoch
		}
		g.epoch++
		in.ctl, in.credited = g, true
		for ch, ic := range in.ins {
			if in.finishedIn[ch] {
				continue
			}
			in.ins[ch].every = grantEvery(window(cfg), batch) // from its Gate on (onGateMark)
			g.pending++
			in.sendGate(ic.sender, &gateMsg{out: ic.out, credited: true, window: window(cfg), epoch: g.epoch})
		}
		if g.pending == 0 {
			mb.SetOverfill(false)
		}
	case wasBlock && !toBlock:
		in.credited = false
		if in.ctl != nil {
			in.ctl.pending = 0
		}
		mb.SetOverfill(false)
		for ch, ic := range in.ins {
			if !in.finishedIn[ch] {
				in.sendGate(ic.sender, &gateMsg{out: ic.out})
			}
		}
	}
	return nil
}

// sendGate tells a sender of a change of its channel's gating: as
// wire.Gate when the sender is in another process.
func (in *instance) sendGate(sender *actor.PID, m *gateMsg) {
	if in.exec.local(sender) {
		in.c.Send(sender, m)
		return
	}
	in.c.Send(sender, &wire.Gate{Out: m.out, Credited: m.credited, Window: m.window, Epoch: m.epoch})
}

// onGate: a sender hears that its channel m.out is credit-gated again, or
// no longer.
func (in *instance) onGate(m *gateMsg) {
	if m.out < 0 || m.out >= len(in.outs) {
		return
	}
	oc := in.outs[m.out]
	if m.credited {
		oc.credited, oc.credits, oc.granted = true, m.window, 0
		in.send(oc, &actors.Envelope{Kind: actors.Gate, Mark: m.epoch, Channel: oc.channel, Seq: oc.seq})
	} else {
		oc.credited = false
	}
	in.flushQueue(oc)
}

// gatedIn says whether the records of input channel ch are granted back
// (Block): after a live change to Block, only those after the channel's
// Gate.
func (in *instance) gatedIn(ch int) bool { return in.ctl == nil || in.ctl.gated[ch] }

// onGateMark: channel ch delivered the Gate of change epoch.
func (in *instance) onGateMark(ch int, epoch int64) {
	g := in.ctl
	if g == nil || epoch != g.epoch || g.gated[ch] || !in.credited {
		return // of an older change
	}
	g.gated[ch] = true
	in.ins[ch].consumed, in.ins[ch].reported = 0, 0 // the sender counts its credits afresh
	in.gateSettled()
}

// gateEnded: channel ch ended; its Gate will not come.
func (in *instance) gateEnded(ch int) {
	if g := in.ctl; g != nil && in.credited && !g.gated[ch] {
		g.gated[ch] = true
		in.gateSettled()
	}
}

func (in *instance) gateSettled() {
	g := in.ctl
	g.pending--
	if g.pending == 0 {
		if mb := in.mb.Load(); mb != nil {
			mb.SetOverfill(false)
		}
	}
}
