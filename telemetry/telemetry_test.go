package telemetry_test

import (
	"context"
	"fmt"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/telemetry"
)

func TestInjectExtractRoundTrip(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("test").Start(context.Background(), "op")
	defer span.End()
	h := telemetry.Inject(ctx, nil)
	if h["traceparent"] == "" {
		t.Fatalf("no traceparent in %v", h)
	}
	got := trace.SpanContextFromContext(telemetry.Extract(context.Background(), h))
	if got.TraceID() != span.SpanContext().TraceID() || got.SpanID() != span.SpanContext().SpanID() || !got.IsRemote() {
		t.Fatalf("extracted %v, want the span %v as remote parent", got, span.SpanContext())
	}
}

func TestUnsampledInjectsNothing(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("test").Start(context.Background(), "op")
	defer span.End()
	if h := telemetry.Inject(ctx, nil); h != nil {
		t.Fatalf("an unsampled span injected %v", h)
	}
	if ctx := telemetry.Extract(context.Background(), nil); trace.SpanContextFromContext(ctx).IsValid() {
		t.Fatal("extracting nothing gave a span context")
	}
}

func TestFromEnvWithoutEndpointIsNoop(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	p, err := telemetry.FromEnv(context.Background(), "svc")
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.Tracer.Tracer("x").Start(context.Background(), "y")
	if span.IsRecording() {
		t.Fatal("tracing without an endpoint records spans")
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "127.0.0.1:4317")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon")
	if _, err := telemetry.FromEnv(context.Background(), "svc"); err == nil {
		t.Fatal("an unknown protocol was accepted")
	}
}

// Trace context travels in a string map, as in sluice's envelope headers.
func ExampleInject() {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("example").Start(context.Background(), "source")
	headers := telemetry.Inject(ctx, nil)
	span.End()

	remote := trace.SpanContextFromContext(telemetry.Extract(context.Background(), headers))
	fmt.Println(len(headers["traceparent"]), remote.TraceID() == span.SpanContext().TraceID(), remote.IsRemote())
	// Output: 55 true true
}
