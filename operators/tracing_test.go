package operators_test

import (
	"context"
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

// records sums the sluice.records attribute of the spans named name.
func records(ix spanIndex, name string) int64 {
	var n int64
	for _, s := range ix.byName[name] {
		for _, a := range s.Attributes() {
			if a.Key == "sluice.records" {
				n += a.Value.AsInt64()
			}
		}
	}
	return n
}

func names(ix spanIndex) []string {
	var out []string
	for n := range ix.byName {
		out = append(out, n)
	}
	return out
}

func TestTracesFollowRecordsThroughOperators(t *testing.T) {
	sys, ctx, rec := tracedSystem(t)
	top := operators.NewTopology("traced", operators.BatchSize(100))
	src := operators.Source(top, "src", operators.Generate(1000, func(i int64) int64 { return i }))
	double := operators.Map(src, "double", func(v int64) int64 { return 2 * v }) // fused with src
	by := operators.KeyBy(double, "by", func(v int64) int64 { return v % 3 }, operators.Parallelism(2))
	counts := operators.Count(by, "count", operators.Emit(operators.EmitAtEnd))
	operators.Sink(counts, "out", discard[operators.KV[int64, int64]]()) // fused with count
	runToEnd(t, sys, ctx, top)

	ix := indexSpans(rec)
	if n := records(ix, "src"); n != 1000 {
		t.Fatalf("source spans cover %d records, want all 1000", n)
	}
	checkParents(t, ix, "double", "src") // fused: nested
	// The aggregate's per-batch spans continue the trace across actors.
	inputs := 0
	for _, s := range ix.byName["count"] {
		if ix.parentName(s) == "double" {
			inputs++
		}
	}
	if inputs == 0 {
		t.Fatal("no count span is a child of a double span: the context did not cross the edge")
	}
	for _, s := range ix.byName["count"] {
		if ix.parentName(s) != "double" {
			continue
		}
		policy := ""
		for _, a := range s.Attributes() {
			if a.Key == "sluice.mailbox.policy" {
				policy = a.Value.AsString()
			}
		}
		if policy != "block" {
			t.Fatalf("the span of the operator reading the mailbox has policy %q, want block", policy)
		}
	}
	// Its results link to their inputs instead of nesting under one.
	var results []sdktrace.ReadOnlySpan
	for _, s := range ix.byName["count"] {
		if !s.Parent().IsValid() {
			results = append(results, s)
		}
	}
	if len(results) != 2 {
		t.Fatalf("%d result spans for count, want one per instance (2)", len(results))
	}
	linked := 0
	for _, s := range results {
		for _, l := range s.Links() {
			if in, ok := ix.byID[l.SpanContext.SpanID()]; !ok || in.Name() != "count" {
				t.Fatalf("a result span links to %v, not to a count input span", l.SpanContext)
			}
			linked++
		}
	}
	if linked != inputs {
		t.Fatalf("result spans link %d inputs, want the %d traced input batches", linked, inputs)
	}
	checkParents(t, ix, "out", "count")
	for _, s := range ix.byName["double"] {
		attrs := map[string]bool{}
		for _, a := range s.Attributes() {
			attrs[string(a.Key)] = true
		}
		for _, k := range []string{"sluice.topology", "sluice.operator", "sluice.instance", "sluice.records"} {
			if !attrs[k] {
				t.Fatalf("span double lacks attribute %s", k)
			}
		}
	}
}

func TestTracesFanOutAndFanIn(t *testing.T) {
	sys, ctx, rec := tracedSystem(t)
	top := operators.NewTopology("shapes-traced", operators.BatchSize(50))
	a := operators.Source(top, "a", operators.Generate(200, func(i int64) int64 { return i }))
	b := operators.Source(top, "b", operators.Generate(200, func(i int64) int64 { return i }))
	operators.Sink(a, "copy1", discard[int64](), operators.NoFusion())
	operators.Sink(a, "copy2", discard[int64](), operators.NoFusion())
	operators.Sink(operators.Merge("both", a, b), "joined", discard[int64]())
	runToEnd(t, sys, ctx, top)
	ix := indexSpans(rec)
	checkParents(t, ix, "copy1", "a")
	checkParents(t, ix, "copy2", "a")
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
	if fromA == 0 || fromB == 0 {
		t.Fatalf("fan-in: %d spans from a, %d from b; want both", fromA, fromB)
	}
}

func TestTracesAcrossARestart(t *testing.T) {
	sys, ctx, rec := tracedSystem(t)
	var failed atomic.Bool
	top := failingTopology(t.TempDir(), 20_000, 10_000, func() bool { return failed.CompareAndSwap(false, true) },
		operators.RestartOnFailure(supervision.Backoff{Initial: time.Millisecond, Jitter: supervision.NoJitter}, 2, time.Minute))
	run := runToEnd(t, sys, ctx, top)
	if operators.CheckpointStatsOf(run).Restarts != 1 {
		t.Fatal("the job did not restart")
	}
	ix := indexSpans(rec)
	checkParents(t, ix, "check", "numbers")
	checkParents(t, ix, "key", "check")
	for _, s := range ix.byName["count"] {
		if ix.parentName(s) != "key" {
			t.Fatalf("count span with parent %q", ix.parentName(s))
		}
	}
	if n := records(ix, "numbers"); n <= 20_000 {
		t.Fatalf("source spans cover %d records: the run after the restart was not traced", n)
	}
	if !hasEvent(ix, "sluice.job", "restart") {
		t.Fatal("no restart event was traced")
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
	top := operators.NewTopology("overflowing", operators.BatchSize(16))
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
	if !hasEvent(ix, "sluice.mailbox", "overflow-started") || !hasEvent(ix, "sluice.mailbox", "overflow-ended") {
		t.Fatalf("overflow episode not traced (spans %v)", names(ix))
	}
}
