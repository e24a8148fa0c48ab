// Package shed is the load shedder of a topology with a latency target
// (operators.LatencyTarget), as a pure state machine: Controller.Step takes
// what the job measured over one window and returns the next state and
// the actions to carry out, and Controller.Probe the same for a look
// between windows. The job's actor (internal/engine) only turns its
// measurements into Window and Probe events and carries out SetRate and
// Report; the machine reads no clock and starts no goroutine, so its
// transcripts (testdata, go test -rewrite) are its specification.
//
// # The control law
//
// Each window the controller finds the bottleneck, the task with the
// highest utilisation (busy time over the window, per instance), and
// compares the end-to-end p99 latency of the window with the target T:
//
//   - p99 > T (over) two windows in a row, or p99 > 2T with a queue at
//     the bottleneck or a lag at the sources that explains it (they take
//     at least Low × T to work through; a stall of the process leaves
//     neither, and one window's spike is not cut for): the rate kept
//     at the bottleneck's shed point becomes the lower of two.
//     The steady rate, Headroom × capacity / (arrivals × gain), admits
//     Headroom of the bottleneck's capacity (records a second it handles
//     when busy all the time) of what arrives at the sources (records a
//     second, whether or not they could read it: back-pressure leaves it
//     waiting outside), gain being the records that reach the bottleneck
//     per record admitted. The drain rate,
//     (capacity × (window + Low × T) − queued) / (arrivals × gain × (window + lag)),
//     is what the bottleneck, busy all the next window, works through:
//     the records queued at its inputs and what the sources read, the
//     backlog waiting outside ("lag" behind the arrivals) and the window's
//     arrivals, leaving Low × T of work queued. So the bottleneck stays
//     busy while the backlog drains, and the rate is no lower than that
//     needs. Without those measurements, Headroom × keep / utilisation,
//     divided by 1 + lag / window. When the p99 is over a third window in
//     a row and did not fall (the cut before had a window to show: the
//     records of the window right after a cut were admitted before it),
//     the rate is also cut to at most 0.9 × keep, and that becomes the
//     steady rate. Once the sources have read their backlog (lag under a
//     tenth of the window) and the p99 is no longer over, the rate goes
//     back to the steady one, as far as the bottleneck's queue allows
//     (when only looks have cut, the steady rate is the first window's
//     after them: the start transcript).
//   - what waits predicts a wait past T: the records queued at the
//     bottleneck at the capacity it measured in the window, plus the
//     sources' lag, is the wait of a record that joins the queue now.
//     Past T the rate is cut at once as for a p99 over, whatever the
//     window's p99 (a capacity that dipped late in the window has not
//     shown in it yet). Between windows the driver takes a few looks
//     (Controller.Probe: busy time and capacity since the last look, the
//     queue, the lag and the sources' arrivals now); a look cuts on the
//     same prediction to the lower of the steady and the drain rate with
//     the look's capacity and the latest window's arrivals (the look's
//     when they are more: before the first window, or a load that stepped
//     up), but no lower than half the rate in force, nor than a quarter of
//     the rate the latest window left (a look's capacity, measured over a
//     fraction of a window, is noisy: a stall of the process in it reads
//     as a capacity dip). After a look's cut,
//     a later look before the next window cuts again only while what
//     waits still grows: the rate in force admits more than the
//     bottleneck handles (a wait the records admitted before the cut make
//     longer, on their way, does not count). So a capacity dip costs a
//     look's time (an eighth of a window), not the two windows over the
//     p99 asks for, and a job overloaded from its start reaches a rate
//     the bottleneck can carry in a few looks, halving at each at most
//     (the start transcript).
//   - p99 < Low × T (well under) for a second window in a row, and
//     something is shed, and what waits predicts under Low × T too: the
//     rate admits Fill of the bottleneck's
//     capacity of what arrives (with the measurements; else keep grows by
//     Fill / utilisation, at most doubling a window), up to 1 (shedding
//     stops). Fill (0.95) above Headroom (0.9) uses the slack a latency
//     well under the target shows, but only while the capacity holds
//     still (it moved less than Fill − Headroom of itself since the
//     window before; else Headroom): on a machine shared with others the
//     capacity swings from window to window and a rate that fills it
//     pushes the queue past the target when it dips. A p99 that goes over
//     the target twice cuts back to Headroom. A window with slack counts
//     as well under, admitting Headroom: the p99 in the band but the
//     bottleneck busy less than Headroom² of the window with what waits
//     under Low × T. A process slow to schedule (a loaded machine) has a
//     p99 floor above Low × T however little is admitted, and without
//     slack the rate would stay as low as a cut left it.
//   - otherwise nothing changes. The band [Low × T, T], and the second
//     window asked for, are what keep the rate from oscillating: it moves
//     only when the latency stays out of the band (or passes 2T), so a
//     load that swings from window to window across the band's edges
//     leaves it alone; in the oscillation transcript it does not move at
//     all once settled. Under a steady overload the rate stays between
//     the steady rate and Fill / Headroom of it (5.6 %: the backlog
//     transcript).
//
// Nothing is shed while the target holds: keep starts at 1 and only an
// over window lowers it.
//
// # Where and how
//
// Each task names its shed point (Task.Point: the sources that feed it, or
// the edge into it) and whether records may be sampled there (Task.Sample:
// false when an operator downstream declared it must not see sampled
// input, operators.Selective). Sampling keeps each record with the rate;
// dropping keeps whole batches with the rate, so the runs of input a
// selective operator sees are complete. When keep has been at MinKeep for
// Patience over windows, or the bottleneck has no shed point, the
// controller reports that the target cannot be held (once per episode).
package shed

