package graph

import (
	"reflect"

	"github.com/sluicehq/sluice/connector"
	"github.com/sluicehq/sluice/internal/stage"

	"github.com/sluicehq/sluice/mailbox"
)

// Source adds an operator that reads records from src. Sources run with
// parallelism 1 unless Parallelism says otherwise; each instance reads one
// partition of the connector.
func Source[T any](t *Topology, name string, src connector.Source[T], opts ...Option) Stream[T] {
	nd := &Node{name: name, kind: "source", role: RoleSource, outType: typeOf[T]()}
	_, once := src.(interface{ notReplayable() })
	nd.replayable = !once
	if r, ok := src.(connector.OffsetRescaler); ok {
		nd.rescale = r.RescaleOffsets
	}
	if src == nil {
		t.errs = append(t.errs, opErr(t, name, KindInvalid, "nil source connector"))
	}
	nd.newSource = func(next any, sc *stage.Ctx) stage.SourceRunner {
		return stage.NewSource(src, next, sc)
	}
	setTypedPlumbing[T](nd)
	return Stream[T]{t.add(nd, nil, opts)}
}

// Map applies f to every record.
func Map[In, Out any](s Stream[In], name string, f func(In) Out, opts ...Option) Stream[Out] {
	return Stream[Out]{stateless[In, Out](s, name, "map", f == nil, func(next any, sc *stage.Ctx) any {
		return stage.NewMap(f, next, sc)
	}, opts)}
}

// Filter keeps the records for which keep returns true.
func Filter[T any](s Stream[T], name string, keep func(T) bool, opts ...Option) Stream[T] {
	return Stream[T]{stateless[T, T](s, name, "filter", keep == nil, func(next any, sc *stage.Ctx) any {
		return stage.NewFilter(keep, next, sc)
	}, opts)}
}

// FlatMap replaces every record with the records f returns (none, one or
// many). strings.Fields is a FlatMap function from string to string.
func FlatMap[In, Out any](s Stream[In], name string, f func(In) []Out, opts ...Option) Stream[Out] {
	return Stream[Out]{stateless[In, Out](s, name, "flatmap", f == nil, func(next any, sc *stage.Ctx) any {
		return stage.NewFlatMap(f, next, sc)
	}, opts)}
}

func stateless[In, Out any](s Stream[In], name, kind string, nilFunc bool, build func(any, *stage.Ctx) any, opts []Option) *Node {
	t := topoOf(s.n)
	if t == nil {
		t = orphan(name)
	}
	nd := &Node{name: name, kind: kind, role: roleOperator, inType: typeOf[In](), outType: typeOf[Out](), newStage: build}
	if nilFunc {
		t.errs = append(t.errs, opErr(t, name, KindInvalid, "nil function"))
	}
	setTypedPlumbing[Out](nd)
	setInlet[In](nd)
	return t.add(nd, []*Node{s.n}, opts)
}

// orphan is the topology that collects the errors of an operator whose input
// is a zero Stream, so that they are not lost; such an operator belongs to no
// topology that can run.
func orphan(name string) *Topology {
	_ = name
	return NewTopology("(none)")
}

// KeyBy partitions s by key: all records with the same key reach the same
// instance of the next operator. Partitioning hashes the key with a function
// that is stable across runs and machines. Parallelism on KeyBy sets the
// parallelism of its consumers.
func KeyBy[T any, K comparable](s Stream[T], name string, key func(T) K, opts ...Option) KeyedStream[K, T] {
	t := topoOf(s.n)
	if t == nil {
		t = orphan(name)
	}
	nd := &Node{name: name, kind: "keyby", role: rolePartition, partition: stage.Hash,
		inType: typeOf[T](), outType: typeOf[T]()}
	if key == nil {
		t.errs = append(t.errs, opErr(t, name, KindInvalid, "nil key function"))
	} else {
		h := stage.HasherFor[K]()
		nd.hasher = func(v T) uint64 { return h(key(v)) }
		nd.keyString = func(v T) string { return stage.KeyString(key(v)) }
	}
	setTypedPlumbing[T](nd)
	return KeyedStream[K, T]{n: t.add(nd, []*Node{s.n}, opts), key: key}
}

