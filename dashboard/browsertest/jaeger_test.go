package browsertest

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/telemetry"
	"github.com/sluicehq/sluice/telemetry/jaegertest"
)

// TestRecordTraceInChromium follows one record with the real Jaeger: a job
// that traces every record (TraceRatio(1); TraceKey would start the trace
// at the key-by edge, after the source) exports its spans over OTLP into a
// Jaeger started for the test; the dashboard reads a trace of a record with
// the key user-7 from Jaeger's query API when the page asks for the key,
// and the page draws its path on the topology graph in order (source first,
// sink last, the shuffle's edge marked) with a waterfall of its spans,
// without a script error.
func TestRecordTraceInChromium(t *testing.T) {
	chromium := chromiumPath(t)
	j := jaegertest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const service, key = "sluice-browsertrace", "user-7"
	tp, err := telemetry.NewOTLPTracerProvider(ctx, service, j.OTLPGRPC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	sys, err := actors.NewSystem(actors.Config{Name: "browsertrace", TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := sys.Stop(sctx); err != nil {
			t.Errorf("system stop: %v", err)
		}
	})

	top := operators.NewTopology("traced", operators.BatchSize(16), operators.TraceRatio(1))
	src := operators.Source(top, "numbers", operators.Generate(400, func(i int64) int64 { return i }))
	parsed := operators.Map(src, "parse", func(v int64) string { return fmt.Sprintf("user-%d", v%20) })
	byUser := operators.KeyBy(parsed, "by-user", func(u string) string { return u }, operators.Parallelism(2))
	counts := operators.Count(byUser, "count")
	operators.Sink(counts, "store", operators.SinkFunc(func(operators.KV[string, int64]) error { return nil }))
	plan, err := top.Plan()
	if err != nil {
		t.Fatal(err)
	}
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tp.ForceFlush(ctx); err != nil { // every span into Jaeger
		t.Fatal(err)
	}
	traces, err := j.WaitTracesTagged(ctx, service, map[string]string{"sluice.key": key}, func(trs []jaegertest.Trace) bool {
		for _, tr := range trs {
			if _, ok := tr.Span("store"); ok {
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatalf("Jaeger never held a trace with sluice.key=%s through store (%d traces): %v", key, len(traces), err)
	}

	d, err := dashboard.New(dashboard.Options{Interval: 200 * time.Millisecond, JaegerQueryURL: j.QueryURL, JaegerService: service})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(func() { d.Close() })
	if err := d.Add(run); err != nil {
		t.Fatal(err)
	}

	tab, _ := startBrowser(t, ctx, chromium)
	console := watchConsole(t, tab)
	if err := chromedp.Do(tab, chromedp.EmulateViewport(1280, 1000)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(tab, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	const job = `section.job[data-job="1"]`
	if err := chromedp.Do(tab, chromedp.WaitVisible(chromedp.CSS(job+` input.trace-key`))); err != nil {
		t.Fatalf("no trace form: %v", err)
	}
	got := traceByKey(t, tab, job, key)
	t.Logf("the record's trace from Jaeger, drawn: %v", got)
	path := strings.Split(got["path"], ",")
	order := map[string]int{}
	for i, task := range plan.Tasks {
		for k, op := range task.Operators {
			order[op] = 100*i + k // tasks come in topological order
		}
	}
	if len(path) < 3 || path[0] != "numbers" || path[len(path)-1] != "store" {
		t.Errorf("path drawn %v: want it from the source numbers to the sink store", path)
	}
	for i := 1; i < len(path); i++ {
		if _, ok := order[path[i]]; !ok || order[path[i]] <= order[path[i-1]] {
			t.Errorf("path drawn %v: %s after %s is not in the plan's order", path, path[i], path[i-1])
		}
	}
	if !strings.Contains(got["path"], "count") || got["edges"] == "0" || got["rows"] == "0" || len(got["trace"]) != 32 {
		t.Errorf("the trace drawn: %v (want count on the path, the shuffle's edge marked, a waterfall)", got)
	}
	for _, m := range console() {
		t.Errorf("the page logged: %s", m)
	}
}
