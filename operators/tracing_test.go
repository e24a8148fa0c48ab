package operators_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/supervision"
)

// tracedSystem is a system whose tracer records every span in memory.
func tracedSystem(t *testing.T) (*actors.System, context.Context, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	sys, err := actors.NewSystem(actors.Config{Name: t.Name(), TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sys.Stop(ctx)
		tp.Shutdown(ctx)
		cancel()
	})
	return sys, ctx, rec
}

type spanIndex struct {
	byID   map[trace.SpanID]sdktrace.ReadOnlySpan
	byName map[string][]sdktrace.ReadOnlySpan
}

func indexSpans(rec *tracetest.SpanRecorder) spanIndex {
	ix := spanIndex{byID: map[trace.SpanID]sdktrace.ReadOnlySpan{}, byName: map[string][]sdktrace.ReadOnlySpan{}}
	for _, s := range rec.Ended() {
		ix.byID[s.SpanContext().SpanID()] = s
		ix.byName[s.Name()] = append(ix.byName[s.Name()], s)
	}
	return ix
}

// parentName is the name of s's parent span, "" for a root.
func (ix spanIndex) parentName(s sdktrace.ReadOnlySpan) string {
	if p, ok := ix.byID[s.Parent().SpanID()]; ok {
		return p.Name()
	}
	return ""
}

// checkParents asserts that every span named child has a parent named
// parent, in the same trace, and that there are some.
func checkParents(t *testing.T, ix spanIndex, child, parent string) {
	t.Helper()
	spans := ix.byName[child]
	if len(spans) == 0 {
		t.Fatalf("no %q spans (have %v)", child, names(ix))
	}
	for _, s := range spans {
		if got := ix.parentName(s); got != parent {
			t.Fatalf("span %q has parent %q, want %q", child, got, parent)
		}
		if p := ix.byID[s.Parent().SpanID()]; p.SpanContext().TraceID() != s.SpanContext().TraceID() {
			t.Fatalf("span %q is in another trace than its parent", child)
		}
	}
}

// attr is the string form of attribute key of s, "" without it.
func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, a := range s.Attributes() {
		if string(a.Key) == key {
			return a.Value.Emit()
		}
	}
	return ""
}

func names(ix spanIndex) []string {
	var out []string
	for n := range ix.byName {
		out = append(out, n)
	}
	return out
}

