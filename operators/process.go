package operators

import (
	"time"

	"github.com/sluicehq/sluice/internal/graph"
)

// ProcessContext is what a Process function sees: the current key, its
// state, the current event time, and the means to emit results and to set
// event-time timers. It is valid only during the call it is passed to.
//
// It is the engine's context under its own name: Process passes the
// engine's pointer converted, with no wrapper to allocate per call.
type ProcessContext[K comparable, S, O any] graph.ProcessContext[K, S, O]

// in is the engine's context c is.
func (c *ProcessContext[K, S, O]) in() *graph.ProcessContext[K, S, O] {
	return (*graph.ProcessContext[K, S, O])(c)
}

// ProcessingTimer sets a processing-time timer for the key: onTimer runs
// when the job's clock (WithClock) reaches t, with Time returning t and
// IsProcessingTimer true. Setting the same time twice for a key sets one
// timer. Processing-time timers are part of checkpoints and are armed again
// on restore (at once when their time has passed); those still pending at
// the end of the input do not fire.
func (c *ProcessContext[K, S, O]) ProcessingTimer(t time.Time) { c.in().ProcessingTimer(t) }

// IsProcessingTimer reports whether onTimer runs for a processing-time
// timer (false: an event-time timer).
func (c *ProcessContext[K, S, O]) IsProcessingTimer() bool { return c.in().IsProcessingTimer() }

// Key returns the key of the record or timer being handled.
func (c *ProcessContext[K, S, O]) Key() K { return c.in().Key() }

// State returns the key's state, a zero S the first time. Changes through
// the pointer are kept, and are part of checkpoints (S must then be
// msgpack-encodable). The pointer is valid during the call: once the call
// has returned, a state Clear forgot may be reused for another key.
func (c *ProcessContext[K, S, O]) State() *S { return c.in().State() }

// Clear forgets the key's state. Its timers stay set.
func (c *ProcessContext[K, S, O]) Clear() { c.in().Clear() }

// Time returns the event time of the record being handled, or the time of
// the timer that fired (zero when the input carries no event times).
func (c *ProcessContext[K, S, O]) Time() time.Time { return c.in().Time() }

// Watermark returns the operator's event time: no record at or before it
// will arrive (zero before the first watermark).
func (c *ProcessContext[K, S, O]) Watermark() time.Time { return c.in().Watermark() }

// IsLate reports whether the record being handled is behind the watermark
// (its event time is at or before it): Process receives late records like
// any other, and the function decides what they mean.
func (c *ProcessContext[K, S, O]) IsLate() bool { return c.in().IsLate() }

// CountLate counts the record being handled as late in the operator's
// statistics (OperatorStats.Late), for a function that drops or diverts it.
func (c *ProcessContext[K, S, O]) CountLate() { c.in().CountLate() }

// Emit sends o downstream with the current event time.
func (c *ProcessContext[K, S, O]) Emit(o O) { c.in().Emit(o) }

// EmitAt sends o downstream with event time t.
func (c *ProcessContext[K, S, O]) EmitAt(o O, t time.Time) { c.in().EmitAt(o, t) }

// Timer sets an event-time timer for the key: onTimer runs once the
// watermark reaches t (at the latest at the end of the input). Setting the
// same time twice for a key sets one timer.
func (c *ProcessContext[K, S, O]) Timer(t time.Time) { c.in().Timer(t) }

// Process runs onRecord for every record of a keyed stream, with the
// record's key and that key's state, and onTimer for every event-time timer
// that comes due (as Flink's KeyedProcessFunction). Both emit results
// through the context. State and timers are checkpointed. At the end of the
// input every timer still set fires, in time order. onTimer may be nil when
// no timers are set.
func Process[K comparable, T, S, O any](ks KeyedStream[K, T], name string, onRecord func(c *ProcessContext[K, S, O], v T), onTimer func(c *ProcessContext[K, S, O]), opts ...ProcessOption) Stream[O] {
	rec, tim := processFuncs(onRecord, onTimer)
	return Stream[O]{graph.Process(ks.s, name, rec, tim, unwrap(opts)...)}
}

// processFuncs are Process's functions as the engine calls them, with its
// context (nil stays nil).
func processFuncs[K comparable, T, S, O any](onRecord func(c *ProcessContext[K, S, O], v T), onTimer func(c *ProcessContext[K, S, O])) (func(*graph.ProcessContext[K, S, O], T), func(*graph.ProcessContext[K, S, O])) {
	var rec func(*graph.ProcessContext[K, S, O], T)
	if onRecord != nil {
		rec = func(c *graph.ProcessContext[K, S, O], v T) { onRecord((*ProcessContext[K, S, O])(c), v) }
	}
	var tim func(*graph.ProcessContext[K, S, O])
	if onTimer != nil {
		tim = func(c *graph.ProcessContext[K, S, O]) { onTimer((*ProcessContext[K, S, O])(c)) }
	}
	return rec, tim
}
