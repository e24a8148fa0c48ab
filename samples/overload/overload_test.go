package overload_test

import (
	"context"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/samples/overload"
)

// TestMain fails the package when a test leaves a goroutine behind. The
// protoactor goroutines ignored are the dead-letter throttle's (see
// actors/actors_test.go): bounded, owned by protoactor, not waitable.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
	)
}

func newSystem(t *testing.T) (*actors.System, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	sys, err := actors.NewSystem(actors.Config{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sys.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return sys, ctx
}

// The three pipelines under a load each consumer is far too slow for:
// the accounting holds for each; block and spill deliver exactly what a
// plain loop computes; drop-oldest delivers a subsequence ending with the
// newest record; block slows its own source only.
func TestPipelinesUnderOverload(t *testing.T) {
	sys, ctx := newSystem(t)
	cfg := overload.Config{Records: 3000, Slow: 5000, Capacity: 128} // a consumer: ~25µs a record, or more
	p, err := overload.NewPipelines(cfg)
	if err != nil {
		t.Fatal(err)
	}
	accounts, err := p.Measure(ctx, sys)
	if err != nil {
		t.Fatal(err)
	}
	if err := overload.Check(cfg, accounts); err != nil {
		t.Fatal(err)
	}
	want := make([]overload.Result, cfg.Records) // the independent computation
	for seq := range cfg.Records {
		want[seq] = overload.Result{Seq: seq, Digest: overload.Digest(seq, cfg.Slow)}
	}
	by := map[string]overload.Accounting{}
	for _, a := range accounts {
		by[a.Policy] = a
		got := p.Received(a.Policy).Results()
		t.Logf("%s: %+v", a.Policy, a)
		switch a.Policy {
		case "block", "spill":
			if len(got) != len(want) {
				t.Fatalf("%s: %d results, want %d", a.Policy, len(got), len(want))
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%s: result %d is %+v, the plain loop %+v", a.Policy, i, got[i], want[i])
				}
			}
		case "drop-oldest":
			for i, r := range got {
				if r != want[r.Seq] || (i > 0 && r.Seq <= got[i-1].Seq) {
					t.Fatalf("drop-oldest: result %d is %+v (the plain loop %+v), or out of order", i, r, want[r.Seq])
				}
			}
			if got[len(got)-1].Seq != cfg.Records-1 {
				t.Fatalf("drop-oldest: the last result is record %d, not the newest", got[len(got)-1].Seq)
			}
		}
	}
	// What overload does to each policy: the sources produce 3000 records
	// in milliseconds, each consumer needs ~75ms or more for them.
	if a := by["block"]; a.Backpressured <= 0 || a.Dropped != 0 || a.Spilled != 0 {
		t.Errorf("block: back-pressured %v, dropped %d, spilled %d: want back-pressure only", a.Backpressured, a.Dropped, a.Spilled)
	}
	if a := by["drop-oldest"]; a.Dropped == 0 || a.Backpressured != 0 {
		t.Errorf("drop-oldest: dropped %d, back-pressured %v: want drops, no back-pressure", a.Dropped, a.Backpressured)
	}
	if a := by["spill"]; a.Spilled == 0 || a.Backpressured != 0 {
		t.Errorf("spill: spilled %d, back-pressured %v: want spills, no back-pressure", a.Spilled, a.Backpressured)
	}
	if b, d := by["block"], by["drop-oldest"]; b.SourceDone <= d.SourceDone {
		t.Errorf("block's source read everything after %v, drop-oldest's after %v: block should be slowed", b.SourceDone, d.SourceDone)
	}
}

// The sample as `sluice run overload` runs it: its topology is the
// pipelines themselves, run on the caller's system (so their drops and
// spills show where the command shows its job's), and the report, read
// from the run's statistics, holds.
func TestSampleReport(t *testing.T) {
	sys, ctx := newSystem(t)
	s := overload.New()
	fs := flag.NewFlagSet("overload", flag.ContinueOnError)
	s.Flags(fs)
	if err := fs.Parse([]string{"--records", "2000", "--slow", "5000", "--capacity", "64"}); err != nil {
		t.Fatal(err)
	}
	top, err := s.Topology()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Report(io.Discard); err == nil || !strings.Contains(err.Error(), "before the pipelines ran") {
		t.Errorf("Report before the run: %v", err)
	}
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	s.Observe(run)
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := s.Report(&out); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	for _, want := range []string{"2000 records", "block", "drop-oldest", "spill", "evicted", "holds for all three"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if len(s.Accounts()) != 3 {
		t.Fatalf("%d accounts", len(s.Accounts()))
	}
	// The drops and spills are the run's own, as the progress line and the
	// dashboard read them.
	var dropped, spilled int64
	for _, st := range run.Stats() {
		dropped += st.Dropped
		spilled += st.Spilled
	}
	if dropped == 0 || spilled == 0 {
		t.Errorf("the run's statistics show %d dropped and %d spilled: want both (the consumers cannot follow)", dropped, spilled)
	}
	for _, a := range s.Accounts() {
		if a.Policy == "drop-oldest" && a.Dropped != dropped {
			t.Errorf("drop-oldest accounts %d drops, the run %d", a.Dropped, dropped)
		}
	}
}

// Check refuses accounting that does not add up.
func TestCheckCatchesBrokenAccounting(t *testing.T) {
	cfg := overload.Config{Records: 10, Slow: 1, Capacity: 4}
	sum := overload.ExpectedSum(cfg)
	good := func() []overload.Accounting {
		return []overload.Accounting{
			{Policy: "block", Produced: 10, Delivered: 10, HighWater: 4, InOrder: true, Complete: true, Newest: true, DigestsOK: true, Sum: sum},
			{Policy: "drop-oldest", Produced: 10, Delivered: 4, Dropped: 6, DroppedBy: map[string]int64{"evicted": 6}, HighWater: 4, InOrder: true, Newest: true, DigestsOK: true},
			{Policy: "spill", Produced: 10, Delivered: 10, Spilled: 6, HighWater: 4, InOrder: true, Complete: true, Newest: true, DigestsOK: true, Sum: sum},
		}
	}
	if err := overload.Check(cfg, good()); err != nil {
		t.Fatalf("Check(good) = %v", err)
	}
	cases := map[string]func(a []overload.Accounting){
		"!= delivered":        func(a []overload.Accounting) { a[1].Dropped, a[1].DroppedBy["evicted"] = 5, 5 },
		"records left queued": func(a []overload.Accounting) { a[2].Delivered, a[2].Queued = 9, 1 },
		"queued in memory":    func(a []overload.Accounting) { a[0].HighWater = 5 },
		"by reason":           func(a []overload.Accounting) { a[1].DroppedBy["evicted"] = 2 },
		"lossless":            func(a []overload.Accounting) { a[0].Complete = false },
		"plain loop":          func(a []overload.Accounting) { a[2].Sum++ },
		"newest":              func(a []overload.Accounting) { a[1].Newest = false },
		"evictions only":      func(a []overload.Accounting) { a[1].DroppedBy = map[string]int64{"evicted": 3, "full": 3} },
		"in order":            func(a []overload.Accounting) { a[1].InOrder = false },
	}
	for want, breakIt := range cases {
		a := good()
		breakIt(a)
		if err := overload.Check(cfg, a); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: Check = %v", want, err)
		}
	}
}

func TestConfigValidated(t *testing.T) {
	_, err := overload.NewPipelines(overload.Config{Records: 0, Slow: -1, Capacity: 0})
	for _, want := range []string{"records 0", "slow -1", "capacity 0"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewPipelines = %v, want an error mentioning %q", err, want)
		}
	}
}
