package operators_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/telemetry"
	"github.com/sluicehq/sluice/telemetry/jaegertest"
)

// TestTracesInJaeger runs a topology traced at 100 % into a real Jaeger
// over OTLP and reads the traces back through Jaeger's HTTP API: one trace
// holds a span for every operator a batch passed, parent to child, with
// sluice's attributes, and the aggregate's result span links to its
// inputs' spans.
func TestTracesInJaeger(t *testing.T) {
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
	top := operators.NewTopology("orders", operators.BatchSize(100))
	src := operators.Source(top, "read", operators.Generate(300, func(i int64) int64 { return i }))
	parsed := operators.Map(src, "parse", func(v int64) int64 { return v * 10 })
	by := operators.KeyBy(parsed, "by-region", func(v int64) int64 { return v % 4 }, operators.Parallelism(2))
	totals := operators.Count(by, "total", operators.Emit(operators.EmitAtEnd))
	operators.Sink(totals, "store", discard[operators.KV[int64, int64]]())
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

	// A batch's path: read -> parse (fused) -> total (another actor).
	isChild := func(tr jaegertest.Trace, child jaegertest.Span, parent string) bool {
		for _, r := range child.References {
			if r.RefType == jaegertest.ChildOf {
				for _, s := range tr.Spans {
					if s.SpanID == r.SpanID && s.OperationName == parent {
						return true
					}
				}
			}
		}
		return false
	}
	var path, result *jaegertest.Trace
	traces, err := j.WaitTraces(ctx, service, func(trs []jaegertest.Trace) bool {
		path, result = nil, nil
		for i, tr := range trs {
			read, okR := tr.Span("read")
			parse, okP := tr.Span("parse")
			total, okT := tr.Span("total")
			if okR && okP && okT && len(read.References) == 0 && isChild(tr, parse, "read") && isChild(tr, total, "parse") {
				path = &trs[i]
			}
			store, okS := tr.Span("store")
			if okT && okS && len(total.References) > 0 && isChild(tr, store, "total") {
				for _, r := range total.References {
					if r.RefType == jaegertest.FollowsFrom {
						result = &trs[i]
					}
				}
			}
		}
		return path != nil && result != nil
	})
	if err != nil {
		t.Fatalf("Jaeger never held the expected traces (%d traces seen): %v", len(traces), err)
	}
	total, _ := path.Span("total")
	for key, want := range map[string]any{"sluice.topology": "orders", "sluice.operator": "total", "sluice.mailbox.policy": "block"} {
		if got, ok := total.Tag(key); !ok || got != want {
			t.Errorf("span total: tag %s = %v, want %v", key, got, want)
		}
	}
	for _, key := range []string{"sluice.instance", "sluice.records", "sluice.queue.depth"} {
		if _, ok := total.Tag(key); !ok {
			t.Errorf("span total lacks tag %s", key)
		}
	}
	// The result links to input spans of other traces (the batches it sums).
	res, _ := result.Span("total")
	linked := 0
	for _, r := range res.References {
		if r.RefType == jaegertest.FollowsFrom && r.TraceID != result.TraceID {
			linked++
		}
	}
	if linked == 0 {
		t.Fatalf("the result span has no links to its inputs' traces: %+v", res.References)
	}
}
