package graph

import (
	"github.com/sluicehq/sluice/internal/state"

	"fmt"
	"maps"
	"reflect"
	"time"

	"github.com/sluicehq/sluice/internal/stage"

	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/persistence"
	"github.com/sluicehq/sluice/supervision"
)

// role says how a logical node takes part in execution.
type Role uint8

const (
	RoleSource    Role = iota // reads a connector.Source
	roleOperator              // runs user code on records
	RoleSink                  // writes to a connector.Sink
	rolePartition             // KeyBy, Broadcast: shapes the edge to its consumers, runs nothing
	roleJunction              // Merge, Declare: joins inputs, runs nothing
)

// Topology is a logical graph of operators under construction. Build it with
// the package's functions (Source, Map, KeyBy, Sink, ...), check it with
// Validate or Plan, and run it with actors.System.Run. A Topology is not safe
// for concurrent construction.
type Topology struct {
	tname    string
	nodes    []*Node
	errs     []error
	connects []connection
	cfg      Config
	kit      Errors
}

type connection struct{ from, to string }

// NewTopology starts an empty topology named name.
func NewTopology(name string, opts ...TopologyOption) *Topology {
	t := &Topology{tname: name, cfg: defaultRunConfig(), kit: plainErrors}
	for _, o := range opts {
		o(&t.cfg)
	}
	return t
}

// Name returns the topology's name.
func (t *Topology) Name() string { return t.tname }

// node is one logical operator.
type Node struct {
	id             int
	name           string
	kind           string // "source", "map", "keyby", "count", "sink", ...
	role           Role
	topo           *Topology
	inType         reflect.Type // nil for sources
	outType        reflect.Type // nil for sinks
	inputs         []*Node
	consumers      []*Node
	parallelism    int // 0: inherit
	explicitP      bool
	noFusion       bool
	stateful       bool
	declared       bool
	partition      stage.Partition // for rolePartition nodes
	hasher         any             // func(T) uint64, for KeyBy
	keyString      any             // func(T) string, for KeyBy: the key as spans carry it (stage.KeyString)
	emit           EmitMode
	input          *mailbox.Config // the operator's input mailbox, when set with Input
	stateTypes     []reflect.Type  // types in the operator's checkpointed state
	replayable     bool            // a source that can rewind to an offset
	recordAttempts int             // OnRecordFailure: tries per record
	recordPolicy   bool            // OnRecordFailure was given
	idleAfter      time.Duration   // a source's idle timeout (IdleAfter)
	traceRatio     float64         // a source's share of records traced (SourceTraceRatio), when traceRatioSet
	traceRatioSet  bool
	bound          time.Duration                                      // OutOfOrderness of Timestamps
	ttl            time.Duration                                      // StateTTL of a Join
	timed          bool                                               // the operator's output carries event times it assigned
	needsTime      bool                                               // the operator needs event times on its input
	lateness       time.Duration                                      // AllowedLateness
	rescale        func(offsets []int64, parts int) ([]int64, error)  // a source's connector.OffsetRescaler
	rescaleStates  func(states [][]byte, parts int) ([][]byte, error) // a sink's connector.StateRescaler
	selective      bool                                               // must not see sampled input (Selective)

	// typed builders, set by the generic constructors
	newSource  func(next any, sc *stage.Ctx) stage.SourceRunner
	newStage   func(next any, sc *stage.Ctx) any // returns pusher[In]
	newInlet   func(head any) stage.Inlet
	newCodec   func() mailbox.Codec // spills this node's input envelopes
	newEmitter func(outs []stage.Output, size int, s stage.Sender) (any, stage.Flusher)

	// Late records (LateRecords): a window's lateNode takes them, through
	// an emitter of the window's input type; the late node's input edge
	// is a side edge.
	lateNode       *Node
	side           bool
	newLateEmitter func(outs []stage.Output, size int, s stage.Sender) (any, stage.Flusher)
}

// Stream is a typed stream of records produced by one operator. Streams are
// values: pass them to the next operator's constructor. A stream may be
// consumed by several operators; each receives every record.
type Stream[T any] struct{ n *Node }

