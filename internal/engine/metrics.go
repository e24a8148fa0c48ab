package engine

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
)

// jobMetrics publishes a job's statistics through the OpenTelemetry metric
// API of the system's MeterProvider: counters and gauges observed from
// Stats, and histograms of checkpoint durations and batch processing time.
type jobMetrics struct {
	reg        metric.Registration
	checkpoint metric.Float64Histogram
	latency    metric.Float64Histogram
	e2e        metric.Float64Histogram // end to end, at sinks
	queueWait  metric.Float64Histogram
	job        attribute.KeyValue
}

// newJobMetrics returns nil when the provider is a no-op.
func newJobMetrics(x *execution) (*jobMetrics, error) {
	mp := x.sys.Config().MeterProvider
	if _, noop := mp.(metricnoop.MeterProvider); noop || mp == nil {
		return nil, nil
	}
	m := mp.Meter("github.com/sluicehq/sluice/operators")
	jm := &jobMetrics{job: attribute.String("sluice.topology", x.topo.Name())}
	var err error
	counter := func(name, desc string) metric.Int64ObservableCounter {
		c, e := m.Int64ObservableCounter(name, metric.WithDescription(desc), metric.WithUnit("{record}"))
		if e != nil && err == nil {
			err = e
		}
		return c
	}
	in := counter("sluice.records.in", "records an operator received")
	out := counter("sluice.records.out", "records an operator emitted")
	dropped := counter("sluice.records.dropped", "records an operator's input mailbox dropped")
	spilled := counter("sluice.records.spilled", "records an operator's input mailbox spilled to disk")
	dead := counter("sluice.records.deadlettered", "records an operator gave to the dead-letter store")
	depth, e1 := m.Int64ObservableGauge("sluice.queue.depth", metric.WithDescription("records waiting in an operator's input mailboxes"), metric.WithUnit("{record}"))
	restarts, e2 := m.Int64ObservableCounter("sluice.job.restarts", metric.WithDescription("restarts of the job from its last checkpoint"))
	completed, e3 := m.Int64ObservableCounter("sluice.checkpoints.completed", metric.WithDescription("checkpoints completed"))
	failed, e6 := m.Int64ObservableCounter("sluice.checkpoints.failed", metric.WithDescription("checkpoints that failed (store failed or timed out)"))
	inProgress, e7 := m.Int64ObservableGauge("sluice.checkpoints.in_progress", metric.WithDescription("checkpoints in flight"))
	var e4, e5 error
	jm.checkpoint, e4 = m.Float64Histogram("sluice.checkpoint.duration", metric.WithDescription("from barriers injected to checkpoint stored"), metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(checkpointBuckets...))
	jm.latency, e5 = m.Float64Histogram("sluice.batch.processing", metric.WithDescription("time an operator instance spent on one batch of records"), metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(batchBuckets...))
	var e8, e9 error
	jm.e2e, e8 = m.Float64Histogram("sluice.latency.end_to_end", metric.WithDescription("from a record's ingestion at a source to the end of its sink's handling"), metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	jm.queueWait, e9 = m.Float64Histogram("sluice.latency.queue_wait", metric.WithDescription("from a batch sent by the upstream task to its handling"), metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	lag, e10 := m.Float64ObservableGauge("sluice.eventtime.lag", metric.WithDescription("the job's clock less the operator's watermark"), metric.WithUnit("s"))
	shed := counter("sluice.records.shed", "records a LatencyTarget shed from an operator's output")
	rate, e11 := m.Float64ObservableGauge("sluice.shed.rate", metric.WithDescription("the fraction of an operator's output a LatencyTarget keeps"))
	for _, e := range []error{e1, e2, e3, e4, e5, e6, e7, e8, e9, e10, e11} {
		if e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return nil, err
	}
	jm.reg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, st := range x.Stats() {
			attrs := metric.WithAttributes(jm.job, attribute.String("sluice.operator", st.Name), attribute.String("sluice.kind", st.Kind))
			o.ObserveInt64(in, st.In, attrs)
			o.ObserveInt64(out, st.Out, attrs)
			o.ObserveInt64(dropped, st.Dropped, attrs)
			o.ObserveInt64(spilled, st.Spilled, attrs)
			o.ObserveInt64(dead, st.DeadLettered, attrs)
			o.ObserveInt64(depth, int64(st.Queued), attrs)
			if !st.Watermark.IsZero() {
				o.ObserveFloat64(lag, st.EventTimeLag.Seconds(), attrs)
			}
			for reason, n := range st.ShedBy {
				o.ObserveInt64(shed, n, metric.WithAttributes(jm.job, attribute.String("sluice.operator", st.Name), attribute.String("sluice.kind", st.Kind), attribute.String("sluice.reason", reason)))
			}
			if x.sheds != nil {
				o.ObserveFloat64(rate, st.SampleRate, attrs)
			}
		}
		cs := x.Checkpoints()
		o.ObserveInt64(restarts, int64(cs.Restarts), metric.WithAttributes(jm.job))
		o.ObserveInt64(completed, cs.Completed, metric.WithAttributes(jm.job))
		o.ObserveInt64(failed, cs.Failed, metric.WithAttributes(jm.job))
		o.ObserveInt64(inProgress, int64(len(cs.InProgress)), metric.WithAttributes(jm.job))
		return nil
	}, in, out, dropped, spilled, dead, depth, restarts, completed, failed, inProgress, lag, shed, rate)
	if err != nil {
		return nil, err
	}
	return jm, nil
}

