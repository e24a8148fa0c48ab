package operators_test

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clock/clocktest"
	"github.com/sluicehq/sluice/operators"
)

// tev is a test event: a key and a time in ms.
type tev struct {
	K string
	T int64
}

func tevTime(e tev) time.Time { return time.UnixMilli(e.T) }
func tevKey(e tev) string     { return e.K }

// win is a windowed result in comparable form.
type win struct {
	K          string
	Start, End int64 // ms
	N          int64
}

func wins[V any](rs []operators.Windowed[string, V], n func(V) int64) []win {
	out := make([]win, len(rs))
	for i, r := range rs {
		out[i] = win{r.Key, r.Start.UnixMilli(), r.End.UnixMilli(), n(r.Value)}
	}
	slices.SortFunc(out, func(a, b win) int {
		return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.K, b.K), cmp.Compare(a.End, b.End), cmp.Compare(a.N, b.N))
	})
	return out
}

func ident(n int64) int64 { return n }

// modelWindows counts events per key in epoch-aligned windows of size and
// slide (ms), the way the windows are specified.
func modelWindows(evs []tev, size, slide int64) []win {
	counts := map[win]int64{}
	for _, e := range evs {
		last := e.T - ((e.T%slide)+slide)%slide
		for start := last; start > e.T-size; start -= slide {
			counts[win{K: e.K, Start: start, End: start + size}]++
		}
	}
	var out []win
	for w, n := range counts {
		w.N = n
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b win) int {
		return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.K, b.K), cmp.Compare(a.End, b.End))
	})
	return out
}

// randomEvents are n events over keys, roughly in time order with jitter
// below maxLag ms.
func randomEvents(seed uint64, n, keys int, maxLag int64) []tev {
	rng := rand.New(rand.NewPCG(seed, 2))
	evs := make([]tev, n)
	for i := range evs {
		t := int64(i)*7 + rng.Int64N(maxLag+1)
		evs[i] = tev{K: fmt.Sprintf("k%d", rng.IntN(keys)), T: t}
	}
	return evs
}

func TestTumblingAndSlidingWindowsMatchModel(t *testing.T) {
	evs := randomEvents(1, 20_000, 7, 0)
	for _, tc := range []struct {
		name        string
		w           operators.Windows
		size, slide int64
	}{
		{"tumbling", operators.Tumbling(time.Second), 1000, 1000},
		{"sliding", operators.Sliding(time.Second, 250*time.Millisecond), 1000, 250},
		{"sliding-gaps", operators.Sliding(300*time.Millisecond, time.Second), 300, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys, ctx := newSystem(t)
			top := operators.NewTopology(t.Name(), operators.BatchSize(64))
			src := operators.Source(top, "events", operators.FromSlice(evs))
			ts := operators.Timestamps(src, "ts", tevTime)
			counts := operators.WindowCount(operators.KeyBy(ts, "by-key", tevKey, operators.Parallelism(2)), "count", tc.w)
			col := operators.NewCollector[operators.Windowed[string, int64]]()
			operators.Sink(counts, "out", col)
			runToEnd(t, sys, ctx, top)
			got, want := wins(col.Items(), ident), modelWindows(evs, tc.size, tc.slide)
			if !slices.Equal(got, want) {
				t.Fatalf("%d windows, model %d; first difference %s", len(got), len(want), firstDiff(got, want))
			}
		})
	}
}

func firstDiff[T comparable](got, want []T) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("at %d: got %v, want %v", i, got[i], want[i])
		}
	}
	return fmt.Sprintf("lengths %d and %d", len(got), len(want))
}

