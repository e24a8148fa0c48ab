package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/graph"
	"github.com/sluicehq/sluice/internal/stage"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/coord"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/persistence"
	"go.opentelemetry.io/otel/attribute"
)

// jobActor supervises the instances of one execution. It drives two pure
// machines of package coord, the checkpoint coordinator (cs) and the job's
// lifecycle (life): it translates its messages into their events, with the
// time of the job's clock, and carries out their actions.
type jobActor struct {
	x *execution
	// suspend: the drain asked is a suspension (StopWithSavepoint)
	suspend bool
	cs      coord.Checkpoints
	life    coord.Job
	timer   func() bool // stops the checkpoint interval's timer
	// savepoints waiting for a checkpoint at or after their id
	savepoints []savepointWait
	stored     *persistence.Checkpoint // the newest checkpoint stored while savepoints wait
	started    map[uint64]time.Time    // when each checkpoint's barriers went out
	expiry     map[uint64]func() bool  // stop the timers of checkpoints' deadlines
	// alignTimers stop the timers of alignment timeouts
	alignTimers []func() bool
	deferred    func() bool       // stops the minimum pause's timer
	stopTimer   func() bool       // stops the restart backoff's timer
	unwatch     func()            // distributed: stops watching for lost processes
	latTimer    func() bool       // stops the latency window's timer
	latTicks    int               // its ticks: with a LatencyTarget, ProbesPerWindow a window
	sizes       map[uint64]cpSize // checkpoints stored, not yet completed: what they hold
}

func newJobActor(x *execution) *jobActor {
	j := &jobActor{x: x, life: coord.Job{Name: x.topo.Name(), Checkpoints: x.cpStore != nil, Distributed: x.dist != nil}}
	if rp := x.topo.Config().Restart; rp != nil {
		j.life.Restart = &coord.Budget{Max: rp.Budget, Within: rp.Within}
	}
	return j
}

