package graph

import (
	"fmt"
	"reflect"
	"time"

	"github.com/sluicehq/sluice/internal/stage"
)

// joinInputs tags, merges and partitions the two inputs of a join.
func joinInputs[K comparable, L, R any](left Stream[L], right Stream[R], name string, lkey func(L) K, rkey func(R) K) KeyedStream[K, Either[L, R]] {
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
// time.
func WindowJoin[K comparable, L, R, O any](left Stream[L], right Stream[R], name string, lkey func(L) K, rkey func(R) K, w Windows, join func(L, R) O, opts ...Option) Stream[O] {
	ks := joinInputs(left, right, name, lkey, rkey)
	nd := windowed(ks, name, "window-join", w, join == nil, stage.WinFns[K, Either[L, R], stage.WindowBuf[L, R], O]{
		Zero: func() stage.WindowBuf[L, R] { return stage.WindowBuf[L, R]{} },
		Add: func(b stage.WindowBuf[L, R], e Either[L, R]) stage.WindowBuf[L, R] {
			if e.Right {
				b.Rs = append(b.Rs, e.R)
			} else {
				b.Ls = append(b.Ls, e.L)
			}
			return b
		},
		Emit: func(_ K, _, _ int64, b stage.WindowBuf[L, R], out func(O)) {
			for _, l := range b.Ls {
				for _, r := range b.Rs {
					out(join(l, r))
				}
			}
		},
	}, opts)
	if w.IsSessions() {
		nd.topo.errs = append(nd.topo.errs, opErr(nd.topo, name, KindInvalid, "WindowJoin takes tumbling or sliding windows"))
	}
	if nd.lateness > 0 {
		nd.topo.errs = append(nd.topo.errs, opErr(nd.topo, name, KindInvalid, "WindowJoin: AllowedLateness would join late records twice; it is not supported"))
	}
	return Stream[O]{nd}
}

// IntervalJoin joins every left record l with every right record r of the
// same key whose event time lies in [l+lower, l+upper] (lower may be
// negative). Results come as soon as both records are there, with the later
// of the two event times. Records are kept only as long as a partner may
// still arrive: a left one until the watermark passes l+upper, a right one
// until it passes r-lower. A record at or behind the watermark when it
// arrives is late: counted (OperatorStats.Late) and dropped.
func IntervalJoin[K comparable, L, R, O any](left Stream[L], right Stream[R], name string, lkey func(L) K, rkey func(R) K, lower, upper time.Duration, join func(L, R) O, opts ...Option) Stream[O] {
	ks := joinInputs(left, right, name, lkey, rkey)
	t := ks.n.topo
	nd := &Node{name: name, kind: "interval-join", role: roleOperator, stateful: true, timed: true, needsTime: true,
		inType: typeOf[Either[L, R]](), outType: typeOf[O](), stateTypes: []reflect.Type{typeOf[K](), typeOf[L](), typeOf[R]()}}
	if join == nil {
		t.errs = append(t.errs, opErr(t, name, KindInvalid, "nil function"))
	}
	if lower > upper {
		t.errs = append(t.errs, opErr(t, name, KindInvalid, fmt.Sprintf("interval [%v, %v]: lower above upper", lower, upper)))
	}
	key := ks.key
	nd.newStage = func(next any, sc *stage.Ctx) any {
		return stage.NewIntervalJoin(key, join, int64(lower), int64(upper), next, sc)
	}
	setTypedPlumbing[O](nd)
	setInlet[Either[L, R]](nd)
	return Stream[O]{t.add(nd, []*Node{ks.n}, opts)}
}

// StateTTL makes a keyed operator (an aggregation, Process, Join) forget a
// key's state once the key has seen no record for d of processing time (as
// Flink's state TTL), so that its state stays bounded when keys stop
// appearing. See operators.StateTTL.
func StateTTL(d time.Duration) Option {
	return func(nd *Node) { nd.ttl = d }
}

// Join is the unbounded (regular) inner join of two keyed streams: every
// left record is joined with every right record of the same key that came
// before or comes after it, whatever their times; each pair is joined once.
// Its state grows with its inputs unless StateTTL bounds it. Results carry
// the event time of the record that completed the pair, when the inputs
// carry event times.
func Join[K comparable, L, R, O any](left Stream[L], right Stream[R], name string, lkey func(L) K, rkey func(R) K, join func(L, R) O, opts ...Option) Stream[O] {
	ks := joinInputs(left, right, name, lkey, rkey)
	t := ks.n.topo
	nd := &Node{name: name, kind: "join", role: roleOperator, stateful: true,
		inType: typeOf[Either[L, R]](), outType: typeOf[O](), stateTypes: []reflect.Type{typeOf[K](), typeOf[L](), typeOf[R]()}}
	if join == nil {
		t.errs = append(t.errs, opErr(t, name, KindInvalid, "nil function"))
	}
	key := ks.key
	nd.newStage = func(next any, sc *stage.Ctx) any {
		return stage.NewJoin(key, join, int64(nd.ttl), next, sc)
	}
	setTypedPlumbing[O](nd)
	setInlet[Either[L, R]](nd)
	t.add(nd, []*Node{ks.n}, opts)
	return Stream[O]{nd}
}