// Windows fire as the watermark passes them, not only at the end: with an
// unbounded input, results appear while it runs.
func TestWindowsFireOnWatermark(t *testing.T) {
	sys, ctx := newSystem(t)
	in := make(chan tev)
	top := operators.NewTopology(t.Name(), operators.BatchSize(1))
	src := operators.Source(top, "events", operators.FromChannel(in))
	ts := operators.Timestamps(src, "ts", tevTime)
	counts := operators.WindowCount(operators.KeyBy(ts, "by-key", tevKey), "count", operators.Tumbling(time.Second))
	got := make(chan operators.Windowed[string, int64], 10)
	operators.Sink(counts, "out", operators.SinkFunc(func(w operators.Windowed[string, int64]) error { got <- w; return nil }))
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []tev{{"a", 100}, {"a", 900}, {"b", 950}, {"a", 1000}} {
		in <- e
	}
	for range 2 { // [0,1s) closed when the record at 1 s arrived
		select {
		case w := <-got:
			if w.End.UnixMilli() != 1000 || (w.Key == "a") != (w.Value == 2) {
				t.Fatalf("unexpected result %+v", w)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the window [0, 1s) did not fire when the watermark passed it")
		}
	}
	close(in)
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if w := <-got; w.Key != "a" || w.Start.UnixMilli() != 1000 || w.Value != 1 {
		t.Fatalf("at the end: %+v", w)
	}
}

func TestSessionWindowsOutOfOrder(t *testing.T) {
	sys, ctx := newSystem(t)
	// a: 0, 3000 and 1500 (late but within the bound) make one session
	// [0, 7000); 20000 starts another. b: 500 alone.
	evs := []tev{{"a", 0}, {"b", 500}, {"a", 3000}, {"a", 1500}, {"a", 20000}, {"b", 30000}}
	top := operators.NewTopology(t.Name(), operators.BatchSize(1))
	src := operators.Source(top, "events", operators.FromSlice(evs))
	ts := operators.Timestamps(src, "ts", tevTime, operators.OutOfOrderness(2*time.Second))
	sess := operators.WindowCount(operators.KeyBy(ts, "by-key", tevKey, operators.Parallelism(2)), "sessions", operators.Sessions(4*time.Second))
	col := operators.NewCollector[operators.Windowed[string, int64]]()
	operators.Sink(sess, "out", col)
	runToEnd(t, sys, ctx, top)
	want := []win{{"a", 0, 7000, 3}, {"b", 500, 4500, 1}, {"a", 20000, 24000, 1}, {"b", 30000, 34000, 1}}
	slices.SortFunc(want, func(a, b win) int { return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.K, b.K)) })
	if got := wins(col.Items(), ident); !slices.Equal(got, want) {
		t.Fatalf("sessions %v, want %v", got, want)
	}
}

// A record behind the watermark goes to the late output and is counted;
// with allowed lateness it updates its window, which fires again.
func TestLateRecords(t *testing.T) {
	evs := []tev{{"a", 100}, {"a", 2500}, {"a", 900}, {"a", 5000}, {"a", 1200}}
	for _, tc := range []struct {
		name     string
		lateness time.Duration
		want     []win
		late     []tev
	}{
		{"dropped", 0, []win{{"a", 0, 1000, 1}, {"a", 2000, 3000, 1}, {"a", 5000, 6000, 1}},
			[]tev{{"a", 900}, {"a", 1200}}},
		// 900 updates [0,1s), which fires again; 1200 arrives after the
		// watermark passed [1s,2s) (at 5s) but within 4 s of lateness.
		{"within-lateness", 4 * time.Second, []win{{"a", 0, 1000, 1}, {"a", 0, 1000, 2}, {"a", 1000, 2000, 1}, {"a", 2000, 3000, 1}, {"a", 5000, 6000, 1}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys, ctx := newSystem(t)
			top := operators.NewTopology(t.Name(), operators.BatchSize(1))
			src := operators.Source(top, "events", operators.FromSlice(evs))
			ts := operators.Timestamps(src, "ts", tevTime)
			late := operators.NewCollector[tev]()
			ks := operators.KeyBy(ts, "by-key", tevKey)
			counts := operators.WindowCount(ks, "count", operators.Tumbling(time.Second), operators.AllowedLateness(tc.lateness))
			operators.Sink(operators.LateRecords(ks, counts, "late"), "late-out", late)
			col := operators.NewCollector[operators.Windowed[string, int64]]()
			operators.Sink(counts, "out", col)
			run := runToEnd(t, sys, ctx, top)
			if got := wins(col.Items(), ident); !slices.Equal(got, tc.want) {
				t.Errorf("windows %v, want %v", got, tc.want)
			}
			if got := late.Items(); !slices.Equal(got, tc.late) {
				t.Errorf("late output %v, want %v", got, tc.late)
			}
			if st := stat(t, run, "count"); st.Late != int64(len(tc.late)) {
				t.Errorf("Late = %d, want %d", st.Late, len(tc.late))
			}
		})
	}
}

