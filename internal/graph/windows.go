package graph

import (
	"fmt"
	"math"
	"reflect"
	"time"

	"github.com/sluicehq/sluice/internal/stage"
)

// WindowAggregate folds the records of each key and window into an
// accumulator that starts as zero() and is updated with add, and emits one
// Windowed result per key and window when the window closes: in event
// time when the watermark passes its end (and again for each record that
// arrives within AllowedLateness), in processing time when the clock does.
// At the end of the input every open window fires. Session windows merge,
// so they need merge to combine two accumulators; it may be nil for the
// other windows. Window state is part of checkpoints.
func WindowAggregate[K comparable, T, A, O any](ks KeyedStream[K, T], name string, w Windows, zero func() A, add func(A, T) A, merge func(A, A) A, win Result[K, A, O], opts ...Option) Stream[O] {
	nd := windowed(ks, name, "window", w, zero == nil || add == nil, stage.WinFns[K, T, A, O]{
		Zero: zero, Add: add, Merge: merge,
		Emit: func(k K, start, end int64, acc A, out func(O)) {
			out(win(k, time.Unix(0, start).UTC(), time.Unix(0, end).UTC(), acc))
		},
	}, opts)
	if w.IsSessions() && merge == nil && zero != nil {
		nd.topo.errs = append(nd.topo.errs, opErr(nd.topo, name, KindInvalid, "session windows merge: WindowAggregate needs a merge function"))
	}
	return Stream[O]{nd}
}

// WindowCount counts the records of each key in each window.
func WindowCount[K comparable, T, O any](ks KeyedStream[K, T], name string, w Windows, win Result[K, int64, O], opts ...Option) Stream[O] {
	return Stream[O]{windowed(ks, name, "window-count", w, false, stage.WinFns[K, T, int64, O]{
		Zero:  func() int64 { return 0 },
		Add:   func(n int64, _ T) int64 { return n + 1 },
		Merge: func(a, b int64) int64 { return a + b },
		Emit: func(k K, start, end int64, n int64, out func(O)) {
			out(win(k, time.Unix(0, start).UTC(), time.Unix(0, end).UTC(), n))
		},
	}, opts)}
}

// WindowReduce combines the records of each key in each window with f,
// starting from the window's first record.
func WindowReduce[K comparable, T, O any](ks KeyedStream[K, T], name string, w Windows, f func(a, b T) T, win Result[K, T, O], opts ...Option) Stream[O] {
	return Stream[O]{windowed(ks, name, "window-reduce", w, f == nil, stage.WinFns[K, T, stage.Reduced[T], O]{
		Zero: func() stage.Reduced[T] { return stage.Reduced[T]{} },
		Add: func(acc stage.Reduced[T], v T) stage.Reduced[T] {
			if !acc.Set {
				return stage.Reduced[T]{V: v, Set: true}
			}
			return stage.Reduced[T]{V: f(acc.V, v), Set: true}
		},
		Merge: func(a, b stage.Reduced[T]) stage.Reduced[T] {
			switch {
			case !a.Set:
				return b
			case !b.Set:
				return a
			}
			return stage.Reduced[T]{V: f(a.V, b.V), Set: true}
		},
		Emit: func(k K, start, end int64, acc stage.Reduced[T], out func(O)) {
			out(win(k, time.Unix(0, start).UTC(), time.Unix(0, end).UTC(), acc.V))
		},
	}, opts)}
}

// Result makes the result of a key's window [start, end) whose value is v.
type Result[K comparable, V, O any] func(k K, start, end time.Time, v V) O

// windowed adds a windowed operator over a keyed stream.
func windowed[K comparable, T, A, O any](ks KeyedStream[K, T], name, kind string, w Windows, nilFunc bool, fns stage.WinFns[K, T, A, O], opts []Option) *Node {
	return windowedCtx(ks, name, kind, w, nilFunc, func(*stage.Ctx) stage.WinFns[K, T, A, O] { return fns }, opts)
}

