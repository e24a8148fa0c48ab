package operators_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/telemetry"
	"github.com/sluicehq/sluice/telemetry/jaegertest"
)

type jclick struct {
	User string
	At   int64 // unix ns
}

type profile struct{ User, Name string }

type enriched struct {
	User   string
	Clicks int64
	Name   string
}

// TestRecordTraceInJaeger sends a record with a known key through a fused
// chain (source, parse, stamp), a key-by shuffle, a window and a join into
// a real Jaeger over OTLP, finds its trace by the key through Jaeger's
// HTTP query API, and reads it: ONE trace holding a span per operator in
// order, parent to child, with the record's id, key, edge, queue wait and
// event time, and the window's result linked to the record's window span.
func TestRecordTraceInJaeger(t *testing.T) {
	j := jaegertest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const service = "sluice-e2e"
	tp, err := telemetry.NewOTLPTracerProvider(ctx, service, j.OTLPGRPC)
	if err != nil {
		t.Fatal(err)
	}
	sys, err := actors.NewSystem(actors.Config{Name: "e2e", TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).UnixNano()
	top := clickTopology(base)
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sys.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tp.Shutdown(ctx); err != nil { // flush every span to Jaeger
		t.Fatal(err)
	}

	path := recordPath
	tags := map[string]string{"sluice.key": "user-42"}
	// walk is the path from the root to the sink span of tr, by CHILD_OF
	// references.
	walk := func(tr jaegertest.Trace) []string {
		byID := map[string]jaegertest.Span{}
		for _, s := range tr.Spans {
			byID[s.SpanID] = s
		}
		s, ok := tr.Span("store")
		var got []string
		for ok {
			got = append([]string{s.OperationName}, got...)
			next, found := jaegertest.Span{}, false
			for _, r := range s.References {
				if r.RefType == jaegertest.ChildOf {
					next, found = byID[r.SpanID]
				}
			}
			s, ok = next, found
		}
		return got
	}
	var got []string
	traces, err := j.WaitTracesTagged(ctx, service, tags, func(trs []jaegertest.Trace) bool {
		got = nil
		if len(trs) == 1 {
			got = walk(trs[0])
		}
		return len(trs) == 1 && slices.Equal(got, path)
	})
	if err != nil && len(traces) == 1 {
		for _, sp := range traces[0].Spans {
			t.Logf("span %s %s refs %+v", sp.OperationName, sp.SpanID, sp.References)
		}
	}
	if err != nil {
		t.Fatalf("Jaeger never held one trace with sluice.key=user-42 from the source to the sink (%d traces, last path %v, want %v): %v",
			len(traces), got, path, err)
	}
	tr := traces[0]
	tag := func(s jaegertest.Span, k string) string {
		v, _ := s.Tag(k)
		return fmt.Sprint(v)
	}
	root, _ := tr.Span("clicks")
	id := tag(root, "sluice.record.id")
	if id != "clicks/0/123" || len(root.References) != 0 {
		t.Fatalf("root span: record id %q, references %v", id, root.References)
	}
	win, _ := tr.Span("per-minute")
	for k, want := range map[string]string{"sluice.record.id": id, "sluice.key": "user-42", "sluice.edge": "stamp->per-minute",
		"sluice.edge.kind": "hash", "sluice.event_time": strconv.FormatInt(base+123*int64(time.Second), 10), "sluice.role": "pass"} {
		if got := tag(win, k); got != want {
			t.Errorf("window span: %s = %q, want %q", k, got, want)
		}
	}
	if _, ok := win.Tag("sluice.queue.wait_us"); !ok {
		t.Error("window span lacks sluice.queue.wait_us")
	}
	// The window's result is linked to the record's span at the window:
	// its parent (the first of its sampled inputs; the others would be
	// FOLLOWS_FROM links), counted in sluice.links.
	emit, _ := tr.Span("per-minute emit")
	if len(emit.References) != 1 || emit.References[0].RefType != jaegertest.ChildOf || emit.References[0].SpanID != win.SpanID ||
		tag(emit, "sluice.key") != "user-42" || tag(emit, "sluice.links") != "1" || tag(emit, "sluice.role") != "emit" {
		t.Fatalf("the window's result span: references %v, key %q, links %q; want a reference to the record's window span",
			emit.References, tag(emit, "sluice.key"), tag(emit, "sluice.links"))
	}
	join, _ := tr.Span("enrich")
	if tag(join, "sluice.edge") != "enrich.left->enrich" || tag(join, "sluice.key") != "user-42" {
		t.Fatalf("join span: edge %q key %q", tag(join, "sluice.edge"), tag(join, "sluice.key"))
	}
}

// clickTopology is the topology of TestRecordTraceInJaeger: 400 clicks of
// 7 users and one of user-42 (record 123), counted per user and minute and
// joined with the users' profiles (not traced).
func clickTopology(base int64) *operators.Topology {
	const n = 400
	top := operators.NewTopology("clicks", operators.BatchSize(50), operators.TraceRatio(1))
	clicks := operators.Source(top, "clicks", operators.Generate(n, func(i int64) int64 { return i }))
	parsed := operators.Map(clicks, "parse", func(i int64) jclick {
		u := "user-" + strconv.FormatInt(i%7, 10)
		if i == 123 {
			u = "user-42" // the one record of this key
		}
		return jclick{User: u, At: base + i*int64(time.Second)}
	})
	stamped := operators.Timestamps(parsed, "stamp", func(c jclick) time.Time { return time.Unix(0, c.At) })
	byUser := operators.KeyBy(stamped, "by-user", func(c jclick) string { return c.User }, operators.Parallelism(2))
	perMinute := operators.WindowCount(byUser, "per-minute", operators.Tumbling(time.Minute))
	// The profiles are not traced: the key's only trace is the click's.
	profiles := operators.Source(top, "profiles", operators.Generate(8, func(i int64) profile {
		u := "user-" + strconv.FormatInt(i, 10)
		if i == 7 {
			u = "user-42"
		}
		return profile{User: u, Name: "name of " + u}
	}), operators.SourceTraceRatio(0))
	joined := operators.Join(perMinute, profiles, "enrich",
		func(w operators.Windowed[string, int64]) string { return w.Key }, func(p profile) string { return p.User },
		func(w operators.Windowed[string, int64], p profile) enriched { return enriched{w.Key, w.Value, p.Name} })
	operators.Sink(joined, "store", discard[enriched]())
	return top
}

// recordPath is the path of user-42's click, operator by operator: the
// source, the fused chain, the window (after the shuffle), its result, the
// join's input map (fused after the window), the join and its fused sink.
var recordPath = []string{"clicks", "parse", "stamp", "per-minute", "per-minute emit", "enrich.left", "enrich", "store"}

// TestRecordTraceInMemory is TestRecordTraceInJaeger's topology traced
// into memory: user-42's spans form one chain from the root to the sink.
func TestRecordTraceInMemory(t *testing.T) {
	sys, ctx, rec := tracedSystem(t)
	runToEnd(t, sys, ctx, clickTopology(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).UnixNano()))
	ix := indexSpans(rec)
	var store sdktrace.ReadOnlySpan
	traces := map[trace.TraceID]bool{}
	for _, s := range rec.Ended() {
		if attr(s, "sluice.key") == "user-42" {
			traces[s.SpanContext().TraceID()] = true
		}
	}
	for _, s := range ix.byName["store"] {
		if traces[s.SpanContext().TraceID()] {
			store = s
		}
	}
	if len(traces) != 1 || store == nil {
		t.Fatalf("user-42 is in %d traces (store span %v), want one through the sink", len(traces), store != nil)
	}
	var got []string
	for s, ok := store, true; ok; s, ok = ix.byID[s.Parent().SpanID()] {
		got = append([]string{s.Name()}, got...)
	}
	if !slices.Equal(got, recordPath) {
		t.Fatalf("the record's spans from the root: %v, want %v", got, recordPath)
	}
}

