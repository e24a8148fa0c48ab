package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
)

// spin is the keyed operator's work per record: enough that its two
// instances take far fewer records per second than the source makes.
func spin(v int64) int64 {
	x := uint64(v) | 1
	for range 2000 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	if x == 0 { // never: keeps the loop
		return -1
	}
	return v
}

// policySwitch drives the control plane's headline through the admin API:
// the input edge of one operator of a running job under overload,
// switched Block → DropOldest → Spill → Sample → Block, each stretch
// ending with the source paused once what it produced reached the edge.
// At every look (during each stretch and at its end) the edge's
// accounting must be exact: produced = delivered + dropped +
// spilled-pending + queued. TestLivePolicySwitch and
// TestLivePolicySwitchNexmarkQ5 share it.
type policySwitch struct {
	t                 *testing.T
	a                 *api
	job, source, edge string
	// feed is the operator whose output is the edge's input ("": the
	// source); what it emitted is what the edge was posted.
	feed string
	run  *actors.Run
	// capacity of the edge in every stretch, and step: the records
	// each stretch lets the source produce.
	capacity int
	step     int64
	looks    int
}

// switched is what the switches did: the stretches' boundaries in records
// the source produced (block [0, B0), drop-oldest [B0, B1), spill [B1, B2), sample
// [B2, B3), block [B3, Total)) and the drops of the lossy stretches.
type switched struct {
	B0, B1, B2, B3, Total int64
	DropOldest, Sample    int64
}

// exactStretch says whether the records [lo, hi) all fell in stretches
// that lose nothing (Block, Spill).
func (s switched) exactStretch(lo, hi int64) bool {
	in := func(a, b int64) bool { return lo >= a && hi <= b }
	return in(0, s.B0) || in(s.B1, s.B2) || in(s.B3, s.Total)
}

func (p *policySwitch) produced() int64 { return stat(p.t, p.run, p.source).Out }

func (p *policySwitch) arrivals() int64 {
	if p.feed == "" {
		return p.produced()
	}
	return stat(p.t, p.run, p.feed).Out
}

func (p *policySwitch) status() admin.InputStatus {
	p.t.Helper()
	var st admin.JobStatus
	if code := p.a.do(http.MethodGet, "/v1/jobs/"+p.job, nil, nil, &st); code != http.StatusOK {
		p.t.Fatalf("status: %d", code)
	}
	for _, in := range st.Inputs {
		if in.Operator == p.edge {
			return in
		}
	}
	p.t.Fatalf("no input for %s", p.edge)
	return admin.InputStatus{}
}

func (p *policySwitch) exact(step string, e admin.InputStatus) {
	p.t.Helper()
	p.looks++
	if e.Posted != e.Delivered+e.Dropped+e.Queued+e.SpillPending {
		p.t.Fatalf("%s: posted %d != delivered %d + dropped %d + queued %d + spilled %d",
			step, e.Posted, e.Delivered, e.Dropped, e.Queued, e.SpillPending)
	}
}

func (p *policySwitch) post(path string) {
	p.t.Helper()
	if code := p.a.do(http.MethodPost, "/v1/jobs/"+p.job+path, nil, nil, nil); code != http.StatusOK {
		p.t.Fatalf("POST %s: %d", path, code)
	}
}

// stretch lets the source run until it produced until records, then
// pauses it and waits until everything it produced reached the edge.
func (p *policySwitch) stretch(name string, until int64) admin.InputStatus {
	p.t.Helper()
	p.post("/sources/" + p.source + "/resume")
	waitFor(p.t, name+": the source to produce "+fmt.Sprint(until), func() bool {
		p.exact(name+" (running)", p.status())
		return p.produced() >= until
	})
	p.post("/sources/" + p.source + "/pause")
	out, arrive := p.produced(), p.arrivals()
	var e admin.InputStatus
	waitFor(p.t, name+": what the source produced to reach the edge", func() bool {
		e = p.status()
		p.exact(name+" (settling)", e)
		return e.Posted == arrive
	})
	if got := p.produced(); got != out {
		p.t.Fatalf("%s: the paused source produced %d more", name, got-out)
	}
	return e
}

func (p *policySwitch) set(in admin.Input) {
	p.t.Helper()
	if code := p.a.do(http.MethodPut, "/v1/jobs/"+p.job+"/inputs/"+p.edge, in, nil, nil); code != http.StatusOK {
		p.t.Fatalf("set %v: %d", in, code)
	}
	p.exact("after set "+in.Policy, p.status())
}

func (p *policySwitch) drained(name string) admin.InputStatus {
	p.t.Helper()
	var e admin.InputStatus
	waitFor(p.t, name+": the edge to drain", func() bool {
		e = p.status()
		p.exact(name+" (draining)", e)
		return e.Queued == 0 && e.SpillPending == 0
	})
	return e
}

