package graph

import (
	"reflect"

	"github.com/sluicehq/sluice/internal/stage"
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
	nd := &Node{name: name, kind: "process", role: roleOperator, stateful: true, timed: true,
		inType: typeOf[T](), outType: typeOf[O](), stateTypes: []reflect.Type{typeOf[K](), typeOf[S]()}}
	if onRecord == nil {
		t.errs = append(t.errs, opErr(t, name, KindInvalid, "nil function"))
	}
	key := ks.key
	nd.newStage = func(next any, sc *stage.Ctx) any {
		return stage.NewProcess(key, onRecord, onTimer, next, sc)
	}
	setTypedPlumbing[O](nd)
	setInlet[T](nd)
	return Stream[O]{t.add(nd, []*Node{ks.n}, opts)}
}
