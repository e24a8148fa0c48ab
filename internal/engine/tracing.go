package engine

import (
	"time"

	"github.com/sluicehq/sluice/actors"
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
	return stage.NewTracer(tp.Tracer("github.com/sluicehq/sluice/operators"), x.ctx, depth, x.topo.Name(), in.mbCfg.Overflow.String(), samp,
		x.sys.Logger(), x.topo.Config().Now)
}

// traceEvent records a job-level event (a restart, a mailbox overflow) as a
// short span of its own carrying the event, when tracing is on.
func (x *execution) traceEvent(name, event string, attrs ...attribute.KeyValue) {
	tp := x.sys.Config().TracerProvider
	if _, noop := tp.(tracenoop.TracerProvider); noop || tp == nil {
		return
	}
	attrs = append(attrs, attribute.String("sluice.topology", x.topo.Name()))
	// A child of the span the job was started under (sluice run
	// --trace-parent), else a root.
	_, span := tp.Tracer("github.com/sluicehq/sluice/operators").Start(x.ctx, name, trace.WithAttributes(attrs...))
	span.AddEvent(event, trace.WithAttributes(attrs...))
	span.End()
}

// samples reports whether the job samples any record for tracing.
func (x *execution) samples() bool {
	samp := x.topo.Config().Tracing
	if samp.Ratio > 0 || samp.Key != "" || samp.Parent {
		return true
	}
	for _, chain := range x.plan.Chains {
		if r, ok := chain[0].TraceRatio(); ok && r > 0 {
			return true
		}
	}
	return false
}

// traceShed ends the traces of sampled records dropped, spilled or shed
// at the instance's input, and links them to the overflow episode under
// way. It may run on a sender's goroutine (a mailbox's OnDrop).
func (in *instance) traceShed(ms []stage.Mark, role, why string) {
	if in.tr == nil || in.headSC == nil || len(ms) == 0 {
		return
	}
	scs := in.tr.Shed(in.headSC, ms, role, why)
	if role != "shed" { // the mailbox's: in its episode, which it reports after its first drops
		in.episodeNow(time.Unix(0, in.exec.now())).Touched(scs)
	}
}

// episodeNow is the overflow episode under way, begun at start if none is.
func (in *instance) episodeNow(start time.Time) *stage.Episode {
	for {
		if ep := in.episode.Load(); ep != nil {
			return ep
		}
		ep := in.tr.Episode(in.headSC, start)
		if in.episode.CompareAndSwap(nil, ep) {
			return ep
		}
	}
}

// traceShedMsg is traceShed for a message a mailbox discarded or spilled
// whole.
func (in *instance) traceShedMsg(msg any, role, why string) {
	env, ok := msg.(*actors.Envelope)
	if !ok {
		return
	}
	if m, ok := env.Payload.(stage.Marked); ok {
		tr, gone := m.Marks()
		if len(tr)+len(gone) > 0 {
			in.traceShed(append(append([]stage.Mark(nil), tr...), gone...), role, why)
			m.Forget()
		}
	}
}

// shedTraced is shed (load shedding on the edge into oc's receiver),
// tracing the sampled records it sheds on the receiver's head.
func (in *instance) shedTraced(oc *outChan, env *actors.Envelope) bool {
	if in.tr == nil {
		return in.shed(oc.shed, env)
	}
	m, ok := env.Payload.(stage.Marked)
	var before []stage.Mark
	if ok {
		before, _ = m.Marks()
		before = append([]stage.Mark(nil), before...)
	}
	kept := in.shed(oc.shed, env)
	if len(before) == 0 {
		return kept
	}
	recv := in.exec.byID[oc.target.Id]
	var shed []stage.Mark
	if !kept {
		shed = before
	} else {
		_, shed = m.Marks()
	}
	m.Forget()
	if recv != nil {
		recv.traceShed(shed, "shed", "latency target")
	}
	return kept
}

// sourceKey is the key function (graph.Node.KeyString) of the one key-by
// that reads a source's output directly (outs are the source chain's
// output edges, the source being the chain's only operator), for TraceKey
// at the source; nil when none or several do (a key exists only where a
// key-by computes it: after a map it is not computable at the source).
func sourceKey(outs []graph.PhysEdge) any {
	var via *graph.Node
	for _, e := range outs {
		if e.Part != stage.Hash || e.Via == nil || e.Via.KeyString() == nil || e.Via == via {
			continue
		}
		if via != nil {
			return nil
		}
		via = e.Via
	}
	if via == nil {
		return nil
	}
	return via.KeyString()
}
