package operators

import (
	"time"

	"github.com/sluicehq/sluice/internal/graph"
)

// Timestamps takes each record's event time from ts and generates
// watermarks from the largest time seen so far, less the out-of-orderness
// allowed with OutOfOrderness (default 0: records arrive in order). A
// record that arrives later than that is late for the windows downstream:
// see AllowedLateness and LateRecords. Watermarks from upstream are replaced by
// the ones Timestamps generates. It is stateless and fuses with its
// neighbours.
func Timestamps[T any](s Stream[T], name string, ts func(T) time.Time, opts ...TimestampsOption) Stream[T] {
	return Stream[T]{graph.Timestamps(s.s, name, ts, unwrap(opts)...)}
}

// OutOfOrderness sets how far behind the latest event time a record may
// arrive and still be on time (Timestamps): the watermark trails the
// largest event time seen by d.
func OutOfOrderness(d time.Duration) OrderOption { return OrderOption{graph.OutOfOrderness(d)} }

// IdleAfter marks a source instance idle when it has read nothing for d:
// downstream event time stops waiting for it (otherwise one quiet partition
// holds every window back) until it reads again. For sources only.
func IdleAfter(d time.Duration) IdleOption { return IdleOption{graph.IdleAfter(d)} }

// Windows says how a windowed operator groups records in time: Tumbling,
// Sliding or Sessions, in event time unless ProcessingTime says otherwise.
// Windows are aligned to the Unix epoch: a tumbling window of size S holds
// [k·S, (k+1)·S), a sliding window of size S and slide P holds
// [k·P, k·P+S).
type Windows struct{ w graph.Windows }

// Tumbling windows of the given size: every record belongs to exactly one.
func Tumbling(size time.Duration) Windows { return Windows{graph.Tumbling(size)} }

// Sliding windows of the given size that start every slide: a record
// belongs to size/slide of them.
func Sliding(size, slide time.Duration) Windows { return Windows{graph.Sliding(size, slide)} }

// Sessions groups the records of a key into sessions that close after gap
// without a record: a session holds [first, last+gap).
func Sessions(gap time.Duration) Windows { return Windows{graph.Sessions(gap)} }

// ProcessingTime makes the windows follow the clock of the machine instead
// of the records' event time: a record belongs to the window of the moment
// it is handled, and a window fires when the clock passes its end.
func (w Windows) ProcessingTime() Windows { return Windows{w.w.ProcessingTime()} }

func (w Windows) String() string { return w.w.String() }

// AllowedLateness keeps an event-time window's state for d after it fired:
// a record that arrives that late still updates the window, which fires
// again with the new result. Records later than that are late: they are
// counted (OperatorStats.Late) and go to the LateRecords stream, if any.
func AllowedLateness(d time.Duration) LateOption { return LateOption{graph.AllowedLateness(d)} }

// Windowed is the result of a windowed aggregation: a key's value in one
// window [Start, End).
type Windowed[K comparable, V any] struct {
	Key   K
	Start time.Time
	End   time.Time
	Value V
}

func windowedResult[K comparable, V any](k K, start, end time.Time, v V) Windowed[K, V] {
	return Windowed[K, V]{Key: k, Start: start, End: end, Value: v}
}

// WindowAggregate folds the records of each key and window into an
// accumulator that starts as zero() and is updated with add, and emits one
// Windowed result per key and window when the window closes: in event
// time when the watermark passes its end (and again for each record that
// arrives within AllowedLateness), in processing time when the clock does.
// At the end of the input every open window fires. Session windows merge,
// so they need merge to combine two accumulators; it may be nil for the
// other windows. Window state is part of checkpoints.
func WindowAggregate[K comparable, T, A any](ks KeyedStream[K, T], name string, w Windows, zero func() A, add func(A, T) A, merge func(A, A) A, opts ...WindowOption) Stream[Windowed[K, A]] {
	return Stream[Windowed[K, A]]{graph.WindowAggregate(ks.s, name, w.w, zero, add, merge, windowedResult[K, A], unwrap(opts)...)}
}

// WindowCount counts the records of each key in each window.
func WindowCount[K comparable, T any](ks KeyedStream[K, T], name string, w Windows, opts ...WindowOption) Stream[Windowed[K, int64]] {
	return Stream[Windowed[K, int64]]{graph.WindowCount(ks.s, name, w.w, windowedResult[K, int64], unwrap(opts)...)}
}

