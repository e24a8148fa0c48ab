// Package telemetry connects sluice to OpenTelemetry: W3C trace context in
// envelope headers, tracer and meter providers configured from the standard
// OTEL_* variables, and nothing global.
//
// # Basics
//
// Providers are injected into actors.Config; when none is configured,
// telemetry is a no-op that costs nothing measurable:
//
//	p, err := telemetry.FromEnv(ctx, "my-service") // OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_TRACES_SAMPLER, ...
//	defer p.Shutdown(ctx)
//	sys, err := actors.NewSystem(actors.Config{TracerProvider: p.Tracer, MeterProvider: p.Meter})
//
// A topology traces records: a source samples records (operators.TraceRatio,
// 1 % by default; operators.TraceKey), each sampled record gets a trace of
// its own with a span at every operator it passes (its id, key, edge,
// queue wait, event time), its trace context rides with its batch to the
// next actor and across processes, and a window's result links to the
// records that made it. docs/tracing.md is the span contract; find a
// record's trace in Jaeger by the tag sluice.key.
//
// # Caveats
//
// The provider's sampler applies to the spans sluice starts: keep it
// always-on (NewOTLPTracerProvider does) and choose the records with
// TraceRatio.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// propagator is W3C trace context; it holds no state.
var propagator = propagation.TraceContext{}

// Inject writes the span context of ctx into headers (creating the map when
// nil) and returns them. A context without a sampled span writes nothing.
func Inject(ctx context.Context, headers map[string]string) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsSampled() {
		return headers
	}
	if headers == nil {
		headers = make(map[string]string, 1)
	}
	propagator.Inject(ctx, propagation.MapCarrier(headers))
	return headers
}

// Extract returns ctx with the remote span context found in headers, if any.
func Extract(ctx context.Context, headers map[string]string) context.Context {
	if len(headers) == 0 {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier(headers))
}

// Providers are a tracer and a meter provider and the function that
// flushes and stops them.
type Providers struct {
	Tracer   trace.TracerProvider
	Meter    metric.MeterProvider
	Shutdown func(context.Context) error
}

// Noop returns providers that do nothing.
func Noop() Providers {
	return Providers{Tracer: tracenoop.NewTracerProvider(), Meter: metricnoop.NewMeterProvider(),
		Shutdown: func(context.Context) error { return nil }}
}

// FromEnv builds providers from the standard OpenTelemetry variables:
// traces are exported over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (gRPC, or HTTP with
// OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf), sampled as OTEL_TRACES_SAMPLER
// says (default parentbased_always_on), for the service OTEL_SERVICE_NAME
// (default service). OTEL_TRACES_EXPORTER=none, or no endpoint, gives
// no-op tracing. Metrics stay no-op here: pass a MeterProvider of your own
// (for example the OTel Prometheus exporter's) to actors.Config.
func FromEnv(ctx context.Context, service string) (Providers, error) {
	p := Noop()
	if os.Getenv("OTEL_TRACES_EXPORTER") == "none" ||
		os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return p, nil
	}
	tp, err := NewOTLPTracerProvider(ctx, service, "")
	if err != nil {
		return p, err
	}
	p.Tracer, p.Shutdown = tp, tp.Shutdown
	return p, nil
}

// NewOTLPTracerProvider returns an SDK tracer provider exporting over OTLP
// to endpoint (host:port; empty: from the OTEL_* variables), with the
// sampler from OTEL_TRACES_SAMPLER. Shut it down to flush.
func NewOTLPTracerProvider(ctx context.Context, service, endpoint string) (*sdktrace.TracerProvider, error) {
	var exp *otlptrace.Exporter
	var err error
	proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch {
	case strings.HasPrefix(proto, "http"):
		var opts []otlptracehttp.Option
		if endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpoint(endpoint), otlptracehttp.WithInsecure())
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	case proto == "" || proto == "grpc":
		var opts []otlptracegrpc.Option
		if endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpoint(endpoint), otlptracegrpc.WithInsecure())
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	default:
		return nil, fmt.Errorf("telemetry: OTEL_EXPORTER_OTLP_PROTOCOL %q: want grpc or http/protobuf", proto)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP exporter: %w", err)
	}
	if service == "" {
		service = "sluice"
	}
	res, err := resource.Merge(resource.Default(), resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(service)))
	if err != nil && !errors.Is(err, resource.ErrSchemaURLConflict) {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	if env, eerr := resource.New(ctx, resource.WithFromEnv()); eerr == nil {
		if merged, merr := resource.Merge(res, env); merr == nil {
			res = merged
		}
	}
	// The SDK reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG itself
	// when no sampler is given.
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}
