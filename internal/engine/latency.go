package engine

import (
	"fmt"
	"math"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/wire"
)

// Latency measurement (DESIGN.md, Latency and shedding). A source stamps
// every data envelope it sends with its ingestion time (the job's clock
// once per source tick, or what the reader says: connector.IngestionTimer),
// and every envelope an instance sends while it handles another inherits
// the ingestion time of that one, so window results carry the ingestion
// time of the watermark that fired them. The sending instance also stamps
// the time it sent (Envelope.Sent). The receiving instance then records,
// per batch and weighted by the batch's records:
//
//   - queue wait: from Sent to the start of handling;
//   - processing: the time spent handling the batch (the whole chain);
//   - end to end, at a chain that ends in a sink: from the ingestion time
//     to the end of handling.
//
// This costs two or three reads of the clock per batch (of 256 records by
// default) and an atomic add per histogram: nothing per record.

// Histogram buckets: log-linear, histSub sub-buckets per power of two of
// microseconds, so a bucket's width is at most 1/histSub of its value
// (6 %); 0 to 2^histExp µs (about 9 days); values below 1 µs land in the
// first bucket.
const (
	histSubBits = 4
	histSub     = 1 << histSubBits
	histExp     = 40
	histBuckets = (histExp-histSubBits+1)*histSub + histSub
)

// hist is a histogram of durations written by one instance's actor and
// read by Stats from any goroutine.
type hist struct {
	b   [histBuckets]atomic.Int64 // the count is their sum (snapshot)
	max atomic.Int64              // nanoseconds
}

func histIndex(d time.Duration) int {
	us := uint64(max(d, 0)) / 1000
	if us < histSub {
		return int(us)
	}
	e := bits.Len64(us) - 1 // us in [2^e, 2^(e+1)), e >= histSubBits
	if e > histExp {
		return histBuckets - 1
	}
	sub := (us >> (e - histSubBits)) & (histSub - 1)
	return (e-histSubBits+1)*histSub + int(sub)
}

// histUpper is the upper bound of bucket i, in nanoseconds.
func histUpper(i int) time.Duration {
	if i < histSub {
		return time.Duration(i+1) * time.Microsecond
	}
	e := i/histSub + histSubBits - 1
	sub := uint64(i % histSub)
	us := (uint64(1) << e) + (sub+1)<<(e-histSubBits)
	return time.Duration(us) * time.Microsecond
}

// observe records n records that each took d. One writer at a time (the
// instance's actor).
func (h *hist) observe(d time.Duration, n int64) {
	if n <= 0 {
		return
	}
	h.b[histIndex(d)].Add(n)
	if int64(d) > h.max.Load() {
		h.max.Store(int64(d))
	}
}

// histSnap is a copy of a histogram's counts, to add up and subtract.
type histSnap struct {
	b   []int64
	n   int64
	max time.Duration
}

// count is how many records the histogram holds.
func (h *hist) count() int64 {
	var n int64
	for i := range h.b {
		n += h.b[i].Load()
	}
	return n
}

func (h *hist) snapshot() histSnap {
	s := histSnap{b: make([]int64, histBuckets), max: time.Duration(h.max.Load())}
	for i := range s.b {
		s.b[i] = h.b[i].Load()
		s.n += s.b[i]
	}
	return s
}

func (s *histSnap) add(o histSnap) {
	if s.b == nil {
		s.b = make([]int64, histBuckets)
	}
	for i, v := range o.b {
		s.b[i] += v
	}
	s.n += o.n
	s.max = max(s.max, o.max)
}

// since is what was recorded after old: the counts of a window. Its max is
// the largest bucket's bound (the exact maximum of a window is not kept),
// at most the histogram's maximum.
func (s histSnap) since(old histSnap) histSnap {
	if old.b == nil {
		return s
	}
	d := histSnap{b: make([]int64, histBuckets), n: s.n - old.n}
	top := -1
	for i := range s.b {
		d.b[i] = s.b[i] - old.b[i]
		if d.b[i] > 0 {
			top = i
		}
	}
	if top >= 0 {
		d.max = min(histUpper(top), s.max)
	}
	return d
}

