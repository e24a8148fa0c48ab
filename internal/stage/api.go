package stage

import (
	"math"
	"time"

	"github.com/sluicehq/sluice/connector"
	"github.com/sluicehq/sluice/internal/state"
	"github.com/sluicehq/sluice/supervision"
)

// The constructors of the stages, for the engine's operator constructors:
// each takes what the operator's function and options give, the next stage
// (a Pusher of its output, as any) and the stage's context.

// NewSource reads src.
func NewSource[T any](src connector.Source[T], next any, sc *Ctx) SourceRunner {
	return &SourceStage[T]{conn: src, next: next.(Pusher[T]), sc: sc, free: arraysFor[T](sc.Arrays, sc.BatchSize, true)}
}

// NewMap applies f to every record.
func NewMap[In, Out any](f func(In) Out, next any, sc *Ctx) any {
	s := &MapStage[In, Out]{f: f, next: next.(Pusher[Out]), sc: sc}
	s.filter, _ = next.(*FilterStage[Out])
	return s
}

// NewFilter keeps the records for which keep is true.
func NewFilter[T any](keep func(T) bool, next any, sc *Ctx) any {
	return &FilterStage[T]{keep: keep, next: next.(Pusher[T]), sc: sc}
}

// NewFlatMap replaces every record with those f returns.
func NewFlatMap[In, Out any](f func(In) []Out, next any, sc *Ctx) any {
	return &FlatMapStage[In, Out]{f: f, next: next.(Pusher[Out]), sc: sc}
}

// NewKeyed folds the records of each key with step and emits kv's results
// as emit says.
func NewKeyed[K comparable, T, A, O any](key func(T) K, step func(A, bool, T) A, kv func(K, A) O, emit EmitMode, next any, sc *Ctx) any {
	s := &KeyedStage[K, T, A, O]{key: key, foldFn: step, kv: kv, emit: emit, next: next.(Pusher[O]), sc: sc}
	s.open()
	return s
}

// NewSink writes to sink.
func NewSink[T any](sink connector.Sink[T], sc *Ctx) any { return &SinkStage[T]{conn: sink, sc: sc} }

// NewTimestamps takes event times from ts, with watermarks bound behind the
// largest.
func NewTimestamps[T any](ts func(T) time.Time, bound int64, next any, sc *Ctx) any {
	return &TimestampStage[T]{f: ts, bound: bound, max: math.MinInt64, sent: math.MinInt64, next: next.(Pusher[T]), sc: sc}
}

// NewIntervalJoin joins left and right records whose times lie within
// [lower, upper] of each other.
func NewIntervalJoin[K comparable, L, R, O any](key func(Either[L, R]) K, join func(L, R) O, lower, upper int64, next any, sc *Ctx) any {
	p := next.(Pusher[O])
	s := &IntervalStage[K, L, R, O]{key: key, join: join, lower: lower, upper: upper, wm: math.MinInt64,
		out: NewOutBuf(p, sc), next: p, sc: sc}
	s.open()
	return s
}

// NewJoin is the unbounded join, forgetting a key's records after ttl of
// processing time without one (0: never).
func NewJoin[K comparable, L, R, O any](key func(Either[L, R]) K, join func(L, R) O, ttl int64, next any, sc *Ctx) any {
	p := next.(Pusher[O])
	s := &JoinStage[K, L, R, O]{key: key, join: join, ttl: ttl, out: NewOutBuf(p, sc), next: p, sc: sc}
	s.open()
	return s
}

// NewProcess runs onRecord and onTimer with per-key state and timers.
func NewProcess[K comparable, T, S, O any](key func(T) K, onRecord func(*ProcessContext[K, S, O], T), onTimer func(*ProcessContext[K, S, O]), next any, sc *Ctx) any {
	p := next.(Pusher[O])
	core := &ProcCore[K, S, O]{onTimer: onTimer, wm: math.MinInt64,
		timerSet: make(map[TimerID[K]]struct{}), ptimers: make(map[TimerID[K]]struct{}), out: NewOutBuf(p, sc), next: p, sc: sc,
		marshal: state.Marshaler[processState[K, S]]()}
	core.open()
	return &ProcessStage[K, T, S, O]{ProcCore: core, key: key, onRecord: onRecord}
}

// NewFailureHandler applies OnRecordFailure: attempts tries per record, then
// the dead-letter store.
func NewFailureHandler(sc *Ctx, attempts int, store supervision.DeadLetterStore, job string) *FailureHandler {
	return &FailureHandler{sc: sc, attempts: attempts, store: store, job: job}
}

// NewFailure is the failure of operator op with err.
func NewFailure(op string, err error) *Failure { return &Failure{op: op, err: err} }

// Op is the operator that failed.
func (f *Failure) Op() string { return f.op }

// Unwrap is the cause.
func (f *Failure) Unwrap() error { return f.err }

// IsSessions says whether the windows are session windows.
func (w Windows) IsSessions() bool { return w.kind == sessions }

// InProcessingTime says whether the windows follow the clock.
func (w Windows) InProcessingTime() bool { return w.proc }

// NewInlet feeds the envelopes of a chain whose head takes In.
func NewInlet[In any](head any) Inlet { return &TypedInlet[In]{head: head.(Pusher[In])} }
