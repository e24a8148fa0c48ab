package stage

import (
	"reflect"
	"sync"
	"sync/atomic"
)

// Arrays lends the record arrays of a job's batches back from where they
// end to where they begin: a sink that has written a batch it owns (one
// delivered to its instance, Batch.Own) and whose writer keeps no records
// (KeepsNoRecords) returns its array, and a source whose previous array
// was kept downstream takes one back instead of allocating a new one. A
// batch crosses a hop without a copy (the emitter ships the array it was
// given), so without this every batch a source reads costs an array that
// dies at the sink: a 2 KiB allocation per batch of int64, and the
// collector's work to reclaim it.
//
// An Arrays belongs to one job (execution) and is safe for concurrent use
// by its instances; the nil *Arrays lends nothing.
type Arrays struct {
	mu    sync.Mutex
	lists map[arraysKey]any // *freeArrays[T]
}

type arraysKey struct {
	t    reflect.Type
	size int
}

// keptArrays bounds the arrays a list keeps: a job's records in flight
// between its sources and sinks are bounded by the edges' credits (4096
// records, 16 batches, per edge by default); arrays returned beyond it
// are left to the collector.
const keptArrays = 64

// freeArrays are the returned arrays of one element type and capacity.
type freeArrays[T any] struct {
	list  freeList[[]T]
	clear bool // T holds pointers: a returned array is cleared (nothing kept alive)
	// wanted: a keyed stage read a batch it could have given back but for
	// its array's capacity; an emitter that partitions by key then makes
	// whole-batch arrays (Emitter.lent), which come back.
	wanted atomic.Bool
}

// freeList is a stack of values handed back for reuse (arrays, an
// emitter's envelopes), bounded by its callers; safe for concurrent use.
type freeList[E any] struct {
	mu   sync.Mutex
	free []E
}

// get is the last value put, or the zero E when there is none.
func (l *freeList[E]) get() E {
	l.mu.Lock()
	defer l.mu.Unlock()
	var zero E
	n := len(l.free)
	if n == 0 {
		return zero
	}
	e := l.free[n-1]
	l.free[n-1] = zero
	l.free = l.free[:n-1]
	return e
}

// put keeps e unless the list holds max values already.
func (l *freeList[E]) put(e E, max int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.free) < max {
		l.free = append(l.free, e)
	}
}

// arraysFor is the list of arrays of T of capacity size, made when create
// is set, else nil when no source made it.
func arraysFor[T any](a *Arrays, size int, create bool) *freeArrays[T] {
	if a == nil || size <= 0 {
		return nil
	}
	t := reflect.TypeFor[T]()
	k := arraysKey{t, size}
	a.mu.Lock()
	defer a.mu.Unlock()
	if l, ok := a.lists[k]; ok {
		return l.(*freeArrays[T])
	}
	if !create {
		return nil
	}
	if a.lists == nil {
		a.lists = map[arraysKey]any{}
	}
	l := &freeArrays[T]{clear: hasPointers(t)}
	a.lists[k] = l
	return l
}

// get is a returned array (length 0), or nil.
func (l *freeArrays[T]) get() []T { return l.list.get() }

// take is an array of n values: a returned one when it holds n and T
// holds no pointers (the caller overwrites all n), else a new one.
func (l *freeArrays[T]) take(n int) []T {
	if l != nil && !l.clear && n > 0 {
		if vs := l.get(); cap(vs) >= n {
			return vs[:n]
		} else if vs != nil {
			l.list.put(vs, keptArrays)
		}
	}
	return make([]T, n)
}

// put returns vs, whose array nobody reads or writes any more.
func (l *freeArrays[T]) put(vs []T) {
	vs = vs[:cap(vs)]
	if l.clear {
		clear(vs)
	}
	l.list.put(vs[:0], keptArrays)
}

// hasPointers says whether values of t hold pointers the collector
// follows.
func hasPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return false
	case reflect.Array:
		return t.Len() > 0 && hasPointers(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if hasPointers(t.Field(i).Type) {
				return true
			}
		}
		return false
	default:
		return true
	}
}

// KeepsNoRecords is implemented by a connector.Writer whose Write keeps
// neither the slice it is given nor its array once it returns (it copies
// what it keeps): a sink with such a writer returns the arrays of the
// batches it has written to its job's sources (Arrays).
type KeepsNoRecords interface{ KeepsNoRecords() }

// lender gives a keyed stage's input arrays back to its job (giveBack).
type lender[T any] struct {
	vs     *freeArrays[T]
	ts     *freeArrays[int64]
	looked bool
}

// giveBack returns the arrays of b, which the stage has read to its end
// and keeps nothing of (it copied the records it keeps), to the job's
// Arrays, where an emitter that partitions by key takes them up again
// (Emitter.lent). Only a batch the stage owns (Own), with arrays of a
// whole batch and no sampled records (whose spans may read the batch when
// the stage's Push returns), goes back; its Vs and Ts are nil after.
func (l *lender[T]) giveBack(sc *Ctx, b *Batch[T]) {
	if !b.Own || len(b.Tr) > 0 || sc.Tracer != nil || len(b.Vs) == 0 {
		return
	}
	if !l.looked {
		l.vs, l.ts, l.looked = arraysFor[T](sc.Arrays, sc.BatchSize, false), arraysFor[int64](sc.Arrays, sc.BatchSize, false), true
	}
	if l.vs == nil {
		return
	}
	if cap(b.Vs) != sc.BatchSize {
		if !l.vs.wanted.Load() {
			l.vs.wanted.Store(true)
		}
		return
	}
	l.vs.put(b.Vs)
	if l.ts != nil && cap(b.Ts) == sc.BatchSize {
		l.ts.put(b.Ts)
	}
	b.Vs, b.Ts = nil, nil
}
