package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/graph"
	"github.com/sluicehq/sluice/internal/shed"
)

// latencyTick asks the job actor to close a latency window.
type latencyTick struct{}

// ProbesPerWindow is how many times a window a LatencyTarget's controller
// is looked at: once at the window's end (shed.Controller.Step), the others
// between (shed.Controller.Probe).
const ProbesPerWindow = 8

// DefaultLatencyWindow is the window of LatencyWindow stats and of a
// LatencyTarget's controller unless operators.LatencyWindow says otherwise.
const DefaultLatencyWindow = time.Second

// shedder drives a shed.Controller (DESIGN.md, Latency and shedding): the
// job actor turns each latency window into a shed.Window and carries out
// what the controller returns. Only the job actor touches it.
type shedder struct {
	c       shed.Controller
	points  map[string][]*shedPoint // by the controller's point names
	born    map[[2]int]int64        // each source instance's latest ingestion time read, at the last window
	offered map[[2]int]int64        // and the records it had read
	started int64                   // the job's start (unix ns): the ingestion time before the first window
	view    shed.Controller         // a copy of c for Stats, under latMu
	// probePrev is every task's measurements at the last look or window,
	// probeAt when, and probeOffered each source instance's records read
	// then (probeLatency).
	probePrev    []latencySnap
	probeAt      int64
	probeOffered map[[2]int]int64
	probeBorn    map[[2]int]int64 // each source instance's latest ingestion time read, at the last look
	report       shed.Report      // the latest report, under latMu
}

// latencyEvery is how many batches the instances time one in: every batch
// under a LatencyTarget, whose controller reads the records handled and
// the time spent on them from the processing histograms.
func (x *execution) latencyEvery() uint64 {
	cfg := x.topo.Config()
	if cfg.LatencyTarget > 0 {
		return 1
	}
	return uint64(max(1, cfg.LatencyEvery))
}

