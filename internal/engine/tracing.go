package engine

import (
	"github.com/sluicehq/sluice/internal/graph"
	"github.com/sluicehq/sluice/internal/stage"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// newTracer returns nil when tracing is off (a no-op provider), so that the
// hot path checks a nil pointer and nothing else.
func newTracer(x *execution, in *instance) *stage.Tracer {
	tp := x.sys.Config().TracerProvider
	if _, noop := tp.(tracenoop.TracerProvider); noop || tp == nil {
		return nil
	}
	depth := func() int {
		if mb := in.mb.Load(); mb != nil {
			return mb.Stats().Depth
		}
		return 0
	}
	samp := x.topo.Config().Tracing
	if head := x.plan.Chains[in.task][0]; head.Role() == graph.RoleSource {
		if r, ok := head.TraceRatio(); ok {
			samp.Ratio = r
		}
	}
	if !x.samples() {
		return nil // nothing is sampled: nothing to check per batch
	}
	return stage.NewTracer(tp.Tracer("github.com/sluicehq/sluice/operators"), x.ctx, depth, x.topo.Name(), in.mbCfg.Overflow.String(), samp)
}

// traceEvent records a job-level event (a restart, a mailbox overflow) as a
// short span of its own carrying the event, when tracing is on.
func (x *execution) traceEvent(name, event string, attrs ...attribute.KeyValue) {
	tp := x.sys.Config().TracerProvider
	if _, noop := tp.(tracenoop.TracerProvider); noop || tp == nil {
		return
	}
	attrs = append(attrs, attribute.String("sluice.topology", x.topo.Name()))
	_, span := tp.Tracer("github.com/sluicehq/sluice/operators").Start(x.ctx, name, trace.WithNewRoot(), trace.WithAttributes(attrs...))
	span.AddEvent(event, trace.WithAttributes(attrs...))
	span.End()
}

// samples reports whether the job samples any record for tracing.
func (x *execution) samples() bool {
	samp := x.topo.Config().Tracing
	if samp.Ratio > 0 || samp.Key != "" {
		return true
	}
	for _, chain := range x.plan.Chains {
		if r, ok := chain[0].TraceRatio(); ok && r > 0 {
			return true
		}
	}
	return false
}
