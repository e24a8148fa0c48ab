package operators_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/operators"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// protoactor's dead-letter log throttle keeps a goroutine for its
		// interval (1 s) after a message reaches a stopped actor, as happens
		// when a job is stopped mid-stream; it ends by itself.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

// newSystem starts a system stopped at the end of the test.
func newSystem(t *testing.T) (*actors.System, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	sys, err := actors.NewSystem(actors.Config{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer cancel()
		// A deadline of its own: a test that used up ctx's should fail on
		// its own steps, not on the system's stop.
		stopCtx, stopCancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer stopCancel()
		if err := sys.Stop(stopCtx); err != nil {
			t.Errorf("system stop: %v", err)
		}
	})
	return sys, ctx
}

func runToEnd(t *testing.T, sys *actors.System, ctx context.Context, top *operators.Topology) *actors.Run {
	t.Helper()
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	checkAccounts(t, run)
	return run
}

// checkAccounts fails the test when a mailbox of run lost track of a record
// (see engine.CheckAccounts).
func checkAccounts(t *testing.T, run *actors.Run) {
	t.Helper()
	for _, err := range engine.CheckAccounts(run) {
		t.Error(err)
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

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

func TestStatelessChainInOrder(t *testing.T) {
	for _, fused := range []bool{true, false} {
		t.Run(fmt.Sprintf("fused=%v", fused), func(t *testing.T) {
			sys, ctx := newSystem(t)
			var opt operators.Option // the zero Option changes nothing
			if !fused {
				opt = operators.NoFusion()
			}
			const n = 10_000
			top := operators.NewTopology("chain", operators.BatchSize(64), operators.Capacity(256))
			src := operators.Source(top, "src", operators.Generate(n, func(i int64) int64 { return i }), opt)
			m := operators.Map(src, "triple", func(v int64) int64 { return 3 * v }, opt)
			f := operators.Filter(m, "even", func(v int64) bool { return v%2 == 0 }, opt)
			fm := operators.FlatMap(f, "twice", func(v int64) []int64 { return []int64{v, v + 1} }, opt)
			col := operators.NewCollector[int64]()
			operators.Sink(fm, "out", col, opt)
			run := runToEnd(t, sys, ctx, top)

			var want []int64
			for i := int64(0); i < n; i++ {
				if v := 3 * i; v%2 == 0 {
					want = append(want, v, v+1)
				}
			}
			if got := col.Items(); !slices.Equal(got, want) {
				t.Fatalf("got %d records (first %v), want %d (first %v)", len(got), got[:min(5, len(got))], len(want), want[:5])
			}
			if s := stat(t, run, "even"); s.In != n || s.Out != n/2 {
				t.Errorf("filter stats in=%d out=%d, want %d and %d", s.In, s.Out, n, n/2)
			}
			wantTasks := 1
			if !fused {
				wantTasks = 5
			}
			p, _ := top.Plan()
			if len(p.Tasks) != wantTasks {
				t.Errorf("plan has %d tasks, want %d", len(p.Tasks), wantTasks)
			}
		})
	}
}

func TestKeyedCountUpdatesAndFinal(t *testing.T) {
	sys, ctx := newSystem(t)
	words := strings.Fields(strings.Repeat("a b c d e f g a b c a ", 500))
	want := map[string]int64{}
	for _, w := range words {
		want[w]++
	}
	top := operators.NewTopology("count")
	src := operators.Source(top, "src", operators.FromSlice(words))
	by := operators.KeyBy(src, "by", identity[string], operators.Parallelism(3))
	updates := operators.NewCollector[operators.KV[string, int64]]()
	final := operators.NewCollector[operators.KV[string, int64]]()
	operators.Sink(operators.Count(by, "updates"), "u", updates)
	operators.Sink(operators.Count(by, "final", operators.Emit(operators.EmitAtEnd)), "f", final)
	runToEnd(t, sys, ctx, top)

	if got := updates.Len(); got != len(words) {
		t.Errorf("updates: %d records, want one per word (%d)", got, len(words))
	}
	last := map[string]int64{}
	for _, kv := range updates.Items() {
		if kv.Value <= last[kv.Key] {
			t.Fatalf("update for %q went from %d to %d", kv.Key, last[kv.Key], kv.Value)
		}
		last[kv.Key] = kv.Value
	}
	got := map[string]int64{}
	for _, kv := range final.Items() {
		if _, dup := got[kv.Key]; dup {
			t.Fatalf("key %q emitted twice at end (two instances own it?)", kv.Key)
		}
		got[kv.Key] = kv.Value
	}
	for k, v := range want {
		if got[k] != v || last[k] != v {
			t.Errorf("count[%q]: final %d, last update %d, want %d", k, got[k], last[k], v)
		}
	}
}

func TestReduceAndAggregate(t *testing.T) {
	sys, ctx := newSystem(t)
	type sale struct {
		shop   string
		amount int
	}
	sales := []sale{{"x", 3}, {"y", 4}, {"x", 10}, {"z", 1}, {"y", 6}}
	top := operators.NewTopology("agg")
	src := operators.Source(top, "sales", operators.FromSlice(sales))
	by := operators.KeyBy(src, "by-shop", func(s sale) string { return s.shop }, operators.Parallelism(2))
	maxes := operators.NewCollector[operators.KV[string, sale]]()
	operators.Sink(operators.Reduce(by, "max", func(a, b sale) sale {
		if b.amount > a.amount {
			return b
		}
		return a
	}, operators.Emit(operators.EmitAtEnd)), "maxes", maxes)
	sums := operators.NewCollector[operators.KV[string, []int]]()
	operators.Sink(operators.Aggregate(by, "amounts", func() []int { return nil },
		func(acc []int, s sale) []int { return append(acc, s.amount) }, operators.Emit(operators.EmitAtEnd)), "lists", sums)
	runToEnd(t, sys, ctx, top)

	gotMax := map[string]int{}
	for _, kv := range maxes.Items() {
		gotMax[kv.Key] = kv.Value.amount
	}
	if want := map[string]int{"x": 10, "y": 6, "z": 1}; fmt.Sprint(gotMax) != fmt.Sprint(want) {
		t.Errorf("max per shop = %v, want %v", gotMax, want)
	}
	gotList := map[string][]int{}
	for _, kv := range sums.Items() {
		gotList[kv.Key] = kv.Value
	}
	if want := map[string][]int{"x": {3, 10}, "y": {4, 6}, "z": {1}}; fmt.Sprint(gotList) != fmt.Sprint(want) {
		t.Errorf("amounts per shop = %v, want %v (in arrival order)", gotList, want)
	}
}

func TestFanOutMergeBroadcastRebalance(t *testing.T) {
	sys, ctx := newSystem(t)
	const n = 5000
	top := operators.NewTopology("shapes")
	a := operators.Source(top, "a", operators.Generate(n, func(i int64) int64 { return i }))
	b := operators.Source(top, "b", operators.Generate(n, func(i int64) int64 { return n + i }), operators.Parallelism(2))
	both := operators.Merge("both", a, b)
	copyA := operators.NewCollector[int64]()
	copyB := operators.NewCollector[int64]()
	operators.Sink(both, "copy-a", copyA)
	operators.Sink(both, "copy-b", copyB)
	bc := operators.NewCollector[int64]()
	operators.Sink(operators.Broadcast(a, "to-all"), "every", bc, operators.Parallelism(3))
	rb := operators.NewCollector[int64]()
	operators.Sink(operators.Rebalance(b, "spread"), "spread-out", rb, operators.Parallelism(3))
	run := runToEnd(t, sys, ctx, top)

	for name, c := range map[string]*operators.Collector[int64]{"copy-a": copyA, "copy-b": copyB} {
		if err := everyOnce(c.Items(), 2*n); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if got := bc.Len(); got != 3*n {
		t.Errorf("broadcast to 3 instances: %d records, want %d", got, 3*n)
	}
	if got := rb.Len(); got != n {
		t.Errorf("rebalance: %d records, want %d", got, n)
	}
	if s := stat(t, run, "spread-out"); s.Parallelism != 3 || s.In != n {
		t.Errorf("spread-out stats %+v", s)
	}
}

func TestPanicFailsJobNamingOperator(t *testing.T) {
	sys, ctx := newSystem(t)
	top := operators.NewTopology("boom")
	src := operators.Source(top, "src", operators.Generate(10_000, func(i int64) int64 { return i }))
	m := operators.Map(src, "explode", func(v int64) int64 {
		if v == 777 {
			panic("bad record")
		}
		return v
	}, operators.NoFusion(), operators.Parallelism(2))
	operators.Sink(m, "out", discard[int64]())
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	err = run.Wait(ctx)
	var oe *operators.OperatorError
	if !errors.As(err, &oe) {
		t.Fatalf("Wait() = %v, want an *OperatorError", err)
	}
	var pe *operators.PanicError
	if !strings.Contains(oe.Operator, "explode") || !errors.As(err, &pe) || pe.Value != "bad record" {
		t.Fatalf("Wait() = %v, want a panic of operator explode", err)
	}
}

func TestSinkErrorFailsJob(t *testing.T) {
	sys, ctx := newSystem(t)
	top := operators.NewTopology("sink-error")
	src := operators.Source(top, "src", operators.FromSlice([]int{1, 2, 3}))
	errDisk := errors.New("disk full")
	operators.Sink(src, "writer", operators.SinkFunc(func(v int) error {
		if v == 2 {
			return errDisk
		}
		return nil
	}))
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	err = run.Wait(ctx)
	var oe *operators.OperatorError
	if !errors.Is(err, errDisk) || !errors.As(err, &oe) || oe.Operator != "writer" {
		t.Fatalf("Wait() = %v, want operator writer failing with %v", err, errDisk)
	}
}

func TestSourceOpenErrorFailsJob(t *testing.T) {
	sys, ctx := newSystem(t)
	top := operators.NewTopology("missing-file")
	src := operators.Source(top, "lines", operators.FileLines(filepath.Join(t.TempDir(), "nope.txt")))
	operators.Sink(src, "out", discard[string]())
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	err = run.Wait(ctx)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), `"lines"`) {
		t.Fatalf("Wait() = %v, want a not-exist error naming operator lines", err)
	}
}

// TestBackPressureBoundsSource holds the sink and checks that the source
// stops once its credits are spent, instead of filling memory.
func TestBackPressureBoundsSource(t *testing.T) {
	sys, ctx := newSystem(t)
	const (
		n        = 1_000_000
		batch    = 64
		capacity = 1024
	)
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open) // before the system stops: a stuck sink cannot be stopped
	top := operators.NewTopology("pressure", operators.BatchSize(batch), operators.Capacity(capacity))
	src := operators.Source(top, "src", operators.Generate(n, func(i int64) int64 { return i }))
	var got int64
	operators.Sink(src, "slow", operators.SinkFunc(func(int64) error {
		<-gate
		got++
		return nil
	}), operators.NoFusion())
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the source to run out of credit", func() bool { return stat(t, run, "src").Backpressured == 1 })
	// Credits: the sink's whole capacity, one batch held by the sink, one
	// batch waiting in the source's emitter.
	if out := stat(t, run, "src").Out; out > capacity+2*batch {
		t.Fatalf("source emitted %d records while the sink was stuck; bound is %d", out, capacity+2*batch)
	}
	open()
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if got != n {
		t.Fatalf("sink received %d records, want %d", got, n)
	}
	if s := stat(t, run, "src"); s.Blocked <= 0 {
		t.Errorf("source blocked time = %v, want > 0", s.Blocked)
	}
}

