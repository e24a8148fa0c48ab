package operators

import (
	"github.com/sluicehq/sluice/internal/graph"
)

// KV is a keyed result: the output of the per-key aggregations.
type KV[K comparable, V any] struct {
	Key   K
	Value V
}

func kv[K comparable, V any](k K, v V) KV[K, V] { return KV[K, V]{k, v} }

// Source adds an operator that reads records from src. Sources run with
// parallelism 1 unless Parallelism says otherwise; each instance reads one
// partition of the connector.
func Source[T any](t *Topology, name string, src SourceConnector[T], opts ...SourceOption) Stream[T] {
	eo := unwrap(opts)
	if _, once := src.(interface{ notReplayable() }); once {
		eo = append(eo, graph.NotReplayable())
	}
	return Stream[T]{graph.Source(t.t, name, src, eo...)}
}

// Map applies f to every record.
func Map[In, Out any](s Stream[In], name string, f func(In) Out, opts ...MapOption) Stream[Out] {
	return Stream[Out]{graph.Map(s.s, name, f, unwrap(opts)...)}
}

// Filter keeps the records for which keep returns true.
func Filter[T any](s Stream[T], name string, keep func(T) bool, opts ...MapOption) Stream[T] {
	return Stream[T]{graph.Filter(s.s, name, keep, unwrap(opts)...)}
}

// FlatMap replaces every record with the records f returns (none, one or
// many). strings.Fields is a FlatMap function from string to string.
func FlatMap[In, Out any](s Stream[In], name string, f func(In) []Out, opts ...MapOption) Stream[Out] {
	return Stream[Out]{graph.FlatMap(s.s, name, f, unwrap(opts)...)}
}

// KeyBy partitions s by key: all records with the same key reach the same
// instance of the next operator. Partitioning hashes the key with a function
// that is stable across runs and machines. Parallelism on KeyBy sets the
// parallelism of its consumers.
func KeyBy[T any, K comparable](s Stream[T], name string, key func(T) K, opts ...PartitionOption) KeyedStream[K, T] {
	return KeyedStream[K, T]{graph.KeyBy(s.s, name, key, unwrap(opts)...)}
}

// Broadcast sends every record of s to every instance of the next operator.
func Broadcast[T any](s Stream[T], name string, opts ...PartitionOption) Stream[T] {
	return Stream[T]{graph.Broadcast(s.s, name, unwrap(opts)...)}
}

// Rebalance distributes the records of s round-robin, a batch at a time,
// over the instances of the next operator.
func Rebalance[T any](s Stream[T], name string, opts ...PartitionOption) Stream[T] {
	return Stream[T]{graph.Rebalance(s.s, name, unwrap(opts)...)}
}

// Merge unites several streams of the same type into one (a union). Records
// of one input keep their order; records of different inputs interleave.
func Merge[T any](name string, streams ...Stream[T]) Stream[T] {
	es := make([]graph.Stream[T], len(streams))
	for i, s := range streams {
		es[i] = s.s
	}
	return Stream[T]{graph.Merge(name, es...)}
}

// EmitMode says when a per-key aggregation emits.
type EmitMode uint8

const (
	// EmitUpdates emits the key's new value after every record (a changelog).
	EmitUpdates EmitMode = iota
	// EmitAtEnd emits every key's final value once, at end of stream.
	EmitAtEnd
)

// Emit sets when a per-key aggregation (Count, Reduce, Aggregate) emits.
// The default is EmitUpdates.
func Emit(m EmitMode) EmitOption {
	em := graph.EmitUpdates
	if m == EmitAtEnd {
		em = graph.EmitAtEnd
	}
	return EmitOption{graph.Emit(em)}
}

// Count counts the records per key.
func Count[K comparable, T any](ks KeyedStream[K, T], name string, opts ...AggregateOption) Stream[KV[K, int64]] {
	return Stream[KV[K, int64]]{graph.Keyed(ks.s, name, "count", false,
		func(acc int64, _ bool, _ T) int64 { return acc + 1 }, kv[K, int64], unwrap(opts)...)}
}

// Reduce combines the records of each key with f, starting from the key's
// first record.
func Reduce[K comparable, T any](ks KeyedStream[K, T], name string, f func(acc, v T) T, opts ...AggregateOption) Stream[KV[K, T]] {
	return Stream[KV[K, T]]{graph.Keyed(ks.s, name, "reduce", f == nil, func(acc T, seen bool, v T) T {
		if !seen {
			return v
		}
		return f(acc, v)
	}, kv[K, T], unwrap(opts)...)}
}

// Aggregate folds the records of each key into an accumulator that starts as
// zero() and is updated with add.
func Aggregate[K comparable, T, A any](ks KeyedStream[K, T], name string, zero func() A, add func(acc A, v T) A, opts ...AggregateOption) Stream[KV[K, A]] {
	return Stream[KV[K, A]]{graph.Keyed(ks.s, name, "aggregate", zero == nil || add == nil, func(acc A, seen bool, v T) A {
		if !seen {
			acc = zero()
		}
		return add(acc, v)
	}, kv[K, A], unwrap(opts)...)}
}

// Sink adds an operator that writes every record of s to sink.
func Sink[T any](s Stream[T], name string, sink SinkConnector[T], opts ...SinkOption) {
	graph.Sink(s.s, name, sink, unwrap(opts)...)
}
