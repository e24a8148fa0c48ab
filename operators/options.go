package operators

import "github.com/sluicehq/sluice/internal/graph"

// Options are typed by the family of operators they apply to: each
// constructor takes the options of its family, so an option that means
// nothing to an operator does not compile (StateTTL on a Map, say).
// Parallelism and NoFusion apply to every operator; Input to every operator
// with an input.
//
//	family            constructors                              options besides Parallelism, NoFusion
//	SourceOption      Source                                    IdleAfter, SourceTraceRatio
//	MapOption         Map, Filter, FlatMap                      Input, OnRecordFailure
//	TimestampsOption  Timestamps                                Input, OutOfOrderness
//	PartitionOption   KeyBy, Broadcast, Rebalance, Declare      -
//	AggregateOption   Count, Reduce, Aggregate                  Input, OnRecordFailure, Emit, StateTTL
//	WindowOption      WindowAggregate, WindowCount, WindowReduce Input, AllowedLateness
//	JoinOption        Join                                      Input, StateTTL
//	TimedJoinOption   WindowJoin, IntervalJoin                  Input
//	ProcessOption     Process                                   Input, StateTTL
//	SinkOption        Sink                                      Input
type (
	// SourceOption configures a Source.
	SourceOption interface {
		option
		source()
	}
	// MapOption configures a Map, Filter or FlatMap.
	MapOption interface {
		option
		mapping()
	}
	// TimestampsOption configures a Timestamps.
	TimestampsOption interface {
		option
		timestamps()
	}
	// PartitionOption configures a KeyBy, Broadcast, Rebalance or Declare.
	PartitionOption interface {
		option
		partition()
	}
	// AggregateOption configures a Count, Reduce or Aggregate.
	AggregateOption interface {
		option
		aggregate()
	}
	// WindowOption configures a WindowAggregate, WindowCount or
	// WindowReduce.
	WindowOption interface {
		option
		window()
	}
	// JoinOption configures a Join.
	JoinOption interface {
		option
		join()
	}
	// TimedJoinOption configures a WindowJoin or an IntervalJoin.
	TimedJoinOption interface {
		option
		timedJoin()
	}
	// ProcessOption configures a Process.
	ProcessOption interface {
		option
		process()
	}
	// SinkOption configures a Sink.
	SinkOption interface {
		option
		sink()
	}
)

// option is what every option is: a change to the operator being added.
type option interface{ engineOption() graph.Option }

// Option applies to every operator: Parallelism, NoFusion. The zero Option
// changes nothing.
type Option struct{ o graph.Option }

// InputOption applies to every operator with an input: Input.
type InputOption struct{ o graph.Option }

// RecordFailureOption applies to the operators that run a function per
// record and may retry it: OnRecordFailure.
type RecordFailureOption struct{ o graph.Option }

// EmitOption applies to the per-key aggregations: Emit.
type EmitOption struct{ o graph.Option }

// TraceOption applies to sources: SourceTraceRatio.
type TraceOption struct{ o graph.Option }

func (o TraceOption) engineOption() graph.Option { return o.o }
func (TraceOption) source()                      {}

// SourceTraceRatio sets the share of this source's records that are
// traced (0: none, 1: all), overriding the topology's TraceRatio.
func SourceTraceRatio(r float64) TraceOption { return TraceOption{graph.SourceTraceRatio(r)} }

// IdleOption applies to sources: IdleAfter.
type IdleOption struct{ o graph.Option }

// OrderOption applies to Timestamps: OutOfOrderness.
type OrderOption struct{ o graph.Option }

// LateOption applies to windowed aggregations: AllowedLateness.
type LateOption struct{ o graph.Option }

// TTLOption applies to the keyed operators whose state grows with their
// keys (Count, Reduce, Aggregate, Process, Join): StateTTL.
type TTLOption struct{ o graph.Option }

func (o Option) engineOption() graph.Option              { return o.o }
func (o InputOption) engineOption() graph.Option         { return o.o }
func (o RecordFailureOption) engineOption() graph.Option { return o.o }
func (o EmitOption) engineOption() graph.Option          { return o.o }
func (o IdleOption) engineOption() graph.Option          { return o.o }
func (o OrderOption) engineOption() graph.Option         { return o.o }
func (o LateOption) engineOption() graph.Option          { return o.o }
func (o TTLOption) engineOption() graph.Option           { return o.o }

func (Option) source()     {}
func (Option) mapping()    {}
func (Option) timestamps() {}
func (Option) partition()  {}
func (Option) aggregate()  {}
func (Option) window()     {}
func (Option) join()       {}
func (Option) timedJoin()  {}
func (Option) process()    {}
func (Option) sink()       {}

func (InputOption) mapping()    {}
func (InputOption) timestamps() {}
func (InputOption) aggregate()  {}
func (InputOption) window()     {}
func (InputOption) join()       {}
func (InputOption) timedJoin()  {}
func (InputOption) process()    {}
func (InputOption) sink()       {}

func (RecordFailureOption) mapping()   {}
func (RecordFailureOption) aggregate() {}

func (EmitOption) aggregate() {}

func (TTLOption) aggregate() {}
func (TTLOption) process()   {}

func (IdleOption) source() {}

func (OrderOption) timestamps() {}

func (LateOption) window() {}

func (TTLOption) join() {}

// unwrap turns a family's options into the engine's.
func unwrap[O option](opts []O) []graph.Option {
	out := make([]graph.Option, 0, len(opts))
	for _, o := range opts {
		if any(o) == nil {
			continue
		}
		if eo := o.engineOption(); eo != nil {
			out = append(out, eo)
		}
	}
	return out
}
