package stage

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice/connector"
)

const (
	sampledParent   = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	unsampledParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
)

func TestDecodeTraceParent(t *testing.T) {
	sc, err := DecodeTraceParent(sampledParent, "congo=t61rcWkgMzE")
	if err != nil {
		t.Fatal(err)
	}
	if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" ||
		!sc.IsSampled() || !sc.IsRemote() || sc.TraceState().Get("congo") != "t61rcWkgMzE" {
		t.Fatalf("decoded %+v", sc)
	}
	if sc, err := DecodeTraceParent(unsampledParent, ""); err != nil || sc.IsSampled() {
		t.Fatalf("unsampled: %v, %v", sc, err)
	}
	// A tracestate over the bound is left out; the parent stands.
	if sc, err := DecodeTraceParent(sampledParent, "a="+strings.Repeat("b", MaxTraceStateBytes)); err != nil || sc.TraceState().Len() != 0 {
		t.Fatalf("long tracestate: %v, %v", sc.TraceState(), err)
	}
	for _, bad := range []string{
		"", "00", "garbage",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01", // zero trace id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", // zero span id
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // version ff
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", // upper case
		sampledParent + "," + sampledParent,                       // two headers
		sampledParent + strings.Repeat(" ", MaxTraceParentBytes),  // over the bound
	} {
		if _, err := DecodeTraceParent(bad, ""); !errors.Is(err, ErrBadTraceParent) {
			t.Errorf("%q: %v, want ErrBadTraceParent", bad, err)
		}
	}
}