// setupLatency reads the topology's latency options: measurement (on
// unless NoLatencyStats), and a LatencyTarget's controller and shed points.
func (x *execution) setupLatency() error {
	cfg := x.topo.Config()
	x.setClock(cfg)
	if cfg.NoLatency {
		if cfg.LatencyTarget > 0 {
			return errors.New("LatencyTarget needs latency measured: remove NoLatencyStats")
		}
		return nil
	}
	if cfg.LatencyTarget < 0 || cfg.LatencyWindow < 0 {
		return fmt.Errorf("latency target %v, window %v: must not be negative", cfg.LatencyTarget, cfg.LatencyWindow)
	}
	x.lats = make([][]*instLatency, len(x.plan.Chains))
	p := x.plan
	if k := cfg.FixedShed; k > 0 && k < 1 {
		x.sheds = make(map[[2]int]*shedPoint)
		for s, chain := range p.Chains {
			if chain[0].Role() == graph.RoleSource {
				for _, e := range p.Outs[s] {
					sp := newShedPoint()
					sp.set(k, cfg.FixedDrop)
					x.sheds[[2]int{s, e.To}] = sp
				}
			}
		}
	}
	if cfg.LatencyTarget == 0 {
		return nil
	}
	if x.sheds != nil {
		return errors.New("LatencyTarget and a fixed shedding rate exclude each other")
	}
	x.sheds = make(map[[2]int]*shedPoint)
	sh := &shedder{points: make(map[string][]*shedPoint), born: make(map[[2]int]int64), offered: make(map[[2]int]int64), started: x.now(),
		probeOffered: make(map[[2]int]int64), probeBorn: make(map[[2]int]int64)}
	// Looks start with the job: the first window's are measured from its
	// start (with the sources' reads as its arrivals, see shed.Probe).
	sh.probePrev, sh.probeAt = make([]latencySnap, len(p.Chains)), sh.started
	point := func(from, to int) *shedPoint {
		k := [2]int{from, to}
		if x.sheds[k] == nil {
			x.sheds[k] = newShedPoint()
		}
		return x.sheds[k]
	}
	reach := make([][]bool, len(p.Chains)) // reach[a][b]: b is downstream of a (or a itself)
	for a := range p.Chains {
		reach[a] = make([]bool, len(p.Chains))
		stack := []int{a}
		for len(stack) > 0 {
			t := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if reach[a][t] {
				continue
			}
			reach[a][t] = true
			for _, e := range p.Outs[t] {
				stack = append(stack, e.To)
			}
		}
	}
	isSource := func(t int) bool { return p.Chains[t][0].Role() == graph.RoleSource }
	// selectiveFrom: a Selective operator sees what leaves task t: one in a
	// task downstream of t, not t's own chain.
	selectiveFrom := func(t int) bool {
		for u := range p.Chains {
			if u != t && reach[t][u] && slices.ContainsFunc(p.Chains[u], (*graph.Node).Selective) {
				return true
			}
		}
		return false
	}
	var tasks []shed.Task
	for b, chain := range p.Chains {
		task := shed.Task{Name: chain[0].Name()}
		if isSource(b) {
			tasks = append(tasks, task)
			continue
		}
		// At the sources that feed b when everything they feed is upstream
		// or downstream of b (no branch bypasses it); else on the edges
		// into b.
		var srcs []int
		useEdges := false
		for s := range p.Chains {
			if !isSource(s) || !reach[s][b] {
				continue
			}
			srcs = append(srcs, s)
			for u := range p.Chains {
				if reach[s][u] && !reach[u][b] && !reach[b][u] {
					useEdges = true
				}
			}
		}
		var names []string
		var pts []*shedPoint
		sample := true
		// Sampling at the sources would reach a Selective operator, but one
		// upstream of b only: the edges into b, where sampling is allowed,
		// relieve b and leave that operator's input whole.
		edgeSamples := !slices.ContainsFunc(chain, (*graph.Node).Selective) && !selectiveFrom(b)
		for _, s := range srcs {
			if selectiveFrom(s) && edgeSamples {
				useEdges = true
			}
		}
		if !useEdges && len(srcs) > 0 {
			for _, s := range srcs {
				names = append(names, p.Chains[s][0].Name())
				for _, e := range p.Outs[s] {
					pts = append(pts, point(s, e.To))
				}
				sample = sample && !selectiveFrom(s)
			}
		} else {
			for _, e := range p.Ins[b] {
				names = append(names, p.Chains[e.From][0].Name()+"->"+chain[0].Name())
				pts = append(pts, point(e.From, b))
			}
			sample = edgeSamples
		}
		slices.Sort(names)
		names = slices.Compact(names)
		task.Point, task.Sample = strings.Join(names, "+"), sample
		if len(pts) > 0 {
			sh.points[task.Point] = pts
		} else {
			task.Point = ""
		}
		tasks = append(tasks, task)
	}
	sh.c = shed.New(shed.Config{Target: cfg.LatencyTarget, Tasks: tasks})
	sh.view = sh.c // ShedStatsOf reports the target before the first window closes
	x.shedder = sh
	return nil
}

func (x *execution) latencyWindowLength() time.Duration {
	if d := x.topo.Config().LatencyWindow; d > 0 {
		return d
	}
	return DefaultLatencyWindow
}

