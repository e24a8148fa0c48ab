package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/persistence"
	"github.com/sluicehq/sluice/supervision"
	"go.opentelemetry.io/otel/attribute"
)

// jobActor supervises the instances of one execution and drives the
// checkpoint coordinator.
type jobActor struct {
	x     *execution
	total int
	cs    coordState
	timer func() bool // stops the checkpoint interval's timer
	// savepoints waiting for a checkpoint at or after their id
	savepoints []savepointWait
	started    map[uint64]time.Time // when each checkpoint's barriers went out

	// The end of a job with checkpoints: every instance reports finished
	// twice, when its input ended and when its sinks closed after the final
	// checkpoint (reported holds who reported once; closed counts the
	// second reports, out of instances).
	reported  map[[2]int]bool // by task and instance index
	closed    int
	instances int
	finalDone bool // the final checkpoint completed

	// restarts
	budget     *supervision.Budget
	restarts   int
	restarting bool
	drained    bool // Drain was asked: the job keeps its last checkpoint
	alive      int  // instances of the stopped generation not yet terminated
	timerDone  bool // the restart backoff elapsed
	stopTimer  func() bool

	// distributed
	unwatch   func()          // stops watching for lost processes
	waitHosts map[string]bool // processes whose instances are stopping
}

func (j *jobActor) Receive(c actor.Context) {
	x := j.x
	switch m := c.Message().(type) {
	case *actor.Started:
		x.jobPID = c.Self()
		if x.dist != nil {
			root, pid := x.root, c.Self()
			j.unwatch = x.dist.Watch(func(addr string) { root.Send(pid, &hostLost{addr: addr}) })
		}
		err := j.launch(c)
		x.launched <- err
		if err != nil {
			x.setErr(err)
			c.Stop(c.Self())
			return
		}
		if x.cpStore != nil {
			j.cs = coordState{Instances: j.total}
			if x.restored != nil {
				j.cs.Completed = x.restored.ID
			}
			j.started = map[uint64]time.Time{}
			j.arm()
		}
	case *cpTick:
		j.feed(c, evTick{})
		j.arm()
	case *savepointTick:
		j.feed(c, evTick{})
	case *savepointMsg:
		if x.cpStore == nil {
			m.reply <- savepointResult{err: errors.New("operators: savepoint: the job takes no checkpoints (use the Checkpoints option)")}
			return
		}
		if j.cs.Stopping {
			m.reply <- savepointResult{err: errors.New("operators: savepoint: the job is finishing")}
			return
		}
		min := j.cs.Next
		if min == 0 {
			min = j.cs.Completed + 1
		}
		j.savepoints = append(j.savepoints, savepointWait{min: min, reply: m.reply})
		j.feed(c, evTick{})
	case *wire.Ack:
		if m.Gen == x.gen {
			j.feed(c, evAck{ID: m.ID, Instance: m.Instance, States: m.States, Offsets: m.Offsets})
		}
	case *wire.Stats:
		x.onStats(m)
	case *wire.Finished:
		x.noteStats(m.Gen, m.Stats)
		if m.Gen != x.gen || j.restarting {
			return
		}
		if x.cpStore == nil {
			j.total--
			if j.total == 0 {
				c.Stop(c.Self())
			}
			return
		}
		key := [2]int{m.Task, m.Instance}
		if j.reported[key] { // its sinks closed after the final checkpoint
			j.closed++
			j.maybeEnd(c)
			return
		}
		j.reported[key] = true
		j.total--
		if j.total == 0 {
			// Every instance finished its input and nothing is in flight:
			// take the final checkpoint, which commits the sinks' tail.
			j.feed(c, evFinal{})
		}
	case *wire.Failed:
		j.onFailure(c, m)
	case *actor.Terminated:
		if j.restarting {
			if in := x.byID[m.Who.Id]; in != nil && in.gen == x.gen {
				j.alive--
				j.maybeRelaunch(c)
			}
		}
	case *wire.Stopped:
		if j.restarting && m.Gen == x.gen && j.waitHosts[m.Address] {
			delete(j.waitHosts, m.Address)
			j.alive--
			j.maybeRelaunch(c)
		}
	case *hostLost:
		switch {
		case j.restarting && j.waitHosts[m.addr]:
			delete(j.waitHosts, m.addr)
			j.alive--
			j.maybeRelaunch(c)
		case !j.restarting && x.hosts[m.addr]:
			j.restart(c, fmt.Errorf("operators: topology %q: the process at %s, which runs instances of it, left or its connection broke", x.topo.name, m.addr), m.addr)
		}
	case *restartMsg:
		if j.restarting && m.gen == x.gen {
			j.timerDone = true
			j.maybeRelaunch(c)
		}
	case *wire.Drain:
		j.drained = true
		if x.cpStore != nil {
			j.feed(c, evStopping{})
		}
		for id, chain := range x.plan.chains {
			if chain[0].role == roleSource {
				for _, in := range x.instances[id] {
					x.tellFrom(c, in.self, &wire.Drain{})
				}
			}
		}
	case *abortMsg:
		if m.cause != nil {
			x.setErr(fmt.Errorf("%w: %w", x.topo.kit.Aborted, m.cause))
		} else {
			x.setErr(x.topo.kit.Aborted)
		}
		c.Stop(c.Self())
	case *actor.Stopped:
		if x.dist != nil {
			j.unwatch()
			x.stopHosts(nil)
		}
		x.metrics.close()
		if j.timer != nil {
			j.timer()
		}
		j.endSavepoints(j.x.topo.kit.Aborted)
		if j.stopTimer != nil {
			j.stopTimer()
		}
		x.cancel()
		close(x.done)
	}
}

