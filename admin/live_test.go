package admin_test

import (
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

// TestLivePolicySwitch is the control plane's headline: a keyed job under
// overload whose input edge is switched Block → DropOldest → Spill → Sample
// → Block through the admin API while it runs. The job never restarts; at
// every look (during each stretch and at its end, with the source paused)
// the edge's accounting is exact: produced = delivered + dropped +
// spilled-pending + queued. The output is what the policy history
// implies: every record of the Block and Spill stretches exactly once, the
// DropOldest and Sample stretches short by exactly their drops.
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

	produced := func() int64 { return stat(t, run, "src").Out }
	edge := func() admin.InputStatus {
		t.Helper()
		var st admin.JobStatus
		if code := a.do(http.MethodGet, "/v1/jobs/overload", nil, nil, &st); code != http.StatusOK {
			t.Fatalf("status: %d", code)
		}
		for _, in := range st.Inputs {
			if in.Operator == "work" {
				return in
			}
		}
		t.Fatal("no input for work")
		return admin.InputStatus{}
	}
	looks := 0
	exact := func(step string, e admin.InputStatus) {
		t.Helper()
		looks++
		if e.Posted != e.Delivered+e.Dropped+e.Queued+e.SpillPending {
			t.Fatalf("%s: posted %d != delivered %d + dropped %d + queued %d + spilled %d",
				step, e.Posted, e.Delivered, e.Dropped, e.Queued, e.SpillPending)
		}
	}
	post := func(path string) {
		t.Helper()
		if code := a.do(http.MethodPost, path, nil, nil, nil); code != http.StatusOK {
			t.Fatalf("POST %s: %d", path, code)
		}
	}
	// stretch lets the source run until it produced until records, then
	// pauses it and waits until everything it produced reached the edge.
	stretch := func(name string, until int64) admin.InputStatus {
		t.Helper()
		post("/v1/jobs/overload/sources/src/resume")
		waitFor(t, name+": the source to produce "+fmt.Sprint(until), func() bool {
			exact(name+" (running)", edge())
			return produced() >= until
		})
		post("/v1/jobs/overload/sources/src/pause")
		out := produced()
		var e admin.InputStatus
		waitFor(t, name+": what the source produced to reach the edge", func() bool {
			e = edge()
			exact(name+" (settling)", e)
			if testing.Verbose() && e.Posted != out {
				t.Logf("%s: produced %d, posted %d: %+v", name, out, e.Posted, e)
			}
			return e.Posted == out
		})
		if got := produced(); got != out {
			t.Fatalf("%s: the paused source produced %d more", name, got-out)
		}
		return e
	}
	set := func(in admin.Input) {
		t.Helper()
		if code := a.do(http.MethodPut, "/v1/jobs/overload/inputs/work", in, nil, nil); code != http.StatusOK {
			t.Fatalf("set %v: %d", in, code)
		}
		exact("after set "+in.Policy, edge())
	}
	drained := func(name string) admin.InputStatus {
		t.Helper()
		var e admin.InputStatus
		waitFor(t, name+": the edge to drain", func() bool {
			e = edge()
			exact(name+" (draining)", e)
			return e.Queued == 0 && e.SpillPending == 0
		})
		return e
	}

	// Block, then drained, so that DropOldest finds nothing of it queued.
	e0 := stretch("block", 10_000)
	if e0.Dropped != 0 {
		t.Fatalf("block: %d dropped", e0.Dropped)
	}
	b0 := drained("block").Posted
	set(admin.Input{Policy: "drop-oldest", Capacity: 1024})
	e1 := stretch("drop-oldest", b0+15_000)
	b1, d1 := e1.Posted, e1.Dropped
	set(admin.Input{Policy: "spill", Capacity: 1024})
	e2 := stretch("spill", b1+15_000)
	b2 := e2.Posted
	if e2.Dropped != d1 {
		t.Fatalf("spill: %d dropped", e2.Dropped-d1)
	}
	set(admin.Input{Policy: "sample", Capacity: 1024, SampleEvery: 4})
	e3 := stretch("sample", b2+15_000)
	b3, d3 := e3.Posted, e3.Dropped-d1
	set(admin.Input{Policy: "block", Capacity: 1024})
	e4 := stretch("block again", b3+15_000)
	if e4.Dropped != e3.Dropped {
		t.Fatalf("block again: %d dropped", e4.Dropped-e3.Dropped)
	}
	// Stop with a savepoint, the source paused: it drains, and ends.
	post("/v1/jobs/overload/stop")
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	end := edge()
	exact("end", end)
	total := produced()
	t.Logf("stretches (records produced): block %d, drop-oldest %d (dropped %d), spill %d, sample %d (dropped %d), block %d; %d looks at the accounting",
		b0, b1-b0, d1, b2-b1, b3-b2, d3, total-b3, looks)
	if end.Posted != total || total != e4.Posted || end.Dropped != d1+d3 || end.Queued != 0 || end.SpillPending != 0 {
		t.Fatalf("end: %+v; want %d posted, %d dropped, nothing queued", end, total, d1+d3)
	}
	if d1 == 0 {
		t.Errorf("drop-oldest dropped nothing: the edge was not overloaded")
	}
	if cs := operators.CheckpointStatsOf(run); cs.Restarts != 0 {
		t.Fatalf("the job restarted %d times", cs.Restarts)
	}
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
	for _, s := range []struct {
		name   string
		lo, hi int64
		lost   int64
	}{
		{"block", 0, b0, 0}, {"drop-oldest", b0, b1, d1}, {"spill", b1, b2, 0}, {"sample", b2, b3, d3}, {"block again", b3, total, 0},
	} {
		if got := count(s.lo, s.hi); got != s.hi-s.lo-s.lost {
			t.Errorf("%s stretch [%d, %d): %d records delivered, want %d (%d dropped)", s.name, s.lo, s.hi, got, s.hi-s.lo-s.lost, s.lost)
		}
	}
	if len(seen) != 0 {
		t.Fatalf("%d records delivered that the source did not produce", len(seen))
	}
	hist, _ := a.srv.History("overload")
	changes := 0
	for _, ev := range hist {
		if ev.What == "set-input" && ev.Result == "applied" {
			changes++
		}
	}
	if changes != 4 || hist[len(hist)-1].What != "stop" {
		t.Fatalf("history has %d applied input changes, want 4, then the stop: %+v", changes, hist)
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