func TestDrainUnboundedSource(t *testing.T) {
	sys, ctx := newSystem(t)
	top := operators.NewTopology("endless")
	src := operators.Source(top, "ticks", operators.Generate(operators.Unbounded, func(i int64) int64 { return i }))
	sq := operators.Map(src, "square", func(v int64) int64 { return v * v }, operators.NoFusion())
	col := operators.NewCollector[int64]()
	operators.Sink(sq, "out", col)
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "records to flow", func() bool { return col.Len() > 10_000 })
	if err := run.Drain(ctx); err != nil {
		t.Fatalf("Drain() = %v", err)
	}
	emitted := stat(t, run, "ticks").Out
	got := col.Items()
	if int64(len(got)) != emitted {
		t.Fatalf("drained: source emitted %d, sink received %d: in-flight records lost", emitted, len(got))
	}
	for i, v := range got {
		if v != int64(i)*int64(i) {
			t.Fatalf("record %d = %d, want %d", i, v, i*i)
		}
	}
}

// runEndless starts a job whose source never ends, collecting what it
// emits, and returns once records flow.
func runEndless(t *testing.T, sys *actors.System, ctx context.Context, name string) (*operators.Topology, *actors.Run, *operators.Collector[int64]) {
	t.Helper()
	top := operators.NewTopology(name)
	src := operators.Source(top, "ticks", operators.Generate(operators.Unbounded, func(i int64) int64 { return i }))
	col := operators.NewCollector[int64]()
	operators.Sink(src, "out", col)
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "records to flow", func() bool { return col.Len() > 0 })
	return top, run, col
}

