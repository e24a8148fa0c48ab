package stage

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/telemetry"
)

// Tracer traces the batches an instance processes: a source starts a trace
// for each Batch the sampler keeps, each stage a Batch passes adds a span
// named after its operator (fused stages nest), and the trace context goes
// on in the headers of the envelopes the Batch produces.
type Tracer struct {
	t        trace.Tracer
	base     context.Context // the job's: the parent of its traces
	ctx      context.Context // the Batch being processed, nil when it is not traced
	depth    func() int      // the queue depth of the instance's mailbox now
	topology string
	policy   string
	queued   int // the queue depth the traced envelope met, for the head's span
}

func (tr *Tracer) attrs(sc *Ctx, n int) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		attribute.String("sluice.topology", tr.topology),
		attribute.String("sluice.operator", sc.Name),
		attribute.String("sluice.kind", sc.Kind),
		attribute.Int("sluice.instance", sc.Instance),
		attribute.Int("sluice.records", n),
	}
	if sc.Head {
		// The operator that reads the mailbox: its policy and what the
		// envelope found there.
		attrs = append(attrs, attribute.String("sluice.mailbox.policy", tr.policy), attribute.Int("sluice.queue.depth", tr.queued))
	}
	return attrs
}

// rootOpts are the options of a source's span, built once: the sampler
// decides before any attribute is made.
var rootOpts = []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindProducer)}

// root starts the trace of what a source reads in one tick, when the
// sampler keeps it, and returns the function that ends it with the number
// of records read.
func (tr *Tracer) Root(sc *Ctx) func(records int) {
	ctx, span := tr.t.Start(tr.base, sc.Name, rootOpts...)
	if !span.SpanContext().IsSampled() {
		span.End()
		return func(int) {}
	}
	tr.ctx = ctx
	return func(n int) {
		span.SetAttributes(tr.attrs(sc, n)...)
		span.End()
		tr.ctx = nil
	}
}

// child starts the span of a stage within the traced Batch.
func (tr *Tracer) child(sc *Ctx, n int) func() {
	parent := tr.ctx
	ctx, span := tr.t.Start(parent, sc.Name, trace.WithAttributes(tr.attrs(sc, n)...))
	tr.ctx = ctx
	return func() { span.End(); tr.ctx = parent }
}

// receive adopts the trace context an envelope carries, for the chain head,
// with the queue depth it met; done forgets it.
func (tr *Tracer) Receive(headers map[string]string) (done func()) {
	if len(headers) == 0 {
		return func() {}
	}
	ctx := telemetry.Extract(tr.base, headers)
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return func() {}
	}
	tr.ctx = ctx
	tr.queued = tr.depth()
	return func() { tr.ctx = nil }
}

// event adds an event to the current span, if the Batch is traced.
func (tr *Tracer) Event(name string, attrs ...attribute.KeyValue) {
	if tr != nil && tr.ctx != nil {
		trace.SpanFromContext(tr.ctx).AddEvent(name, trace.WithAttributes(attrs...))
	}
}

// traced is the helper stages call at the top of push: it starts their span
// when the Batch is traced and returns the function that ends it.
func (sc *Ctx) Traced(n int) func() {
	if tr := sc.Tracer; tr != nil && tr.ctx != nil {
		return tr.child(sc, n)
	}
	return nil
}

// Current is the trace context of the batch being processed, nil when it is
// not traced.
func (tr *Tracer) Current() context.Context { return tr.ctx }

// NewTracer traces with t under the job's context base; depth reports the
// instance's mailbox depth, policy is its overflow policy.
func NewTracer(t trace.Tracer, base context.Context, depth func() int, topology, policy string) *Tracer {
	return &Tracer{t: t, base: base, depth: depth, topology: topology, policy: policy}
}