// all runs the five stretches (the source must start paused, or be
// pausable), stops the job through the API, waits for its end and checks
// the end's accounting, that the job never restarted, that the lossy
// stretches dropped what the accounting says and the others nothing, and
// the history.
func (p *policySwitch) all(ctx context.Context) switched {
	t, c := p.t, p.capacity
	t.Helper()
	p.set(admin.Input{Policy: "block", Capacity: c})
	// Block, then drained, so that DropOldest finds nothing of it queued.
	e0 := p.stretch("block", p.step)
	if e0.Dropped != 0 {
		t.Fatalf("block: %d dropped", e0.Dropped)
	}
	var s switched
	p.drained("block")
	s.B0 = p.produced()
	p.set(admin.Input{Policy: "drop-oldest", Capacity: c})
	e1 := p.stretch("drop-oldest", s.B0+p.step)
	s.B1, s.DropOldest = p.produced(), e1.Dropped
	p.set(admin.Input{Policy: "spill", Capacity: c})
	e2 := p.stretch("spill", s.B1+p.step)
	s.B2 = p.produced()
	if e2.Dropped != s.DropOldest {
		t.Fatalf("spill: %d dropped", e2.Dropped-s.DropOldest)
	}
	p.set(admin.Input{Policy: "sample", Capacity: c, SampleEvery: 4})
	e3 := p.stretch("sample", s.B2+p.step)
	s.B3, s.Sample = p.produced(), e3.Dropped-s.DropOldest
	p.set(admin.Input{Policy: "block", Capacity: c})
	e4 := p.stretch("block again", s.B3+p.step)
	if e4.Dropped != e3.Dropped {
		t.Fatalf("block again: %d dropped", e4.Dropped-e3.Dropped)
	}
	// Stop, the source paused: it drains, and ends.
	p.post("/stop")
	if err := p.run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	end := p.status()
	p.exact("end", end)
	s.Total = p.produced()
	t.Logf("stretches (records produced): block %d, drop-oldest %d (dropped %d), spill %d, sample %d (dropped %d), block %d; %d looks at the accounting",
		s.B0, s.B1-s.B0, s.DropOldest, s.B2-s.B1, s.B3-s.B2, s.Sample, s.Total-s.B3, p.looks)
	if end.Posted != p.arrivals() || end.Posted != e4.Posted || end.Dropped != s.DropOldest+s.Sample || end.Queued != 0 || end.SpillPending != 0 {
		t.Fatalf("end: %+v; want %d posted, %d dropped, nothing queued", end, p.arrivals(), s.DropOldest+s.Sample)
	}
	if s.DropOldest == 0 {
		t.Errorf("drop-oldest dropped nothing: the edge was not overloaded")
	}
	if cs := operators.CheckpointStatsOf(p.run); cs.Restarts != 0 {
		t.Fatalf("the job restarted %d times", cs.Restarts)
	}
	hist, _ := p.a.srv.History(p.job)
	changes := 0
	for _, ev := range hist {
		if ev.What == "set-input" && ev.Result == "applied" {
			changes++
		}
	}
	if changes != 5 || hist[len(hist)-1].What != "stop" {
		t.Fatalf("history has %d applied input changes, want 5, then the stop: %+v", changes, hist)
	}
	return s
}

// TestLivePolicySwitch is the control plane's headline on a keyed job
// (policySwitch): no restart, the identity exact at every look, and the
// output what the policy history implies: every record of the Block and
// Spill stretches exactly once, the DropOldest and Sample stretches short
// by exactly their drops.
func TestLivePolicySwitch(t *testing.T) {
	const n = 1 << 40 // never reached: the test stops the job
	sys, ctx := newSystem(t)
	var mu sync.Mutex
	seen := map[int64]int{}
	top := operators.NewTopology("overload", operators.BatchSize(64))
	src := operators.Source(top, "src", operators.Generate(n, func(i int64) int64 { return i }))
	keyed := operators.KeyBy(src, "by-key", func(v int64) int64 { return v % 16 }, operators.Parallelism(2))
	work := operators.Process(keyed, "work", func(c *operators.ProcessContext[int64, struct{}, int64], v int64) { c.Emit(spin(v)) }, nil,
		operators.Input(mailbox.Block(1024)))
	operators.Sink(work, "sink", operators.SinkFunc(func(v int64) error {
		mu.Lock()
		seen[v]++
		mu.Unlock()
		return nil
	}))
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	a := newAPI(t, admin.Options{})
	if err := a.srv.Add(run); err != nil {
		t.Fatal(err)
	}
	p := &policySwitch{t: t, a: a, job: "overload", source: "src", edge: "work", run: run, capacity: 1024, step: 15_000}
	s := p.all(ctx)
	count := func(lo, hi int64) (got int64) {
		for i := lo; i < hi; i++ {
			if seen[i] > 1 {
				t.Fatalf("record %d delivered %d times", i, seen[i])
			}
			got += int64(seen[i])
			delete(seen, i)
		}
		return got
	}
	for _, st := range []struct {
		name   string
		lo, hi int64
		lost   int64
	}{
		{"block", 0, s.B0, 0}, {"drop-oldest", s.B0, s.B1, s.DropOldest}, {"spill", s.B1, s.B2, 0}, {"sample", s.B2, s.B3, s.Sample}, {"block again", s.B3, s.Total, 0},
	} {
		if got := count(st.lo, st.hi); got != st.hi-st.lo-st.lost {
			t.Errorf("%s stretch [%d, %d): %d records delivered, want %d (%d dropped)", st.name, st.lo, st.hi, got, st.hi-st.lo-st.lost, st.lost)
		}
	}
	if len(seen) != 0 {
		t.Fatalf("%d records delivered that the source did not produce", len(seen))
	}
}

func stat(t *testing.T, run *actors.Run, name string) actors.OperatorStats {
	t.Helper()
	for _, s := range run.Stats() {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no statistics for operator %q", name)
	return actors.OperatorStats{}
}
