package nexmark

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
)

// queryConfig is the stream of the query tests: 100 000 events from 4
// generators at 1 000 events/s, so 100 s of event time (20 of q5's sliding
// windows, 10 of q7's and q8's tumbling windows, auctions that last up to
// about 3 s).
func queryConfig() Config {
	cfg := DefaultConfig()
	cfg.NumEvents = 100_000
	cfg.NumEventGenerators = 4
	cfg.FirstEventRate, cfg.NextEventRate = 1000, 1000
	return cfg
}

var queryEventsCache sync.Map // Config -> []Event

// queryEvents returns the whole stream of cfg, generated once per test
// binary.
func queryEvents(t testing.TB, cfg Config) []Event {
	t.Helper()
	if evs, ok := queryEventsCache.Load(cfg); ok {
		return evs.([]Event)
	}
	s, err := NewStream(cfg)
	if err != nil {
		t.Fatal(err)
	}
	evs := make([]Event, 0, s.Len())
	for ev := range s.All() {
		evs = append(evs, ev)
	}
	queryEventsCache.Store(cfg, evs)
	return evs
}

// queryRun runs top to its end and checks that no operator saw a late
// record.
func queryRun(t *testing.T, top *operators.Topology) *actors.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sys, err := actors.NewSystem(actors.Config{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sys.Stop(ctx); err != nil {
			t.Errorf("system stop: %v", err)
		}
	}()
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	queryNoLate(t, run)
	return run
}

func queryNoLate(t *testing.T, run *actors.Run) {
	t.Helper()
	for _, st := range run.Stats() {
		if st.Late != 0 {
			t.Errorf("operator %s: %d late records", st.Name, st.Late)
		}
	}
}

// queryOutputs collects the results of every query of one topology.
type queryOutputs struct {
	q0  *operators.Collector[Event]
	q1  *operators.Collector[Q1]
	q2  *operators.Collector[Q2]
	q3  *operators.Collector[Q3]
	q4  *operators.Collector[Q4]
	q5  *operators.Collector[Q5]
	q6  *operators.Collector[Q6]
	q7  *operators.Collector[Q7]
	q8  *operators.Collector[Q8]
	q9  *operators.Collector[Q9]
	q11 *operators.Collector[Q11]
}

// collectInto adds a sink that collects s.
func collectInto[T any](s operators.Stream[T], name string) *operators.Collector[T] {
	c := operators.NewCollector[T]()
	operators.Sink(s, name, c)
	return c
}

// addAllQueries adds every query's typed builder over events, each into a
// collector.
func addAllQueries(events operators.Stream[Event], p Params) *queryOutputs {
	return &queryOutputs{
		q0:  collectInto(BuildQ0(events, p), "q0.out"),
		q1:  collectInto(BuildQ1(events, p), "q1.out"),
		q2:  collectInto(BuildQ2(events, p), "q2.out"),
		q3:  collectInto(BuildQ3(events, p), "q3.out"),
		q4:  collectInto(BuildQ4(events, p), "q4.out"),
		q5:  collectInto(BuildQ5(events, p), "q5.out"),
		q6:  collectInto(BuildQ6(events, p), "q6.out"),
		q7:  collectInto(BuildQ7(events, p), "q7.out"),
		q8:  collectInto(BuildQ8(events, p), "q8.out"),
		q9:  collectInto(BuildQ9(events, p), "q9.out"),
		q11: collectInto(BuildQ11(events, p), "q11.out"),
	}
}