// Name returns the name of the operator that produces the stream.
func (s Stream[T]) Name() string {
	if s.n == nil {
		return ""
	}
	return s.n.name
}

// KeyedStream is a stream partitioned by key: every record with the same key
// reaches the same instance of the consuming operator. Create it with KeyBy.
type KeyedStream[K comparable, T any] struct {
	n   *Node
	key func(T) K
}

// Name returns the name of the KeyBy that produced the stream.
func (s KeyedStream[K, T]) Name() string {
	if s.n == nil {
		return ""
	}
	return s.n.name
}

// Option configures one operator at its call site.
type Option func(*Node)

// Parallelism sets how many instances (actors) run the operator. The default
// is the parallelism of the operator's first input (1 for sources). On KeyBy
// it sets the parallelism of the keyed consumers.
func Parallelism(n int) Option {
	return func(nd *Node) { nd.parallelism, nd.explicitP = n, true }
}

// Input sets the operator's input mailbox: its capacity in records and what
// happens when it is full (mailbox.Block, the default, with credit-based
// back-pressure; mailbox.DropNewest, DropOldest, Sample, Throttle, which
// never slow the senders and count every drop; mailbox.Spill, which keeps
// the order and the memory bound by spilling to the system's store). For
// Spill, leave SpillOptions empty: the job fills in the store, a queue name
// and a codec for the operator's input type, whose values must be msgpack
// encodable. An operator with its own Input is never fused with its
// predecessor.
func Input(cfg mailbox.Config) Option {
	return func(nd *Node) { c := cfg; nd.input = &c }
}

// Selective declares that the operator must not see sampled input (a
// selective query: a join, a rare pattern): a LatencyTarget never samples
// upstream of it, and drops whole batches instead (DESIGN.md, Latency and
// shedding).
func Selective() Option { return func(nd *Node) { nd.selective = true } }

// NoFusion keeps the operator in an actor of its own instead of fusing it
// with its neighbours into one chain.
func NoFusion() Option { return func(nd *Node) { nd.noFusion = true } }

// TopologyOption configures how a topology runs.
type TopologyOption func(*Config)

type Config struct {
	// Tracing says which records the job traces when its system has a
	// TracerProvider (docs/tracing.md): 1 % by default.
	Tracing            stage.Sampling
	BatchSize          int
	Capacity           int
	CheckpointInterval time.Duration
	CheckpointPolicy   CheckpointPolicy
	CheckpointStore    persistence.CheckpointStore
	DeadLetters        supervision.DeadLetterStore
	Restart            *RestartPolicy
	Dist               Distributor // nil: in this process
	Savepoint          string      // FromSavepoint: the savepoint directory the job starts from
	// Parallelism overrides operators' parallelism for this run, by name
	// (RunParallelism), as if each had been built with Parallelism(n).
	Parallelism map[string]int
	// after runs f once d has passed, and returns a function that cancels it
	// (time.AfterFunc; tests replace it).
	After func(d time.Duration, f func()) (stop func() bool)
	Now   func() time.Time // the clock of processing time
	// SystemClock says that Now is the system clock (the default, or
	// WithClock(clock.Real())): the engine then times its batches with the
	// monotonic clock from a reading of Now at the job's start, which
	// costs half of a time.Now.
	SystemClock bool
	// cpAfter times the checkpoint interval (the job's clock).
	CheckpointAfter func(d time.Duration, f func()) (stop func() bool)
	// Latency (DESIGN.md, Latency and shedding): NoLatency turns its
	// measurement off; LatencyWindow is the window of LatencyWindow stats
	// and of the controller (default 1 s); LatencyTarget, when positive,
	// sheds load to hold the end-to-end p99 under it.
	NoLatency     bool
	LatencyWindow time.Duration
	LatencyTarget time.Duration
	// LatencyEvery: the engine times one batch in LatencyEvery, chosen at
	// random by the source that reads it, and that batch's records at
	// every operator they reach (default 8; 1 times every batch, as it
	// does under a LatencyTarget); windows' and timers' outputs are
	// always timed.
	LatencyEvery int
	// FixedShed, when in (0, 1), sheds at every source's outputs with that
	// rate from the start, without a controller (sampling, or with
	// FixedDrop dropping whole batches): a seam for tests.
	FixedShed float64
	FixedDrop bool
	// ShedSeed seeds the random numbers that choose which records are
	// shed (each instance's sequence is derived from it and the
	// instance's number).
	ShedSeed uint64
	// State is the state backend of the keyed aggregations (memory unless
	// its Dir is set; see operators.StateBackend).
	State state.Spec
}

