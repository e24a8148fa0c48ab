package httpin_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/connectors/httpin"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/telemetry"
	"github.com/sluicehq/sluice/telemetry/jaegertest"
)

const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
	sampled     = "00-" + callerTrace + "-" + callerSpan + "-01"
)

func postTraced(t *testing.T, c *http.Client, url, body string, h http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST: %s", resp.Status)
	}
}

// TestTraceContextsOfRequests: the reader hands over each request's
// traceparent and tracestate headers for exactly the records of that
// request, across Reads that cut requests apart; a request without one
// gives its records none; two traceparent headers are passed on joined
// (the runtime refuses them) and an over-long one cut just over the
// runtime's bound (so it is still refused).
func TestTraceContextsOfRequests(t *testing.T) {
	g := start(t, httpin.Config[event]{})
	c := client(t)
	postTraced(t, c, g.URL(), lines("a", "b", "c"), http.Header{"Traceparent": {sampled}, "Tracestate": {"congo=t61rcWkgMzE"}})
	postTraced(t, c, g.URL(), lines("d", "e"), http.Header{})
	postTraced(t, c, g.URL(), lines("f"), http.Header{"Traceparent": {sampled, sampled}})
	postTraced(t, c, g.URL(), lines("g"), http.Header{"Traceparent": {sampled + strings.Repeat("0", 10_000)}})

	r, err := g.Source().Open(context.Background(), 0, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	tc, ok := r.(operators.TraceCarrier)
	if !ok {
		t.Fatalf("the reader %T is no TraceCarrier", r)
	}
	type got struct {
		id, parent, state string
	}
	var all []got
	buf := make([]event, 2) // cuts the first request across two Reads
	for len(all) < 7 {
		n, err := r.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatalf("the ingress ran dry after %d records", len(all))
		}
		byIdx := map[int]operators.TraceContext{}
		last := -1
		for _, x := range tc.TraceContexts() {
			if x.Index <= last || x.Index >= n {
				t.Fatalf("trace context for record %d of %d after %d", x.Index, n, last)
			}
			last = x.Index
			byIdx[x.Index] = x
		}
		for i := range n {
			all = append(all, got{buf[i].ID, byIdx[i].TraceParent, byIdx[i].TraceState})
		}
	}
	joined := sampled + "," + sampled
	want := []got{{"a", sampled, "congo=t61rcWkgMzE"}, {"b", sampled, "congo=t61rcWkgMzE"}, {"c", sampled, "congo=t61rcWkgMzE"},
		{"d", "", ""}, {"e", "", ""}, {"f", joined, ""}}
	for i, w := range want {
		if all[i] != w {
			t.Errorf("record %d: %+v, want %+v", i, all[i], w)
		}
	}
	if g := all[6]; g.id != "g" || len(g.parent) != 257 || !strings.HasPrefix(g.parent, sampled) {
		t.Errorf("the over-long traceparent: %q (%d bytes)", g.parent[:min(60, len(g.parent))], len(g.parent))
	}
}

// TestRecordContinuesCallersTraceInJaeger: a record POSTed with a sampled
// traceparent, into a topology that samples by parent only, is traced in
// the caller's trace in the real Jaeger: its source span a child of the
// caller's span, then a span per operator in order; the records of a
// request without one, and of a request whose traceparent is not sampled
// or malformed, are not traced (the malformed one counted).
func TestRecordContinuesCallersTraceInJaeger(t *testing.T) {
	j := jaegertest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const service = "sluice-httpin-parent"
	tp, err := telemetry.NewOTLPTracerProvider(ctx, service, j.OTLPGRPC)
	if err != nil {
		t.Fatal(err)
	}
	sys, err := actors.NewSystem(actors.Config{Name: "httpin-parent", TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	g := start(t, httpin.Config[event]{})
	top := operators.NewTopology("httpin-parent", operators.TraceParent(), operators.TraceRatio(0))
	in := operators.Source(top, "ingest", g.Source())
	parsed := operators.Map(in, "parse", func(e event) event { e.N *= 2; return e }, operators.NoFusion())
	kept := operators.Filter(parsed, "keep", func(e event) bool { return true })
	var stored []event
	operators.Sink(kept, "store", operators.SinkFunc(func(e event) error { stored = append(stored, e); return nil }), operators.NoFusion())
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	c := client(t)
	postTraced(t, c, g.URL(), lines("plain-1", "plain-2"), http.Header{})
	postTraced(t, c, g.URL(), lines("traced"), http.Header{"Traceparent": {sampled}})
	postTraced(t, c, g.URL(), lines("unsampled"), http.Header{"Traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"}})
	postTraced(t, c, g.URL(), lines("bad"), http.Header{"Traceparent": {"00-nonsense"}})
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if len(stored) != 5 {
		t.Fatalf("stored %d records, want 5", len(stored))
	}
	var bad int64
	for _, st := range run.Stats() {
		if st.Name == "ingest" {
			bad = st.BadTraceParents
		}
	}
	if bad != 1 {
		t.Errorf("BadTraceParents %d, want 1", bad)
	}
	if err := sys.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tp.Shutdown(ctx); err != nil { // flush every span to Jaeger
		t.Fatal(err)
	}

	traces, err := j.WaitTraces(ctx, service, func(trs []jaegertest.Trace) bool {
		for _, tr := range trs {
			if tr.TraceID == callerTrace && len(tr.Spans) >= 4 {
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(traces) != 1 {
		t.Errorf("%d traces in Jaeger, want only the caller's", len(traces))
	}
	var tr jaegertest.Trace
	for _, x := range traces {
		if x.TraceID == callerTrace {
			tr = x
		}
	}
	byParent := map[string]jaegertest.Span{}
	for _, s := range tr.Spans {
		for _, r := range s.References {
			if r.RefType == jaegertest.ChildOf {
				byParent[r.SpanID] = s
			}
		}
	}
	var path []string
	for at := callerSpan; ; {
		s, ok := byParent[at]
		if !ok {
			break
		}
		path = append(path, s.OperationName)
		if at == callerSpan {
			if v, _ := s.Tag("sluice.sampler"); v != "parent" {
				t.Errorf("the source span's sluice.sampler %v, want parent", v)
			}
			if v, _ := s.Tag("sluice.record.id"); v != "ingest/0/2" {
				t.Errorf("the source span's sluice.record.id %v, want ingest/0/2", v)
			}
		}
		at = s.SpanID
	}
	if strings.Join(path, " → ") != "ingest → parse → keep → store" {
		t.Fatalf("from the caller's span %s: %v, want ingest → parse → keep → store (%d spans)", callerSpan, path, len(tr.Spans))
	}
}