func (j *jobActor) Receive(c actor.Context) {
	x := j.x
	now := x.topo.Config().Now()
	switch m := c.Message().(type) {
	case *actor.Started:
		x.jobPID = c.Self()
		if x.dist != nil {
			root, pid := x.root, c.Self()
			j.unwatch = x.dist.Watch(func(addr string) { root.Send(pid, &hostLost{addr: addr}) })
		}
		total, local, err := j.launch(c)
		x.launched <- err
		if err != nil {
			x.setErr(err)
			c.Stop(c.Self())
			return
		}
		j.launched(c, now, total, local)
		j.armLatency()
	case *latencyTick:
		if j.latTicks++; x.shedder == nil || j.latTicks%ProbesPerWindow == 0 {
			x.closeLatencyWindow()
		} else {
			x.probeLatency()
		}
		j.armLatency()
	case *retargetMsg:
		m.reply <- x.retarget(m.target)
	case *cpTick:
		j.feed(c, coord.Tick{At: now})
		j.arm()
	case *savepointTick, *cpDeferred:
		j.feed(c, coord.Tick{At: now})
	case *cpExpire:
		j.feed(c, coord.Expire{ID: m.id, At: now})
	case *cpAlignTimeout:
		j.feed(c, coord.AlignTimeout{ID: m.id, At: now})
	case *savepointMsg:
		if x.cpStore == nil {
			m.reply <- savepointResult{err: errors.New("operators: checkpoint now: the job takes no checkpoints (use the Checkpoints option)")}
			return
		}
		if j.cs.Stopping {
			m.reply <- savepointResult{err: errors.New("operators: checkpoint now: the job is finishing")}
			return
		}
		j.savepoints = append(j.savepoints, savepointWait{min: j.cs.MinSavepoint(), reply: m.reply})
		j.feed(c, coord.Tick{At: now})
	case *wire.Ack:
		if from := sentFrom(c.MessageHeader()); !x.fromInstance(from, m.Gen, m.Instance) {
			x.forged("checkpoint acknowledgement", from, "instance "+itoa(m.Instance)+" of generation "+itoa(m.Gen))
			return
		}
		if m.Gen == x.gen {
			j.feed(c, coord.Acked{ID: m.ID, Instance: m.Instance, States: m.States, Offsets: m.Offsets, Channels: m.Channels})
		}
	case *wire.Stats:
		x.onStats(sentFrom(c.MessageHeader()), m)
	case *wire.Finished:
		if from := sentFrom(c.MessageHeader()); !x.fromInstance(from, m.Gen, x.instanceNum(m.Task, m.Instance)) {
			x.forged("finished notice", from, "task "+itoa(m.Task)+" instance "+itoa(m.Instance)+" of generation "+itoa(m.Gen))
			return
		}
		if m.Stats != nil && (m.Stats.Task != m.Task || m.Stats.Instance != m.Instance) {
			m.Stats = nil // statistics of another instance than the one finished
		}
		x.noteStats(m.Gen, m.Stats)
		j.step(c, coord.InstanceFinished{At: now, Gen: m.Gen, Slot: coord.Slot{Task: m.Task, Instance: m.Instance}})
	case *wire.Failed:
		if from := sentFrom(c.MessageHeader()); !x.fromProcess(from, m.Address) || (x.byID[m.ID] != nil && x.byID[m.ID].self.Address != m.Address) {
			x.forged("failure notice", from, "instance "+m.ID+" at "+m.Address)
			return
		}
		j.onFailure(c, now, m)
	case *actor.Terminated:
		if in := x.byID[m.Who.Id]; in != nil {
			j.step(c, coord.InstanceTerminated{At: now, Gen: in.gen})
		}
	case *wire.Stopped:
		j.step(c, coord.HostStopped{At: now, Gen: m.Gen, Addr: m.Address})
	case *hostLost:
		j.step(c, coord.HostLost{At: now, Addr: m.addr})
	case *restartMsg:
		j.step(c, coord.BackoffElapsed{At: now, Gen: m.gen})
	case *wire.Drain:
		j.suspend = j.suspend || m.Suspend
		j.step(c, coord.DrainAsked{At: now})
	case *abortMsg:
		err := x.topo.Kit().Aborted
		if m.cause != nil {
			err = fmt.Errorf("%w: %w", x.topo.Kit().Aborted, m.cause)
		}
		j.step(c, coord.AbortAsked{At: now, Err: err})
	case *actor.Stopped:
		if x.dist != nil {
			j.unwatch()
			x.stopHosts(nil)
		}
		x.metrics.Close()
		if j.timer != nil {
			j.timer()
		}
		if j.latTimer != nil {
			j.latTimer()
		}
		j.stopPolicyTimers()
		j.endSavepoints(j.x.topo.Kit().Aborted)
		if j.stopTimer != nil {
			j.stopTimer()
		}
		x.cancel()
		close(x.done)
	}
}

// launched starts the checkpoint coordinator of a generation just launched
// (total instances, local of them here) and tells the lifecycle.
func (j *jobActor) launched(c actor.Context, now time.Time, total, local int) {
	j.startCheckpoints(total)
	j.step(c, coord.Launched{At: now, Instances: total, Local: local, Hosts: j.x.hostList()})
}

// startCheckpoints starts the checkpoint coordinator of a generation of
// total instances, from the checkpoint it was restored from.
func (j *jobActor) startCheckpoints(total int) {
	x := j.x
	if x.cpStore == nil {
		return
	}
	j.stopPolicyTimers()
	j.cs = x.newCoordinator(total)
	j.started = map[uint64]time.Time{}
	j.publishInProgress()
	j.arm()
}

// onFailure tells the lifecycle of a failed instance, with its generation:
// its own for an instance known here, else the one the message says.
func (j *jobActor) onFailure(c actor.Context, now time.Time, m *wire.Failed) {
	x := j.x
	remote := m.Reason == nil // from another process: Gen says which generation
	gen := x.gen
	if in := x.byID[m.ID]; in != nil {
		gen = in.gen
	}
	reason := m.Reason
	if remote {
		if m.Gen != x.gen {
			gen = m.Gen
		}
		reason = stage.NewFailure(m.Operator, errors.New(m.Message))
	}
	j.step(c, coord.InstanceFailed{At: now, Gen: gen, Err: x.operatorError(actor.NewPID(m.Address, m.ID), reason)})
}

