package graph

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/stage"
)

// Event time
//
// A record's event time is when it happened, as opposed to when sluice
// handles it. Timestamps takes it from the records and emits watermarks: a
// watermark at time W says that no record at or before W will follow. Every
// operator instance tracks the lowest watermark over its input channels
// (those that neither ended nor went idle) and passes it on, so event-time
// windows and joins close when every input has passed them.

// Timestamps takes each record's event time with ts and generates
// watermarks from the largest time seen so far, less the out-of-orderness
// allowed with OutOfOrderness (default 0: records arrive in order). A
// record that arrives later than that is late for the windows downstream:
// see AllowedLateness and LateRecords. Watermarks from upstream are replaced by
// the ones Timestamps generates. It is stateless and fuses with its
// neighbours.
func Timestamps[T any](s Stream[T], name string, ts func(T) time.Time, opts ...Option) Stream[T] {
	var nd *Node
	nd = stateless[T, T](s, name, "timestamps", ts == nil, func(next any, sc *stage.Ctx) any {
		return stage.NewTimestamps(ts, int64(nd.bound), next, sc)
	}, opts)
	nd.timed = true
	if nd.bound < 0 {
		nd.topo.errs = append(nd.topo.errs, opErr(nd.topo, name, KindInvalid, fmt.Sprintf("OutOfOrderness(%v): must not be negative", nd.bound)))
	}
	return Stream[T]{nd}
}

// OutOfOrderness sets how far behind the latest event time a record may
// arrive and still be on time (Timestamps): the watermark trails the
// largest event time seen by d.
func OutOfOrderness(d time.Duration) Option { return func(nd *Node) { nd.bound = d } }

// IdleAfter marks a source instance idle when it has read nothing for d:
// downstream event time stops waiting for it (otherwise one quiet partition
// holds every window back) until it reads again. For sources only.
func IdleAfter(d time.Duration) Option { return func(nd *Node) { nd.idleAfter = d } }

// AllowedLateness keeps an event-time window's state for d after it fired:
// a record that arrives that late still updates the window, which fires
// again with the new result. Records later than that are late: they are
// counted (OperatorStats.Late) and go to the LateRecords stream, if any.
func AllowedLateness(d time.Duration) Option { return func(nd *Node) { nd.lateness = d } }