// closeLatencyWindow records what every task measured in the window that
// ends now and, with a LatencyTarget, steps the controller with it and
// carries out its actions. The job actor calls it.
func (x *execution) closeLatencyWindow() {
	n := len(x.plan.Chains)
	cur := make([]latencySnap, n)
	for t := range n {
		cur[t] = x.taskLatency(t)
	}
	x.latMu.Lock()
	win := make([]latencySnap, n)
	for t := range n {
		if x.latPrev != nil {
			win[t] = cur[t].since(x.latPrev[t])
		} else {
			win[t] = cur[t]
		}
	}
	x.latPrev, x.latWin = cur, win
	x.latMu.Unlock()
	sh := x.shedder
	if sh == nil {
		return
	}
	length := x.latencyWindowLength()
	w := shed.Window{Length: length, Loads: make([]shed.Load, n)}
	for t, s := range win {
		if x.plan.Chains[t][len(x.plan.Chains[t])-1].Role() == graph.RoleSink {
			w.P99 = max(w.P99, s.e2e.quantile(0.99))
		}
		w.Loads[t] = shed.Load{Busy: s.busy, Parallelism: x.plan.Par[x.plan.Chains[t][0]]}
	}
	// The rate records arrive at the sources: what they read over the
	// ingestion time it covers (more than they read when back-pressure
	// leaves records waiting outside, less while they read a backlog), and
	// how far behind the arrivals the most behind of them read. A source
	// whose reader does not say when records arrived (IngestionTimer)
	// counts them as arriving when read.
	now := x.now()
	var admitted int64
	for t, chain := range x.plan.Chains {
		if chain[0].Role() != graph.RoleSource || t >= len(x.lats) {
			continue
		}
		for i, l := range x.lats[t] {
			k := [2]int{t, i}
			born, offered := l.lastBorn.Load(), l.offered.Load()
			if prev := sh.born[k]; born != 0 && offered > sh.offered[k] {
				if prev == 0 {
					prev = sh.started
				}
				span := max(time.Duration(born-prev), length/100)
				w.Arrivals += float64(offered-sh.offered[k]) / span.Seconds()
				w.Lag = max(w.Lag, time.Duration(now-born))
			}
			sh.born[k], sh.offered[k] = born, offered
		}
		admitted += cur[t].offered - cur[t].shed[shedSampled] - cur[t].shed[shedDropped]
	}
	queued := make([]int64, n)
	for _, st := range x.InstanceStats() {
		if st.Task < n {
			queued[st.Task] += int64(st.Queued)
		}
	}
	for t, s := range win {
		w.Loads[t].Queued = queued[t]
		if s.busy > 0 && s.handled > 0 {
			w.Loads[t].Capacity = float64(s.handled) / s.busy.Seconds() * float64(w.Loads[t].Parallelism)
		}
		if admitted > 0 { // as if nothing were shed on the edges into t
			// What reached t, handled or waiting, per record admitted.
			g := float64(cur[t].handled+queued[t]) / float64(admitted)
			for k, p := range x.sheds {
				if k[1] == t && !x.isSourceTask(k[0]) {
					g /= max(p.rate(), 1e-3)
				}
			}
			w.Loads[t].Gain = g
		}
	}
	var acts []shed.Action
	sh.c, acts = sh.c.Step(w)
	sh.probePrev, sh.probeAt = cur, now
	x.applyShed(acts)
}

// probeLatency takes a look between two windows: each task's busy time and
// capacity since the last look or window, what waits at its inputs, and the
// sources' lag, for shed.Controller.Probe (which cuts only when the queue
// at the bottleneck predicts a wait past the target). The job actor calls
// it ProbesPerWindow − 1 times a window.
func (x *execution) probeLatency() {
	sh := x.shedder
	if sh == nil || sh.probePrev == nil {
		return
	}
	n := len(x.plan.Chains)
	now := x.now()
	p := shed.Probe{Length: time.Duration(now - sh.probeAt), Window: x.latencyWindowLength(), Loads: make([]shed.Load, n)}
	cur := make([]latencySnap, n)
	for t := range n {
		cur[t] = x.taskLatency(t)
	}
	for t, chain := range x.plan.Chains {
		if chain[0].Role() != graph.RoleSource || t >= len(x.lats) {
			continue
		}
		for i, l := range x.lats[t] {
			k := [2]int{t, i}
			born, offered := l.lastBorn.Load(), l.offered.Load()
			if born != 0 && offered > sh.probeOffered[k] { // read since the last look
				p.Lag = max(p.Lag, time.Duration(now-born))
				// The records read over the ingestion time they cover, as
				// a window's arrivals: under back-pressure a source reads
				// fewer than arrive, and its reads alone would say the
				// load is lighter than it is.
				prev := sh.probeBorn[k]
				if prev == 0 {
					prev = sh.started
				}
				if span := max(time.Duration(born-prev), p.Window/100); p.Length > 0 {
					p.Arrivals += float64(offered-sh.probeOffered[k]) / span.Seconds()
				}
			}
			sh.probeOffered[k], sh.probeBorn[k] = offered, born
		}
	}
	queued := make([]int64, n)
	for _, st := range x.InstanceStats() {
		if st.Task < n {
			queued[st.Task] += int64(st.Queued)
		}
	}
	for t := range n {
		d := cur[t].since(sh.probePrev[t])
		l := shed.Load{Busy: d.busy, Parallelism: x.plan.Par[x.plan.Chains[t][0]], Queued: queued[t]}
		if d.busy > 0 && d.handled > 0 {
			l.Capacity = float64(d.handled) / d.busy.Seconds() * float64(l.Parallelism)
		}
		p.Loads[t] = l
	}
	var acts []shed.Action
	sh.c, acts = sh.c.Probe(p)
	sh.probePrev, sh.probeAt = cur, now
	x.applyShed(acts)
}

