package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/netaddr"
	"go.opentelemetry.io/contrib/instrumentation/runtime"
	"go.opentelemetry.io/otel/metric"

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

// MetricsListenAddr returns the address to listen on for addr as a user
// wrote it: empty means DefaultMetricsAddr, a port alone (":9464" or
// "9464") means loopback, 127.0.0.1:PORT, never every interface; a host
// written out is kept as written. Loopback reports whether the result is
// reachable from this machine only.
func MetricsListenAddr(addr string) (listen string, loopback bool, err error) {
	if addr == "" {
		addr = DefaultMetricsAddr
	}
	listen, loopback, err = netaddr.Listen(addr)
	if err != nil {
		return "", false, fmt.Errorf("telemetry: metrics: %w", err)
	}
	return listen, loopback, nil
}

// ServeMetrics serves handler at /metrics on addr (see MetricsListenAddr:
// a port alone binds loopback) until ctx ends; it returns once the
// listener is open, with the address it listens on and a function that
// waits for the server to stop.
func ServeMetrics(ctx context.Context, addr string, handler http.Handler) (string, func() error, error) {
	addr, _, err := MetricsListenAddr(addr)
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("telemetry: metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", handler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute}
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

// RuntimeMetrics exports the Go runtime's metrics through mp with the
// process's others: memory in use and allocated, GC cycles and the heap
// goal, goroutines, the scheduler's latency, named as OpenTelemetry's
// semantic conventions name them (go.memory.used, go.goroutine.count, ...;
// go_memory_used_bytes and so on in Prometheus). They are read when mp is
// collected: nothing runs in between.
func RuntimeMetrics(mp metric.MeterProvider) error {
	if err := runtime.Start(runtime.WithMeterProvider(mp)); err != nil {
		return fmt.Errorf("telemetry: runtime metrics: %w", err)
	}
	return nil
}