import (
	"fmt"
	"math"
	"time"
)

// Config is a controller's fixed part.
type Config struct {
	Target   time.Duration
	Headroom float64 // the fraction of the bottleneck's capacity to admit after a cut (default 0.9)
	Fill     float64 // the fraction it is raised to while the p99 stays well under the band (default 0.95)
	Low      float64 // the band's low end, as a fraction of the target (default 0.5)
	MinKeep  float64 // the least rate kept (default 0.01)
	Patience int     // over windows at MinKeep before the target is reported unreachable (default 3)
	Tasks    []Task
}

// Task is one task of the plan (a fused chain of operators).
type Task struct {
	Name string
	// Point is where to shed when the task is the bottleneck ("" for a
	// task that cannot be relieved: a source), and Sample whether
	// sampling is allowed there; otherwise whole batches are dropped.
	Point  string
	Sample bool
}

// Controller is the machine's state.
type Controller struct {
	Config
	Point      string  // the shed point in use, "" when nothing is shed
	Keep       float64 // the rate kept there
	Drop       bool    // dropping whole batches rather than sampling
	Bottleneck string  // the latest window's
	AtMin      int     // over windows in a row at MinKeep
	Over       int     // windows in a row over the target
	Under      int     // windows in a row well under the target
	LastP99    time.Duration
	Steady     float64 // the rate the latest cut found without the backlog's share
	LastCap    float64 // the bottleneck's capacity in the window before (0: unknown)
	Infeasible bool    // the target was reported unreachable, and still is
	// Probed: a look cut the rate since the latest window (a later look
	// cuts again only while the rate in force admits more than the
	// bottleneck handles).
	Probed     bool
	ProbedFrom float64 // the rate in force before the first look's cut since the latest window
	Arrivals   float64 // the latest window's (for probes)
	Gains      []float64
}

// New returns a controller that sheds nothing.
func New(cfg Config) Controller {
	if cfg.Headroom <= 0 {
		cfg.Headroom = 0.9
	}
	if cfg.Fill <= 0 {
		cfg.Fill = max(0.95, cfg.Headroom)
	}
	if cfg.Low <= 0 {
		cfg.Low = 0.5
	}
	if cfg.MinKeep <= 0 {
		cfg.MinKeep = 0.01
	}
	if cfg.Patience <= 0 {
		cfg.Patience = 3
	}
	return Controller{Config: cfg, Keep: 1}
}

