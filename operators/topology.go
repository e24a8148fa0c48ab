package operators

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/graph"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/persistence"
	"github.com/sluicehq/sluice/supervision"
)

func init() {
	graph.BindUser(func(t any) (*graph.Topology, bool) {
		ut, ok := t.(*Topology)
		if !ok || ut == nil {
			return nil, false
		}
		return ut.t, true
	})
}

// Topology is a logical graph of operators under construction. Build it with
// the package's functions (Source, Map, KeyBy, Sink, ...), check it with
// Validate or Plan, and run it with actors.System.Run. A Topology is not safe
// for concurrent construction.
type Topology struct{ t *graph.Topology }

// NewTopology starts an empty topology named name.
func NewTopology(name string, opts ...TopologyOption) *Topology {
	t := graph.NewTopology(name)
	t.SetErrors(errorKit)
	for _, o := range opts {
		if o.o != nil {
			t.Configure(o.o)
		}
	}
	return &Topology{t}
}

// Configure applies topology options to a topology already built, as if
// they had been given to NewTopology; a later option overrides an earlier
// one. A command line uses it to add checkpoints to a topology that a
// library built (sluice run --checkpoints).
func (t *Topology) Configure(opts ...TopologyOption) {
	for _, o := range opts {
		if o.o != nil {
			t.t.Configure(o.o)
		}
	}
}

// Name returns the topology's name.
func (t *Topology) Name() string { return t.t.Name() }

// Connect wires the output of operator from into the declared input to (see
// Declare). Both are looked up by name when the topology is validated, so
// the order of calls does not matter. Errors (unknown names, a type mismatch,
// a cycle) are reported by Validate, Plan and Run.
func (t *Topology) Connect(from, to string) { t.t.Connect(from, to) }

// Validate checks the topology and returns every problem found, each a
// *TopologyError naming the operator, joined with errors.Join.
func (t *Topology) Validate() error { return t.t.Validate() }

// Start launches the topology on sys; it implements actors.Job, and
// applications call sys.Run(ctx, t) rather than Start.
func (t *Topology) Start(ctx context.Context, sys *actors.System) (actors.Execution, error) {
	return engine.Job{T: t.t}.Start(ctx, sys)
}

// Stream is a typed stream of records produced by one operator. Streams are
// values: pass them to the next operator's constructor. A stream may be
// consumed by several operators; each receives every record.
type Stream[T any] struct{ s graph.Stream[T] }

// Name returns the name of the operator that produces the stream.
func (s Stream[T]) Name() string { return s.s.Name() }

// KeyedStream is a stream partitioned by key: every record with the same key
// reaches the same instance of the consuming operator. Create it with KeyBy.
type KeyedStream[K comparable, T any] struct{ s graph.KeyedStream[K, T] }

// Name returns the name of the KeyBy that produced the stream.
func (s KeyedStream[K, T]) Name() string { return s.s.Name() }

// Parallelism sets how many instances (actors) run the operator. The default
// is the parallelism of the operator's first input (1 for sources). On KeyBy
// it sets the parallelism of the keyed consumers.
func Parallelism(n int) Option { return Option{graph.Parallelism(n)} }

// Input sets the operator's input mailbox: its capacity in records and what
// happens when it is full (mailbox.Block, the default, with credit-based
// back-pressure; mailbox.DropNewest, DropOldest, Sample, Throttle, which
// never slow the senders and count every drop; mailbox.Spill, which keeps
// the order and the memory bound by spilling to the system's store). For
// Spill, leave SpillOptions empty: the job fills in the store, a queue name
// and a codec for the operator's input type, whose values must be msgpack
// encodable. An operator with its own Input is never fused with its
// predecessor.
func Input(cfg mailbox.Config) InputOption { return InputOption{graph.Input(cfg)} }