// TestTracesFollowRecordsThroughOperators traces every record (TraceRatio
// 1): each gets a trace of its own, rooted at the source, with a span per
// operator that carries its record id (and key after the key-by), and the
// aggregate's results link to every record they count, 100 links a span.
func TestTracesFollowRecordsThroughOperators(t *testing.T) {
	sys, ctx, rec := tracedSystem(t)
	top := operators.NewTopology("traced", operators.BatchSize(100), operators.TraceRatio(1))
	src := operators.Source(top, "src", operators.Generate(1000, func(i int64) int64 { return i }))
	double := operators.Map(src, "double", func(v int64) int64 { return 2 * v }) // fused with src
	by := operators.KeyBy(double, "by", func(v int64) int64 { return v % 3 }, operators.Parallelism(2))
	counts := operators.Count(by, "count", operators.Emit(operators.EmitAtEnd))
	operators.Sink(counts, "out", discard[operators.KV[int64, int64]]()) // fused with count
	runToEnd(t, sys, ctx, top)

	ix := indexSpans(rec)
	roots := ix.byName["src"]
	ids := map[string]bool{}
	for _, s := range roots {
		if s.Parent().IsValid() || attr(s, "sluice.role") != "source" {
			t.Fatalf("source span with parent %v, role %q", s.Parent(), attr(s, "sluice.role"))
		}
		ids[attr(s, "sluice.record.id")] = true
	}
	if len(roots) != 1000 || len(ids) != 1000 || !ids["src/0/0"] || !ids["src/0/999"] {
		t.Fatalf("%d source spans, %d record ids, want a trace for each of the 1000 records", len(roots), len(ids))
	}
	checkParents(t, ix, "double", "src") // fused
	checkParents(t, ix, "count", "double")
	for _, s := range ix.byName["double"] {
		p := ix.byID[s.Parent().SpanID()]
		if attr(s, "sluice.record.id") != attr(p, "sluice.record.id") || attr(s, "sluice.edge") != "src->double" || attr(s, "sluice.edge.kind") != "fused" {
			t.Fatalf("double span: id %q (parent's %q), edge %q %q", attr(s, "sluice.record.id"), attr(p, "sluice.record.id"),
				attr(s, "sluice.edge"), attr(s, "sluice.edge.kind"))
		}
	}
	keys := map[string]int{}
	for _, s := range ix.byName["count"] {
		for k, want := range map[string]string{"sluice.mailbox.policy": "block", "sluice.edge": "double->count", "sluice.edge.kind": "hash", "sluice.role": "pass"} {
			if got := attr(s, k); got != want {
				t.Fatalf("count span: %s = %q, want %q", k, got, want)
			}
		}
		if attr(s, "sluice.queue.wait_us") == "" {
			t.Fatal("count span (a chain head) lacks sluice.queue.wait_us")
		}
		keys[attr(s, "sluice.key")]++
	}
	if len(keys) != 3 || keys["0"]+keys["1"]+keys["2"] != 1000 {
		t.Fatalf("count spans by key %v, want 3 keys and 1000 spans", keys)
	}
	// One result span per key, in the trace of one of its records, linked
	// to the pass spans of all of them.
	results := ix.byName["count emit"]
	if len(results) != 3 {
		t.Fatalf("%d result spans, want one per key (3)", len(results))
	}
	linked := map[trace.SpanID]bool{}
	for _, r := range results {
		if ix.parentName(r) != "count" {
			t.Fatalf("result span's parent is %q, want a count span", ix.parentName(r))
		}
		linked[r.Parent().SpanID()] = true // the first input: the others are links
		if len(r.Links()) > 100 || r.DroppedLinks() > 0 {
			t.Fatalf("result span has %d links (%d dropped): want at most 100 a span", len(r.Links()), r.DroppedLinks())
		}
		for _, l := range r.Links() {
			linked[l.SpanContext.SpanID()] = true
		}
	}
	for _, s := range ix.byName["count inputs"] {
		if ix.parentName(s) != "count emit" || s.DroppedLinks() > 0 {
			t.Fatalf("inputs span: parent %q, %d links dropped", ix.parentName(s), s.DroppedLinks())
		}
		for _, l := range s.Links() {
			linked[l.SpanContext.SpanID()] = true
		}
	}
	for _, s := range ix.byName["count"] {
		if !linked[s.SpanContext().SpanID()] {
			t.Fatalf("the count span of record %s is linked from no result", attr(s, "sluice.record.id"))
		}
	}
	checkParents(t, ix, "out", "count emit")
}