// maybeEnd stops a job with checkpoints once its final checkpoint completed
// and every instance closed its sinks. A job that ran to its end clears its
// checkpoints (the next run starts afresh); a drained one keeps them, the
// final checkpoint last, to resume from.
func (j *jobActor) maybeEnd(c actor.Context) {
	x := j.x
	if !j.finalDone || j.closed < j.instances {
		return
	}
	if !j.drained {
		if err := x.cpStore.Clear(x.ctx, x.topo.name); err != nil {
			x.sys.Logger().Error("clear checkpoints", "job", x.topo.name, "err", err)
		}
	}
	c.Stop(c.Self())
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
		err error
	}
)

// savepointDone answers the savepoints that checkpoint id covers, and
// starts another checkpoint for those waiting for a later one.
func (j *jobActor) savepointDone(c actor.Context, id uint64) {
	kept := j.savepoints[:0]
	for _, w := range j.savepoints {
		if id >= w.min {
			w.reply <- savepointResult{id: id}
		} else {
			kept = append(kept, w)
		}
	}
	j.savepoints = kept
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

// Savepoint takes a checkpoint of the running job now, outside its
// interval, and returns its id once it is complete: the state of every
// operator after every record read before the call, durable in the job's
// checkpoint store. A job of the same name started later resumes from it.
// The job must have been started with Checkpoints.
func Savepoint(ctx context.Context, run *actors.Run) (uint64, error) {
	x, ok := run.Execution().(*execution)
	if !ok {
		return 0, errors.New("operators: savepoint: not a topology's run")
	}
	reply := make(chan savepointResult, 1)
	x.tell(&savepointMsg{reply: reply})
	select {
	case r := <-reply:
		return r.id, r.err
	case <-x.done:
		select {
		case r := <-reply:
			return r.id, r.err
		default:
		}
		return 0, fmt.Errorf("operators: savepoint: the job ended: %w", x.topo.kit.Aborted)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// onFailure handles a failed instance: the job stops with the operator's
// error, or, with RestartOnFailure and budget left, restarts from its last
// completed checkpoint after the backoff's delay.
func (j *jobActor) onFailure(c actor.Context, m *wire.Failed) {
	x := j.x
	remote := m.Reason == nil // from another process: Gen says which generation
	in := x.byID[m.ID]
	if in != nil && in.gen != x.gen || remote && m.Gen != x.gen || j.restarting {
		return // a failure of a generation being replaced
	}
	reason := m.Reason
	if remote {
		reason = &stageFailure{op: m.Operator, err: errors.New(m.Message)}
	}
	j.restart(c, x.operatorError(actor.NewPID(m.Address, m.ID), reason), "")
}

// restart stops the generation and restarts the job after the backoff, or
// stops it with err when it may not restart. lost is a process that left,
// whose instances are not waited for.
func (j *jobActor) restart(c actor.Context, err error, lost string) {
	x := j.x
	rp := x.topo.cfg.restart
	if rp == nil {
		x.setErr(err)
		c.Stop(c.Self())
		return
	}
	if j.budget == nil {
		j.budget, _ = supervision.NewBudget(rp.budget, rp.within)
	}
	if j.budget == nil || !j.budget.Allow(time.Now()) {
		x.setErr(fmt.Errorf("operators: topology %q: %d restarts within %v spent, giving up: %w", x.topo.name, rp.budget, rp.within, err))
		c.Stop(c.Self())
		return
	}
	j.restarts++
	delay := rp.backoff.Delay(j.restarts)
	x.noteRestart(delay)
	x.traceEvent("sluice.job", "restart", attribute.Int("sluice.restart", j.restarts),
		attribute.String("sluice.delay", delay.String()), attribute.String("error", err.Error()))
	x.sys.Logger().Warn("operator failed; restarting the job from its last checkpoint", "job", x.topo.name,
		"err", err, "restart", j.restarts, "delay", delay)
	j.restarting, j.timerDone, j.alive = true, false, 0
	if j.timer != nil {
		j.timer()
	}
	x.instMu.RLock()
	for _, insts := range x.instances {
		for _, in := range insts {
			if x.local(in.self) {
				c.Stop(in.self)
				j.alive++
			}
		}
	}
	x.instMu.RUnlock()
	if x.dist != nil {
		j.waitHosts = x.stopHosts(map[string]bool{lost: true})
		j.alive += len(j.waitHosts)
	}
	root, pid, gen := x.root, x.jobPID, x.gen
	j.stopTimer = x.topo.cfg.after(delay, func() { root.Send(pid, &restartMsg{gen: gen}) })
}

// maybeRelaunch starts the next generation once the old one has stopped and
// the backoff has elapsed.
func (j *jobActor) maybeRelaunch(c actor.Context) {
	x := j.x
	if !j.restarting || j.alive > 0 || !j.timerDone {
		return
	}
	j.restarting = false
	x.gen++
	if x.cpStore != nil {
		cp, ok, err := x.cpStore.Latest(x.ctx, x.topo.name)
		if err != nil {
			x.setErr(fmt.Errorf("operators: topology %q: restart: load the latest checkpoint: %w", x.topo.name, err))
			c.Stop(c.Self())
			return
		}
		x.restored = nil
		if ok {
			x.restored = &cp
		}
	}
	j.total = 0
	if err := j.launch(c); err != nil {
		err = fmt.Errorf("operators: topology %q: restart: %w", x.topo.name, err)
		if x.dist != nil { // a process may have left while it was deployed to
			j.restart(c, err, "")
			return
		}
		x.setErr(err)
		c.Stop(c.Self())
		return
	}
	if x.cpStore != nil {
		j.cs = coordState{Instances: j.total}
		if x.restored != nil {
			j.cs.Completed = x.restored.ID
			x.cpStatsMu.Lock()
			x.cpStats.RestoredFrom = x.restored.ID
			x.cpStatsMu.Unlock()
		}
		j.started = map[uint64]time.Time{}
		j.arm()
	}
}

// arm schedules the next checkpoint tick.
func (j *jobActor) arm() {
	if j.cs.Stopping {
		return
	}
	root, pid := j.x.root, j.x.jobPID
	j.timer = j.x.topo.cfg.cpAfter(j.x.topo.cfg.cpInterval, func() { root.Send(pid, &cpTick{}) })
}

// feed steps the coordinator and carries out its actions.
func (j *jobActor) feed(c actor.Context, ev any) {
	x := j.x
	var acts []any
	j.cs, acts = step(j.cs, ev)
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		switch a := a.(type) {
		case actInject:
			// Every instance hears of the checkpoint: running sources
			// start it, finished instances answer it (see barrierMsg).
			j.started[a.ID] = time.Now()
			for _, insts := range x.instances {
				for _, in := range insts {
					x.tellFrom(c, in.self, &wire.Barrier{ID: a.ID})
				}
			}
		case actAbandoned:
			delete(j.started, a.ID)
			x.sys.Logger().Debug("checkpoint abandoned for the final checkpoint", "job", x.topo.name, "checkpoint", a.ID)
		case actStore:
			err := x.cpStore.Complete(x.ctx, x.topo.name, persistence.Checkpoint{
				ID: a.ID, Time: time.Now(), States: a.States, Offsets: a.Offsets})
			var more []any
			j.cs, more = step(j.cs, evStored{ID: a.ID, Err: err})
			acts = append(acts, more...)
		case actCompleted:
			d := time.Since(j.started[a.ID])
			delete(j.started, a.ID)
			x.cpStatsMu.Lock()
			x.cpStats.Completed++
			x.cpStats.LastID, x.cpStats.LastDuration, x.cpStats.LastTime = a.ID, d, time.Now()
			x.cpStatsMu.Unlock()
			x.metrics.checkpointDone(d)
			j.savepointDone(c, a.ID)
			for _, insts := range x.instances {
				for _, in := range insts {
					x.tellFrom(c, in.self, &wire.Committed{Gen: x.gen, ID: a.ID})
				}
			}
			x.sys.Logger().Debug("checkpoint completed", "job", x.topo.name, "checkpoint", a.ID, "duration", d, "final", a.Final)
			if a.Final {
				j.finalDone = true
				j.maybeEnd(c)
			}
		case actFailed:
			delete(j.started, a.ID)
			j.endSavepoints(fmt.Errorf("operators: savepoint: checkpoint %d failed: %w", a.ID, a.Err))
			x.cpStatsMu.Lock()
			x.cpStats.Failed++
			x.cpStatsMu.Unlock()
			x.sys.Logger().Error("checkpoint failed", "job", x.topo.name, "checkpoint", a.ID, "err", a.Err, "final", a.Final)
			if a.Final {
				// Without it the sinks' tail can only be committed outside any
				// checkpoint: abort them instead (Aborter discards) and fail,
				// or restart, from the last completed checkpoint.
				since := "the start"
				if j.cs.Completed > 0 {
					since = "checkpoint " + strconv.FormatUint(j.cs.Completed, 10)
				}
				j.restart(c, fmt.Errorf("operators: topology %q: final checkpoint %d: %w (the sinks' records since %s are not committed)",
					x.topo.name, a.ID, a.Err, since), "")
			}
		}
	}
}

func (j *jobActor) launch(c actor.Context) (err error) {
	x := j.x
	defer func() { // a panic while building must reach Start as an error, not hang it
		if r := recover(); r != nil {
			err = fmt.Errorf("operators: launching job %q: %v", x.topo.name, r)
		}
	}()
	x.place()
	if err := x.build(); err != nil {
		return err
	}
	j.reported, j.closed, j.finalDone = map[[2]int]bool{}, 0, false
	defer func() { j.instances = j.total }()
	for _, insts := range x.instances {
		for _, in := range insts {
			j.total++
			if !x.local(in.self) {
				continue
			}
			if err := x.spawn(c, in, x.jobPID.Id); err != nil {
				return err
			}
		}
	}
	if x.dist != nil { // the other processes spawn and start theirs before any source starts
		if err := x.deploy(); err != nil {
			return err
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
	return nil
}