// step steps the lifecycle and carries out its actions.
func (j *jobActor) step(c actor.Context, ev coord.JobEvent) {
	x := j.x
	var acts []coord.JobAction
	j.life, acts = j.life.Step(ev)
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		switch a := a.(type) {
		case coord.StopGeneration:
			if j.timer != nil {
				j.timer()
			}
			x.instMu.RLock()
			for _, insts := range x.instances {
				for _, in := range insts {
					if x.local(in.self) {
						c.Stop(in.self)
					}
				}
			}
			x.instMu.RUnlock()
			if x.dist != nil {
				x.stopHosts(map[string]bool{a.Lost: true})
			}
		case coord.ScheduleRelaunch:
			delay := x.topo.Config().Restart.Backoff.Delay(a.Restart)
			x.noteRestart(delay, a.Err)
			x.traceEvent("sluice.job", "restart", attribute.Int("sluice.restart", a.Restart),
				attribute.String("sluice.delay", delay.String()), attribute.String("error", a.Err.Error()))
			x.sys.Logger().Warn("operator failed; restarting the job from its last checkpoint", "job", x.topo.Name(),
				"err", a.Err, "restart", a.Restart, "delay", delay)
			root, pid, gen := x.root, x.jobPID, a.Gen
			j.stopTimer = x.topo.Config().After(delay, func() { root.Send(pid, &restartMsg{gen: gen}) })
		case coord.Relaunch:
			acts = append(acts, j.relaunch(c, a.Gen)...)
		case coord.TakeFinalCheckpoint:
			j.feed(c, coord.TakeFinal{At: x.topo.Config().Now()})
		case coord.StopCheckpoints:
			j.feed(c, coord.Stop{})
		case coord.DrainSources:
			for id, chain := range x.plan.Chains {
				if chain[0].Role() == graph.RoleSource {
					for _, in := range x.instances[id] {
						x.tellFrom(c, in.self, &wire.Drain{Suspend: j.suspend})
					}
				}
			}
		case coord.ClearCheckpoints:
			if err := x.cpStore.Clear(x.ctx, x.topo.Name()); err != nil {
				x.sys.Logger().Error("clear checkpoints", "job", x.topo.Name(), "err", err)
			}
		case coord.Fail:
			x.setErr(a.Err)
			c.Stop(c.Self())
		case coord.End:
			c.Stop(c.Self())
		}
	}
}

// relaunch launches generation gen from the latest checkpoint and returns
// the lifecycle's actions on the outcome.
func (j *jobActor) relaunch(c actor.Context, gen int) []coord.JobAction {
	x := j.x
	now := x.topo.Config().Now()
	x.gen = gen
	if x.cpStore != nil {
		cp, ok, err := x.cpStore.Latest(x.ctx, x.topo.Name())
		if err != nil {
			return j.stepped(coord.LaunchFailed{At: now, Err: fmt.Errorf("operators: topology %q: restart: load the latest checkpoint: %w", x.topo.Name(), err)})
		}
		var restore *persistence.Checkpoint
		if ok {
			restore = &cp
		}
		if err := x.adopt(restore); err != nil {
			return j.stepped(coord.LaunchFailed{At: now, Err: fmt.Errorf("operators: topology %q: restart: %w", x.topo.Name(), err)})
		}
	}
	total, local, err := j.launch(c)
	if err != nil {
		// In a distributed job a process may have left while it was
		// deployed to: restart again.
		return j.stepped(coord.LaunchFailed{At: now, Err: fmt.Errorf("operators: topology %q: restart: %w", x.topo.Name(), err),
			Retryable: true, Local: local, Hosts: x.hostList()})
	}
	if x.restored != nil {
		x.noteRestored(x.restored)
	}
	j.startCheckpoints(total)
	return j.stepped(coord.Launched{At: now, Instances: total, Local: local, Hosts: x.hostList()})
}

// stepped steps the lifecycle with ev and returns its actions, for step to
// carry out.
func (j *jobActor) stepped(ev coord.JobEvent) []coord.JobAction {
	var acts []coord.JobAction
	j.life, acts = j.life.Step(ev)
	return acts
}

type (
	savepointMsg  struct{ reply chan savepointResult }
	savepointTick struct{} // start a checkpoint for waiting savepoints
	savepointWait struct {
		min   uint64 // the first checkpoint id that started after the request
		reply chan savepointResult
	}
	savepointResult struct {
		id  uint64
		cp  *persistence.Checkpoint // the checkpoint stored, with its plan
		err error
	}
)