// StateBackend sets the keyed aggregations' state backend.
func StateBackend(s state.Spec) TopologyOption {
	return func(c *Config) { c.State = s }
}

func defaultRunConfig() Config {
	realAfter := func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	return Config{Tracing: stage.Sampling{Ratio: DefaultTraceRatio}, BatchSize: 256, Capacity: 4096, LatencyEvery: DefaultLatencyEvery, Now: time.Now, SystemClock: true, After: realAfter, CheckpointAfter: realAfter,
		CheckpointPolicy: CheckpointPolicy{Timeout: DefaultCheckpointTimeout, MaxConcurrent: 1}}
}

// DefaultTraceRatio is the share of records a traced job samples unless
// TraceRatio says otherwise.
const DefaultTraceRatio = 0.01

// TraceRatio sets the probability that a source samples a record for
// tracing (0: none, 1: every record).
func TraceRatio(r float64) TopologyOption { return func(c *Config) { c.Tracing.Ratio = r } }

// TraceKey samples every record whose key is k at the keyed operators.
func TraceKey(k string) TopologyOption { return func(c *Config) { c.Tracing.Key = k } }

// TraceParent samples the records that arrive with a sampled W3C trace
// context (connector.TraceCarrier), in the caller's trace.
func TraceParent() TopologyOption { return func(c *Config) { c.Tracing.Parent = true } }

// DefaultCheckpointTimeout is how long a checkpoint may take unless
// CheckpointTimeout says otherwise (Flink's default).
const DefaultCheckpointTimeout = 10 * time.Minute

// CheckpointPolicy bounds a job's checkpoints (see internal/coord's
// Checkpoints).
type CheckpointPolicy struct {
	Timeout       time.Duration // a checkpoint not complete after it fails; 0: never
	MaxConcurrent int           // checkpoints in flight at once (at least 1)
	MinPause      time.Duration // from the end of one checkpoint to the start of the next
	// Unaligned starts every checkpoint unaligned; AlignmentTimeout starts
	// them aligned and switches one still aligning after it to unaligned.
	Unaligned        bool
	AlignmentTimeout time.Duration
}

// UnalignedCheckpoints makes every checkpoint but the final one unaligned
// (see operators.UnalignedCheckpoints).
func UnalignedCheckpoints() TopologyOption {
	return func(c *Config) { c.CheckpointPolicy.Unaligned = true }
}

// AlignmentTimeout switches a checkpoint still aligning d after it started
// to unaligned (see operators.AlignmentTimeout).
func AlignmentTimeout(d time.Duration) TopologyOption {
	return func(c *Config) { c.CheckpointPolicy.AlignmentTimeout = max(0, d) }
}

// CheckpointTimeout makes a checkpoint that is not complete d after it
// started fail, counted in Failed with the reason "timed out after d"; the
// job goes on and the next interval starts the next checkpoint. Default
// DefaultCheckpointTimeout; 0 disables it.
func CheckpointTimeout(d time.Duration) TopologyOption {
	return func(c *Config) { c.CheckpointPolicy.Timeout = max(0, d) }
}

// MaxConcurrentCheckpoints lets up to n checkpoints be in flight at once
// (default 1; values below 1 mean 1). An interval that elapses while n are
// in flight starts none. A checkpoint that completes subsumes the older
// ones still in flight.
func MaxConcurrentCheckpoints(n int) TopologyOption {
	return func(c *Config) { c.CheckpointPolicy.MaxConcurrent = max(1, n) }
}