func TestStopAborts(t *testing.T) {
	sys, ctx := newSystem(t)
	_, run, _ := runEndless(t, sys, ctx, "stopped")
	if err := run.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := run.Wait(ctx); !errors.Is(err, operators.ErrAborted) {
		t.Fatalf("Wait() after Stop = %v, want ErrAborted", err)
	}
}

// TestAbortWithCause: a runner's reason for stopping a job is its outcome,
// wrapped in ErrAborted.
func TestAbortWithCause(t *testing.T) {
	sys, ctx := newSystem(t)
	_, run, _ := runEndless(t, sys, ctx, "abort-cause")
	cause := errors.New("fenced by a newer coordinator")
	engine.Abort(run, cause)
	err := run.Wait(ctx)
	if !errors.Is(err, operators.ErrAborted) || !errors.Is(err, cause) {
		t.Fatalf("Wait() after Abort = %v, want ErrAborted and the cause", err)
	}
}

func TestSystemStopDrainsRunningJobs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		t.Fatal(err)
	}
	top, run, col := runEndless(t, sys, ctx, "endless")
	if err := sys.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := run.Wait(ctx); err != nil {
		t.Fatalf("job after System.Stop: %v, want a clean drain", err)
	}
	if int64(col.Len()) != stat(t, run, "ticks").Out {
		t.Fatalf("records lost in the drain")
	}
	if _, err := sys.Run(ctx, top); !errors.Is(err, actors.ErrStopped) {
		t.Fatalf("Run on a stopped system = %v, want ErrStopped", err)
	}
}