// quantile is the upper bound of the bucket that holds quantile q (at most
// the maximum), 0 for an empty histogram.
func (s histSnap) quantile(q float64) time.Duration {
	if s.n <= 0 {
		return 0
	}
	rank := int64(q*float64(s.n) + 0.5)
	rank = min(max(rank, 1), s.n)
	var seen int64
	for i, v := range s.b {
		seen += v
		if seen >= rank {
			return min(histUpper(i), s.max)
		}
	}
	return s.max
}

func (s histSnap) percentiles() actors.Percentiles {
	if s.n <= 0 {
		return actors.Percentiles{}
	}
	return actors.Percentiles{Count: s.n, P50: s.quantile(0.50), P95: s.quantile(0.95), P99: s.quantile(0.99), Max: s.max}
}

// instLatency is what one instance measured; it outlives restarts (as the
// record counters do), so the statistics of a job cover every generation.
type instLatency struct {
	queue, proc, e2e hist         // of the batches timed (Config.LatencyEvery)
	busy             atomic.Int64 // nanoseconds spent handling the batches timed
	records          atomic.Int64 // records handled (a source's: read), timed or not
	offered          atomic.Int64 // a source's: records read, before LatencyTarget shed any
	blocked          atomic.Int64 // nanoseconds without credit to send, in episodes that ended
	blockedSince     atomic.Int64 // the start of the episode going on (unix ns), 0: none
	lastBorn         atomic.Int64 // a source's: the ingestion time of the latest batch read (unix ns)
	shed             [numShedReasons]atomic.Int64
}

// Reasons a LatencyTarget shed records for.
const (
	shedSampled    = iota // kept each record with the sample rate
	shedDropped           // dropped whole batches (the operators downstream must not see sampled input)
	numShedReasons        //
)

var shedReasonNames = [numShedReasons]string{"latency-sampled", "latency-dropped"}

// handledBusy is the records the instance handled (after the mailbox's
// shedding) and the time it spent on them: the time spent on the records
// timed (the processing histogram's count), scaled to all (one batch in
// Config.LatencyEvery is timed; every one under a LatencyTarget, whose
// controller divides the two).
func (l *instLatency) handledBusy(timed int64) (int64, time.Duration) {
	handled, busy := l.records.Load(), l.busy.Load()
	if timed > 0 && handled > timed {
		busy = int64(float64(busy) * float64(handled) / float64(timed))
	}
	return handled, time.Duration(busy)
}

// latencySnap is an instant's copy of what the instances of a task measured.
type latencySnap struct {
	queue, proc, e2e histSnap
	busy             time.Duration
	handled, offered int64
	blocked          time.Duration
	shed             [numShedReasons]int64
}

func (l *instLatency) snapshot(now time.Time) latencySnap {
	s := latencySnap{queue: l.queue.snapshot(), proc: l.proc.snapshot(), e2e: l.e2e.snapshot(),
		offered: l.offered.Load(), blocked: time.Duration(l.blocked.Load())}
	s.handled, s.busy = l.handledBusy(s.proc.n)
	if since := l.blockedSince.Load(); since != 0 {
		s.blocked += max(0, now.Sub(time.Unix(0, since)))
	}
	for i := range s.shed {
		s.shed[i] = l.shed[i].Load()
	}
	return s
}

func (s *latencySnap) add(o latencySnap) {
	s.queue.add(o.queue)
	s.proc.add(o.proc)
	s.e2e.add(o.e2e)
	s.busy += o.busy
	s.handled += o.handled
	s.offered += o.offered
	s.blocked += o.blocked
	for i := range s.shed {
		s.shed[i] += o.shed[i]
	}
}

func (s latencySnap) since(old latencySnap) latencySnap {
	d := latencySnap{queue: s.queue.since(old.queue), proc: s.proc.since(old.proc), e2e: s.e2e.since(old.e2e),
		busy: s.busy - old.busy, handled: s.handled - old.handled, offered: s.offered - old.offered,
		blocked: s.blocked - old.blocked}
	for i := range s.shed {
		d.shed[i] = s.shed[i] - old.shed[i]
	}
	return d
}