// check compares every query's output with its model over events.
func (o *queryOutputs) check(t *testing.T, events []Event) {
	t.Run("q0", func(t *testing.T) {
		got, want := SortedEvents(o.q0.Items()), ModelQ0(events)
		if !slices.EqualFunc(got, want, func(a, b Event) bool { return CompareEvents(a, b) == 0 }) {
			t.Errorf("%d events out, model %d", len(got), len(want))
		}
	})
	t.Run("q1", func(t *testing.T) { queryCompare(t, Sorted(o.q1.Items()), ModelQ1(events)) })
	t.Run("q2", func(t *testing.T) { queryCompare(t, Sorted(o.q2.Items()), ModelQ2(events)) })
	t.Run("q3", func(t *testing.T) { queryCompare(t, Sorted(o.q3.Items()), ModelQ3(events)) })
	t.Run("q4", func(t *testing.T) { queryCompare(t, LastPerKeyQ4(o.q4.Items()), ModelQ4(events)) })
	t.Run("q5", func(t *testing.T) { queryCompare(t, Sorted(o.q5.Items()), ModelQ5(events)) })
	t.Run("q6", func(t *testing.T) {
		updates := o.q6.Items()
		queryCompare(t, LastPerKeyQ6(updates), ModelQ6(events))
		// Every update, not just the last: the same multiset as the model's.
		queryCompare(t, Sorted(updates), Sorted(ModelQ6Updates(events)))
	})
	t.Run("q7", func(t *testing.T) { queryCompare(t, Sorted(o.q7.Items()), ModelQ7(events)) })
	t.Run("q8", func(t *testing.T) { queryCompare(t, Sorted(o.q8.Items()), ModelQ8(events)) })
	t.Run("q9", func(t *testing.T) { queryCompare(t, Sorted(o.q9.Items()), ModelQ9(events)) })
	t.Run("q11", func(t *testing.T) { queryCompare(t, Sorted(o.q11.Items()), ModelQ11(events)) })
}