// WindowReduce combines the records of each key in each window with f,
// starting from the window's first record.
func WindowReduce[K comparable, T any](ks KeyedStream[K, T], name string, w Windows, f func(a, b T) T, opts ...WindowOption) Stream[Windowed[K, T]] {
	return Stream[Windowed[K, T]]{graph.WindowReduce(ks.s, name, w.w, f, windowedResult[K, T], unwrap(opts)...)}
}

// LateRecords is the stream of the records of ks that the windowed
// aggregation w over ks (WindowAggregate, WindowCount, WindowReduce) found
// late: those that arrived after every window they belong to had closed,
// past AllowedLateness (a side output, as Flink's sideOutputLateData). They
// keep their event times and are counted in w's OperatorStats.Late as
// before. The operator it adds, named name, runs with w's parallelism.
//
//	counts := operators.WindowCount(byUser, "per-minute", operators.Tumbling(time.Minute))
//	late := operators.LateRecords(byUser, counts, "late-clicks")
//	operators.Sink(late, "late-out", lateSink)
func LateRecords[K comparable, T, R any](ks KeyedStream[K, T], w Stream[R], name string) Stream[T] {
	return Stream[T]{graph.LateRecords(ks.s, w.s, name)}
}

// Estimate is an approximate aggregate of one key in one window
// (WindowCountEstimate, WindowSumEstimate), made honest about what a
// LatencyTarget's sampling shed: Value is the estimate, each record seen
// counted (or its value summed) divided by the probability that it was
// kept (its own: a rate that changed within the window is accounted for
// record by record; the Horvitz-Thompson estimator); the true value lies
// within [Low, High] with about 95 % probability. That interval is the
// score (Wilson) interval of the estimator, whose variance is estimated as
// Σ x²(1−p)/p² over the records kept: unlike Value ± 1.96 standard errors
// it keeps its 95 % when few sampled records were kept (see
// graph.Estimate.Interval), so it is not centred on Value. Bound is the
// larger of Value − Low and High − Value: Value ± Bound contains the
// interval. Approximate tells that some of the window's records were
// sampled away, or may have been: a window that saw records of other keys
// sampled (at rates down to p) while none of this key's kept records was
// is approximate too, its High raised by ln(0.05)/ln(1−p) records (the
// most that all go unkept with 5 % probability; each of the largest value
// seen, for a sum). Without sampling Value is exact, Bound 0. Whole batches
// dropped (upstream of a Selective operator) are not estimated: they are
// counted as shed, not scaled for; nor is a window of which sampling kept
// no record at all (it is not emitted).
type Estimate struct {
	Value       float64
	Low, High   float64
	Bound       float64
	Approximate bool
	Seen        int64 // records the window saw
}

// Contains reports whether v lies within the estimate's 95 % interval.
func (e Estimate) Contains(v float64) bool { return v >= e.Low && v <= e.High }

func estimated[K comparable](k K, start, end time.Time, e graph.Estimate) Windowed[K, Estimate] {
	lo, hi := e.Interval(1.96)
	return Windowed[K, Estimate]{Key: k, Start: start, End: end, Value: Estimate{
		Value: e.Sum, Low: lo, High: hi, Bound: max(e.Sum-lo, hi-e.Sum), Approximate: e.Approx, Seen: e.Seen}}
}

// WindowCountEstimate counts the records of each key in each window, as
// WindowCount, scaled by the sampling of a LatencyTarget upstream: an
// Estimate with its 95 % bound, marked approximate when records were
// sampled away.
func WindowCountEstimate[K comparable, T any](ks KeyedStream[K, T], name string, w Windows, opts ...WindowOption) Stream[Windowed[K, Estimate]] {
	return Stream[Windowed[K, Estimate]]{graph.WindowEstimate(ks.s, name, w.w, func(T) float64 { return 1 }, estimated[K], unwrap(opts)...)}
}

// WindowSumEstimate sums value over the records of each key in each
// window, scaled by the sampling of a LatencyTarget upstream (see
// WindowCountEstimate).
func WindowSumEstimate[K comparable, T any](ks KeyedStream[K, T], name string, w Windows, value func(T) float64, opts ...WindowOption) Stream[Windowed[K, Estimate]] {
	return Stream[Windowed[K, Estimate]]{graph.WindowEstimate(ks.s, name, w.w, value, estimated[K], unwrap(opts)...)}
}