// TestTracesSessionWindows: a session window's result is an emit span in
// the trace of its first sampled record, linked to the others, also when
// sessions merge (a's 0, 3000 and 1500 make one session of three records).
func TestTracesSessionWindows(t *testing.T) {
	sys, ctx, rec := tracedSystem(t)
	evs := []tev{{"a", 0}, {"b", 500}, {"a", 3000}, {"a", 1500}, {"a", 20000}, {"b", 30000}}
	top := operators.NewTopology(t.Name(), operators.BatchSize(1), operators.TraceRatio(1))
	src := operators.Source(top, "events", operators.FromSlice(evs))
	ts := operators.Timestamps(src, "ts", tevTime, operators.OutOfOrderness(2*time.Second))
	sess := operators.WindowCount(operators.KeyBy(ts, "by-key", tevKey, operators.Parallelism(2)), "sessions", operators.Sessions(4*time.Second))
	operators.Sink(sess, "out", discard[operators.Windowed[string, int64]]())
	runToEnd(t, sys, ctx, top)
	ix := indexSpans(rec)
	if n := len(ix.byName["sessions"]); n != len(evs) {
		t.Fatalf("%d sessions pass spans, want one per record (%d)", n, len(evs))
	}
	emits := ix.byName["sessions emit"]
	if len(emits) != 4 {
		t.Fatalf("%d session emit spans, want one per session (4); spans %v", len(emits), names(ix))
	}
	linked := map[trace.SpanID]bool{}
	for _, e := range emits {
		if ix.parentName(e) != "sessions" {
			t.Fatalf("emit span's parent is %q, want a sessions pass span", ix.parentName(e))
		}
		linked[e.Parent().SpanID()] = true
		for _, l := range e.Links() {
			linked[l.SpanContext.SpanID()] = true
		}
		// contributors by the session's start (ns): a's merged session has 3
		want := map[string]int{"0": 3, "500000000": 1, "20000000000": 1, "30000000000": 1}
		start := attr(e, "sluice.window.start")
		if n := 1 + len(e.Links()); n != want[start] || attr(e, "sluice.links") != strconv.Itoa(n) {
			t.Fatalf("session at %s: %d contributors (sluice.links %s), want %d", start, n, attr(e, "sluice.links"), want[start])
		}
		if start == "0" && attr(e, "sluice.key") != "a" {
			t.Fatalf("the merged session [0, 7s) has key %q, want a", attr(e, "sluice.key"))
		}
	}
	for _, s := range ix.byName["sessions"] {
		if !linked[s.SpanContext().SpanID()] {
			t.Fatalf("the sessions span of record %s is linked from no session", attr(s, "sluice.record.id"))
		}
	}
	checkParents(t, ix, "out", "sessions emit")
}

// TestTraceSamplingRatio samples 1 % of a 1 M-record job: 10 000 ± 10 %
// records get a trace (the sampler is seeded per source instance, so the
// figure is the same on every run).
func TestTraceSamplingRatio(t *testing.T) {
	if testing.Short() {
		t.Skip("a million records")
	}
	sys, ctx, rec := tracedSystem(t)
	top := operators.NewTopology("sampled", operators.TraceRatio(0.01))
	src := operators.Source(top, "src", operators.Generate(1_000_000, func(i int64) int64 { return i }), operators.Parallelism(2))
	operators.Sink(src, "out", discard[int64](), operators.NoFusion())
	runToEnd(t, sys, ctx, top)
	ix := indexSpans(rec)
	n, m := len(ix.byName["src"]), len(ix.byName["out"])
	t.Logf("1 %% of 1 000 000 records: %d traced, %d sink spans", n, m)
	if n < 9_000 || n > 11_000 || m != n {
		t.Fatalf("%d records traced (%d reached the sink), want 10 000 ± 10 %% and all at the sink", n, m)
	}
}