// queryCompare fails unless got equals want; both are in canonical order.
// A model without results would make the comparison vacuous: it fails too.
func queryCompare[T comparable](t *testing.T, got, want []T) {
	t.Helper()
	if len(want) == 0 {
		t.Fatal("the model has no results: the test's stream is too small")
	}
	if slices.Equal(got, want) {
		return
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	var g, w any = "(none)", "(none)"
	if i < len(got) {
		g = got[i]
	}
	if i < len(want) {
		w = want[i]
	}
	t.Errorf("%d results, model %d; first difference at %d: got %+v, model %+v", len(got), len(want), i, g, w)
}

// TestQueryLiveSource runs every query at once on the live generator read by
// 2 source instances (4 generators), with the keyed operators in 2
// instances, and compares each query's output with its model.
func TestQueryLiveSource(t *testing.T) {
	cfg := queryConfig()
	top := operators.NewTopology(t.Name())
	events := operators.Source(top, "events", Source(cfg), operators.Parallelism(2))
	out := addAllQueries(events, ParamsOf(cfg, 2))
	queryRun(t, top)
	out.check(t, queryEvents(t, cfg))
}

// TestQueryDenseStream runs every query at Beam's default rate (10 000
// events/s: several events in each ms, so bids often share their auction's
// ms) from a slice, read by 2 source instances as the live source reads its
// generators.
func TestQueryDenseStream(t *testing.T) {
	cfg := queryConfig()
	cfg.FirstEventRate, cfg.NextEventRate = 10_000, 10_000
	evs := queryEvents(t, cfg)
	top := operators.NewTopology(t.Name())
	events := operators.Source(top, "events", operators.FromSlice(evs), operators.Parallelism(2))
	out := addAllQueries(events, ParamsOf(cfg, 2))
	queryRun(t, top)
	out.check(t, evs)
}

// queryWriteFile writes evs to an event file with Writer.
func queryWriteFile(t *testing.T, evs []Event) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := NewWriter(f)
	for _, ev := range evs {
		if err := w.Write(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// modelLines returns the model output of each query (all of them without
// any named) as sorted JSON lines, as Build's output is compared (for q4 and
// q6: the last update per key).
func modelLines(evs []Event, names ...string) map[string][]string {
	if len(names) == 0 {
		names = Queries()
	}
	m := map[string][]string{}
	for _, q := range names {
		var lines []string
		switch q {
		case "q0":
			for _, ev := range ModelQ0(evs) {
				lines = append(lines, string(AppendJSON(nil, ev)))
			}
		case "q1":
			lines = modelLinesOf(ModelQ1(evs))
		case "q2":
			lines = modelLinesOf(ModelQ2(evs))
		case "q3":
			lines = modelLinesOf(ModelQ3(evs))
		case "q4":
			lines = modelLinesOf(ModelQ4(evs))
		case "q5":
			lines = modelLinesOf(ModelQ5(evs))
		case "q6":
			lines = modelLinesOf(ModelQ6(evs))
		case "q7":
			lines = modelLinesOf(ModelQ7(evs))
		case "q8":
			lines = modelLinesOf(ModelQ8(evs))
		case "q9":
			lines = modelLinesOf(ModelQ9(evs))
		case "q11":
			lines = modelLinesOf(ModelQ11(evs))
		default:
			panic("no model for " + q)
		}
		slices.Sort(lines)
		m[q] = lines
	}
	return m
}

// resultLines reduces a query's JSON lines to what is compared with
// modelLines: sorted, and for q4 and q6 the last update per key (the lines
// of one key are in the order they were emitted).
func resultLines(t testing.TB, query string, lines []string) []string {
	t.Helper()
	switch query {
	case "q4", "q6":
		var q4 []Q4
		var q6 []Q6
		for _, l := range lines {
			var err error
			if query == "q4" {
				var r Q4
				err = json.Unmarshal([]byte(l), &r)
				q4 = append(q4, r)
			} else {
				var r Q6
				err = json.Unmarshal([]byte(l), &r)
				q6 = append(q6, r)
			}
			if err != nil {
				t.Fatalf("%s line %q: %v", query, l, err)
			}
		}
		if query == "q4" {
			lines = modelLinesOf(LastPerKeyQ4(q4))
		} else {
			lines = modelLinesOf(LastPerKeyQ6(q6))
		}
	}
	out := slices.Clone(lines)
	slices.Sort(out)
	return out
}

func modelLinesOf[T interface{ AppendJSON([]byte) []byte }](rs []T) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = string(r.AppendJSON(nil))
	}
	return out
}

// TestQueryEventFile runs every query with Build on an event file written
// with Writer (FileSource) and compares the JSON lines with the models'.
func TestQueryEventFile(t *testing.T) {
	cfg := queryConfig()
	evs := queryEvents(t, cfg)
	path := queryWriteFile(t, evs)
	top := operators.NewTopology(t.Name())
	events := operators.Source(top, "events", FileSource(path, false))
	outs := map[string]*operators.Collector[string]{}
	for _, q := range Queries() {
		s, err := Build(q, events, ParamsOf(cfg, 2))
		if err != nil {
			t.Fatal(err)
		}
		outs[q] = collectInto(s, q+".out")
	}
	queryRun(t, top)
	want := modelLines(evs)
	for _, q := range Queries() {
		t.Run(q, func(t *testing.T) { queryCompare(t, resultLines(t, q, outs[q].Items()), want[q]) })
	}
}

// TestQueryEventFileMalformed: a malformed line fails the job with an error
// naming its line, unless the source skips it; then it is counted and the
// results are those of the other events.
func TestQueryEventFileMalformed(t *testing.T) {
	cfg := queryConfig()
	cfg.NumEvents = 20_000
	evs := queryEvents(t, cfg)
	path := queryWriteFile(t, evs)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	const bad = 1234 // 1-based line number of the damaged line
	dropped, err := DecodeLine([]byte(strings.TrimSuffix(lines[bad-1], "\n")))
	if err != nil {
		t.Fatal(err)
	}
	lines[bad-1] = `{"type":"bid","auction":1000,` + "\n"
	if err := os.WriteFile(path, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	rest := slices.DeleteFunc(slices.Clone(evs), func(e Event) bool { return CompareEvents(e, dropped) == 0 })
	if len(rest) != len(evs)-1 {
		t.Fatalf("the damaged line's event occurs %d times", len(evs)-len(rest))
	}

	t.Run("fails", func(t *testing.T) {
		top := operators.NewTopology(t.Name())
		s, err := Build("q5", operators.Source(top, "events", FileSource(path, false)), Params{})
		if err != nil {
			t.Fatal(err)
		}
		operators.Sink(s, "out", operators.NewCollector[string]())
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sys, err := actors.NewSystem(actors.Config{Name: t.Name()})
		if err != nil {
			t.Fatal(err)
		}
		defer sys.Stop(ctx)
		run, err := sys.Run(ctx, top)
		if err != nil {
			t.Fatal(err)
		}
		err = run.Wait(ctx)
		var le *LineError
		if !errors.As(err, &le) || le.Line != bad || !errors.Is(err, ErrMalformed) {
			t.Fatalf("job error %v, want a *LineError for line %d", err, bad)
		}
		if want := fmt.Sprintf("line %d", bad); !strings.Contains(err.Error(), want) {
			t.Fatalf("job error %q does not say %q", err, want)
		}
	})
	t.Run("skips", func(t *testing.T) {
		top := operators.NewTopology(t.Name())
		src := FileSource(path, true)
		events := operators.Source(top, "events", src)
		outs := map[string]*operators.Collector[string]{}
		for _, q := range []string{"q3", "q5", "q9"} {
			s, err := Build(q, events, Params{Parallelism: 2})
			if err != nil {
				t.Fatal(err)
			}
			outs[q] = collectInto(s, q+".out")
		}
		queryRun(t, top)
		if n := src.Skipped(); n != 1 {
			t.Errorf("Skipped() = %d, want 1", n)
		}
		want := modelLines(rest, "q3", "q5", "q9")
		for q, c := range outs {
			t.Run(q, func(t *testing.T) { queryCompare(t, resultLines(t, q, c.Items()), want[q]) })
		}
	})
}

func TestQueryUnknown(t *testing.T) {
	top := operators.NewTopology(t.Name())
	events := operators.Source(top, "events", operators.FromSlice([]Event{}))
	_, err := Build("q10", events, Params{})
	want := `nexmark: no query "q10" (valid: q0, q1, q2, q3, q4, q5, q6, q7, q8, q9, q11)`
	if err == nil || err.Error() != want {
		t.Fatalf("Build(q10) error %v, want %s", err, want)
	}
	if _, err := Build("q1", events, Params{Parallelism: -1}); !errors.Is(err, ErrInvalidParams) {
		t.Fatalf("Build with parallelism -1: error %v, want ErrInvalidParams", err)
	}
}

// TestQueryParams: the window knobs reach the windows. With windows of 20 s
// every 10 s, q5's windows are those bounds.
func TestQueryParams(t *testing.T) {
	cfg := queryConfig()
	cfg.NumEvents = 20_000
	cfg.WindowSizeSec, cfg.WindowPeriodSec = 20, 10
	evs := queryEvents(t, cfg)
	top := operators.NewTopology(t.Name())
	out := collectInto(BuildQ5(operators.Source(top, "events", operators.FromSlice(evs)), ParamsOf(cfg, 2)), "out")
	queryRun(t, top)
	got := out.Items()
	if len(got) == 0 {
		t.Fatal("no results")
	}
	for _, r := range got {
		if r.WindowEnd-r.WindowStart != 20_000 || r.WindowStart%10_000 != 0 {
			t.Fatalf("result %+v: not a window of 20 s starting at a multiple of 10 s", r)
		}
	}
	if p := ParamsOf(cfg, 3); p.WindowSize != 20*time.Second || p.WindowPeriod != 10*time.Second || p.AuctionSkip != 123 || p.Parallelism != 3 {
		t.Fatalf("ParamsOf = %+v", p)
	}
}

// TestPendingUntil: a pending bid is dropped at the next whole second
// after its time, never before it (negative times and the largest too).
func TestPendingUntil(t *testing.T) {
	for _, c := range []struct{ ms, want int64 }{
		{0, 1000}, {1, 1000}, {999, 1000}, {1000, 2000}, {1_700_000_000_123, 1_700_000_001_000},
		{-1, 0}, {-999, 0}, {-1000, 0}, {-1001, -1000},
		{math.MaxInt64 - 1000, math.MaxInt64 - 1000 - (math.MaxInt64-1000)%1000 + 1000}, {math.MaxInt64, math.MaxInt64},
	} {
		if got := pendingUntil(c.ms); got != c.want || got < c.ms {
			t.Errorf("pendingUntil(%d) = %d, want %d", c.ms, got, c.want)
		}
	}
}