// windowedCtx is windowed with functions made for each instance, from its
// stage context.
func windowedCtx[K comparable, T, A, O any](ks KeyedStream[K, T], name, kind string, w Windows, nilFunc bool, mk func(*stage.Ctx) stage.WinFns[K, T, A, O], opts []Option) *Node {
	t := topoOf(ks.n)
	if t == nil {
		t = orphan(name)
	}
	nd := &Node{name: name, kind: kind, role: roleOperator, stateful: true, timed: true, needsTime: !w.InProcessingTime(),
		inType: typeOf[T](), outType: typeOf[O](), stateTypes: []reflect.Type{typeOf[K](), typeOf[A]()}}
	if nilFunc {
		t.errs = append(t.errs, opErr(t, name, KindInvalid, "nil function"))
	}
	if err := w.Validate(); err != nil {
		t.errs = append(t.errs, opErr(t, name, KindInvalid, err.Error()))
	}
	nd.newStage = func(next any, sc *stage.Ctx) any {
		fns := mk(sc)
		fns.Key = ks.key
		return stage.NewWinStage(fns, w, nd.lateness, next.(stage.Pusher[O]), sc)
	}
	setTypedPlumbing[O](nd)
	setInlet[T](nd)
	nd.newLateEmitter = func(outs []stage.Output, size int, s stage.Sender) (any, stage.Flusher) {
		e := stage.NewEmitter[T](outs, size, s)
		return e, e
	}
	t.add(nd, []*Node{ks.n}, opts)
	return nd
}

// LateRecords is the stream of the records of ks that the windowed
// aggregation w over ks found late (a side output): those that arrived
// after every window they belong to had closed, past the allowed lateness.
// They keep their event times. The operator it adds, named name, runs with
// w's parallelism.
func LateRecords[K comparable, T, R any](ks KeyedStream[K, T], w Stream[R], name string) Stream[T] {
	t := topoOf(ks.n, w.n)
	if t == nil {
		t = orphan(name)
	}
	nd := &Node{name: name, kind: "late", role: roleOperator, side: true, noFusion: true, timed: true,
		inType: typeOf[T](), outType: typeOf[T]()}
	switch win := w.n; {
	case win == nil || ks.n == nil:
		t.errs = append(t.errs, opErr(t, name, KindUnconnected, "LateRecords of a zero stream"))
		return Stream[T]{t.add(nd, nil, nil)}
	case win.kind != "window" && win.kind != "window-count" && win.kind != "window-reduce":
		t.errs = append(t.errs, opErr(t, name, KindInvalid, fmt.Sprintf("LateRecords: %q is a %s, not a windowed aggregation", win.name, win.kind)))
	case len(win.inputs) != 1 || win.inputs[0] != ks.n:
		t.errs = append(t.errs, opErr(t, name, KindInvalid, fmt.Sprintf("LateRecords: %q does not window %q", win.name, ks.n.name)))
	case win.lateNode != nil:
		t.errs = append(t.errs, opErr(t, name, KindInvalid, fmt.Sprintf("LateRecords: the late records of %q are taken by %q already", win.name, win.lateNode.name)))
	default:
		win.lateNode = nd
	}
	nd.newStage = func(next any, sc *stage.Ctx) any { return stage.NewMap(func(v T) T { return v }, next, sc) }
	setTypedPlumbing[T](nd)
	setInlet[T](nd)
	return Stream[T]{t.add(nd, []*Node{w.n}, nil)}
}

// LateNode is the node that takes the window's late records, nil when none.
func (n *Node) LateNode() *Node { return n.lateNode }

// Side says whether the node's input is the late records of a window.
func (n *Node) Side() bool { return n.side }

// NewLateEmitter builds the emitter of a window's late records.
func (n *Node) NewLateEmitter(outs []stage.Output, size int, s stage.Sender) (any, stage.Flusher) {
	return n.newLateEmitter(outs, size, s)
}

// Estimate is the state of an approximate sum (WindowEstimate): the
// Horvitz-Thompson estimate of the sum of the records' values, each
// divided by the probability it survived the load shedding upstream, and
// the estimate of its variance. Each record is weighted by its own keep
// probability (it travels with the record's batch), so a rate that changed
// within the window is accounted for record by record.
type Estimate struct {
	Seen    int64   // records the window saw
	Sum     float64 // Σ value/keep
	Var     float64 // Σ value²·(1−keep)/keep²
	Approx  bool    // a record had keep < 1
	Sampled float64 // Σ |value|/keep over the records with keep < 1
	Kept    int64   // records seen with keep < 1
	Raw     float64 // Σ value over the records seen
	Neg     bool    // a record's value was negative
	Max     float64 // the largest |value| seen
	// Unseen (set at emission by unseen, not kept in state) bounds at 95 %
	// how many of the key's records the window's shedding may have taken
	// when it kept none of the key's sampled ones: the interval's upper end
	// is raised by Unseen records of value Max (1 for a count).
	Unseen float64 `msgpack:"-"`
}