func (jm *jobMetrics) checkpointDone(d time.Duration) {
	if jm != nil {
		jm.checkpoint.Record(context.Background(), d.Seconds(), metric.WithAttributes(jm.job))
	}
}

func (jm *jobMetrics) batchDone(in *instance, d time.Duration) {
	jm.latency.Record(context.Background(), d.Seconds(), in.metricAttrs())
}

// latencyDone records a batch's queue wait and, at a sink, its end-to-end
// latency (one value per batch: the histograms count batches, the Stats
// records).
func (jm *jobMetrics) latencyDone(in *instance, queue, e2e time.Duration) {
	if queue >= 0 {
		jm.queueWait.Record(context.Background(), queue.Seconds(), in.metricAttrs())
	}
	if e2e >= 0 {
		jm.e2e.Record(context.Background(), e2e.Seconds(), in.sinkAttrs())
	}
}

// metricAttrs are the attributes of the instance's task's measurements,
// made once.
func (in *instance) metricAttrs() metric.MeasurementOption {
	if in.mAttrs == nil {
		in.mAttrs = metric.WithAttributeSet(attribute.NewSet(in.exec.metrics.job,
			attribute.String("sluice.operator", in.exec.plan.Chains[in.task][0].Name())))
	}
	return in.mAttrs
}

// sinkAttrs name the sink at the end of the instance's chain.
func (in *instance) sinkAttrs() metric.MeasurementOption {
	if in.mSinkAttrs == nil {
		chain := in.exec.plan.Chains[in.task]
		in.mSinkAttrs = metric.WithAttributeSet(attribute.NewSet(in.exec.metrics.job,
			attribute.String("sluice.operator", chain[len(chain)-1].Name())))
	}
	return in.mSinkAttrs
}

func (jm *jobMetrics) Close() {
	if jm != nil {
		_ = jm.reg.Unregister()
	}
}

// Bucket boundaries fit for what the histograms measure, in seconds
// (OpenTelemetry's default boundaries, 0 to 10000, suit milliseconds: every
// batch of tens of microseconds would land in the first bucket of 5 s).
var (
	// A batch takes microseconds to milliseconds; a slow user function
	// seconds.
	batchBuckets = []float64{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4,
		1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	// A latency takes microseconds (a queue wait on an idle edge) to
	// seconds (a record behind a backlog).
	latencyBuckets = []float64{1e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4,
		1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.2, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	// A checkpoint takes milliseconds to tens of seconds.
	checkpointBuckets = []float64{1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5,
		1, 2.5, 5, 10, 30, 60, 120}
)