// TestTraceKey traces the records of one key, and only those. The key-by
// reads the source's output, so the source tests the key: each trace
// starts at the source (sampler key). After a map the key is not
// computable at the source: the trace starts at the keyed operator.
func TestTraceKey(t *testing.T) {
	for _, tc := range []struct {
		name       string
		mapped     bool
		countUnder string
	}{{"at-the-source", false, "src"}, {"after-a-map", true, "count key"}} {
		t.Run(tc.name, func(t *testing.T) {
			sys, ctx, rec := tracedSystem(t)
			top := operators.NewTopology("by-key", operators.TraceRatio(0), operators.TraceKey("user-7"))
			src := operators.Source(top, "src", operators.Generate(1000, func(i int64) string { return "user-" + strconv.FormatInt(i%10, 10) }))
			if tc.mapped {
				src = operators.Map(src, "upper", func(v string) string { return v }, operators.NoFusion())
			}
			by := operators.KeyBy(src, "by", func(v string) string { return v }, operators.Parallelism(2))
			counts := operators.Count(by, "count")
			operators.Sink(counts, "out", discard[operators.KV[string, int64]]())
			runToEnd(t, sys, ctx, top)
			ix := indexSpans(rec)
			roots := ix.byName["src"]
			if tc.mapped {
				if len(roots) != 0 || len(ix.byName["upper"]) != 0 {
					t.Fatalf("%d source and %d map spans with ratio 0 and the key computed after them", len(roots), len(ix.byName["upper"]))
				}
			} else {
				if len(roots) != 100 {
					t.Fatalf("%d source spans, want the 100 records of user-7", len(roots))
				}
				for _, s := range roots {
					if s.Parent().IsValid() || attr(s, "sluice.sampler") != "key" || attr(s, "sluice.key") != "user-7" {
						t.Fatalf("source span: parent %v, sampler %q, key %q", s.Parent(), attr(s, "sluice.sampler"), attr(s, "sluice.key"))
					}
				}
				if n := len(ix.byName["count key"]); n != 0 {
					t.Fatalf("%d key roots at the keyed operator, want none (the source sampled them)", n)
				}
			}
			spans := ix.byName["count"]
			if len(spans) != 100 {
				t.Fatalf("%d count spans, want the 100 records of user-7", len(spans))
			}
			for _, s := range spans {
				if attr(s, "sluice.key") != "user-7" || ix.parentName(s) != tc.countUnder {
					t.Fatalf("count span of key %q under %q, want under %q", attr(s, "sluice.key"), ix.parentName(s), tc.countUnder)
				}
			}
			checkParents(t, ix, "out", "count")
		})
	}
}

func TestTracesFanOutAndFanIn(t *testing.T) {
	sys, ctx, rec := tracedSystem(t)
	top := operators.NewTopology("shapes-traced", operators.BatchSize(50), operators.TraceRatio(0.2))
	a := operators.Source(top, "a", operators.Generate(200, func(i int64) int64 { return i }))
	b := operators.Source(top, "b", operators.Generate(200, func(i int64) int64 { return i }))
	operators.Sink(a, "copy1", discard[int64](), operators.NoFusion())
	operators.Sink(a, "copy2", discard[int64](), operators.NoFusion())
	operators.Sink(operators.Merge("both", a, b), "joined", discard[int64]())
	runToEnd(t, sys, ctx, top)
	ix := indexSpans(rec)
	checkParents(t, ix, "copy1", "a")
	checkParents(t, ix, "copy2", "a")
	if n, m := len(ix.byName["copy1"]), len(ix.byName["a"]); n != m || n == 0 {
		t.Fatalf("%d copy1 spans for %d sampled records of a", n, m)
	}
	fromA, fromB := 0, 0
	for _, s := range ix.byName["joined"] {
		switch ix.parentName(s) {
		case "a":
			fromA++
		case "b":
			fromB++
		default:
			t.Fatalf("joined span with parent %q", ix.parentName(s))
		}
	}
	if fromA != len(ix.byName["a"]) || fromB != len(ix.byName["b"]) || fromB == 0 {
		t.Fatalf("fan-in: %d spans from a, %d from b; want one per sampled record (%d, %d)", fromA, fromB, len(ix.byName["a"]), len(ix.byName["b"]))
	}
}

