package operators

import (
	"time"

	"github.com/sluicehq/sluice/internal/graph"
)

// Either is a record of one of two inputs brought together by KeyedUnion.
type Either[L, R any] struct {
	L     L    `msgpack:"l"`
	R     R    `msgpack:"r"`
	Right bool `msgpack:"s"` // R is set, else L
}

// KeyedUnion brings two streams of different types together, partitioned
// by key: the next operator receives the records of both as Either, every
// record of a key from either side in the same instance (Flink's
// connect + keyBy). Use it with Process or the windowed aggregations to
// write joins of your own. The operators it adds are named name.left,
// name.right, name.union and name.key.
func KeyedUnion[K comparable, L, R any](left Stream[L], right Stream[R], name string, lkey func(L) K, rkey func(R) K) KeyedStream[K, Either[L, R]] {
	lt := Map(left, name+".left", func(l L) Either[L, R] { return Either[L, R]{L: l} })
	rt := Map(right, name+".right", func(r R) Either[L, R] { return Either[L, R]{R: r, Right: true} })
	u := Merge(name+".union", lt, rt)
	var key func(Either[L, R]) K
	if lkey != nil && rkey != nil {
		key = func(e Either[L, R]) K {
			if e.Right {
				return rkey(e.R)
			}
			return lkey(e.L)
		}
	}
	return KeyBy(u, name+".key", key)
}

// WindowJoin joins two streams in windows: when a window closes, join is
// called for every pair of a left and a right record with the same key in
// it (an inner join), and its results carry the window's last instant as
// their event time. Tumbling and sliding windows, in event or processing
// time. The operators it adds besides name are named name.left,
// name.right, name.union and name.key.
func WindowJoin[K comparable, L, R, O any](left Stream[L], right Stream[R], name string, lkey func(L) K, rkey func(R) K, w Windows, join func(L, R) O, opts ...TimedJoinOption) Stream[O] {
	return Stream[O]{graph.WindowJoin(left.s, right.s, name, lkey, rkey, w.w, join, unwrap(opts)...)}
}

// IntervalJoin joins every left record l with every right record r of the
// same key whose event time lies in [l+lower, l+upper] (lower may be
// negative). Results come as soon as both records are there, with the later
// of the two event times. Records are kept only as long as a partner may
// still arrive: a left one until the watermark passes l+upper, a right one
// until it passes r-lower. A record at or behind the watermark when it
// arrives is late: counted (OperatorStats.Late) and dropped.
func IntervalJoin[K comparable, L, R, O any](left Stream[L], right Stream[R], name string, lkey func(L) K, rkey func(R) K, lower, upper time.Duration, join func(L, R) O, opts ...TimedJoinOption) Stream[O] {
	return Stream[O]{graph.IntervalJoin(left.s, right.s, name, lkey, rkey, lower, upper, join, unwrap(opts)...)}
}

// StateTTL makes a keyed operator forget a key's state once the key has
// seen no record for d of processing time (as Flink's state TTL), so that
// its state stays bounded when keys stop appearing; without it the state
// of every key is kept. It applies to the operators whose state grows with
// their keys:
//
//   - Join forgets the key's records: a later record finds no partner;
//   - Count, Reduce and Aggregate forget the key's accumulator: the next
//     record starts a new one (seen is false). Under EmitAtEnd the key's
//     result is emitted when its state expires, so nothing is lost;
//   - Process forgets the key's state (State() returns a zero S again);
//     its timers stay and fire.
//
// With the memory backend the state of a key expires between d and 2d
// after its last record (a sweep runs every d, on the job's clock), and the
// times are not checkpointed: after a restore, the TTL of the restored keys
// counts from the first record. With the disk backend (Count, Reduce,
// Aggregate) a value expires exactly d after its last record, the times
// are stored and checkpointed with the values, and a sweep every d
// removes the expired ones from disk. Windows and interval joins need no TTL: event time
// frees their state.
func StateTTL(d time.Duration) TTLOption { return TTLOption{graph.StateTTL(d)} }

// Join is the unbounded (regular) inner join of two keyed streams: every
// left record is joined with every right record of the same key that came
// before or comes after it, whatever their times; each pair is joined once.
// Its state grows with its inputs unless StateTTL bounds it. Results carry
// the event time of the record that completed the pair, when the inputs
// carry event times.
func Join[K comparable, L, R, O any](left Stream[L], right Stream[R], name string, lkey func(L) K, rkey func(R) K, join func(L, R) O, opts ...JoinOption) Stream[O] {
	return Stream[O]{graph.Join(left.s, right.s, name, lkey, rkey, join, unwrap(opts)...)}
}
