package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// DefaultMetricsAddr is where ServeMetrics listens by default: loopback.
const DefaultMetricsAddr = "127.0.0.1:9464"

// NewPrometheus returns a MeterProvider whose metrics an http.Handler serves
// in the Prometheus text format, from a registry of its own (never the
// global one, never http.DefaultServeMux). Shut the provider down when done.
func NewPrometheus() (*sdkmetric.MeterProvider, http.Handler, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	return mp, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
}

// ServeMetrics serves handler at /metrics on addr (DefaultMetricsAddr when
// empty) until ctx ends; it returns once the listener is open, with the
// address it listens on and a function that waits for the server to stop.
func ServeMetrics(ctx context.Context, addr string, handler http.Handler) (string, func() error, error) {
	if addr == "" {
		addr = DefaultMetricsAddr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("telemetry: metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", handler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	stopped := make(chan struct{})
	var serveErr error
	go func() { // owned: Serve returns when the server shuts down
		defer close(stopped)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			serveErr = err
		}
	}()
	go func() { // owned: shuts the server down when ctx ends, or ends with it
		select {
		case <-ctx.Done():
			shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(shut)
		case <-stopped:
		}
	}()
	return ln.Addr().String(), func() error { <-stopped; return serveErr }, nil
}