// savepointDone answers the savepoints that checkpoint id covers, and
// starts another checkpoint for those waiting for a later one.
func (j *jobActor) savepointDone(c actor.Context, id uint64) {
	kept := j.savepoints[:0]
	for _, w := range j.savepoints {
		if id >= w.min {
			r := savepointResult{id: id}
			if j.stored != nil && j.stored.ID == id {
				r.cp = j.stored
			}
			w.reply <- r
		} else {
			kept = append(kept, w)
		}
	}
	j.savepoints = kept
	j.stored = nil
	if len(kept) > 0 {
		c.Send(c.Self(), &savepointTick{})
	}
}

func (j *jobActor) endSavepoints(err error) {
	for _, w := range j.savepoints {
		w.reply <- savepointResult{err: err}
	}
	j.savepoints = nil
}

// CheckpointNow takes a checkpoint of the running job now, outside its
// interval, and returns its id once it is complete: the state of every
// operator after every record read before the call, durable in the job's
// checkpoint store. The job must have been started with Checkpoints.
func CheckpointNow(ctx context.Context, run *actors.Run) (uint64, error) {
	r := checkpointNow(ctx, run)
	return r.id, r.err
}

func checkpointNow(ctx context.Context, run *actors.Run) savepointResult {
	x, ok := run.Execution().(*execution)
	if !ok {
		return savepointResult{err: errors.New("operators: checkpoint now: not a topology's run")}
	}
	reply := make(chan savepointResult, 1)
	x.tell(&savepointMsg{reply: reply})
	select {
	case r := <-reply:
		return r
	case <-x.done:
		select {
		case r := <-reply:
			return r
		default:
		}
		return savepointResult{err: fmt.Errorf("operators: checkpoint now: the job ended: %w", x.topo.Kit().Aborted)}
	case <-ctx.Done():
		return savepointResult{err: ctx.Err()}
	}
}

// arm schedules the next checkpoint tick.
func (j *jobActor) arm() {
	if j.cs.Stopping {
		return
	}
	root, pid := j.x.root, j.x.jobPID
	j.timer = j.x.topo.Config().CheckpointAfter(j.x.topo.Config().CheckpointInterval, func() { root.Send(pid, &cpTick{}) })
}