// MinPauseBetweenCheckpoints makes a checkpoint start only d after the
// previous one ended (completed or failed), and only when none is in flight,
// so that a job whose checkpoints take long still gets time to process
// records between them.
func MinPauseBetweenCheckpoints(d time.Duration) TopologyOption {
	return func(c *Config) { c.CheckpointPolicy.MinPause = max(0, d) }
}

// BatchSize sets how many records travel together in one envelope between
// actors (default 256). Larger batches cost memory and latency and save
// per-message overhead.
func BatchSize(n int) TopologyOption { return func(c *Config) { c.BatchSize = n } }

// NoLatencyStats turns the measurement of latency off.
func NoLatencyStats() TopologyOption { return func(c *Config) { c.NoLatency = true } }

// LatencyWindow sets the window of the latency statistics and of a
// LatencyTarget's controller.
func LatencyWindow(d time.Duration) TopologyOption { return func(c *Config) { c.LatencyWindow = d } }

// FixedShed sheds at every source's outputs with rate keep from the start
// (dropping whole batches with drop, else sampling), without a controller:
// a seam for tests.
func FixedShed(keep float64, drop bool) TopologyOption {
	return func(c *Config) { c.FixedShed, c.FixedDrop = keep, drop }
}

// ShedSeed seeds the random numbers that choose which records are shed.
func ShedSeed(seed uint64) TopologyOption { return func(c *Config) { c.ShedSeed = seed } }

// LatencyTarget makes the job shed load to hold its end-to-end p99 latency
// under d.
func LatencyTarget(d time.Duration) TopologyOption { return func(c *Config) { c.LatencyTarget = d } }

// LatencyEvery makes the latency statistics time one batch in n.
func LatencyEvery(n int) TopologyOption { return func(c *Config) { c.LatencyEvery = n } }

// DefaultLatencyEvery is how many batches the latency statistics take one
// in by default: timing every batch cost about 2.5 % of the throughput of
// a pipeline whose operators do little per record (benchmarks/RESULTS.md,
// session 21).
const DefaultLatencyEvery = 8

// Capacity sets each operator instance's input capacity in records (default
// 4096). Senders hold credits for it; a sender without credits stops taking
// input, which propagates back-pressure up to the sources.
func Capacity(n int) TopologyOption { return func(c *Config) { c.Capacity = n } }

// Checkpoints makes the job take a checkpoint every interval: barriers flow
// from the sources through every operator, each records its state, and the
// checkpoint completes when all have (exactly-once state). When a job of
// the same name starts and its last checkpoint exists, every operator is
// restored to it and the sources rewind to its offsets. Checkpoints are kept
// in the system's store unless CheckpointStore names another. Sources must
// be replayable (FromChannel and Ingress are not); per-key state must be
// msgpack-encodable.
//
// Checkpoints go on while some sources have ended and others run: an
// operator instance that has finished its input answers each checkpoint
// with its final state (a source with its end offset), and a job restored
// from such a checkpoint ends those instances at once, without reading or
// emitting their records again. When the job is drained no periodic
// checkpoint starts any more, and once every operator has finished its
// input the job takes a final checkpoint (as Flink does on drain and at the end of input): sinks
// that commit with checkpoints (connector.TwoPhaseWriter) commit their last records
// through it, and only then close. A job that ran to its end then forgets
// its checkpoints, so a rerun starts afresh; a drained job keeps the final
// one and the next run resumes exactly where it stopped. If the final
// checkpoint cannot be stored, the sinks are aborted and the job fails (or
// restarts, with RestartOnFailure) from its last completed checkpoint.
func Checkpoints(interval time.Duration) TopologyOption {
	return func(c *Config) { c.CheckpointInterval = interval }
}

// Clock is the time source of a job: processing-time windows, source
// idleness, state TTL, restart backoff and the checkpoint interval read it.
// Tests pass a clock they advance themselves (clock/clocktest.Manual).
type Clock = clock.Clock

// WithClock makes the job read time from c instead of the system clock.
func WithClock(c Clock) TopologyOption {
	return func(cfg *Config) {
		cfg.Now, cfg.After, cfg.CheckpointAfter = c.Now, c.AfterFunc, c.AfterFunc
		cfg.SystemClock = c == clock.Real()
	}
}

