package operators_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
)

// With NoLatencyStats the job's metrics still time batches (one in
// LatencyEvery, stamped at the source): the processing and queue-wait
// histograms get some, the end-to-end one none (nothing carries an
// ingestion time).
func TestMetricsWithoutLatencyStats(t *testing.T) {
	sys, reader, ctx := meteredSystem(t)
	const n = 100_000
	top := operators.NewTopology("metered", operators.NoLatencyStats())
	src := operators.Source(top, "src", operators.Generate(n, func(i int64) int64 { return i }))
	even := operators.Filter(src, "even", func(v int64) bool { return v%2 == 0 }, operators.NoFusion())
	operators.Sink(even, "out", discard[int64](), operators.NoFusion())
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	// Collect while the job runs or right after it ended: the callback
	// stays registered until the job's end, the histograms are pushed.
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	batches := uint64(n / 256)
	if got := histogramCount(rm, "sluice.batch.processing"); got == 0 || got > batches {
		t.Errorf("%d batch processing times recorded, want some of the %d batches, not all", got, batches)
	}
	if got := histogramCount(rm, "sluice.latency.queue_wait"); got == 0 {
		t.Errorf("no queue waits recorded")
	}
	if got := histogramCount(rm, "sluice.latency.end_to_end"); got != 0 {
		t.Errorf("%d end-to-end latencies recorded without ingestion times", got)
	}
}

// meteredSystem is a system whose MeterProvider a manual reader collects,
// stopped when the test ends, and a context for the test's calls.
func meteredSystem(t *testing.T) (*actors.System, *sdkmetric.ManualReader, context.Context) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	sys, err := actors.NewSystem(actors.Config{MeterProvider: mp})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer cancel()
		sys.Stop(ctx)
		mp.Shutdown(ctx)
	})
	return sys, reader, ctx
}

func TestMetricsThroughTheMeterProvider(t *testing.T) {
	sys, reader, ctx := meteredSystem(t)
	const n = 5000
	top := operators.NewTopology("metered")
	in := operators.NewIngress[int64](64)
	src := operators.Source(top, "src", in)
	even := operators.Filter(src, "even", func(v int64) bool { return v%2 == 0 }, operators.NoFusion())
	operators.Sink(even, "out", discard[int64]())
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	for i := int64(0); i < n; i++ {
		if err := in.Send(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	// Collect while the job runs (its callback is registered until it
	// ends): the ingress is still open.
	var rm metricdata.ResourceMetrics
	waitFor(t, "the filter's counts", func() bool {
		if err := reader.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		return sumOf(rm, "sluice.records.out", "even") == n/2 && sumOf(rm, "sluice.records.in", "even") == n
	})
	if got := histogramCount(rm, "sluice.batch.processing"); got == 0 {
		t.Errorf("no batch processing times recorded")
	}
	// Buckets for seconds from a microsecond up, not OpenTelemetry's
	// defaults (0, 5, 10, ... 10000), where every batch is in the first.
	if b := histogramBounds(rm, "sluice.batch.processing"); len(b) < 10 || b[0] != 1e-6 || b[len(b)-1] != 10 {
		t.Errorf("batch processing buckets %v, want 1 µs to 10 s", b)
	} else if i := sort.SearchFloat64s(b, 36e-6); i == len(b) || b[i] > 1e-4 {
		t.Errorf("batch processing buckets %v: a 36 µs batch lands in a bucket above 100 µs", b)
	}
	// Latency: queue waits into the filter, end to end at the sink fused
	// with it, in buckets from a microsecond to a minute.
	for _, name := range []string{"sluice.latency.queue_wait", "sluice.latency.end_to_end"} {
		if got := histogramCount(rm, name); got == 0 {
			t.Errorf("nothing recorded in %s", name)
		}
		if b := histogramBounds(rm, name); len(b) < 10 || b[0] != 1e-6 || b[len(b)-1] != 60 {
			t.Errorf("%s buckets %v, want 1 µs to 60 s", name, b)
		}
	}
	in.Close()
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

func sumOf(rm metricdata.ResourceMetrics, name, operator string) int64 {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			if s, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range s.DataPoints {
					if v, ok := dp.Attributes.Value(attribute.Key("sluice.operator")); ok && v.AsString() == operator {
						return dp.Value
					}
				}
			}
		}
	}
	return -1
}

func histogramCount(rm metricdata.ResourceMetrics, name string) uint64 {
	var n uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == name {
				for _, dp := range h.DataPoints {
					n += dp.Count
				}
			}
		}
	}
	return n
}

func histogramBounds(rm metricdata.ResourceMetrics, name string) []float64 {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == name && len(h.DataPoints) > 0 {
				return h.DataPoints[0].Bounds
			}
		}
	}
	return nil
}