// TestSessionTraceInJaeger: a record alone in its session window (key z)
// has, in the real Jaeger, one trace from the source through the session
// window to its result's emit span (child of the record's window span)
// and the sink.
func TestSessionTraceInJaeger(t *testing.T) {
	j := jaegertest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const service = "sluice-sessions"
	tp, err := telemetry.NewOTLPTracerProvider(ctx, service, j.OTLPGRPC)
	if err != nil {
		t.Fatal(err)
	}
	sys, err := actors.NewSystem(actors.Config{Name: "sessions", TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	evs := []tev{{"a", 0}, {"z", 10000}, {"a", 3000}, {"a", 1500}, {"a", 20000}}
	top := operators.NewTopology("sessions", operators.BatchSize(1), operators.TraceRatio(1))
	src := operators.Source(top, "events", operators.FromSlice(evs))
	ts := operators.Timestamps(src, "ts", tevTime, operators.OutOfOrderness(2*time.Second))
	sess := operators.WindowCount(operators.KeyBy(ts, "by-key", tevKey), "sessions", operators.Sessions(4*time.Second))
	operators.Sink(sess, "out", discard[operators.Windowed[string, int64]]())
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sys.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"events", "ts", "sessions", "sessions emit", "out"}
	var got []string
	traces, err := j.WaitTracesTagged(ctx, service, map[string]string{"sluice.key": "z"}, func(trs []jaegertest.Trace) bool {
		got = nil
		if len(trs) == 1 {
			got = childPath(trs[0], "out")
		}
		return slices.Equal(got, want)
	})
	if err != nil {
		t.Fatalf("Jaeger never held one trace of key z from the source to the sink (%d traces, last path %v, want %v): %v", len(traces), got, want, err)
	}
	emit, _ := traces[0].Span("sessions emit")
	for k, w := range map[string]string{"sluice.key": "z", "sluice.links": "1", "sluice.role": "emit",
		"sluice.window.start": strconv.FormatInt(10*int64(time.Second), 10), "sluice.window.end": strconv.FormatInt(14*int64(time.Second), 10)} {
		if v, _ := emit.Tag(k); fmt.Sprint(v) != w {
			t.Errorf("session emit span: %s = %v, want %s", k, v, w)
		}
	}
}

// childPath is the path of tr from its root to the span named last, by
// CHILD_OF references.
func childPath(tr jaegertest.Trace, last string) []string {
	byID := map[string]jaegertest.Span{}
	for _, s := range tr.Spans {
		byID[s.SpanID] = s
	}
	s, ok := tr.Span(last)
	var got []string
	for ok {
		got = append([]string{s.OperationName}, got...)
		next, found := jaegertest.Span{}, false
		for _, r := range s.References {
			if r.RefType == jaegertest.ChildOf {
				next, found = byID[r.SpanID]
			}
		}
		s, ok = next, found
	}
	return got
}