// CheckpointStore sets where the job's checkpoints are kept.
func CheckpointStore(s persistence.CheckpointStore) TopologyOption {
	return func(c *Config) { c.CheckpointStore = s }
}

// FromSavepoint starts the job from the savepoint in dir (see
// operators.FromSavepoint).
func FromSavepoint(dir string) TopologyOption {
	return func(c *Config) { c.Savepoint = dir }
}

// RunParallelism runs operator op at parallelism n in this run, as if it
// had been built with Parallelism(n) (see operators.RunParallelism).
func RunParallelism(op string, n int) TopologyOption {
	return func(c *Config) {
		m := make(map[string]int, len(c.Parallelism)+1)
		maps.Copy(m, c.Parallelism)
		m[op] = n
		c.Parallelism = m
	}
}

func typeOf[T any]() reflect.Type { return reflect.TypeFor[T]() }

// add registers a node, checking that its inputs belong to this topology.
func (t *Topology) add(nd *Node, inputs []*Node, opts []Option) *Node {
	nd.id = len(t.nodes)
	nd.topo = t
	for _, o := range opts {
		if o != nil {
			o(nd)
		}
	}
	if nd.ttl < 0 {
		t.errs = append(t.errs, opErr(t, nd.name, KindInvalid, fmt.Sprintf("StateTTL(%v): must be positive", nd.ttl)))
	}
	for _, in := range inputs {
		if in == nil {
			t.errs = append(t.errs, opErr(t, nd.name, KindUnconnected, "input is a zero Stream (not produced by an operator)"))
			continue
		}
		if in.topo != t {
			t.errs = append(t.errs, opErr(t, nd.name, KindForeignStream,
				fmt.Sprintf("input %q belongs to topology %q", in.name, in.topo.tname)))
			continue
		}
		nd.inputs = append(nd.inputs, in)
		in.consumers = append(in.consumers, nd)
	}
	t.nodes = append(t.nodes, nd)
	return nd
}

func topoOf(ns ...*Node) *Topology {
	for _, n := range ns {
		if n != nil {
			return n.topo
		}
	}
	return nil
}

// Connect wires the output of operator from into the declared input to (see
// Declare). Both are looked up by name when the topology is validated, so
// the order of calls does not matter. Errors (unknown names, a type mismatch,
// a cycle) are reported by Validate, Plan and Run.
func (t *Topology) Connect(from, to string) {
	t.connects = append(t.connects, connection{from, to})
}

// Declare adds a named input whose producers are wired later with
// Topology.Connect: for topologies assembled from parts, or by name from
// configuration. It passes every record through unchanged. A declared input
// that is never connected makes the topology invalid.
func Declare[T any](t *Topology, name string, opts ...Option) Stream[T] {
	nd := &Node{name: name, kind: "declare", role: roleJunction, declared: true,
		inType: typeOf[T](), outType: typeOf[T]()}
	setTypedPlumbing[T](nd)
	return Stream[T]{t.add(nd, nil, opts)}
}

// SetErrors makes the topology report errors built by kit (package
// operators gives its error types). Call it before adding operators.
func (t *Topology) SetErrors(kit Errors) { t.kit = kit }

// NotReplayable marks a source that cannot rewind to an offset (a channel,
// an ingress): a topology with checkpoints rejects it.
func NotReplayable() Option { return func(nd *Node) { nd.replayable = false } }

// userTopology returns the engine topology under a value of the user API's
// Topology type; package operators binds it when it is initialised.
var userTopology func(any) (*Topology, bool)

// BindUser tells the engine how to find the topology under the user API's
// Topology (package operators calls it from init, once).
func BindUser(f func(any) (*Topology, bool)) { userTopology = f }

// Of returns the engine topology under t, a *operators.Topology (for
// package cluster, which runs the user's topologies with settings of its
// own).
func Of(t any) (*Topology, bool) {
	if et, ok := t.(*Topology); ok {
		return et, true
	}
	if userTopology == nil {
		return nil, false
	}
	return userTopology(t)
}

