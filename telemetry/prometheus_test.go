package telemetry_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/sluice/telemetry"
)

func TestPrometheusEndpoint(t *testing.T) {
	mp, handler, err := telemetry.NewPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	defer mp.Shutdown(context.Background())
	c, err := mp.Meter("test").Int64Counter("sluice.records.in")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(ctx, 42, metric.WithAttributes())
	serveCtx, stop := context.WithCancel(ctx)
	addr, wait, err := telemetry.ServeMetrics(serveCtx, "127.0.0.1:0", handler)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("metrics listen on %s, want loopback", addr)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "sluice_records_in") || !strings.Contains(string(body), " 42") {
		t.Fatalf("/metrics lacks the counter:\n%s", body)
	}
	stop()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

// A port alone binds loopback, as --ui does; a host written out is kept.
func TestMetricsListenAddr(t *testing.T) {
	for in, want := range map[string]struct {
		listen   string
		loopback bool
	}{
		"":             {"127.0.0.1:9464", true},
		":9464":        {"127.0.0.1:9464", true},
		"9464":         {"127.0.0.1:9464", true},
		"localhost:1":  {"localhost:1", true},
		"[::1]:9464":   {"[::1]:9464", true},
		"0.0.0.0:9464": {"0.0.0.0:9464", false},
		"10.1.2.3:80":  {"10.1.2.3:80", false},
	} {
		listen, loopback, err := telemetry.MetricsListenAddr(in)
		if err != nil || listen != want.listen || loopback != want.loopback {
			t.Errorf("MetricsListenAddr(%q) = %q, %v, %v; want %q, %v", in, listen, loopback, err, want.listen, want.loopback)
		}
	}
	if _, _, err := telemetry.MetricsListenAddr("nonsense"); err == nil {
		t.Error("MetricsListenAddr(nonsense) succeeded")
	}
	// ServeMetrics with a port alone listens on 127.0.0.1.
	_, handler, err := telemetry.NewPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	addr, wait, err := telemetry.ServeMetrics(ctx, ":0", handler)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("ServeMetrics(:0) listened on %s, want 127.0.0.1", addr)
	}
}

// The Go runtime's metrics come out with the others: heap, GC and
// goroutines, read at each scrape.
func TestRuntimeMetrics(t *testing.T) {
	mp, handler, err := telemetry.NewPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	defer mp.Shutdown(context.Background())
	if err := telemetry.RuntimeMetrics(mp); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	for _, name := range []string{"go_memory_used_bytes", "go_goroutine_count", "go_memory_gc_goal_bytes"} {
		if !strings.Contains(body, name) {
			t.Errorf("no %s in the scrape:\n%s", name, body)
		}
	}
}