// Window is what the job measured over one window.
type Window struct {
	Length time.Duration
	P99    time.Duration // end to end, the highest over the sinks; 0: no record reached a sink
	Loads  []Load        // by task, as Config.Tasks
	// Arrivals is the rate records arrived at the sources (records a
	// second), whether or not the sources read them; 0: unknown.
	Arrivals float64
	// Lag is how far behind its arrivals the most behind source read at
	// the window's end: the age of the newest record it read.
	Lag time.Duration
}

// Probe is a look between windows (the driver takes a few a window): each
// task's work since the last look or window (Busy, Capacity) and what waits
// at its inputs now (Queued), and the sources' lag now. It has no p99: a
// probe only cuts, and only when the queue at the bottleneck predicts a
// wait past the target (see Controller.Probe).
type Probe struct {
	Length time.Duration // since the last probe or window
	Window time.Duration // the windows' length (the drain rate's horizon)
	Loads  []Load        // by task; Gain is ignored (the latest window's is used)
	Lag    time.Duration
	// Arrivals is the rate records arrived at the sources, as a window's
	// but measured since the last look (0: unknown). Used when more than
	// the latest window's: before the first window, when the controller
	// has no window's arrivals yet (a job overloaded from its start would
	// otherwise queue a whole window's excess before its first cut), and
	// when the load stepped up since it.
	Arrivals float64
}

// Load is one task's work in a window.
type Load struct {
	Busy        time.Duration // summed over its instances
	Parallelism int
	// Capacity is the records a second the task handles when all its
	// instances are busy all the time (0: unknown), and Gain the records
	// it handles per record the sources admit (0: unknown, taken as 1).
	Capacity, Gain float64
	// Queued is the records waiting at the task's inputs at the window's
	// end.
	Queued int64
}

// Action is what the driver carries out.
type Action interface{ action() }

// SetRate makes a shed point keep the fraction Keep of its records (1:
// shed nothing), by sampling records or, with Drop, dropping whole batches.
type SetRate struct {
	Point string
	Keep  float64
	Drop  bool
}

// Report tells that the target cannot be held (Infeasible) or can again.
type Report struct {
	Infeasible bool
	Reason     string
}

func (SetRate) action() {}
func (Report) action()  {}

