package main

import (
	"context"
	"fmt"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
)

// benchTracing runs the unfused pipeline without telemetry (the no-op
// provider: tracing code is skipped), and with an SDK tracer (spans go to
// an exporter that discards them) tracing no record (TraceRatio 0: the
// tracer is there, nothing is sampled), 1 % of the records (each sampled
// record gets a span at each of the 4 operators) and, over fewer records,
// every record as context.
func benchTracing(ctx context.Context, e *env) ([]Result, error) {
	n := e.n(10_000_000)
	ratio := 0.0
	measure := func(tp trace.TracerProvider) (float64, error) {
		return best(e.rounds, n, func() (time.Duration, error) {
			sys, err := actors.NewSystem(actors.Config{Name: "tracing", TracerProvider: tp})
			if err != nil {
				return 0, err
			}
			defer sys.Stop(ctx)
			var sum int64
			t := operators.NewTopology("tracing", operators.TraceRatio(ratio))
			src := operators.Source(t, "source", operators.Generate(int64(n), pipeGen), operators.NoFusion())
			m := operators.Map(src, "map", pipeMap, operators.NoFusion())
			f := operators.Filter(m, "filter", pipeFilter, operators.NoFusion())
			operators.Sink(f, "sink", operators.SinkFunc(func(v int64) error { sum += v; return nil }), operators.NoFusion())
			start := time.Now()
			run, err := sys.Run(ctx, t)
			if err != nil {
				return 0, err
			}
			if err := run.Wait(ctx); err != nil {
				return 0, err
			}
			if sum != expectedSum(n) {
				return 0, fmt.Errorf("tracing bench: wrong sum")
			}
			return time.Since(start), nil
		})
	}
	sdk := func(s sdktrace.Sampler) *sdktrace.TracerProvider {
		return sdktrace.NewTracerProvider(sdktrace.WithSampler(s), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	}
	none, err := measure(nil)
	if err != nil {
		return nil, err
	}
	var out []Result
	base := Result{Name: "tracing/no-telemetry", Value: none, Unit: "records/s", Note: "no-op provider: tracing code skipped"}
	out = append(out, base)
	for _, c := range []struct {
		name  string
		ratio float64
		note  string
	}{
		{"tracing/sdk-off", 0, "SDK tracer, TraceRatio 0: no record sampled"},
		{"tracing/sdk-1pct", 0.01, "SDK tracer, 1 % of records sampled, a span per operator each"},
	} {
		tp := sdk(sdktrace.AlwaysSample())
		ratio = c.ratio
		v, err := measure(tp)
		tp.Shutdown(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, Result{Name: c.name, Value: v, Unit: "records/s", Note: c.note}.against(base))
	}
	return out, nil
}