// FuzzDecodeTraceParent: whatever bytes a connector hands over, decoding
// does not panic, refuses with ErrBadTraceParent or gives a valid remote
// span context whose traceparent is the input's (versions above 00 may
// carry more).
func FuzzDecodeTraceParent(f *testing.F) {
	f.Add(sampledParent, "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
	f.Add(unsampledParent, "")
	f.Add("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-more", "a=b")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-xx", "=,=")
	f.Fuzz(func(t *testing.T, parent, state string) {
		sc, err := DecodeTraceParent(parent, state)
		if err != nil {
			if !errors.Is(err, ErrBadTraceParent) || sc.IsValid() {
				t.Fatalf("%q: %v with %v", parent, err, sc)
			}
			if len(err.Error()) > 200 {
				t.Fatalf("an error of %d bytes", len(err.Error()))
			}
			return
		}
		if !sc.IsValid() || !sc.IsRemote() || len(parent) > MaxTraceParentBytes {
			t.Fatalf("%q accepted as %v", parent, sc)
		}
		if !strings.HasPrefix(strings.ToLower(parent)[3:], sc.TraceID().String()+"-"+sc.SpanID().String()+"-") {
			t.Fatalf("%q decoded to %v/%v", parent, sc.TraceID(), sc.SpanID())
		}
	})
}

// parentTracer is a tracer of a source instance whose spans go to rec.
func parentTracer(t *testing.T, s Sampling, log *slog.Logger) (*Tracer, *Ctx, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	at := time.Unix(1_700_000_000, 0)
	tr := NewTracer(tp.Tracer("test"), context.Background(), nil, "topo", "block", s, log, func() time.Time { return at })
	sc := &Ctx{Name: "in", Kind: "source", Instance: 0, C: &Counters{}, Tracer: tr}
	tr.OpenSource(sc)
	return tr, sc, rec
}

// TestSourceParentSampling: with the parent rule, a record whose trace
// context is sampled is traced in the caller's trace, child of its span,
// whatever the ratio; one not sampled is not (with ratio 0); malformed
// ones and those a reader gives out of order are counted, logged, and
// their records go on untraced.
func TestSourceParentSampling(t *testing.T) {
	var logs bytes.Buffer
	tr, sc, rec := parentTracer(t, Sampling{Ratio: 0, Parent: true}, slog.New(slog.NewTextHandler(&logs, nil)))
	tcs := []connector.TraceContext{
		{Index: 1, TraceParent: sampledParent, TraceState: "congo=t61rcWkgMzE"},
		{Index: 2, TraceParent: unsampledParent},
		{Index: 3, TraceParent: "00-zz"},
		{Index: 3, TraceParent: sampledParent}, // out of order: refused
		{Index: 5, TraceParent: sampledParent},
		{Index: 9, TraceParent: sampledParent}, // beyond the batch: refused
	}
	marks, end := tr.Source(sc, 6, nil, tcs, nil)
	if end == nil || len(marks) != 2 || marks[0].I != 1 || marks[1].I != 5 || marks[0].ID != "in/0/1" || marks[1].ID != "in/0/5" {
		t.Fatalf("marks %+v", marks)
	}
	end()
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	for _, s := range spans {
		if s.Parent().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || s.Parent().SpanID().String() != "00f067aa0ba902b7" ||
			!s.Parent().IsRemote() || s.SpanContext().TraceID() != s.Parent().TraceID() {
			t.Errorf("span %s: parent %v, context %v", s.Name(), s.Parent(), s.SpanContext())
		}
		if !s.StartTime().Equal(time.Unix(1_700_000_000, 0)) {
			t.Errorf("start %v, not the batch's clock", s.StartTime())
		}
		found := false
		for _, a := range s.Attributes() {
			if a.Key == "sluice.sampler" && a.Value.AsString() == "parent" {
				found = true
			}
		}
		if !found {
			t.Errorf("span %s: no sluice.sampler=parent in %v", s.Name(), s.Attributes())
		}
	}
	if got := sc.C.BadTrace.Load(); got != 3 {
		t.Errorf("BadTrace %d, want 3", got)
	}
	if n := strings.Count(logs.String(), "trace context is refused"); n != 2 { // the 1st and the 2nd (then the 4th, ...)
		t.Errorf("%d log lines, want 2:\n%s", n, logs.String())
	}
	// The ordinals go on across batches: no trace context, no record sampled.
	if marks, end := tr.Source(sc, 4, nil, nil, nil); marks != nil || end != nil {
		t.Fatalf("a batch without trace contexts sampled %+v", marks)
	}
}

// TestSourceParentWithRatio: the ratio still samples records whose trace
// context is not sampled (they stay in the caller's trace) and those with
// none (new roots); without the parent rule trace contexts are ignored.
func TestSourceParentWithRatio(t *testing.T) {
	tr, sc, rec := parentTracer(t, Sampling{Ratio: 1, Parent: true}, nil)
	_, end := tr.Source(sc, 3, nil, []connector.TraceContext{{Index: 0, TraceParent: unsampledParent}, {Index: 2, TraceParent: sampledParent}}, nil)
	end()
	spans := rec.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3", len(spans))
	}
	if p := spans[0].Parent(); p.SpanID().String() != "b7ad6b7169203331" || spans[0].SpanContext().TraceID() != p.TraceID() {
		t.Errorf("record 0 (unsampled parent, ratio 1): parent %v", p)
	}
	if p := spans[1].Parent(); p.IsValid() {
		t.Errorf("record 1 (no trace context): parent %v, want a root", p)
	}
	if p := spans[2].Parent(); p.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("record 2 (sampled parent): parent %v", p)
	}

	tr, sc, rec = parentTracer(t, Sampling{Ratio: 0}, nil)
	if marks, _ := tr.Source(sc, 3, nil, []connector.TraceContext{{Index: 0, TraceParent: sampledParent}}, nil); marks != nil || len(rec.Ended()) != 0 {
		t.Fatalf("without TraceParent a trace context sampled %+v", marks)
	}
}

// TestPassSpansShareTimestamps: the pass spans of one batch start at one
// reading of the clock and end at another, each a child of its record's
// previous span.
func TestPassSpansShareTimestamps(t *testing.T) {
	tr, src, rec := parentTracer(t, Sampling{Ratio: 1}, nil)
	marks, end := tr.Source(src, 3, nil, nil, nil)
	end()
	sc := &Ctx{Name: "map", Kind: "map", Prev: "in", C: &Counters{}, Tracer: tr}
	for round := range 2 {
		prev := append([]Mark(nil), marks...)
		stop := sc.Pass(marks, nil)
		stop()
		spans := rec.Ended()[3+3*round:]
		if len(spans) != 3 {
			t.Fatalf("round %d: %d spans", round, len(spans))
		}
		for i, s := range spans {
			if s.Parent().SpanID() != prev[i].SC.SpanID() || !s.SpanContext().Equal(marks[i].SC) {
				t.Errorf("round %d span %d: parent %v, want %v", round, i, s.Parent().SpanID(), prev[i].SC.SpanID())
			}
			var edge string
			for _, a := range s.Attributes() {
				if a.Key == "sluice.edge" {
					edge = a.Value.AsString()
				}
			}
			if edge != "in->map" {
				t.Errorf("edge %q", edge)
			}
		}
	}
}