// The watermark of an operator with several inputs is the lowest of them:
// a window closes only when both sources passed it.
func TestWatermarkIsTheMinimumOfInputs(t *testing.T) {
	sys, ctx := newSystem(t)
	fast, slow := make(chan tev), make(chan tev)
	top := operators.NewTopology(t.Name(), operators.BatchSize(1))
	a := operators.Timestamps(operators.Source(top, "fast", operators.FromChannel(fast)), "ts-fast", tevTime)
	b := operators.Timestamps(operators.Source(top, "slow", operators.FromChannel(slow)), "ts-slow", tevTime)
	counts := operators.WindowCount(operators.KeyBy(operators.Merge("both", a, b), "by-key", tevKey), "count", operators.Tumbling(time.Second))
	got := make(chan operators.Windowed[string, int64], 10)
	operators.Sink(counts, "out", operators.SinkFunc(func(w operators.Windowed[string, int64]) error { got <- w; return nil }))
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	fast <- tev{"a", 100}
	slow <- tev{"a", 200}
	fast <- tev{"a", 5000} // fast passed [0,1s), slow has not
	var stats []string
	waitFor(t, "the fast source's watermark to arrive", func() bool {
		st := stat(t, run, "count")
		stats = append(stats[:0], fmt.Sprint(st.In))
		return st.In == 3
	})
	select {
	case w := <-got:
		t.Fatalf("window %+v fired before the slow input passed it", w)
	default:
	}
	slow <- tev{"a", 1500}
	select {
	case w := <-got:
		if w.Start.UnixMilli() != 0 || w.Value != 2 {
			t.Fatalf("got %+v, want [0,1s) with 2", w)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the window did not fire once both inputs passed it")
	}
	close(fast)
	close(slow)
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// An idle source stops holding event time back.
func TestIdleSourceReleasesWindows(t *testing.T) {
	sys, ctx := newSystem(t)
	busy, quiet := make(chan tev), make(chan tev)
	top := operators.NewTopology(t.Name(), operators.BatchSize(1))
	a := operators.Timestamps(operators.Source(top, "busy", operators.FromChannel(busy)), "ts-busy", tevTime)
	b := operators.Timestamps(operators.Source(top, "quiet", operators.FromChannel(quiet), operators.IdleAfter(20*time.Millisecond)), "ts-quiet", tevTime)
	counts := operators.WindowCount(operators.KeyBy(operators.Merge("both", a, b), "by-key", tevKey), "count", operators.Tumbling(time.Second))
	got := make(chan operators.Windowed[string, int64], 10)
	operators.Sink(counts, "out", operators.SinkFunc(func(w operators.Windowed[string, int64]) error { got <- w; return nil }))
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	busy <- tev{"a", 100}
	busy <- tev{"a", 5000}
	select {
	case w := <-got:
		if w.Start.UnixMilli() != 0 || w.Value != 1 {
			t.Fatalf("got %+v", w)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the idle source held the window back")
	}
	close(busy)
	close(quiet)
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestProcessingTimeWindows(t *testing.T) {
	sys, ctx := newSystem(t)
	clock := clocktest.NewManual(time.UnixMilli(10_000))
	in := make(chan string)
	top := operators.NewTopology(t.Name(), operators.BatchSize(1), operators.WithClock(clock))
	src := operators.Source(top, "words", operators.FromChannel(in))
	counts := operators.WindowCount(operators.KeyBy(src, "by-word", func(s string) string { return s }), "count",
		operators.Tumbling(time.Second).ProcessingTime())
	got := make(chan operators.Windowed[string, int64], 10)
	operators.Sink(counts, "out", operators.SinkFunc(func(w operators.Windowed[string, int64]) error { got <- w; return nil }))
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	in <- "x"
	in <- "x"
	if err := clock.WaitForTimers(ctx, 1); err != nil { // the window's end
		t.Fatal(err)
	}
	waitFor(t, "both records", func() bool { return stat(t, run, "count").In == 2 })
	select {
	case w := <-got:
		t.Fatalf("%+v fired before the clock passed the window's end", w)
	default:
	}
	clock.Advance(time.Second)
	select {
	case w := <-got:
		if w.Key != "x" || w.Value != 2 || w.Start.UnixMilli() != 10_000 || w.End.UnixMilli() != 11_000 {
			t.Fatalf("got %+v", w)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the processing-time window did not fire when the clock passed its end")
	}
	close(in)
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestWindowValidation(t *testing.T) {
	top := operators.NewTopology("v")
	src := operators.Source(top, "events", operators.FromSlice([]tev{{"a", 1}}))
	ks := operators.KeyBy(src, "by-key", tevKey)
	operators.Sink(operators.WindowCount(ks, "no-time", operators.Tumbling(time.Second)), "o1", operators.NewCollector[operators.Windowed[string, int64]]())
	ts := operators.Timestamps(src, "ts", tevTime)
	kt := operators.KeyBy(ts, "by-key2", tevKey)
	operators.Sink(operators.WindowAggregate(kt, "no-merge", operators.Sessions(time.Second), func() int { return 0 }, func(a int, _ tev) int { return a + 1 }, nil),
		"o2", operators.NewCollector[operators.Windowed[string, int]]())
	operators.Sink(operators.WindowCount(kt, "bad-size", operators.Tumbling(0)), "o3", operators.NewCollector[operators.Windowed[string, int64]]())
	// The late records of an operator that is no window over the stream.
	notWindow := operators.Map(ts, "not-window", func(e tev) tev { return e })
	operators.Sink(operators.LateRecords(kt, notWindow, "bad-late"), "o4", operators.NewCollector[tev]())
	other := operators.WindowCount(ks, "other-window", operators.Tumbling(time.Second).ProcessingTime())
	operators.Sink(other, "o5", operators.NewCollector[operators.Windowed[string, int64]]())
	operators.Sink(operators.LateRecords(kt, other, "bad-late2"), "o6", operators.NewCollector[tev]())
	err := top.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		`"no-time"`, "add operators.Timestamps",
		`"no-merge"`, "merge function",
		`"bad-size"`, "size must be positive",
		`"bad-late"`, "not a windowed aggregation",
		`"bad-late2"`, "does not window",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	var te *operators.TopologyError
	if !errors.As(err, &te) {
		t.Errorf("not a *TopologyError: %T", err)
	}
}

// The late records of a window whose results a Map transforms: the window
// keeps its results' chain, and its late records reach their own stream,
// with the job's watermark and end of stream.
func TestLateRecordsBesideAResultsChain(t *testing.T) {
	sys, ctx := newSystem(t)
	top := operators.NewTopology(t.Name(), operators.BatchSize(1))
	src := operators.Source(top, "events", operators.FromSlice([]tev{{"a", 100}, {"b", 2500}, {"a", 900}, {"b", 5000}, {"a", 1200}}))
	ks := operators.KeyBy(operators.Timestamps(src, "ts", tevTime), "by-key", tevKey, operators.Parallelism(2))
	counts := operators.WindowCount(ks, "count", operators.Tumbling(time.Second))
	values := operators.Map(counts, "value", func(w operators.Windowed[string, int64]) int64 { return w.Value })
	out := operators.NewCollector[int64]()
	operators.Sink(values, "out", out)
	lateTimes := operators.Map(operators.LateRecords(ks, counts, "late"), "late-time", func(e tev) int64 { return e.T })
	late := operators.NewCollector[int64]()
	operators.Sink(lateTimes, "late-out", late)
	p, err := top.Plan()
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range p.Tasks {
		if slices.Contains(task.Operators, "late") && slices.Contains(task.Operators, "count") {
			t.Fatalf("the late records' operator fused into the window's task: %v", task.Operators)
		}
	}
	run := runToEnd(t, sys, ctx, top)
	got := late.Items()
	slices.Sort(got)
	if !slices.Equal(got, []int64{900, 1200}) {
		t.Errorf("late records %v, want [900 1200]", got)
	}
	if n := out.Len(); n != 3 {
		t.Errorf("%d results, want 3 (a [0,1s), b [2s,3s), b [5s,6s))", n)
	}
	if st := stat(t, run, "count"); st.Late != 2 {
		t.Errorf("Late = %d, want 2", st.Late)
	}
}
