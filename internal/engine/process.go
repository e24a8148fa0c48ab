package engine

import (
	"math"
	"reflect"
)

// Process runs onRecord for every record of a keyed stream, with the
// record's key and that key's state, and onTimer for every event-time timer
// that comes due (as Flink's KeyedProcessFunction). Both emit results
// through the context. State and timers are checkpointed. At the end of the
// input every timer still set fires, in time order. onTimer may be nil when
// no timers are set.
func Process[K comparable, T, S, O any](ks KeyedStream[K, T], name string, onRecord func(c *ProcessContext[K, S, O], v T), onTimer func(c *ProcessContext[K, S, O]), opts ...Option) Stream[O] {
	t := topoOf(ks.n)
	if t == nil {
		t = orphan(name)
	}
	nd := &node{name: name, kind: "process", role: roleOperator, stateful: true, timed: true,
		inType: typeOf[T](), outType: typeOf[O](), stateTypes: []reflect.Type{typeOf[K](), typeOf[S]()}}
	if onRecord == nil {
		t.errs = append(t.errs, opErr(t, name, KindInvalid, "nil function"))
	}
	key := ks.key
	nd.newStage = func(next any, sc *stageCtx) any {
		core := &procCore[K, S, O]{onTimer: onTimer, wm: math.MinInt64, state: make(map[K]*S),
			timerSet: make(map[timerID[K]]struct{}), ptimers: make(map[timerID[K]]struct{}), out: newOutBuf(next.(pusher[O]), sc), next: next.(pusher[O]), sc: sc}
		return &processStage[K, T, S, O]{procCore: core, key: key, onRecord: onRecord}
	}
	setTypedPlumbing[O](nd)
	setInlet[T](nd)
	return Stream[O]{t.add(nd, []*node{ks.n}, opts)}
}