// Selective declares that the operator must not see sampled input: a
// selective query (a join, a rare pattern, a session) that per-record
// sampling would starve of its matches. A LatencyTarget then never samples
// upstream of it; it drops whole batches there instead, so the runs of
// input the operator sees are complete, or reports that the target cannot
// be held (ShedStats.Infeasible).
func Selective() InputOption { return InputOption{graph.Selective()} }

// NoFusion keeps the operator in an actor of its own instead of fusing it
// with its neighbours into one chain.
func NoFusion() Option { return Option{graph.NoFusion()} }

// OnRecordFailure sets what an operator does when its function panics on a
// record: it tries the record again, up to attempts times in all, and then
// hands it to the job's dead-letter store (with the operator, the error,
// the attempts and the time) and goes on with the next record. Without it, a
// panic fails the operator (and the job restarts or stops, see
// RestartOnFailure). It covers Map, Filter, FlatMap and the per-key
// aggregations (their key and fold functions).
func OnRecordFailure(attempts int) RecordFailureOption {
	return RecordFailureOption{graph.OnRecordFailure(attempts)}
}

// TopologyOption configures how a topology runs.
type TopologyOption struct{ o graph.TopologyOption }

// BatchSize sets how many records travel together in one envelope between
// actors (default 256). Larger batches cost memory and latency and save
// per-message overhead.
func BatchSize(n int) TopologyOption { return TopologyOption{graph.BatchSize(n)} }

// LatencyTarget makes the job shed load to hold its end-to-end p99 latency
// (from a record's ingestion at a source to its sink) under d. A
// controller (a pure state machine, internal/shed) watches each latency
// window's p99 and the operators' utilisation; while the p99 is over d it
// sheds at the place that helps most, the sources when everything they
// feed passes the bottleneck, else the edge into the bottleneck, by
// sampling records (the keyed estimates downstream, WindowCountEstimate,
// scale by the rate and report their error) or, when an operator
// downstream is Selective, by dropping whole batches. It sheds nothing
// while the p99 holds, and stops shedding when the load falls. Every shed
// record is counted (OperatorStats.Shed, by reason); ShedStatsOf tells
// where it sheds and how much. Latency is measured in one process: a
// distributed job's records lose their ingestion time when they cross to
// another process.
func LatencyTarget(d time.Duration) TopologyOption { return TopologyOption{graph.LatencyTarget(d)} }

// ShedSeed seeds the random numbers with which shedding (LatencyTarget's
// sampling, or its dropping of whole batches) chooses what to shed: two
// runs with the same seed that shed at the same rates at the same points
// shed the same records. The default seed is 0.
func ShedSeed(seed uint64) TopologyOption { return TopologyOption{graph.ShedSeed(seed)} }

// LatencyWindow sets the window of the latency statistics
// (OperatorStats.LatencyWindow) and of LatencyTarget's controller: one
// second by default.
func LatencyWindow(d time.Duration) TopologyOption { return TopologyOption{graph.LatencyWindow(d)} }

// NoLatencyStats turns the measurement of latency off (it costs a few reads
// of the clock per batch of records; see DESIGN.md, Latency and shedding).
func NoLatencyStats() TopologyOption { return TopologyOption{graph.NoLatencyStats()} }

// LatencyEvery sets how many batches the latency statistics time one in:
// 8 by default. A source chooses at random which of the batches it reads
// are timed, and they are timed at every operator their records reach, so
// that their end-to-end latency is whole; a window's or a timer's output is
// always timed. Percentiles.Count is then the records timed, not every
// record handled. 1 times every batch, which a LatencyTarget always does
// (its controller needs every batch), and costs more: a read of the clock
// and a few counters per batch at every operator, about 2.5 % of the
// throughput of a pipeline whose operators do little per record.
func LatencyEvery(n int) TopologyOption { return TopologyOption{graph.LatencyEvery(n)} }

