package admin_test

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/persistence"
)

// counted is a keyed job whose output says, for every record, how many
// records of its key the job had seen up to it: the output is right only
// if every key's state moved whole across a rescale.
type counted struct {
	mu     sync.Mutex
	out    map[int64]int64 // record → its key's count with it
	dups   int
	last   time.Time
	maxGap time.Duration
	clk    clock.Clock
}

func (c *counted) topology(name string, n int64) *operators.Topology {
	top := operators.NewTopology(name, operators.BatchSize(64))
	src := operators.Source(top, "src", operators.Generate(n, func(i int64) int64 { return i }))
	keyed := operators.KeyBy(src, "by-key", func(v int64) int64 { return v % 16 }, operators.Parallelism(2))
	work := operators.Process(keyed, "work", func(pc *operators.ProcessContext[int64, int64, operators.KV[int64, int64]], v int64) {
		s := pc.State()
		*s++
		pc.Emit(operators.KV[int64, int64]{Key: spin(v), Value: *s})
	}, nil)
	operators.Sink(work, "sink", operators.SinkFunc(func(kv operators.KV[int64, int64]) error {
		now := c.clk.Now()
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, dup := c.out[kv.Key]; dup {
			c.dups++
		}
		c.out[kv.Key] = kv.Value
		if !c.last.IsZero() {
			c.maxGap = max(c.maxGap, now.Sub(c.last))
		}
		c.last = now
		return nil
	}))
	return top
}

func (c *counted) delivered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.out)
}

// gap returns the longest pause between two outputs since the last call
// and starts measuring again.
func (c *counted) gap() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.maxGap
	c.maxGap = 0
	return g
}