// WithTimer replaces the timer that delays restarts, for tests.
func WithTimer(after func(d time.Duration, f func()) (stop func() bool)) TopologyOption {
	return func(c *Config) { c.After = after }
}

// With returns a copy of t whose run settings are t's with opts applied;
// t is unchanged. The copy shares t's operators: build nothing more on
// either.
func (t *Topology) With(opts ...TopologyOption) *Topology {
	c := *t
	for _, o := range opts {
		if o != nil {
			o(&c.cfg)
		}
	}
	return &c
}

// Config is the topology's run settings.
func (t *Topology) Config() Config { return t.cfg }

// Kit is what the topology's errors are built with.
func (t *Topology) Kit() Errors { return t.kit }

// Nodes is the topology's operators, in the order they were added.
func (t *Topology) Nodes() []*Node { return t.nodes }

// The node's view for the runtime.

// Name is the operator's name.
func (n *Node) Name() string { return n.name }

// Kind is the operator's kind: "source", "map", "keyby", ...
func (n *Node) Kind() string { return n.kind }

// Role is how the operator takes part in execution.
func (n *Node) Role() Role { return n.role }

// RecordAttempts is OnRecordFailure's tries per record, 0 without it.
func (n *Node) RecordAttempts() int { return n.recordAttempts }

// Input is the operator's input mailbox when Input set one.
func (n *Node) Input() *mailbox.Config { return n.input }

// TraceRatio is a source's own share of records traced (SourceTraceRatio),
// if it has one.
func (n *Node) TraceRatio() (float64, bool) { return n.traceRatio, n.traceRatioSet }

// SourceTraceRatio sets the share of a source's records that are traced,
// overriding the topology's TraceRatio.
func SourceTraceRatio(r float64) Option {
	return func(nd *Node) { nd.traceRatio, nd.traceRatioSet = r, true }
}

// IdleAfter is a source's idle timeout (IdleAfter).
func (n *Node) IdleAfter() time.Duration { return n.idleAfter }

// Selective reports that the operator must not see sampled input.
func (n *Node) Selective() bool { return n.selective }

// Hasher is a KeyBy's func(T) uint64.
func (n *Node) Hasher() any { return n.hasher }

// KeyString is a KeyBy's func(T) string: a record's key as spans carry it
// (stage.KeyString).
func (n *Node) KeyString() any { return n.keyString }

// TTL is the operator's StateTTL (0: none).
func (n *Node) TTL() time.Duration { return n.ttl }

// KeyGrouped says whether the operator keeps state per key (aggregations,
// windows, joins, Process): redistributed by key group when its
// parallelism changes.
func (n *Node) KeyGrouped() bool { return n.stateful }

// RescaleOffsets is a source's connector.OffsetRescaler, nil when its
// connector has none.
func (n *Node) RescaleOffsets() func(offsets []int64, parts int) ([]int64, error) { return n.rescale }

// RescaleStates is a sink's connector.StateRescaler, nil when its connector
// has none.
func (n *Node) RescaleStates() func(states [][]byte, parts int) ([][]byte, error) {
	return n.rescaleStates
}

// Inputs are the operator's inputs, in order.
func (n *Node) Inputs() []*Node { return n.inputs }

// NewSource builds a source's stage over the chain next.
func (n *Node) NewSource(next any, sc *stage.Ctx) stage.SourceRunner { return n.newSource(next, sc) }

// NewStage builds the operator's stage over the chain next.
func (n *Node) NewStage(next any, sc *stage.Ctx) any { return n.newStage(next, sc) }

// NewInlet feeds envelopes to the chain whose head stage is head.
func (n *Node) NewInlet(head any) stage.Inlet { return n.newInlet(head) }

// NewCodec encodes the envelopes of the node's input.
func (n *Node) NewCodec() mailbox.Codec { return n.newCodec() }

// NewEmitter builds the typed tail of a chain that ends with the node.
func (n *Node) NewEmitter(outs []stage.Output, size int, s stage.Sender) (any, stage.Flusher) {
	return n.newEmitter(outs, size, s)
}