// Capacity sets each operator instance's input capacity in records (default
// 4096). Senders hold credits for it; a sender without credits stops taking
// input, which propagates back-pressure up to the sources.
func Capacity(n int) TopologyOption { return TopologyOption{graph.Capacity(n)} }

// Checkpoints makes the job take a checkpoint every interval: barriers flow
// from the sources through every operator, each records its state, and the
// checkpoint completes when all have (exactly-once state). When a job of
// the same name starts and its last checkpoint exists, every operator is
// restored to it and the sources rewind to its offsets. Checkpoints are kept
// in the system's store unless CheckpointStore names another. Sources must
// be replayable (FromChannel and Ingress are not: an application feeds a
// checkpointed topology through NewDurableIngress); per-key state must be
// msgpack-encodable.
//
// Checkpoints go on while some sources have ended and others run: an
// operator instance that has finished its input answers each checkpoint
// with its final state (a source with its end offset), and a job restored
// from such a checkpoint ends those instances at once, without reading or
// emitting their records again. When the job is drained no periodic
// checkpoint starts any more, and once every operator has finished its
// input the job takes a final checkpoint (as Flink does on drain and at the
// end of input): sinks that commit with checkpoints (TwoPhaseWriter) commit
// their last records through it, and only then close. A job that ran to its
// end then forgets its checkpoints, so a rerun starts afresh; a drained job
// keeps the final one and the next run resumes exactly where it stopped. If
// the final checkpoint cannot be stored, the sinks are aborted and the job
// fails (or restarts, with RestartOnFailure) from its last completed
// checkpoint.
func Checkpoints(interval time.Duration) TopologyOption {
	return TopologyOption{graph.Checkpoints(interval)}
}

// CheckpointTimeout makes a checkpoint that is not complete d after it
// started fail, counted in CheckpointStats.Failed and TimedOut with the
// reason "timed out after d"; the job goes on and the next interval starts
// the next checkpoint. Default 10 minutes; 0 disables it.
func CheckpointTimeout(d time.Duration) TopologyOption {
	return TopologyOption{graph.CheckpointTimeout(d)}
}

// MaxConcurrentCheckpoints lets up to n checkpoints be in flight at once
// (default 1; values below 1 mean 1). An interval that elapses while n are
// in flight starts none. A checkpoint that completes subsumes the older
// ones still in flight.
func MaxConcurrentCheckpoints(n int) TopologyOption {
	return TopologyOption{graph.MaxConcurrentCheckpoints(n)}
}

// MinPauseBetweenCheckpoints makes a checkpoint start only d after the
// previous one ended (completed or failed), and only when none is in flight,
// so that a job whose checkpoints take long still processes records between
// them.
func MinPauseBetweenCheckpoints(d time.Duration) TopologyOption {
	return TopologyOption{graph.MinPauseBetweenCheckpoints(d)}
}

// UnalignedCheckpoints makes the job's checkpoints unaligned (as Flink's
// FLIP-76): a barrier overtakes the records queued in each operator's input
// instead of waiting behind them, the operator records its state at once,
// and the records it overtook are written with the checkpoint and processed
// first when a job is restored from it. A checkpoint then takes about the
// same time whatever the back-pressure, at the cost of a larger checkpoint
// (the in-flight records). Exactly-once state holds as with aligned ones.
// The final checkpoint stays aligned (nothing is in flight at the end). It
// applies to jobs in one process whose inputs have the Block policy (the
// default) or Spill (the spilled records are copied into the checkpoint);
// a dropping policy or a distributed job is refused when the job starts
// (see docs/checkpoints.md).
func UnalignedCheckpoints() TopologyOption {
	return TopologyOption{graph.UnalignedCheckpoints()}
}

// AlignmentTimeout starts checkpoints aligned and switches one that is
// still aligning d after it started to unaligned (see
// UnalignedCheckpoints): small checkpoints while the job keeps up, and
// checkpoints that complete under back-pressure. 0 (the default) never
// switches. The same restrictions as UnalignedCheckpoints apply.
func AlignmentTimeout(d time.Duration) TopologyOption {
	return TopologyOption{graph.AlignmentTimeout(d)}
}

