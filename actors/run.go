package actors

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/clock"
)

// ErrDrainTimeout is returned by Run.Drain when its context ended before the
// job finished draining; the job was then stopped.
var ErrDrainTimeout = errors.New("actors: drain did not finish before the deadline; job stopped")

// Job is something a System runs: a stream topology from package operators,
// or any other unit with the same lifecycle.
type Job interface {
	// Name identifies the job in logs, errors and statistics.
	Name() string
	// Start launches the job on sys. The context bounds only the start.
	Start(ctx context.Context, sys *System) (Execution, error)
}

// Execution is a started Job, as seen by the System.
type Execution interface {
	// Done is closed when the job has finished, by itself, drained or stopped.
	Done() <-chan struct{}
	// Err is the job's outcome once Done is closed: nil when every record was
	// processed and every sink flushed.
	Err() error
	// Drain asks the sources to stop; in-flight records finish and
	// end-of-stream flows through every operator. It does not wait.
	Drain()
	// Abort stops every actor of the job now. It does not wait.
	Abort()
	// Stats reports per-operator statistics; safe to call at any time.
	Stats() []OperatorStats
}

// OperatorStats are the counters of one logical operator, summed over its
// instances.
type OperatorStats struct {
	Name        string // operator name, unique within the job
	Kind        string // "source", "map", "count", "sink", ...
	Task        int    // the physical task (fused chain) the operator runs in
	Parallelism int
	In          int64 // records received
	Out         int64 // records emitted
	// DeadLettered counts records the operator gave to the dead-letter store.
	DeadLettered int64
	// Late counts records that arrived after event time had passed every
	// window (or join interval) they belong to, beyond the allowed lateness:
	// they went to the operator's late output, or were dropped, counted here.
	Late int64
	// BadTraceParents counts, on a source, the W3C trace contexts its
	// records arrived with that were refused as malformed (operators.TraceParent;
	// counted in this process). Such a record goes on, not traced by them.
	BadTraceParents int64
	// Watermark is the operator's current event time (the lowest over its
	// instances), zero before the first watermark.
	Watermark time.Time
	// The input mailboxes, reported on the first operator of a task (summed
	// over instances; the high-water mark is the largest of them).
	Policy         string           // overflow policy
	Capacity       int              // records
	Queued         int              // records waiting now
	QueueHighWater int              // the most records ever waiting in one instance
	Dropped        int64            // records dropped by the policy
	DroppedBy      map[string]int64 // by reason
	Spilled        int64            // records written to the spill, ever
	SpillPending   int64            // records in the spill now
	Blocked        time.Duration    // time the task's instances spent without credit to send (first operator of a task only)
	// Backpressured is the number of the task's instances without credit now
	// (first operator of a task only).
	Backpressured int
	// Latency is what the job measured since it started (DESIGN.md, Latency
	// and shedding), weighted by records: QueueWait and Processing on the
	// first operator of a task (processing covers the task's whole fused
	// chain), EndToEnd on a sink (from the records' ingestion at a source to
	// the end of the sink's handling). LatencyWindow is the same over the
	// latest complete latency window (one second by default; see
	// operators.LatencyWindow), what a LatencyTarget steers by.
	Latency, LatencyWindow LatencyStats
	// EventTimeLag is how far the operator's event time trails the job's
	// clock: processing time − Watermark, zero before the first watermark.
	EventTimeLag time.Duration
	// Shed counts the records a LatencyTarget shed from this operator's
	// output (a source, or the operator before a bottleneck), by reason in
	// ShedBy ("latency-sampled", "latency-dropped"). They are not in
	// Dropped, which counts what the input mailbox dropped.
	Shed   int64
	ShedBy map[string]int64
	// SampleRate is the fraction of records a LatencyTarget keeps on this
	// operator's output now: 1 when it sheds nothing.
	SampleRate float64
}

// LatencyStats are latency percentiles of one operator.
type LatencyStats struct {
	QueueWait  Percentiles // from sent by the upstream task to handled
	Processing Percentiles // handling a batch, in the task's whole chain
	EndToEnd   Percentiles // sinks: from ingestion at a source to written
}

