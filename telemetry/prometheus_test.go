package telemetry_test

import (
	"context"
	"io"
	"net/http"
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