// Step returns the state after window w and the actions to carry out. It
// does not change c.
func (c Controller) Step(w Window) (Controller, []Action) {
	var acts []Action
	prevP99 := c.LastP99
	c.LastP99 = w.P99
	c.Probed = false
	c.Arrivals, c.Gains = w.Arrivals, make([]float64, len(w.Loads))
	for i, l := range w.Loads {
		c.Gains[i] = l.Gain
	}
	b, util := c.bottleneck(w)
	lastCap := c.LastCap
	c.LastCap = 0
	if b >= 0 {
		c.Bottleneck = c.Tasks[b].Name
		c.LastCap = w.Loads[b].Capacity
	}
	over := w.P99 > c.Target
	under := w.P99 < time.Duration(c.Low*float64(c.Target))
	if over {
		c.Over++
	} else {
		c.Over = 0
	}
	// Slack: the p99 in the band, but the bottleneck neither busy (under
	// Headroom² of the time) nor with much waiting (set below): where
	// the process itself is slow to schedule (a machine shared with
	// others), the p99 does not fall under the band however little is
	// admitted, and without this the rate would stay as low as a cut left
	// it.
	slack := false
	if b >= 0 && w.Loads[b].Capacity > 0 && !over && !under && util < c.Headroom*c.Headroom {
		slack = c.wait(w, b) < time.Duration(c.Low*float64(c.Target))
	}
	if under || slack {
		c.Under++
	} else {
		c.Under = 0
	}
	// A window over the target acts when the one before was over too, or
	// when it is more than twice the target; one well under the band
	// when the one before was too. So a load that swings from window to
	// window across the band's edges leaves the rate alone.
	//
	// Past 2T at once only when what waits explains it (the bottleneck's
	// queue takes, with the sources' lag, at least Low × T to work
	// through) or is not measured: a single window's p99 from a stall of
	// the process (a machine shared with others deschedules it) leaves no
	// queue behind, and a cut for it would shed for nothing.
	//
	// What waits is also a prediction: a record queued at the bottleneck
	// now waits about queued ÷ capacity (the rate the bottleneck drains
	// it, measured this window) plus the sources' lag. When that passes
	// the target, the records already waiting will be over it whatever
	// this window's p99 says (a capacity that dipped late in the window
	// has not shown in it yet): cut at once, over or not, rather than
	// wait a window or two for the p99 to show it.
	explained, predicted, queueLow := true, false, true
	if b >= 0 {
		if l := w.Loads[b]; l.Capacity > 0 {
			wait := c.wait(w, b)
			explained = wait >= time.Duration(c.Low*float64(c.Target))
			predicted, queueLow = wait > c.Target, !explained
		}
	}
	act := predicted || (over && (c.Over >= 2 || (w.P99 > 2*c.Target && explained)))
	// back is the rate to go back to once the sources have read the
	// backlog a cut was for: the steady rate, nor more than this window's
	// capacity and what waits at the bottleneck allow (0: none). When it
	// is no higher than the rate in force, the raise for a p99 well under
	// the band may still apply.
	back := 0.0
	// Looks cut, but no window has yet: the steady rate is the one this
	// window measures, so the rate comes back to it once the backlog the
	// looks cut for is worked off (else it stays as low as they left it
	// until two windows well under the band).
	if c.Point != "" && c.Steady == 0 {
		if in, ok := c.model(w, b); ok {
			c.Steady = round(clamp(c.Headroom*w.Loads[b].Capacity/in, c.MinKeep, 1))
		}
	}
	if c.Point != "" && c.Keep < c.Steady && w.Lag < w.Length/10 {
		back = c.Steady
		if in, ok := c.model(w, b); ok {
			back = round(clamp(min(back, c.Headroom*w.Loads[b].Capacity/in, c.drain(w, b, in)), c.MinKeep, 1))
		}
	}
	switch {
	case over && !act:
		return c, nil
	case act && b < 0:
		return c.report(acts, true, "no task is busy: nothing to shed")
	case act && c.Tasks[b].Point == "":
		return c.report(acts, true, fmt.Sprintf("the bottleneck %s has no place to shed before it", c.Tasks[b].Name))
	case act:
		t := c.Tasks[b]
		if t.Point != c.Point && c.Point != "" { // the bottleneck moved: shed at its point instead
			acts = append(acts, SetRate{Point: c.Point, Keep: 1})
			c.Point, c.Keep = "", 1
		}
		// The rate that admits Headroom of the bottleneck's capacity of
		// what arrives (steady), and below it the one that also works
		// through what waits outside and at the bottleneck within a
		// window (drain).
		k := c.Headroom * c.Keep / max(util, 1e-9)
		in, modelled := c.model(w, b)
		if modelled {
			k = c.Headroom * w.Loads[b].Capacity / in
		}
		// Over and not falling though the window before was over too and
		// the cut before it had a window to show: the model is wrong
		// (or missing), cut by a tenth more, and take that as the
		// steady rate.
		deeper := c.Over >= 3 && w.P99 >= prevP99*9/10
		if deeper {
			k = min(k, 0.9*c.Keep)
		}
		c.Steady = round(clamp(k, c.MinKeep, 1))
		if modelled {
			k = min(k, c.drain(w, b, in))
		} else {
			k /= 1 + float64(max(w.Lag, 0))/float64(max(w.Length, 1))
		}
		k = clamp(k, c.MinKeep, 1)
		if c.Keep <= c.MinKeep {
			c.AtMin++
		} else {
			c.AtMin = 0
		}
		c.Point, c.Keep, c.Drop = t.Point, round(k), !t.Sample
		acts = append(acts, SetRate{Point: c.Point, Keep: c.Keep, Drop: c.Drop})
		if c.AtMin >= c.Patience {
			return c.report(acts, true, fmt.Sprintf("p99 %v over the target %v with %s keeping %.2f, the least allowed", w.P99, c.Target, c.Point, c.MinKeep))
		}
		return c, acts
	case back > c.Keep:
		// The backlog the rate was lowered for is read: back to the
		// steady rate, or as near as what waits at the bottleneck allows.
		c.Keep = back
		acts = append(acts, SetRate{Point: c.Point, Keep: c.Keep, Drop: c.Drop})
	case (under || slack) && c.Point != "" && c.Under >= 2 && queueLow:
		// Well under the band two windows in a row: admit Fill of the
		// bottleneck's capacity (at most doubling the rate), or, with
		// the measurements, what the load now needs of it. With slack
		// rather than under, Headroom of it.
		c.AtMin = 0
		// Fill only while the capacity holds still (it moved less than
		// Fill − Headroom since the window before): a capacity that
		// swings from window to window (a machine shared with others)
		// would push a queue past the target, so Headroom then.
		fill := c.Headroom
		if cp := w.Loads[b].Capacity; under && lastCap > 0 && cp > 0 && math.Abs(cp-lastCap) <= (c.Fill-c.Headroom)*lastCap {
			fill = c.Fill
		}
		k := c.Keep * min(2, fill/max(util, 1e-9))
		if in, ok := c.model(w, b); ok {
			k = fill * w.Loads[b].Capacity / in
		}
		if k >= 0.99 {
			acts = append(acts, SetRate{Point: c.Point, Keep: 1})
			c.Point, c.Keep, c.Drop, c.Steady = "", 1, false, 0
		} else if k = round(k); k > c.Keep {
			c.Keep = k
			acts = append(acts, SetRate{Point: c.Point, Keep: c.Keep, Drop: c.Drop})
		}
	}
	if !over {
		c.AtMin = 0
		if c.Infeasible {
			return c.report(acts, false, "")
		}
	}
	return c, acts
}