// CheckpointStore sets where the job's checkpoints are kept.
func CheckpointStore(s persistence.CheckpointStore) TopologyOption {
	return TopologyOption{graph.CheckpointStore(s)}
}

// Clock is the time source of a job: processing-time windows, source
// idleness, state TTL, restart backoff and the checkpoint interval read it.
// Tests pass a clock they advance themselves (clock/clocktest.Manual).
type Clock = clock.Clock

// WithClock makes the job read time from c instead of the system clock.
func WithClock(c Clock) TopologyOption { return TopologyOption{graph.WithClock(c)} }

// DeadLetters sets where the job's dead letters go. Default: the system's
// store (see sluice deadletters).
func DeadLetters(s supervision.DeadLetterStore) TopologyOption {
	return TopologyOption{graph.DeadLetters(s)}
}

// RestartOnFailure makes the job restart when an operator fails (a panic
// without OnRecordFailure, a sink error, a failed open): every operator
// instance stops, and after the backoff's delay the whole job starts again
// from its last completed checkpoint (from the beginning without
// checkpoints), as Flink restarts a job region. At most maxRestarts
// restarts within the window are allowed; the next failure stops the job
// with an error that gives the reason and the count.
func RestartOnFailure(backoff supervision.Backoff, maxRestarts int, within time.Duration) TopologyOption {
	return TopologyOption{graph.RestartOnFailure(backoff, maxRestarts, within)}
}

// Declare adds a named input whose producers are wired later with
// Topology.Connect: for topologies assembled from parts, or by name from
// configuration. It passes every record through unchanged. A declared input
// that is never connected makes the topology invalid.
func Declare[T any](t *Topology, name string, opts ...PartitionOption) Stream[T] {
	return Stream[T]{graph.Declare[T](t.t, name, unwrap(opts)...)}
}

// TraceRatio sets the share of records a job traces when its system has
// a TracerProvider (default 1 %: 0.01): each source samples every record
// with probability r (0: none, 1: all), deterministically per record id,
// and a sampled record gets a span at every operator it passes
// (docs/tracing.md).
func TraceRatio(r float64) TopologyOption { return TopologyOption{graph.TraceRatio(r)} }

// TraceKey traces every record whose key (as fmt.Sprint writes it) is k,
// besides those TraceRatio samples: from the source when a KeyBy reads the
// source's output directly (the source tests the key), else from the first
// keyed operator it reaches (the key does not exist before the operators
// that make what it is computed from). Find their traces in Jaeger by the
// tag sluice.key=k.
func TraceKey(k string) TopologyOption { return TopologyOption{graph.TraceKey(k)} }

// TraceParent traces the records that arrive with a W3C trace context
// (a traceparent header) whose sampled flag is set, whatever TraceRatio
// says: the record continues the caller's trace, its source span a child of
// the caller's span. Connectors hand the header over by implementing
// TraceCarrier (connectors/httpin: the request's traceparent and
// tracestate headers; connectors/jetstream: the message's). A record whose
// trace context is not sampled is not traced by this rule; TraceRatio and
// TraceKey still apply to it (and one the ratio samples stays in the
// caller's trace). For parent-based sampling alone, add TraceRatio(0).
// Malformed trace contexts are refused, counted in the source's
// OperatorStats.BadTraceParents and logged (the 1st, 2nd, 4th, 8th, ...);
// their records go on. See docs/tracing.md, Sampling.
func TraceParent() TopologyOption { return TopologyOption{graph.TraceParent()} }

// DefaultTraceRatio is the share of records a job with a TracerProvider
// traces unless TraceRatio says otherwise: 1 %.
const DefaultTraceRatio = graph.DefaultTraceRatio
