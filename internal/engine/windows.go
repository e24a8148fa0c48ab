package engine

import (
	"fmt"
	"reflect"
	"time"
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
	nd := windowed(ks, name, "window", w, zero == nil || add == nil, winFns[K, T, A, O]{
		zero: zero, add: add, merge: merge,
		emit: func(k K, start, end int64, acc A, out func(O)) {
			out(win(k, time.Unix(0, start).UTC(), time.Unix(0, end).UTC(), acc))
		},
	}, opts)
	if w.kind == sessions && merge == nil && zero != nil {
		nd.topo.errs = append(nd.topo.errs, opErr(nd.topo, name, KindInvalid, "session windows merge: WindowAggregate needs a merge function"))
	}
	return Stream[O]{nd}
}

// WindowCount counts the records of each key in each window.
func WindowCount[K comparable, T, O any](ks KeyedStream[K, T], name string, w Windows, win Result[K, int64, O], opts ...Option) Stream[O] {
	return Stream[O]{windowed(ks, name, "window-count", w, false, winFns[K, T, int64, O]{
		zero:  func() int64 { return 0 },
		add:   func(n int64, _ T) int64 { return n + 1 },
		merge: func(a, b int64) int64 { return a + b },
		emit: func(k K, start, end int64, n int64, out func(O)) {
			out(win(k, time.Unix(0, start).UTC(), time.Unix(0, end).UTC(), n))
		},
	}, opts)}
}

// WindowReduce combines the records of each key in each window with f,
// starting from the window's first record.
func WindowReduce[K comparable, T, O any](ks KeyedStream[K, T], name string, w Windows, f func(a, b T) T, win Result[K, T, O], opts ...Option) Stream[O] {
	return Stream[O]{windowed(ks, name, "window-reduce", w, f == nil, winFns[K, T, reduced[T], O]{
		zero: func() reduced[T] { return reduced[T]{} },
		add: func(acc reduced[T], v T) reduced[T] {
			if !acc.Set {
				return reduced[T]{v, true}
			}
			return reduced[T]{f(acc.V, v), true}
		},
		merge: func(a, b reduced[T]) reduced[T] {
			switch {
			case !a.Set:
				return b
			case !b.Set:
				return a
			}
			return reduced[T]{f(a.V, b.V), true}
		},
		emit: func(k K, start, end int64, acc reduced[T], out func(O)) {
			out(win(k, time.Unix(0, start).UTC(), time.Unix(0, end).UTC(), acc.V))
		},
	}, opts)}
}

// Result makes the result of a key's window [start, end) whose value is v.
type Result[K comparable, V, O any] func(k K, start, end time.Time, v V) O

// windowed adds a windowed operator over a keyed stream.
func windowed[K comparable, T, A, O any](ks KeyedStream[K, T], name, kind string, w Windows, nilFunc bool, fns winFns[K, T, A, O], opts []Option) *node {
	t := topoOf(ks.n)
	if t == nil {
		t = orphan(name)
	}
	nd := &node{name: name, kind: kind, role: roleOperator, stateful: true, timed: true, needsTime: !w.proc,
		inType: typeOf[T](), outType: typeOf[O](), stateTypes: []reflect.Type{typeOf[K](), typeOf[A]()}}
	if nilFunc {
		t.errs = append(t.errs, opErr(t, name, KindInvalid, "nil function"))
	}
	if err := w.validate(); err != nil {
		t.errs = append(t.errs, opErr(t, name, KindInvalid, err.Error()))
	}
	fns.key = ks.key
	nd.newStage = func(next any, sc *stageCtx) any {
		return newWinStage(fns, w, nd.lateness, nd.late, next.(pusher[O]), sc)
	}
	setTypedPlumbing[O](nd)
	setInlet[T](nd)
	t.add(nd, []*node{ks.n}, opts)
	checkLate[T](nd)
	return nd
}

// checkLate reports a LateTo sink of the wrong type.
func checkLate[T any](nd *node) {
	if nd.late == nil {
		return
	}
	if _, ok := nd.late.(SinkConnector[T]); !ok {
		nd.topo.errs = append(nd.topo.errs, opErr(nd.topo, nd.name, KindTypeMismatch,
			fmt.Sprintf("LateTo: the sink takes %T, the operator's input is %v", nd.late, typeOf[T]())))
	}
}