// TestRescaleThroughTheAPI: a keyed operator under load (the source makes
// records far faster than the operator's two instances take them) is
// rescaled 2 → 4 → 2 through the API while the source reads on: each
// rescale stops the job with a savepoint and starts it again from it at
// the new parallelism. The output is the same as that of a run of the
// same records without rescaling: every record once, with its key's
// count. The pause each rescale caused is printed, as the server measured
// it and as the sink saw it (the longest gap between two outputs).
func TestRescaleThroughTheAPI(t *testing.T) {
	sys, ctx := newSystem(t)
	c := &counted{out: map[int64]int64{}, clk: clock.Real()}
	opts := []operators.TopologyOption{operators.Checkpoints(time.Hour), operators.CheckpointStore(persistence.NewMemoryCheckpointStore())}
	top := c.topology("rescaled", 1<<40) // never ends by itself: the test stops it
	job, err := operators.Start(ctx, sys, top, opts...)
	if err != nil {
		t.Fatal(err)
	}
	a := newAPI(t, admin.Options{SavepointDir: t.TempDir()})
	if err := a.srv.AddRestartable(job.Run(), admin.TopologyStarter(sys, top, opts...)); err != nil {
		t.Fatal(err)
	}
	cl := &admin.Client{Base: a.hs.URL, Token: testToken, Who: "test", HTTP: a.hs.Client()}
	followed := make(chan *actors.Run, 4) // Follow's reports of the runs that replace the job's
	followErr := make(chan error, 1)
	go func() {
		followErr <- a.srv.Follow(ctx, "rescaled", func(r *actors.Run) { followed <- r })
	}()
	workPar := func() int {
		t.Helper()
		run, err := a.srv.Current("rescaled")
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range operators.PlanOf(run).Tasks {
			if task.Operators[0] == "work" {
				return task.Parallelism
			}
		}
		t.Fatal("no task work in the plan")
		return 0
	}
	if p := workPar(); p != 2 {
		t.Fatalf("work starts at parallelism %d, want 2", p)
	}

	// Refused before anything stops: an unknown operator, a bad value.
	for _, bad := range []map[string]int{{"nope": 4}, {"work": 0}, {}} {
		var apiErr *admin.APIError
		if _, err := cl.Rescale(ctx, "rescaled", bad); !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest {
			t.Fatalf("rescale %v: %v, want 400", bad, err)
		}
	}
	if run, _ := a.srv.Current("rescaled"); run != job.Run() {
		t.Fatal("a refused rescale replaced the run")
	}

	for _, par := range []int{4, 2} {
		before := c.delivered()
		waitFor(t, "20000 more records delivered", func() bool { return c.delivered() >= before+20_000 })
		c.gap()
		r, err := cl.Rescale(ctx, "rescaled", map[string]int{"work": par})
		if err != nil {
			t.Fatal(err)
		}
		after := c.delivered()
		waitFor(t, "output after the rescale", func() bool { return c.delivered() >= after+1000 })
		t.Logf("rescale to %d: %d records delivered before; pause %v (stopping and savepoint %v), longest gap between outputs %v; savepoint %s at checkpoint %d; parallelism %v, was %v",
			par, after, r.Pause, r.Stopping, c.gap(), filepath.Base(r.Savepoint), r.Checkpoint, r.Parallelism, r.Was)
		if r.Parallelism["work"] != par || workPar() != par {
			t.Fatalf("after the rescale to %d: %+v, the plan says %d", par, r, workPar())
		}
		if _, err := os.Stat(filepath.Join(r.Savepoint, "MANIFEST")); err != nil {
			t.Fatalf("the rescale's savepoint: %v", err)
		}
		select {
		case fr := <-followed:
			if cur, _ := a.srv.Current("rescaled"); fr != cur {
				t.Fatal("Follow reported another run than the one now served")
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Follow did not report the run of the rescale to %d", par)
		}
	}
	before := c.delivered()
	waitFor(t, "20000 more records delivered", func() bool { return c.delivered() >= before+20_000 })
	if _, err := cl.Stop(ctx, "rescaled"); err != nil {
		t.Fatal(err)
	}
	if err := a.srv.Wait(ctx, "rescaled"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-followErr:
		if err != nil {
			t.Fatalf("Follow after the job's end: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not return after the job ended")
	}
	if len(followed) != 0 {
		t.Fatalf("Follow reported %d runs more than the two rescales", len(followed))
	}
	rescaled, dups := c.out, c.dups
	n := int64(len(rescaled))
	if dups != 0 {
		t.Fatalf("%d records delivered more than once", dups)
	}
	for i := range n {
		if _, ok := rescaled[i]; !ok {
			t.Fatalf("%d records delivered, but not record %d", n, i)
		}
	}

	// The same records without rescaling.
	c.mu.Lock()
	c.out = map[int64]int64{}
	c.mu.Unlock()
	ref, err := operators.Start(ctx, sys, c.topology("reference", n))
	if err != nil {
		t.Fatal(err)
	}
	if err := ref.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if len(c.out) != len(rescaled) || c.dups != 0 {
		t.Fatalf("the reference run delivered %d records (%d twice), the rescaled %d", len(c.out), c.dups, len(rescaled))
	}
	for k, v := range c.out {
		if rescaled[k] != v {
			t.Fatalf("record %d: the rescaled run counted %d records of its key, the reference %d", k, rescaled[k], v)
		}
	}
	t.Logf("%d records, output identical to a run without rescaling", n)

	hist, _ := a.srv.History("rescaled")
	var rescales int
	for _, ev := range hist {
		if ev.What == "rescale" && ev.Result == "applied" {
			rescales++
		}
	}
	if rescales != 2 {
		t.Fatalf("history: %d applied rescales, want 2: %+v", rescales, hist)
	}
}

// TestStopWithSavepoint: a job added without a Starter cannot be
// rescaled (409) and goes on; a stop naming a savepoint directory that is
// not empty is refused (400) before anything stops; a stop with a
// savepoint drains the job and writes its final checkpoint there, which
// operators.ReadSavepoint accepts, and a job started from it reads on
// where the first stopped: no record twice, none missing.
func TestStopWithSavepoint(t *testing.T) {
	sys, ctx := newSystem(t)
	c := &counted{out: map[int64]int64{}, clk: clock.Real()}
	top := c.topology("plain", 1<<40)
	opts := []operators.TopologyOption{operators.Checkpoints(time.Hour), operators.CheckpointStore(persistence.NewMemoryCheckpointStore())}
	job, err := operators.Start(ctx, sys, top, opts...)
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	a := newAPI(t, admin.Options{SavepointDir: base})
	if err := a.srv.Add(job.Run()); err != nil {
		t.Fatal(err)
	}
	if code := a.do(http.MethodPost, "/v1/jobs/plain/rescale", map[string]any{"parallelism": map[string]int{"work": 4}}, nil, nil); code != http.StatusConflict {
		t.Fatalf("rescale without a Starter: %d, want 409", code)
	}
	if err := os.MkdirAll(filepath.Join(base, "full"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "full", "x"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := a.do(http.MethodPost, "/v1/jobs/plain/stop", map[string]string{"savepoint": "full"}, nil, nil); code != http.StatusBadRequest {
		t.Fatalf("stop into a directory that is not empty: %d, want 400", code)
	}
	before := c.delivered()
	waitFor(t, "the job to go on", func() bool { return c.delivered() > before+1000 })
	var out struct {
		Checkpoint uint64
		Savepoint  string
	}
	if code := a.do(http.MethodPost, "/v1/jobs/plain/stop", map[string]string{"savepoint": "sp"}, nil, &out); code != http.StatusOK {
		t.Fatalf("stop with a savepoint: %d", code)
	}
	select {
	case <-job.Done():
	default:
		t.Fatal("the job runs on after its stop with a savepoint")
	}
	if err := job.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := operators.ReadSavepoint(out.Savepoint)
	if err != nil {
		t.Fatal(err)
	}
	if out.Savepoint != filepath.Join(base, "sp") || info.Checkpoint != out.Checkpoint || info.Job != "plain" {
		t.Fatalf("savepoint %+v, answered %+v", info, out)
	}
	stopped := c.delivered()
	// Started from it, on a store of its own: it reads on from there.
	job2, err := operators.Start(ctx, sys, top, operators.Checkpoints(time.Hour), operators.CheckpointStore(persistence.NewMemoryCheckpointStore()),
		operators.FromSavepoint(out.Savepoint))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the restarted job's output", func() bool { return c.delivered() > stopped+1000 })
	if err := job2.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dups != 0 {
		t.Fatalf("%d records delivered twice across the stop", c.dups)
	}
	for i := range int64(len(c.out)) {
		if _, ok := c.out[i]; !ok {
			t.Fatalf("%d records delivered, but not record %d", len(c.out), i)
		}
	}
	t.Logf("stopped after %d records at checkpoint %d; %d after the restart", stopped, out.Checkpoint, len(c.out))
}
