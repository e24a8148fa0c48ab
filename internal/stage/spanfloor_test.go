package stage

import (
	"context"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkSpanFloor: what one OTel SDK span costs, started and ended with
// the attributes a chain head's pass span carries (11), under the provider
// benchmarks/tracing.go uses (AlwaysSample, a batcher into a discarding
// exporter). The floor under the engine's per-span cost.
func BenchmarkSpanFloor(b *testing.B) {
	ctx := context.Background()
	attrs := []attribute.KeyValue{
		attribute.String("sluice.role", "pass"), attribute.String("sluice.topology", "bench"),
		attribute.String("sluice.operator", "map"), attribute.String("sluice.kind", "map"),
		attribute.Int("sluice.instance", 0), attribute.String("sluice.record.id", "source/0/1234"),
		attribute.String("sluice.edge", "source->map"), attribute.String("sluice.edge.kind", "forward"),
		attribute.Int("sluice.queue.depth", 3), attribute.String("sluice.mailbox.policy", "block"),
		attribute.Int64("sluice.queue.wait_us", 12),
	}
	run := func(b *testing.B, tp *sdktrace.TracerProvider, attrs []attribute.KeyValue, after bool) {
		defer tp.Shutdown(ctx)
		t := tp.Tracer("b")
		_, parent := t.Start(ctx, "root")
		pctx := trace.ContextWithSpanContext(ctx, parent.SpanContext())
		at := time.Now()
		b.ReportAllocs()
		cpu := cpuClock(b)
		for b.Loop() {
			if after { // as the engine does: the SDK copies them once
				_, s := t.Start(pctx, "map", trace.WithTimestamp(at))
				s.SetAttributes(attrs...)
				s.End(trace.WithTimestamp(at))
			} else {
				_, s := t.Start(pctx, "map", trace.WithTimestamp(at), trace.WithAttributes(attrs...))
				s.End(trace.WithTimestamp(at))
			}
		}
		tp.ForceFlush(ctx) // the batcher's goroutine's share, in the timing
		cpu()
	}
	b.Run("batcher/11-attrs", func(b *testing.B) {
		run(b, sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(tracetest.NewNoopExporter())), attrs, true)
	})
	b.Run("batcher/11-attrs-at-start", func(b *testing.B) {
		run(b, sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(tracetest.NewNoopExporter())), attrs, false)
	})
	b.Run("batcher/8-attrs", func(b *testing.B) {
		run(b, sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(tracetest.NewNoopExporter())), attrs[:8], true)
	})
	b.Run("batcher/4-attrs", func(b *testing.B) {
		run(b, sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(tracetest.NewNoopExporter())), attrs[:4], true)
	})
	b.Run("batcher/0-attrs", func(b *testing.B) {
		run(b, sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(tracetest.NewNoopExporter())), nil, true)
	})
	b.Run("no-processor/11-attrs", func(b *testing.B) {
		run(b, sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample())), attrs, true)
	})
	b.Run("syncer/11-attrs", func(b *testing.B) {
		run(b, sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSyncer(tracetest.NewNoopExporter())), attrs, true)
	})
}

// cpuClock reports, when the function it returns is called, the process's
// CPU time (user and system, all goroutines: the batcher's too) per
// operation as cpu-ns/op: under a loaded machine's contention a steadier
// figure than the wall clock's ns/op.
func cpuClock(b *testing.B) func() {
	read := func() int64 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return ru.Utime.Nano() + ru.Stime.Nano()
	}
	start := read()
	return func() { b.ReportMetric(float64(read()-start)/float64(b.N), "cpu-ns/op") }
}
