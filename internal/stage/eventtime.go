package stage

import (
	"fmt"
	"math"
	"time"
)

type TimestampStage[T any] struct {
	f     func(T) time.Time
	bound int64
	max   int64 // the largest event time seen
	sent  int64 // the last watermark generated
	next  Pusher[T]
	sc    *Ctx
	ts    []int64
}

func (s *TimestampStage[T]) Push(b *Batch[T]) {
	defer s.sc.attribute()
	n := len(b.Vs)
	s.sc.C.In.Add(int64(n))
	if cap(s.ts) < n {
		s.ts = make([]int64, n, max(n, s.sc.BatchSize))
	}
	ts := s.ts[:n]
	s.max = stampInto(s.f, b.Vs, ts, s.max)
	// The times' array is the stage's, used again for the next batch: the
	// batch is not the next stage's to keep.
	b.Ts, b.Own = ts, false
	if end := s.sc.Pass(b.Tr, b.Ts); end != nil { // with the times it gave
		defer end()
	}
	s.sc.C.Out.Add(int64(n))
	s.next.Push(b)
	if wm := s.max - s.bound - 1; wm > s.sent && s.max != math.MinInt64 {
		s.sent = wm
		s.next.Watermark(wm)
	}
}

func stampInto[T any](f func(T) time.Time, vs []T, ts []int64, hi int64) int64 {
	for i, v := range vs {
		t := f(v).UnixNano()
		ts[i] = t
		hi = max(hi, t)
	}
	return hi
}

// watermark: Timestamps replaces the watermarks of its input with its own.
func (s *TimestampStage[T]) Watermark(int64) {}

func (s *TimestampStage[T]) Finish() { s.next.Finish() }

// ---- windows ----

type windowKind uint8

const (
	tumbling windowKind = iota + 1
	sliding
	sessions
)

// Windows says how a windowed operator groups records in time: Tumbling,
// Sliding or Sessions, in event time unless ProcessingTime says otherwise.
// Windows are aligned to the Unix epoch: a tumbling window of size S holds
// [k·S, (k+1)·S), a sliding window of size S and slide P holds
// [k·P, k·P+S).
type Windows struct {
	kind  windowKind
	size  time.Duration
	slide time.Duration
	gap   time.Duration
	proc  bool
}

// Tumbling windows of the given size: every record belongs to exactly one.
func Tumbling(size time.Duration) Windows { return Windows{kind: tumbling, size: size, slide: size} }

// Sliding windows of the given size that start every slide: a record
// belongs to size/slide of them.
func Sliding(size, slide time.Duration) Windows {
	return Windows{kind: sliding, size: size, slide: slide}
}

// Sessions groups the records of a key into sessions that close after gap
// without a record: a session holds [first, last+gap).
func Sessions(gap time.Duration) Windows { return Windows{kind: sessions, gap: gap} }

// ProcessingTime makes the windows follow the clock of the machine instead
// of the records' event time: a record belongs to the window of the moment
// it is handled, and a window fires when the clock passes its end.
func (w Windows) ProcessingTime() Windows { w.proc = true; return w }

func (w Windows) String() string {
	var s string
	switch w.kind {
	case tumbling:
		s = fmt.Sprintf("tumbling(%v)", w.size)
	case sliding:
		s = fmt.Sprintf("sliding(%v every %v)", w.size, w.slide)
	case sessions:
		s = fmt.Sprintf("sessions(gap %v)", w.gap)
	default:
		return "no windows"
	}
	if w.proc {
		s += " in processing time"
	}
	return s
}

func (w Windows) Validate() error {
	switch w.kind {
	case tumbling:
		if w.size <= 0 {
			return fmt.Errorf("%v: the size must be positive", w)
		}
	case sliding:
		if w.size <= 0 || w.slide <= 0 {
			return fmt.Errorf("%v: size and slide must be positive", w)
		}
	case sessions:
		if w.gap <= 0 {
			return fmt.Errorf("%v: the gap must be positive", w)
		}
		if w.proc {
			return fmt.Errorf("%v: session windows are in event time only", w)
		}
	default:
		return fmt.Errorf("no windows given (use Tumbling, Sliding or Sessions)")
	}
	return nil
}

// floorDiv is floor(a / b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// ---- a min-heap of times with a payload ----

type timed[V any] struct {
	at int64
	v  V
}

type timeHeap[V any] []timed[V]

func (h timeHeap[V]) Len() int { return len(h) }

// add schedules v at at. The heap is typed (container/heap would box every
// entry into an interface: an allocation per timer, and a session window
// sets two per record).
func (h *timeHeap[V]) add(at int64, v V) {
	*h = append(*h, timed[V]{at, v})
	a := *h
	i := len(a) - 1
	for i > 0 {
		p := (i - 1) / 2
		if a[p].at <= a[i].at {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
}

// due pops the entry with the earliest time if it is at or before t.
func (h *timeHeap[V]) due(t int64) (timed[V], bool) {
	a := *h
	if len(a) == 0 || a[0].at > t {
		return timed[V]{}, false
	}
	top := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a[n] = timed[V]{} // let go of what V holds
	a = a[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && a[r].at < a[l].at {
			m = r
		}
		if a[i].at <= a[m].at {
			break
		}
		a[i], a[m] = a[m], a[i]
		i = m
	}
	*h = a
	return top, true
}

// OutBuf collects the outputs of a stage that emits at its own pace
// (windows, joins, Process) with their event times, and hands them to the
// next stage a Batch at a time. An output without an event time
// (math.MinInt64) makes its Batch carry none.
type OutBuf[O any] struct {
	b       Batch[O]
	untimed bool
	next    Pusher[O]
	sc      *Ctx
	// cur, when set, is the sampled record (or result) whose handling
	// adds outputs now: they stay in its trace.
	cur *Mark
}

func NewOutBuf[O any](next Pusher[O], sc *Ctx) OutBuf[O] { return OutBuf[O]{next: next, sc: sc} }

func (o *OutBuf[O]) add(v O, at int64) {
	if o.cur != nil {
		m := *o.cur
		m.I = int32(len(o.b.Vs))
		o.b.Tr = append(o.b.Tr, m)
	}
	o.b.Vs = append(o.b.Vs, v)
	o.b.Ts = append(o.b.Ts, at)
	if at == math.MinInt64 {
		o.untimed = true
	}
	if len(o.b.Vs) >= o.sc.BatchSize {
		o.flush()
	}
}

func (o *OutBuf[O]) flush() {
	if len(o.b.Vs) == 0 {
		return
	}
	if o.untimed {
		o.b.Ts = nil
	}
	o.sc.C.Out.Add(int64(len(o.b.Vs)))
	o.next.Push(&o.b)
	o.b.Vs, o.b.Ts, o.b.Tr, o.untimed = o.b.Vs[:0], o.b.Ts[:0], nil, false
}