// unseen marks an estimate of a window that saw records sampled at rates
// down to keep (of any key): when none of this key's kept records was
// sampled, its records in the sampled part may all have been shed, so it
// is approximate and its upper bound grows by the number n of records
// that all go unkept with probability 5 % at least: (1 − keep)^n ≥ 0.05.
func (e Estimate) unseen(keep float64) Estimate {
	if e.Approx || keep <= 0 || keep >= 1 {
		return e
	}
	e.Approx = true
	e.Unseen = math.Log(0.05) / math.Log(1-keep)
	return e
}

// add is e with one record of value x kept with probability k.
func (e Estimate) add(x, k float64) Estimate {
	e.Seen++
	e.Sum += x / k
	e.Raw += x
	e.Neg = e.Neg || x < 0
	e.Max = max(e.Max, math.Abs(x))
	if k < 1 {
		e.Var += x * x * (1 - k) / (k * k)
		e.Sampled += math.Abs(x) / k
		e.Kept++
		e.Approx = true
	}
	return e
}

func (e Estimate) merge(b Estimate) Estimate {
	return Estimate{Seen: e.Seen + b.Seen, Sum: e.Sum + b.Sum, Var: e.Var + b.Var, Approx: e.Approx || b.Approx,
		Sampled: e.Sampled + b.Sampled, Kept: e.Kept + b.Kept, Raw: e.Raw + b.Raw, Neg: e.Neg || b.Neg, Max: max(e.Max, b.Max)}
}

// Interval is the interval [lo, hi] that holds the true sum with about the
// confidence of the normal quantile z (1.96: 95 %), or a little more.
//
// The Wald interval, Sum ± z·sqrt(Var), is too narrow when few sampled
// records were kept: its variance is estimated from the records kept, so a
// window that kept fewer than its share reports an estimate too low and a
// bound too tight together (at 30 records sampled at 10 % it holds the
// truth in 81 % of windows, not 95 %). For values that are not negative
// Interval is the score (Wilson) interval instead: with r = Var / Sampled,
// the variance per unit of the sampled part (for a count sampled at rate p,
// (1−p)/p), the variance at a true sum T is about r·T, and the interval is
// the T for which (Sum − T)² ≤ z²·r·T:
//
//	Sum + z²r/2 ± (z·sqrt(Var + z²r²/4) + c),
//
// widened by the continuity correction c, half the mean weight
// (Sampled / Kept) of a sampled record: the estimate moves in steps of a
// record's weight, and without it the interval falls short of its
// confidence where windows keep a few dozen records (94–95 % rather than
// 95–97 %). It is no lower than the sum of the values seen (unseen records
// add nothing negative). For values of both signs it is Wald's.
func (e Estimate) Interval(z float64) (lo, hi float64) {
	lo, hi = e.interval(z)
	if e.Unseen > 0 {
		per := e.Max
		if per == 0 {
			per = 1
		}
		hi += e.Unseen * per
	}
	return lo, hi
}

func (e Estimate) interval(z float64) (lo, hi float64) {
	if e.Var <= 0 {
		return e.Sum, e.Sum
	}
	if e.Neg || e.Sampled <= 0 || e.Kept <= 0 {
		h := z * math.Sqrt(e.Var)
		return e.Sum - h, e.Sum + h
	}
	r := e.Var / e.Sampled
	c := e.Sum + z*z*r/2
	h := z*math.Sqrt(e.Var+z*z*r*r/4) + e.Sampled/float64(e.Kept)/2
	return max(c-h, e.Raw), c + h
}

// WindowEstimate sums value over the records of each key in each window,
// scaled by the inverse of the probability that each record was kept by a
// LatencyTarget's sampling (1 when nothing was shed).
func WindowEstimate[K comparable, T, O any](ks KeyedStream[K, T], name string, w Windows, value func(T) float64, win Result[K, Estimate, O], opts ...Option) Stream[O] {
	return Stream[O]{windowedCtx(ks, name, "window-estimate", w, value == nil, func(sc *stage.Ctx) stage.WinFns[K, T, Estimate, O] {
		return stage.WinFns[K, T, Estimate, O]{
			Zero: func() Estimate { return Estimate{} },
			Add: func(e Estimate, v T) Estimate {
				return e.add(value(v), min(max(sc.KeepRate(), 1e-9), 1))
			},
			Merge: Estimate.merge,
			Shed:  Estimate.unseen,
			Emit: func(k K, start, end int64, e Estimate, out func(O)) {
				out(win(k, time.Unix(0, start).UTC(), time.Unix(0, end).UTC(), e))
			},
		}
	}, opts)}
}