// Probe returns the state after a look between windows, and the actions
// to carry out. It cuts only when the bottleneck (the busiest task since
// the last look) has a shed point and what is queued there, at the
// capacity it showed since the last look, plus the sources' lag, predicts
// a wait past the target: to the lower of the steady and the drain rate,
// from the latest window's arrivals (the look's when more) and gains, as a
// window would, but no lower than half the rate in force, nor than a
// quarter of the rate the latest window left. After a look's
// cut, again before the next window only while the rate in force admits
// more than the bottleneck's capacity (the records admitted before a cut
// are still on their way at the next look, and make what waits look
// longer for a while), and never raising the rate. A capacity that dips
// in mid-window so costs a look's time, not a window or two. It does not
// change c.
func (c Controller) Probe(p Probe) (Controller, []Action) {
	// The latest window's arrivals, or the look's when they are more: before
	// the first window (none yet), or a load that stepped up since.
	arrivals := max(c.Arrivals, p.Arrivals)
	if arrivals <= 0 {
		return c, nil
	}
	w := Window{Length: p.Length, Loads: p.Loads, Arrivals: arrivals, Lag: p.Lag}
	b, _ := c.bottleneck(w)
	if b < 0 || c.Tasks[b].Point == "" || w.Loads[b].Capacity <= 0 {
		return c, nil
	}
	if b < len(c.Gains) {
		w.Loads[b].Gain = c.Gains[b]
	}
	t := c.Tasks[b]
	in, _ := c.model(w, b)
	// Past the target, and, when a look cut since the latest window, what
	// waits still grows: the rate in force admits more than the
	// bottleneck's capacity. Not a wait that the records admitted before
	// the cut, still on their way, make longer for a while: the rate in
	// force is then below the capacity.
	wait := c.wait(w, b)
	if wait <= c.Target || (c.Probed && c.Keep*in <= w.Loads[b].Capacity) {
		return c, nil
	}
	// The next window's rate: as if the probe's capacity held a whole
	// window (the drain rate's window is the controller's, not the look's).
	w.Length = max(p.Window, p.Length)
	// At most halving the rate, and to no less than a quarter of the rate
	// the latest window left: a look's capacity is measured over a
	// fraction of a window, and on a machine shared with others a stall
	// of the process in it would otherwise cut deep, look after look; the
	// window after cuts deeper if what waits still asks for it.
	from := c.Keep
	if c.Probed {
		from = c.ProbedFrom
	}
	k := min(c.Headroom*w.Loads[b].Capacity/in, c.drain(w, b, in))
	k = round(clamp(max(k, c.Keep/2, from/4), c.MinKeep, 1))
	var acts []Action
	if t.Point != c.Point && c.Point != "" {
		acts = append(acts, SetRate{Point: c.Point, Keep: 1})
		c.Point, c.Keep = "", 1
	}
	if k >= c.Keep {
		return c, acts
	}
	// The steady rate stays the latest window's: a look's capacity,
	// measured over a fraction of a window, is too noisy to keep.
	c.Probed, c.ProbedFrom, c.Bottleneck = true, from, t.Name
	c.Point, c.Keep, c.Drop = t.Point, k, !t.Sample
	return c, append(acts, SetRate{Point: c.Point, Keep: c.Keep, Drop: c.Drop})
}

