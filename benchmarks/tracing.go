package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
)

// benchTracing runs the unfused pipeline without telemetry (the no-op
// provider: tracing code is skipped), and with an SDK tracer (spans go to
// an exporter that discards them) tracing no record (TraceRatio 0: the
// tracer is there, nothing is sampled) and 1 % of the records (each
// sampled record gets a span at each of the 4 operators), in rotated
// rounds. The timing of an SDK run ends after the provider's ForceFlush,
// so that the spans the batcher still holds when the job ends are
// counted; the exporter counts the spans it is given, to show none was
// dropped (the batcher drops spans when its queue is full).
func benchTracing(ctx context.Context, e *env) ([]Result, error) {
	return tracingRounds(ctx, e, "tracing", e.n(10_000_000), pipeMap, "")
}

// benchTracingJSON is benchTracing with a record's work of a service that
// ingests JSON: the map decodes a 150-byte bid with encoding/json (about
// a microsecond) before its arithmetic, in every case alike. The span a
// sampled record costs is the same as in benchTracing (the SDK's, 1 to 5
// µs); what changes is the work it is compared with, which in
// benchTracing is a few nanoseconds of arithmetic per operator.
func benchTracingJSON(ctx context.Context, e *env) ([]Result, error) {
	docs := make([][]byte, 64)
	for i := range docs {
		docs[i] = fmt.Appendf(nil, `{"auction":%d,"bidder":%d,"price":%d,"channel":"channel-%d","url":"https://www.nexmark.com/item.htm?query=%d","dateTime":1700000000%03d}`,
			1000+i, 2000+i*7, 100+i*13, i%5, i, i)
	}
	m := func(v int64) int64 {
		var b struct {
			Auction, Bidder, Price int64
			Channel, URL           string
			DateTime               int64
		}
		if err := json.Unmarshal(docs[v&63], &b); err != nil || b.Auction != 1000+v&63 {
			panic(fmt.Sprintf("tracing-json: decoding record %d: %v", v, err))
		}
		return pipeMap(v)
	}
	return tracingRounds(ctx, e, "tracing-json", e.n(1_000_000), m, ", the map decoding a 150-byte JSON bid per record")
}

// tracingRounds measures the unfused pipeline of n records with map as
// its map, in the three cases (no telemetry, tracer with nothing sampled,
// 1 %), named prefix/...; work, when not empty, is appended to each note.
func tracingRounds(ctx context.Context, e *env, prefix string, n int, pipeMap func(int64) int64, work string) ([]Result, error) {
	// once runs the pipeline one time with tp (nil: no telemetry) and the
	// given ratio, and returns its records/s.
	once := func(tp trace.TracerProvider, ratio float64) (float64, error) {
		return best(1, n, func() (time.Duration, error) {
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
			if stp, ok := tp.(*sdktrace.TracerProvider); ok {
				if err := stp.ForceFlush(ctx); err != nil {
					return 0, err
				}
			}
			if sum != expectedSum(n) {
				return 0, fmt.Errorf("tracing bench: wrong sum")
			}
			return time.Since(start), nil
		})
	}
	exported := make(map[string]*spanCounter)
	sdk := func(s sdktrace.Sampler, name string) *sdktrace.TracerProvider {
		c := exported[name]
		if c == nil {
			c = &spanCounter{}
			exported[name] = c
		}
		return sdktrace.NewTracerProvider(sdktrace.WithSampler(s), sdktrace.WithBatcher(c))
	}
	cases := []struct {
		name  string
		sdk   bool
		ratio float64
		note  string
	}{
		{prefix + "/no-telemetry", false, 0, "no-op provider: tracing code skipped" + work},
		{prefix + "/sdk-off", true, 0, "SDK tracer, TraceRatio 0: no record sampled" + work},
		{prefix + "/sdk-1pct", true, 0.01, "SDK tracer, 1 % of records sampled, a span per operator each (3.5 a sampled record: the filter keeps half)" + work},
	}
	// Rounds measure the three in a rotating order; each round gives the
	// two ratios against its own no-telemetry run, and the results are the
	// medians with their spread.
	rates := make([][]float64, len(cases))
	ratios := make([][]float64, len(cases))
	for r := range max(e.rounds, 1) {
		round := make([]float64, len(cases))
		for k := range cases {
			i := (r + k) % len(cases)
			var tp trace.TracerProvider
			var stp *sdktrace.TracerProvider
			if cases[i].sdk {
				stp = sdk(sdktrace.AlwaysSample(), cases[i].name)
				tp = stp
			}
			v, err := once(tp, cases[i].ratio)
			if stp != nil {
				stp.Shutdown(ctx)
			}
			if err != nil {
				return nil, err
			}
			round[i] = v
			rates[i] = append(rates[i], v)
		}
		for i := 1; i < len(cases); i++ {
			ratios[i] = append(ratios[i], round[i]/round[0])
		}
	}
	base := Result{Name: cases[0].name, Value: median(rates[0]), Unit: "records/s", Note: cases[0].note + "; median of the rounds"}
	out := []Result{base}
	for i := 1; i < len(cases); i++ {
		sr := slices.Sorted(slices.Values(ratios[i]))
		res := Result{Name: cases[i].name, Value: median(rates[i]), Unit: "records/s",
			Note: fmt.Sprintf("%s; ratio: median of %d rotated rounds, spread %.3f-%.3f; %.0f spans exported a run (%d records)",
				cases[i].note, len(sr), sr[0], sr[len(sr)-1], float64(exported[cases[i].name].n.Load())/float64(len(sr)), n)}.against(base)
		res.Ratio = median(ratios[i])
		out = append(out, res)
	}
	return out, nil
}

// spanCounter is an exporter that discards the spans it is given and
// counts them.
type spanCounter struct{ n atomic.Int64 }

func (c *spanCounter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	c.n.Add(int64(len(spans)))
	return nil
}

func (c *spanCounter) Shutdown(context.Context) error { return nil }