// Percentiles of a latency, over Count records: the records timed, those
// of one batch in operators.LatencyEvery (8 by default; every batch under
// a LatencyTarget). Each is the upper bound of the histogram bucket it
// falls in (buckets are at most 6 % wide), at most Max.
type Percentiles struct {
	Count              int64
	P50, P95, P99, Max time.Duration
}

// String prints the percentiles in milliseconds.
func (p Percentiles) String() string {
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 3, 64) }
	return "p50 " + ms(p.P50) + " p95 " + ms(p.P95) + " p99 " + ms(p.P99) + " max " + ms(p.Max) + " ms (" + strconv.FormatInt(p.Count, 10) + ")"
}

// Run is the handle of a running job.
type Run struct {
	sys   *System
	job   Job
	exec  Execution
	start time.Time
}

// Run starts job on the system and returns its handle.
func (s *System) Run(ctx context.Context, job Job) (*Run, error) {
	if job == nil {
		return nil, errors.New("actors: run: nil job")
	}
	if s.isStopped() {
		return nil, fmt.Errorf("actors: run %q: %w", job.Name(), ErrStopped)
	}
	r := &Run{sys: s, job: job, start: s.cfg.Clock.Now()}
	exec, err := job.Start(ctx, s)
	if err != nil {
		return nil, fmt.Errorf("actors: run %q: %w", job.Name(), err)
	}
	r.exec = exec
	// Tracked only once fully formed, so that System.Stop never sees a
	// half-started run; a Stop that slipped in meanwhile ends the job here.
	if err := s.track(r); err != nil {
		exec.Abort()
		<-exec.Done()
		return nil, fmt.Errorf("actors: run %q: %w", job.Name(), err)
	}
	s.log.Info("job started", "job", job.Name())
	go func() { // owned by the run: ends when the job does
		<-exec.Done()
		s.untrack(r)
		if err := exec.Err(); err != nil {
			s.log.Error("job failed", "job", job.Name(), "err", err)
		} else {
			s.log.Info("job finished", "job", job.Name(), "elapsed", clock.Since(s.cfg.Clock, r.start))
		}
	}()
	return r, nil
}

// Name returns the job's name.
func (r *Run) Name() string { return r.job.Name() }

// Done is closed when the job has finished.
func (r *Run) Done() <-chan struct{} { return r.exec.Done() }

// Wait waits for the job to finish by itself and returns its outcome, or the
// context's error when ctx ends first (the job keeps running).
func (r *Run) Wait(ctx context.Context) error {
	select {
	case <-r.exec.Done():
		return r.exec.Err()
	case <-ctx.Done():
		return fmt.Errorf("actors: wait for %q: %w", r.job.Name(), context.Cause(ctx))
	}
}

// Drain asks the job's sources to stop, waits until in-flight records are
// processed and sinks flushed (for a topology with checkpoints, until its
// final checkpoint is committed: see operators.Checkpoints), and returns the
// job's outcome. When ctx ends
// first, the job is asked to stop and ErrDrainTimeout is returned at once.
func (r *Run) Drain(ctx context.Context) error {
	r.exec.Drain()
	select {
	case <-r.exec.Done():
		return r.exec.Err()
	case <-ctx.Done():
		// Stopped, not awaited: an operator stuck in user code cannot be
		// made to return, and the caller's deadline has passed.
		r.exec.Abort()
		return fmt.Errorf("actors: drain %q: %w", r.job.Name(), ErrDrainTimeout)
	}
}

// Stop ends the job now, without draining, and waits until its actors have
// stopped or ctx ends.
func (r *Run) Stop(ctx context.Context) error {
	r.exec.Abort()
	select {
	case <-r.exec.Done():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("actors: stop %q: %w", r.job.Name(), context.Cause(ctx))
	}
}

// Stats reports per-operator statistics.
func (r *Run) Stats() []OperatorStats { return r.exec.Stats() }

// Execution returns the job's execution, for statistics that only its kind
// of job has (see operators.CheckpointStatsOf).
func (r *Run) Execution() Execution { return r.exec }

// Elapsed is the time since the job started, on the System's clock.
func (r *Run) Elapsed() time.Duration { return clock.Since(r.sys.cfg.Clock, r.start) }
