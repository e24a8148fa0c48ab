package admin_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/operators"
)

// TestLatencyTargetThroughTheAPI: the LatencyTarget of a job started with
// one changes through the API (PUT .../latency-target) and through a
// desired-state document (a job's latency_target), shows in the job's
// status and reaches its controller (operators.ShedStatsOf); a bad value
// is refused (400, or the document rejected whole naming the field, the
// target unchanged), and a job started without a target refuses one
// (409).
func TestLatencyTargetThroughTheAPI(t *testing.T) {
	sys, ctx := newSystem(t)
	start := func(name string, opts ...operators.TopologyOption) *operators.Job {
		top := operators.NewTopology(name, opts...)
		src := operators.Source(top, "src", operators.Generate(operators.Unbounded, func(i int64) int64 { return i }))
		operators.Sink(operators.Map(src, "double", func(v int64) int64 { return 2 * v }), "sink", operators.SinkFunc(func(int64) error { return nil }))
		job, err := operators.Start(ctx, sys, top)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = job.Stop(ctx) })
		return job
	}
	lat := start("lat", operators.LatencyTarget(200*time.Millisecond))
	plain := start("plain")
	a := newAPI(t, admin.Options{})
	for _, j := range []*operators.Job{lat, plain} {
		if err := a.srv.Add(j.Run()); err != nil {
			t.Fatal(err)
		}
	}
	target := func() string {
		t.Helper()
		var st admin.JobStatus
		if code := a.do(http.MethodGet, "/v1/jobs/lat", nil, nil, &st); code != http.StatusOK || st.Latency == nil {
			t.Fatalf("status: %d %+v", code, st.Latency)
		}
		if got := operators.ShedStatsOf(lat.Run()).Target.String(); got != st.Latency.Target {
			t.Fatalf("the status says %s, the controller %s", st.Latency.Target, got)
		}
		return st.Latency.Target
	}
	if got := target(); got != "200ms" {
		t.Fatalf("target %s, want 200ms", got)
	}
	if code := a.do(http.MethodPut, "/v1/jobs/lat/latency-target", map[string]string{"target": "50ms"}, nil, nil); code != http.StatusOK {
		t.Fatalf("set: %d", code)
	}
	if got := target(); got != "50ms" {
		t.Fatalf("target %s, want 50ms", got)
	}
	for _, bad := range []string{"abc", "-1s", "0s", "2h"} {
		if code := a.do(http.MethodPut, "/v1/jobs/lat/latency-target", map[string]string{"target": bad}, nil, nil); code != http.StatusBadRequest {
			t.Errorf("target %q: %d, want 400", bad, code)
		}
	}
	if code := a.do(http.MethodPut, "/v1/jobs/plain/latency-target", map[string]string{"target": "50ms"}, nil, nil); code != http.StatusConflict {
		t.Errorf("a job without a target: %d, want 409", code)
	}
	doc := func(v int, job, target string) string {
		return fmt.Sprintf(`{"version": %d, "jobs": {%q: {"latency_target": %q, "operators": {}}}}`, v, job, target)
	}
	if err := a.srv.ApplyDocument(ctx, "test", []byte(doc(1, "lat", "80ms"))); err != nil {
		t.Fatal(err)
	}
	if got := target(); got != "80ms" {
		t.Fatalf("target %s after the document, want 80ms", got)
	}
	for v, c := range []struct{ job, target, field string }{
		{"lat", "-5ms", "jobs.lat.latency_target"}, {"lat", "soon", "jobs.lat.latency_target"}, {"plain", "80ms", "jobs.plain.latency_target"},
	} {
		err := a.srv.ApplyDocument(ctx, "test", []byte(doc(v+2, c.job, c.target)))
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("document with %s %q: %v, want a rejection naming %s", c.job, c.target, err, c.field)
		}
	}
	if got := target(); got != "80ms" {
		t.Fatalf("target %s after rejected documents, want the last good 80ms", got)
	}
	hist, _ := a.srv.History("lat")
	var changes []string
	for _, ev := range hist {
		if ev.What == "latency-target" {
			changes = append(changes, ev.Result+" "+ev.Detail)
		}
	}
	if len(changes) != 5 || changes[0] != "applied 50ms (was 200ms)" || changes[1] != "rejected -1s" || changes[4] != "applied 80ms (was 50ms)" {
		t.Fatalf("history of the target: %q", changes)
	}
}