// applyShed carries out the controller's actions (the job actor).
func (x *execution) applyShed(acts []shed.Action) {
	sh := x.shedder
	x.latMu.Lock()
	sh.view = sh.c
	x.latMu.Unlock()
	for _, a := range acts {
		switch a := a.(type) {
		case shed.SetRate:
			for _, p := range sh.points[a.Point] {
				p.set(a.Keep, a.Drop)
			}
		case shed.Report:
			x.latMu.Lock()
			sh.report = a
			x.latMu.Unlock()
			if a.Infeasible {
				x.sys.Logger().Warn("latency target cannot be held", "job", x.topo.Name(), "target", sh.c.Target, "reason", a.Reason)
			} else {
				x.sys.Logger().Info("latency target holds again", "job", x.topo.Name(), "target", sh.c.Target)
			}
		}
	}
}

// ShedStats describe a LatencyTarget's controller.
type ShedStats struct {
	Target     time.Duration
	Point      string  // where it sheds now, "" when it sheds nothing
	Keep       float64 // the fraction kept there
	Drop       bool    // dropping whole batches rather than sampling
	Bottleneck string  // the busiest task's first operator, in the latest window
	Infeasible string  // why the target cannot be held, "" while it can
}

func (x *execution) shedStats() ShedStats {
	sh := x.shedder
	if sh == nil {
		return ShedStats{}
	}
	x.latMu.Lock()
	defer x.latMu.Unlock()
	v := sh.view
	st := ShedStats{Target: v.Target, Point: v.Point, Keep: v.Keep, Drop: v.Drop, Bottleneck: v.Bottleneck}
	if v.Keep == 0 {
		st.Keep = 1
	}
	if sh.report.Infeasible {
		st.Infeasible = sh.report.Reason
	}
	return st
}

// keepRate is the probability that a record of the batch being handled
// survived the shedding upstream (stage.Ctx.Keep).
func (in *instance) keepRate() float64 {
	if in.curKeep == 0 {
		return 1
	}
	return in.curKeep
}

// ShedStatsOf reports a topology run's LatencyTarget controller (zero
// statistics without one, or for another kind of job).
func ShedStatsOf(run *actors.Run) ShedStats {
	if x, ok := run.Execution().(*execution); ok {
		return x.shedStats()
	}
	return ShedStats{}
}

func (x *execution) isSourceTask(t int) bool { return x.plan.Chains[t][0].Role() == graph.RoleSource }

// retargetMsg asks the job actor to change the LatencyTarget.
type retargetMsg struct {
	target time.Duration
	reply  chan error
}

// retarget changes the controller's target (the job actor calls it).
func (x *execution) retarget(d time.Duration) error {
	sh := x.shedder
	if sh == nil || sh.c.Target <= 0 {
		return fmt.Errorf("%w: job %q was started without a LatencyTarget (operators.LatencyTarget): one cannot be added while it runs", ErrNoLiveChange, x.topo.Name())
	}
	old := sh.c.Target
	var acts []shed.Action
	sh.c, acts = sh.c.Retarget(d)
	x.latMu.Lock()
	sh.view = sh.c
	for _, a := range acts {
		if r, ok := a.(shed.Report); ok {
			sh.report = r
		}
	}
	x.latMu.Unlock()
	x.sys.Logger().Info("latency target changed", "job", x.topo.Name(), "target", d, "was", old)
	return nil
}

// SetLatencyTarget changes the LatencyTarget of a running job that was
// started with one (operators.LatencyTarget): the controller holds the
// end-to-end p99 under d from the next window on, from the rate it sheds
// now. A job without one refuses (ErrNoLiveChange).
func SetLatencyTarget(ctx context.Context, run *actors.Run, d time.Duration) error {
	x, ok := run.Execution().(*execution)
	if !ok {
		return fmt.Errorf("%w: not a topology's run", ErrNoLiveChange)
	}
	if d <= 0 {
		return fmt.Errorf("operators: latency target %v: must be positive", d)
	}
	reply := make(chan error, 1)
	x.tell(&retargetMsg{target: d, reply: reply})
	select {
	case err := <-reply:
		return err
	case <-x.done:
		return fmt.Errorf("%w: job %q has ended", ErrNoLiveChange, x.topo.Name())
	case <-ctx.Done():
		return ctx.Err()
	}
}