func TestTracesAcrossARestart(t *testing.T) {
	sys, ctx, rec := tracedSystem(t)
	var failed atomic.Bool
	top := failingTopology(t.TempDir(), 20_000, 10_000, func() bool { return failed.CompareAndSwap(false, true) },
		operators.RestartOnFailure(supervision.Backoff{Initial: time.Millisecond, Jitter: supervision.NoJitter}, 2, time.Minute),
		operators.TraceRatio(0.05))
	// The job runs under a caller's span: its restart is a child of it;
	// the records' traces stay their own.
	caller := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, Remote: true})
	run := runToEnd(t, sys, trace.ContextWithRemoteSpanContext(ctx, caller), top)
	if operators.CheckpointStatsOf(run).Restarts != 1 {
		t.Fatal("the job did not restart")
	}
	ix := indexSpans(rec)
	for _, s := range ix.byName["sluice.job"] {
		if s.Parent().SpanID() != caller.SpanID() || s.SpanContext().TraceID() != caller.TraceID() {
			t.Fatalf("restart span with parent %v, want the caller's span %v", s.Parent(), caller)
		}
	}
	for _, s := range ix.byName["numbers"] {
		if s.Parent().IsValid() {
			t.Fatalf("a record's source span has parent %v: want a root", s.Parent())
		}
	}
	checkParents(t, ix, "check", "numbers")
	checkParents(t, ix, "key", "check")
	checkParents(t, ix, "count", "key")
	restarts := ix.byName["sluice.job"]
	if !hasEvent(ix, "sluice.job", "restart") {
		t.Fatal("no restart event was traced")
	}
	after := 0
	for _, s := range ix.byName["numbers"] {
		if s.StartTime().After(restarts[0].StartTime()) {
			after++
		}
	}
	if after == 0 {
		t.Fatal("no record was traced after the restart")
	}
}

func hasEvent(ix spanIndex, span, event string) bool {
	for _, s := range ix.byName[span] {
		for _, e := range s.Events() {
			if e.Name == event {
				return true
			}
		}
	}
	return false
}

func TestTracesMailboxOverflow(t *testing.T) {
	sys, ctx, rec := tracedSystem(t)
	gate := make(chan struct{})
	top := operators.NewTopology("overflowing", operators.BatchSize(16), operators.TraceRatio(0.5))
	src := operators.Source(top, "src", operators.Generate(2000, func(i int64) int64 { return i }))
	operators.Sink(src, "stuck", operators.SinkFunc(func(int64) error { <-gate; return nil }),
		operators.Input(mailbox.DropNewest(32)))
	run, err := sys.Run(ctx, top)
	if err != nil {
		close(gate)
		t.Fatal(err)
	}
	waitFor(t, "the source to finish", func() bool { return stat(t, run, "src").Out == 2000 })
	close(gate)
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	ix := indexSpans(rec)
	// One span for the episode, from its start to its end, linked to the
	// sampled records it dropped: each has a drop span ending its trace.
	eps := ix.byName["sluice.overflow"]
	drops := ix.byName["stuck drop"]
	if len(eps) == 0 || len(drops) == 0 {
		t.Fatalf("%d overflow spans, %d drop spans (spans %v), want one episode and drops", len(eps), len(drops), names(ix))
	}
	ep := eps[0]
	links := 0
	for _, e := range eps {
		n, _ := strconv.Atoi(attr(e, "sluice.links"))
		links += n
	}
	if ep.Parent().IsValid() || !ep.EndTime().After(ep.StartTime()) || attr(ep, "sluice.dropped") == "0" || attr(ep, "sluice.mailbox.policy") != "drop-newest" {
		t.Fatalf("episode span: parent %v, %v to %v, dropped %s, policy %s", ep.Parent(), ep.StartTime(), ep.EndTime(),
			attr(ep, "sluice.dropped"), attr(ep, "sluice.mailbox.policy"))
	}
	linked := map[trace.SpanID]bool{}
	for _, s := range append(eps, ix.byName["stuck inputs"]...) {
		for _, l := range s.Links() {
			linked[l.SpanContext.SpanID()] = true
		}
	}
	for _, d := range drops {
		if !hasEvent(spanIndex{byName: map[string][]sdktrace.ReadOnlySpan{"d": {d}}}, "d", "drop") || ix.parentName(d) != "src" {
			t.Fatalf("drop span under %q without a drop event", ix.parentName(d))
		}
		if !linked[d.SpanContext().SpanID()] {
			t.Fatalf("drop of %s not linked from the episode", attr(d, "sluice.record.id"))
		}
	}
	if links != len(drops) {
		t.Fatalf("episodes count %d links, %d drops", links, len(drops))
	}
}
