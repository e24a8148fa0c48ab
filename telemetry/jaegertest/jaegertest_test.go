package jaegertest_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/telemetry/jaegertest"
)

// Jaeger's process, the harness's poller and the OTLP exporter must all be
// gone when the tests end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestParentChildAndLink sends a parent span and a child span with an
// attribute and a link over OTLP/gRPC, and reads them back from Jaeger's
// query API.
func TestParentChildAndLink(t *testing.T) {
	j := jaegertest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(j.OTLPGRPC), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatalf("otlptracegrpc.New: %v", err)
	}
	const service = "jaegertest-harness"
	// WithSyncer: End returns once the span is exported, so what follows
	// waits only for Jaeger to store it.
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))),
	)
	defer func() {
		if err := tp.Shutdown(context.WithoutCancel(ctx)); err != nil {
			t.Errorf("TracerProvider.Shutdown: %v", err)
		}
	}()
	tracer := tp.Tracer("github.com/sluicehq/sluice/telemetry/jaegertest")

	// The link points at a span of another trace, as an aggregate's output
	// links to the batches it was computed from.
	linked := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x5a, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
		SpanID:     trace.SpanID{0x5b, 1, 2, 3, 4, 5, 6, 7},
		TraceFlags: trace.FlagsSampled,
		Remote:     true,
	})
	pctx, parent := tracer.Start(ctx, "parent", trace.WithAttributes(attribute.String("sluice.topology", "wordcount")))
	_, child := tracer.Start(pctx, "child",
		trace.WithAttributes(attribute.Int64("sluice.records", 42)),
		trace.WithLinks(trace.Link{SpanContext: linked}),
	)
	child.End()
	parent.End()
	want := struct{ trace, parent, child string }{
		parent.SpanContext().TraceID().String(),
		parent.SpanContext().SpanID().String(),
		child.SpanContext().SpanID().String(),
	}

	traces, err := j.WaitTraces(ctx, service, func(ts []jaegertest.Trace) bool {
		return len(ts) == 1 && len(ts[0].Spans) == 2
	})
	if err != nil {
		t.Fatalf("WaitTraces: %v; got %s", err, dump(traces))
	}
	tr := traces[0]
	if tr.TraceID != want.trace {
		t.Errorf("trace ID = %s, want %s", tr.TraceID, want.trace)
	}
	p, ok := tr.Span("parent")
	if !ok {
		t.Fatalf("no span %q in %s", "parent", dump(traces))
	}
	c, ok := tr.Span("child")
	if !ok {
		t.Fatalf("no span %q in %s", "child", dump(traces))
	}

	// Parent, then child under it.
	if p.SpanID != want.parent || c.SpanID != want.child {
		t.Errorf("span IDs: parent %s child %s, want %s %s", p.SpanID, c.SpanID, want.parent, want.child)
	}
	if refs := refsOf(p, jaegertest.ChildOf); len(refs) != 0 {
		t.Errorf("parent has parents %v, want none", refs)
	}
	wantParent := jaegertest.Reference{RefType: jaegertest.ChildOf, TraceID: want.trace, SpanID: want.parent}
	if refs := refsOf(c, jaegertest.ChildOf); !slices.Equal(refs, []jaegertest.Reference{wantParent}) {
		t.Errorf("child's parents = %v, want [%v]", refs, wantParent)
	}
	if c.StartTime < p.StartTime || c.StartTime+c.Duration > p.StartTime+p.Duration {
		t.Errorf("child [%d, +%d]us is not within parent [%d, +%d]us", c.StartTime, c.Duration, p.StartTime, p.Duration)
	}

	// The link.
	wantLink := jaegertest.Reference{RefType: jaegertest.FollowsFrom, TraceID: linked.TraceID().String(), SpanID: linked.SpanID().String()}
	if refs := refsOf(c, jaegertest.FollowsFrom); !slices.Equal(refs, []jaegertest.Reference{wantLink}) {
		t.Errorf("child's links = %v, want [%v]", refs, wantLink)
	}

	// Attributes and resource.
	if v, ok := p.Tag("sluice.topology"); v != "wordcount" {
		t.Errorf("parent tag sluice.topology = %v (present %v), want wordcount", v, ok)
	}
	if v, ok := c.Tag("sluice.records"); v != json.Number("42") {
		t.Errorf("child tag sluice.records = %#v (present %v), want 42", v, ok)
	}
	for _, s := range []jaegertest.Span{p, c} {
		if s.Process.ServiceName != service {
			t.Errorf("span %s: service %q, want %q", s.OperationName, s.Process.ServiceName, service)
		}
	}
}

// TestUnknownService: a service Jaeger has not seen has no traces, and
// WaitTraces gives up when its context ends.
func TestUnknownService(t *testing.T) {
	j := jaegertest.Start(t)
	traces, err := j.Traces(t.Context(), "never-seen")
	if err != nil || len(traces) != 0 {
		t.Fatalf("Traces = %v, %v; want none, nil", traces, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err = j.WaitTraces(ctx, "never-seen", func(ts []jaegertest.Trace) bool { return len(ts) > 0 })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitTraces = %v, want an error wrapping context.DeadlineExceeded", err)
	}
}

func refsOf(s jaegertest.Span, refType string) []jaegertest.Reference {
	var out []jaegertest.Reference
	for _, r := range s.References {
		if r.RefType == refType {
			out = append(out, r)
		}
	}
	return out
}

func dump(traces []jaegertest.Trace) string {
	b, err := json.MarshalIndent(traces, "", "  ")
	if err != nil {
		return err.Error()
	}
	return string(b)
}