func TestChannelSource(t *testing.T) {
	sys, ctx := newSystem(t)
	ch := make(chan string)
	top := operators.NewTopology("chan")
	src := operators.Source(top, "events", operators.FromChannel(ch))
	col := operators.NewCollector[string]()
	operators.Sink(operators.Map(src, "upper", strings.ToUpper), "out", col)
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 1000 {
		s := fmt.Sprintf("e%d", i)
		want = append(want, strings.ToUpper(s))
		ch <- s // unbuffered: the source's reader has to come back for each
	}
	close(ch)
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if got := col.Items(); !slices.Equal(got, want) {
		t.Fatalf("got %d records, want %d in order", len(got), len(want))
	}
}

func TestFileLinesToFile(t *testing.T) {
	sys, ctx := newSystem(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(in, []byte("one\r\ntwo\nthree"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.txt")
	top := operators.NewTopology("files")
	src := operators.Source(top, "lines", operators.FileLines(in))
	n := operators.Map(src, "len", func(s string) int { return len(s) })
	operators.Sink(n, "file", operators.File(out, func(v int) string { return fmt.Sprintf("len=%d", v) }))
	runToEnd(t, sys, ctx, top)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), "len=3\nlen=3\nlen=5\n"; got != want {
		t.Fatalf("file sink wrote %q, want %q", got, want)
	}
	if fi, _ := os.Stat(out); fi.Mode().Perm() != 0o600 {
		t.Errorf("file sink mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestInvalidTopologyRefusedByRun(t *testing.T) {
	sys, ctx := newSystem(t)
	top := operators.NewTopology("bad")
	operators.Source(top, "src", operators.FromSlice([]int{1}))
	if _, err := sys.Run(ctx, top); !errors.Is(err, operators.ErrUnconnected) {
		t.Fatalf("Run() = %v, want ErrUnconnected", err)
	}
}

// A LatencyEvery below 1 is refused, with the value named.
func TestLatencyEveryRefused(t *testing.T) {
	sys, ctx := newSystem(t)
	top := operators.NewTopology("bad", operators.LatencyEvery(0))
	src := operators.Source(top, "src", operators.FromSlice([]int{1}))
	operators.Sink(src, "out", operators.NewCollector[int]())
	if _, err := sys.Run(ctx, top); err == nil || !containsAll(err.Error(), "latency every 0 batches", "at least 1") {
		t.Fatalf("Run() = %v, want an error naming latency every 0", err)
	}
}

// A parallel source feeding two operators and a keyed join: the input
// channels of every receiving task are numbered apart (a regression: tasks
// later in the plan took over the channels of earlier ones).
func TestFanOutOfParallelSourceIntoJoin(t *testing.T) {
	sys, ctx := newSystem(t)
	top := operators.NewTopology(t.Name())
	src := operators.Source(top, "numbers", operators.Generate(1000, func(i int64) int64 { return i }), operators.Parallelism(2))
	evens := operators.Filter(src, "evens", func(v int64) bool { return v%2 == 0 })
	odds := operators.Filter(src, "odds", func(v int64) bool { return v%2 == 1 })
	pairs := operators.Join(evens, odds, "pairs", func(v int64) int64 { return v / 2 }, func(v int64) int64 { return v / 2 },
		func(a, b int64) [2]int64 { return [2]int64{a, b} }, operators.Parallelism(2))
	out := operators.NewCollector[[2]int64]()
	operators.Sink(pairs, "out", out)
	runToEnd(t, sys, ctx, top)
	got := out.Items()
	if len(got) != 500 {
		t.Fatalf("%d pairs, want 500", len(got))
	}
	for _, p := range got {
		if p[1] != p[0]+1 {
			t.Fatalf("pair %v", p)
		}
	}
}

// everyOnce says whether vs holds each of 0..n-1 exactly once, in any
// order: it sorts a copy and checks every adjacent pair.
func everyOnce(vs []int64, n int64) error {
	s := slices.Clone(vs)
	slices.Sort(s)
	if int64(len(s)) != n {
		return fmt.Errorf("%d records, want every one of 0..%d once", len(s), n-1)
	}
	if len(s) > 0 && (s[0] != 0 || s[len(s)-1] != n-1) {
		return fmt.Errorf("records from %d to %d, want 0..%d", s[0], s[len(s)-1], n-1)
	}
	for i := 1; i < len(s); i++ {
		if s[i] == s[i-1] {
			return fmt.Errorf("record %d twice", s[i])
		}
		if s[i] != s[i-1]+1 {
			return fmt.Errorf("records %d..%d missing", s[i-1]+1, s[i]-1)
		}
	}
	return nil
}

// TestEveryOnce: the check catches a duplicate that replaces a missing
// record (0 1 1 3), which a check on length and ends alone would pass.
func TestEveryOnce(t *testing.T) {
	for _, c := range []struct {
		vs []int64
		ok bool
	}{{[]int64{0, 1, 2, 3}, true}, {[]int64{3, 1, 0, 2}, true}, {[]int64{0, 1, 1, 3}, false},
		{[]int64{0, 1, 2}, false}, {[]int64{0, 2, 2, 3}, false}, {[]int64{1, 1, 2, 3}, false}} {
		if err := everyOnce(c.vs, 4); (err == nil) != c.ok {
			t.Errorf("everyOnce(%v, 4) = %v, want ok %v", c.vs, err, c.ok)
		}
	}
}

// TestCreditWindows: receivers gather credits before granting them back;
// with windows barely larger than a batch, shared by several senders, and
// with small odd batches, every record still arrives once (no sender waits
// for credit that never comes).
func TestCreditWindows(t *testing.T) {
	for _, c := range []struct{ batch, capacity, par int }{{256, 300, 1}, {256, 512, 2}, {7, 64, 3}, {64, 64, 2}} {
		t.Run(fmt.Sprintf("batch%d-cap%d-par%d", c.batch, c.capacity, c.par), func(t *testing.T) {
			sys, ctx := newSystem(t)
			const n = 20_000
			top := operators.NewTopology("credits", operators.BatchSize(c.batch), operators.Capacity(c.capacity))
			src := operators.Source(top, "src", operators.Generate(n, func(i int64) int64 { return i }), operators.Parallelism(c.par))
			m := operators.Map(operators.Rebalance(src, "spread"), "id", func(v int64) int64 { return v }, operators.NoFusion(), operators.Parallelism(c.par))
			col := operators.NewCollector[int64]()
			operators.Sink(m, "out", col, operators.NoFusion())
			runToEnd(t, sys, ctx, top)
			if err := everyOnce(col.Items(), n); err != nil {
				t.Fatal(err)
			}
		})
	}
}