// feed steps the coordinator and carries out its actions.
func (j *jobActor) feed(c actor.Context, ev coord.CheckpointEvent) {
	x := j.x
	var acts []coord.CheckpointAction
	j.cs, acts = j.cs.Step(ev)
	j.publishInProgress() // before the actions' statistics: a failure counted is no longer in progress
	defer j.publishInProgress()
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		switch a := a.(type) {
		case coord.Inject:
			// Every instance hears of the checkpoint: running sources
			// start it, finished instances answer it (see wire.Barrier).
			j.started[a.ID] = x.topo.Config().Now()
			j.armExpiry(a.ID, a.Deadline)
			j.armAlignTimeout(a.ID, a.AlignBy)
			for _, insts := range x.instances {
				for _, in := range insts {
					x.tellFrom(c, in.self, &wire.Barrier{ID: a.ID, Unaligned: a.Unaligned})
				}
			}
		case coord.SwitchUnaligned:
			// Every instance hears of it: those aligning the checkpoint, or
			// with its barrier queued, record their state now; sources
			// have answered already.
			x.sys.Logger().Debug("checkpoint switched to unaligned", "job", x.topo.Name(), "checkpoint", a.ID)
			for _, insts := range x.instances {
				for _, in := range insts {
					x.tellFrom(c, in.self, &wire.Barrier{ID: a.ID, Unaligned: true})
				}
			}
		case coord.Abandoned:
			j.ended(a.ID)
			x.sys.Logger().Debug("checkpoint abandoned for a later one", "job", x.topo.Name(), "checkpoint", a.ID)
		case coord.TickAt:
			j.deferTick(a.At)
		case coord.Store:
			cp := persistence.Checkpoint{ID: a.ID, Time: x.topo.Config().Now(), States: x.withPlan(a.States), Offsets: a.Offsets, Channels: a.Channels}
			err := x.cpStore.Complete(x.ctx, x.topo.Name(), cp)
			if err == nil && len(j.savepoints) > 0 {
				j.stored = &cp
			}
			if err == nil {
				j.noteSize(a.ID, a.States, a.Channels, a.Unaligned)
			}
			var more []coord.CheckpointAction
			j.cs, more = j.cs.Step(coord.Stored{ID: a.ID, Err: err, At: x.topo.Config().Now()})
			j.publishInProgress()
			acts = append(acts, more...)
		case coord.Completed:
			x.dropOldQueues()
			d := x.topo.Config().Now().Sub(j.started[a.ID])
			j.ended(a.ID)
			x.cpStatsMu.Lock()
			x.cpStats.Completed++
			x.cpStats.LastID, x.cpStats.LastDuration, x.cpStats.LastTime = a.ID, d, x.topo.Config().Now()
			size := j.sizes[a.ID]
			delete(j.sizes, a.ID)
			x.cpStats.History = appendBounded(x.cpStats.History, CompletedCheckpoint{ID: a.ID, Time: x.cpStats.LastTime,
				Duration: d, Size: size.bytes, Instances: size.states, Unaligned: size.unaligned, InFlightBytes: size.inFlight, SpillRanges: size.refs})
			x.cpStatsMu.Unlock()
			x.metrics.checkpointDone(d)
			j.savepointDone(c, a.ID)
			for _, insts := range x.instances {
				for _, in := range insts {
					x.tellFrom(c, in.self, &wire.Committed{Gen: x.gen, ID: a.ID})
				}
			}
			x.sys.Logger().Debug("checkpoint completed", "job", x.topo.Name(), "checkpoint", a.ID, "duration", d, "final", a.Final)
			if a.Final {
				j.step(c, coord.FinalCheckpointDone{At: x.topo.Config().Now()})
			}
		case coord.CheckpointFailed:
			j.ended(a.ID)
			j.endSavepoints(fmt.Errorf("operators: checkpoint now: checkpoint %d failed: %w", a.ID, a.Err))
			x.noteFailed(a.Err)
			x.sys.Logger().Error("checkpoint failed", "job", x.topo.Name(), "checkpoint", a.ID, "err", a.Err, "final", a.Final)
			if a.Final {
				// Without it the sinks' tail can only be committed outside any
				// checkpoint: abort them instead (Aborter discards) and fail,
				// or restart, from the last completed checkpoint.
				since := "the start"
				if j.cs.Completed > 0 {
					since = "checkpoint " + strconv.FormatUint(j.cs.Completed, 10)
				}
				j.step(c, coord.FinalCheckpointFailed{At: x.topo.Config().Now(), Err: fmt.Errorf("operators: topology %q: final checkpoint %d: %w (the sinks' records since %s are not committed)",
					x.topo.Name(), a.ID, a.Err, since)})
			}
		}
	}
}

// launch builds and starts a generation: total instances in all, local of
// them in this process.
func (j *jobActor) launch(c actor.Context) (total, local int, err error) {
	x := j.x
	defer func() { // a panic while building must reach Start as an error, not hang it
		if r := recover(); r != nil {
			err = fmt.Errorf("operators: launching job %q: %v", x.topo.Name(), r)
		}
	}()
	x.place()
	if err := x.newLaunchTag(); err != nil {
		return 0, 0, err
	}
	if err := x.build(); err != nil {
		return 0, 0, err
	}
	for _, insts := range x.instances {
		for _, in := range insts {
			total++
			if x.local(in.self) {
				local++
			}
		}
	}
	for _, insts := range x.instances {
		for _, in := range insts {
			if !x.local(in.self) {
				continue
			}
			if err := x.spawn(c, in, x.jobPID.Id); err != nil {
				return total, local, err
			}
		}
	}
	if x.dist != nil { // the other processes spawn and start theirs before any source starts
		if err := x.deploy(); err != nil {
			return total, local, err
		}
	}
	// Start consumers before their producers: an instance's start must be
	// queued before the first record reaches it.
	for id := len(x.instances) - 1; id >= 0; id-- {
		for _, in := range x.instances[id] {
			if x.local(in.self) {
				c.Send(in.self, &startMsg{})
			}
		}
	}
	return total, local, nil
}

// armLatency sets the timer of the next latency window (DESIGN.md, Latency
// and shedding), on the system's clock: a job's own clock (WithClock) is a
// test's to drive, and its timers are the operators'.
func (j *jobActor) armLatency() {
	x := j.x
	if x.lats == nil {
		return
	}
	root, pid := x.root, x.jobPID
	d := x.latencyWindowLength()
	if x.shedder != nil {
		d /= ProbesPerWindow
	}
	j.latTimer = x.sys.Config().Clock.AfterFunc(d, func() { root.Send(pid, &latencyTick{}) })
}