// model is the records a second that reach the bottleneck b per unit of
// rate kept (what arrives times the gain), when the window measured it and
// b's capacity.
func (c Controller) model(w Window, b int) (float64, bool) {
	if b < 0 || b >= len(w.Loads) || w.Arrivals <= 0 || w.Loads[b].Capacity <= 0 {
		return 0, false
	}
	gain := w.Loads[b].Gain
	if gain <= 0 {
		gain = 1
	}
	return w.Arrivals * gain, true
}

// drain is the rate at which the bottleneck b, busy all the next window,
// works through what it will be given: the records waiting at its inputs
// and what the sources read, their backlog (Lag) and the window's
// arrivals, leaving Low × the target's worth of work queued (in records
// per unit kept a second, in).
func (c Controller) drain(w Window, b int, in float64) float64 {
	l := w.Loads[b]
	win := max(w.Length, time.Millisecond).Seconds()
	room := l.Capacity*win + l.Capacity*c.Low*c.Target.Seconds() - float64(max(l.Queued, 0))
	return room / (in * (win + max(w.Lag, 0).Seconds()))
}

// wait is how long a record that joins the bottleneck b's queue at the
// window's end waits to be handled: the records queued there at the
// capacity measured in the window, plus how far behind its arrivals the
// most behind source read (b's capacity must be known).
func (c Controller) wait(w Window, b int) time.Duration {
	l := w.Loads[b]
	return time.Duration(float64(max(l.Queued, 0))/l.Capacity*float64(time.Second)) + max(w.Lag, 0)
}

// bottleneck is the task with the highest utilisation, and that; -1 when
// no task was busy.
func (c Controller) bottleneck(w Window) (int, float64) {
	b, top := -1, 0.0
	for i, l := range w.Loads {
		if i >= len(c.Tasks) || l.Busy <= 0 || w.Length <= 0 {
			continue
		}
		u := float64(l.Busy) / (float64(w.Length) * float64(max(l.Parallelism, 1)))
		if u > top {
			b, top = i, u
		}
	}
	return b, top
}

// report reports the target infeasible or feasible again, once per change.
func (c Controller) report(acts []Action, infeasible bool, reason string) (Controller, []Action) {
	if c.Infeasible != infeasible {
		c.Infeasible = infeasible
		acts = append(acts, Report{Infeasible: infeasible, Reason: reason})
	}
	return c, acts
}

// Retarget returns the state with the target d (a change through the
// control plane): the rate in force stays, the windows counted over or
// under the old target start again, and a target reported unreachable is
// reported holdable until the windows say otherwise. It does not change c.
func (c Controller) Retarget(d time.Duration) (Controller, []Action) {
	c.Target = d
	c.Over, c.Under, c.AtMin = 0, 0, 0
	return c.report(nil, false, fmt.Sprintf("the target changed to %v", d))
}

func clamp(v, lo, hi float64) float64 { return min(max(v, lo), hi) }

// round keeps three decimals, so transcripts read well and tiny changes
// make no action.
func round(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }
