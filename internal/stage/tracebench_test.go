package stage

import (
	"context"
	"slices"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func benchTracer(tp trace.TracerProvider, s Sampling) *Tracer {
	return NewTracer(tp.Tracer("b"), context.Background(), func() int { return 3 }, "bench", "block", s, nil, nil)
}

func benchSource(tr *Tracer, sc *Ctx, n int) ([]Mark, func()) { return tr.Source(sc, n, nil, nil, nil) }

// BenchmarkTracePass: the pass spans of a batch of 256 records with 3
// sampled at a chain head and at a fused stage after it, and a source's
// sampling at 1 %, with an SDK provider whose spans go to a discarding
// exporter (as benchmarks/tracing.go). For profiling the engine's share of
// a span; the recorded figures are benchmarks/tracing.go's.
func BenchmarkTracePass(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	defer tp.Shutdown(context.Background())
	tr := benchTracer(tp, Sampling{Ratio: 0.01})
	src := &Ctx{Name: "source", Kind: "source", C: &Counters{}, Tracer: tr}
	tr.OpenSource(src)
	var marks []Mark
	for len(marks) < 3 {
		ms, end := benchSource(tr, src, 256)
		if end != nil {
			end()
		}
		marks = append(marks, ms...)
	}
	marks = marks[:3]
	arrived := slices.Clone(marks) // as a batch from the source's actor brings them
	head := &Ctx{Name: "map", Kind: "map", Head: true, C: &Counters{}, Tracer: tr}
	fused := &Ctx{Name: "filter", Kind: "filter", Prev: "map", C: &Counters{}, Tracer: tr}
	b.Run("head+fused/3-marks", func(b *testing.B) {
		b.ReportAllocs()
		cpu := cpuClock(b)
		defer cpu()
		for b.Loop() {
			copy(marks, arrived)
			tr.Receive("source", "forward", false, 12)
			end1 := head.Pass(marks, nil)
			end2 := fused.Pass(marks, nil)
			end2()
			end1()
			tr.Received()
		}
	})
	b.Run("source/256-records-1pct", func(b *testing.B) {
		b.ReportAllocs()
		cpu := cpuClock(b)
		defer cpu()
		for b.Loop() {
			if _, end := benchSource(tr, src, 256); end != nil {
				end()
			}
		}
	})
}