func (s latencySnap) stats() actors.LatencyStats {
	return actors.LatencyStats{QueueWait: s.queue.percentiles(), Processing: s.proc.percentiles(), EndToEnd: s.e2e.percentiles()}
}

// taskLatency sums the task's instances' measurements now: those of
// this process, and what the instances in others reported (every
// generation's latest report, as the record counters).
func (x *execution) taskLatency(task int) latencySnap {
	x.statsMu.Lock()
	defer x.statsMu.Unlock()
	return x.taskLatencyLocked(task)
}

// taskLatencyLocked is taskLatency with statsMu held.
func (x *execution) taskLatencyLocked(task int) latencySnap {
	var s latencySnap
	if task < len(x.lats) {
		now := x.topo.Config().Now()
		for _, l := range x.lats[task] {
			s.add(l.snapshot(now))
		}
	}
	for k, r := range x.remoteLat {
		if k.task == task {
			s.add(r)
		}
	}
	return s
}

// toWire is the histogram's sparse form, to report to the job actor from
// another process.
func (s histSnap) toWire() wire.Hist {
	h := wire.Hist{N: s.n, Max: int64(s.max)}
	for i, v := range s.b {
		if v != 0 {
			h.Index = append(h.Index, int32(i))
			h.Count = append(h.Count, v)
		}
	}
	return h
}

// histFromWire checks and expands a histogram another process reported.
func histFromWire(h wire.Hist) (histSnap, error) {
	if len(h.Index) != len(h.Count) || len(h.Index) > histBuckets {
		return histSnap{}, fmt.Errorf("%d bucket indices, %d counts", len(h.Index), len(h.Count))
	}
	s := histSnap{b: make([]int64, histBuckets), n: h.N, max: time.Duration(h.Max)}
	var sum int64
	for i, idx := range h.Index {
		c := h.Count[i]
		if idx < 0 || int(idx) >= histBuckets || c < 0 || c > math.MaxInt64-sum {
			return histSnap{}, fmt.Errorf("bucket %d count %d: out of range", idx, c)
		}
		s.b[idx] += c
		sum += c
	}
	if sum != h.N || h.Max < 0 {
		return histSnap{}, fmt.Errorf("%d records in the buckets, %d said, max %d", sum, h.N, h.Max)
	}
	return s, nil
}

// toWire is what l measured, to report from another process.
func (l *instLatency) toWire(now time.Time) *wire.Latency {
	s := l.snapshot(now)
	w := &wire.Latency{Queue: s.queue.toWire(), Proc: s.proc.toWire(), EndToEnd: s.e2e.toWire(),
		Busy: int64(s.busy), Handled: s.handled, Offered: s.offered, LastBorn: l.lastBorn.Load(), Shed: s.shed[:]}
	return w
}

// latencyFromWire checks and expands what another process reported.
func latencyFromWire(w *wire.Latency) (latencySnap, error) {
	var s latencySnap
	var err error
	for _, h := range []struct {
		name string
		in   wire.Hist
		out  *histSnap
	}{{"queue wait", w.Queue, &s.queue}, {"processing", w.Proc, &s.proc}, {"end to end", w.EndToEnd, &s.e2e}} {
		if *h.out, err = histFromWire(h.in); err != nil {
			return latencySnap{}, fmt.Errorf("%s: %w", h.name, err)
		}
	}
	if w.Busy < 0 || w.Handled < 0 || w.Offered < 0 || w.LastBorn < 0 || len(w.Shed) > numShedReasons {
		return latencySnap{}, fmt.Errorf("busy %d, handled %d, offered %d, born %d, %d shed reasons: out of range", w.Busy, w.Handled, w.Offered, w.LastBorn, len(w.Shed))
	}
	s.busy, s.handled, s.offered = time.Duration(w.Busy), w.Handled, w.Offered
	for i, n := range w.Shed {
		if n < 0 {
			return latencySnap{}, fmt.Errorf("shed %d: negative", n)
		}
		s.shed[i] = n
	}
	return s, nil
}