// Broadcast sends every record of s to every instance of the next operator.
func Broadcast[T any](s Stream[T], name string, opts ...Option) Stream[T] {
	t := topoOf(s.n)
	if t == nil {
		t = orphan(name)
	}
	nd := &Node{name: name, kind: "broadcast", role: rolePartition, partition: stage.Broadcast,
		inType: typeOf[T](), outType: typeOf[T]()}
	setTypedPlumbing[T](nd)
	return Stream[T]{t.add(nd, []*Node{s.n}, opts)}
}

// Rebalance distributes the records of s round-robin, a batch at a time,
// over the instances of the next operator.
func Rebalance[T any](s Stream[T], name string, opts ...Option) Stream[T] {
	t := topoOf(s.n)
	if t == nil {
		t = orphan(name)
	}
	nd := &Node{name: name, kind: "rebalance", role: rolePartition, partition: stage.Rebalance,
		inType: typeOf[T](), outType: typeOf[T]()}
	setTypedPlumbing[T](nd)
	return Stream[T]{t.add(nd, []*Node{s.n}, opts)}
}

// Merge unites several streams of the same type into one (a union). Records
// of one input keep their order; records of different inputs interleave.
func Merge[T any](name string, streams ...Stream[T]) Stream[T] {
	ns := make([]*Node, len(streams))
	for i, s := range streams {
		ns[i] = s.n
	}
	t := topoOf(ns...)
	if t == nil {
		t = orphan(name)
	}
	nd := &Node{name: name, kind: "merge", role: roleJunction, inType: typeOf[T](), outType: typeOf[T]()}
	if len(streams) == 0 {
		t.errs = append(t.errs, opErr(t, name, KindUnconnected, "merge of no streams"))
	}
	setTypedPlumbing[T](nd)
	return Stream[T]{t.add(nd, ns, nil)}
}

// Emit sets when a per-key aggregation (Count, Reduce, Aggregate) emits.
// The default is EmitUpdates.
func Emit(m EmitMode) Option { return func(nd *Node) { nd.emit = m } }

// Keyed adds a per-key aggregation of kind (count, reduce, aggregate): step
// folds a record into its key's accumulator (seen is false for the key's
// first record), and kv makes the result of a key.
func Keyed[K comparable, T, A, O any](ks KeyedStream[K, T], name, kind string, nilFunc bool, step func(A, bool, T) A, kv func(K, A) O, opts ...Option) Stream[O] {
	t := topoOf(ks.n)
	if t == nil {
		t = orphan(name)
	}
	nd := &Node{name: name, kind: kind, role: roleOperator, stateful: true, inType: typeOf[T](), outType: typeOf[O](),
		stateTypes: []reflect.Type{typeOf[K](), typeOf[A]()}}
	if nilFunc {
		t.errs = append(t.errs, opErr(t, name, KindInvalid, "nil function"))
	}
	key := ks.key
	nd.newStage = func(next any, sc *stage.Ctx) any {
		return stage.NewKeyed(key, step, kv, nd.emit, next, sc)
	}
	setTypedPlumbing[O](nd)
	setInlet[T](nd)
	return Stream[O]{t.add(nd, []*Node{ks.n}, opts)}
}

// Sink adds an operator that writes every record of s to sink.
func Sink[T any](s Stream[T], name string, sink connector.Sink[T], opts ...Option) {
	t := topoOf(s.n)
	if t == nil {
		t = orphan(name)
	}
	nd := &Node{name: name, kind: "sink", role: RoleSink, inType: typeOf[T]()}
	if r, ok := sink.(connector.StateRescaler); ok {
		nd.rescaleStates = r.RescaleStates
	}
	if sink == nil {
		t.errs = append(t.errs, opErr(t, name, KindInvalid, "nil sink connector"))
	}
	nd.newStage = func(_ any, sc *stage.Ctx) any { return stage.NewSink(sink, sc) }
	setInlet[T](nd)
	t.add(nd, []*Node{s.n}, opts)
}

// setTypedPlumbing gives a node producing T its emitter factory.
func setTypedPlumbing[T any](nd *Node) {
	nd.newEmitter = func(outs []stage.Output, size int, s stage.Sender) (any, stage.Flusher) {
		e := stage.NewEmitter[T](outs, size, s)
		return e, e
	}
}

// setInlet gives a node consuming In the adapter that feeds it envelopes.
func setInlet[In any](nd *Node) {
	nd.newInlet = func(head any) stage.Inlet { return stage.NewInlet[In](head) }
	nd.newCodec = func() mailbox.Codec { return stage.Codec[In]{} }
}
