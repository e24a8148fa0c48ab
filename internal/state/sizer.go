package state

import (
	"math/bits"
	"reflect"
	"unsafe"
)

// The disk table's cache counts each entry at the bytes it takes in the
// Go heap: its slot in the cache's map (slotBytes) and what its key and
// value point to (a sizer of their types, built once per table). The
// number is stored in the entry when it is put or loaded, so removing it
// subtracts what was added whatever the stage did to a pointer value since
// (a stage gets a pointer, changes what it points to and puts it again:
// the Put measures it anew).

// slotBytes is the bytes a cached entry's slot takes at most: the key,
// the entry and a control byte, at the map's worst (a Go map fills its
// groups to 7/8 and doubles: up to 16/7 slots an entry). The cache is
// cleared whole when it is over its budget (Disk.maybeEvict), so the map
// holds no deleted slots: deleting entries one by one from a full Go map
// leaves tombstones that take the place of empty slots, and a cache kept
// at its size that way grew to about 180 bytes an int64 entry of 32,
// against the 80 of a map cleared whole (measured, Go 1.26).
func slotBytes[K comparable, V any]() int64 {
	return (int64(unsafe.Sizeof(*new(K))) + int64(unsafe.Sizeof(entry[V]{})) + 1) * 16 / 7
}

// A sizer gives the heap bytes a value of its type at p points to (not
// its own bytes, which are counted where it is held): the allocations of
// its strings, slices (their capacity), maps and pointers, followed
// through. A type that points to nothing (numbers, structs and arrays of
// them) has a nil sizer: its entries cost their slot alone, measured
// once. A slice or array of more than sampleN elements that point to
// something is measured on sampleN of them, evenly spread, scaled to its
// length (a join's buffer of records with strings costs a Put that much,
// not a walk of every record); a map's entries likewise, the first sampleN
// its iteration yields. Values pointed to twice are counted twice (an
// overestimate); a cycle is followed to maxDepth pointers (the codec
// cannot write a cyclic value either).
type sizer func(p unsafe.Pointer, depth int) int64

const (
	sampleN  = 64
	maxDepth = 1 << 12
)

// sizers builds the sizers of a table's types (the map breaks the
// recursion of a recursive type and keeps an interface's dynamic types).
type sizers map[reflect.Type]*sizer

// sizerOf is the sizer of values of t (nil: t points to nothing).
func (ss sizers) sizerOf(t reflect.Type) sizer {
	if !hasPointers(t) {
		return nil
	}
	if s, ok := ss[t]; ok {
		if *s != nil {
			return *s
		}
		// t is being built: a recursive type refers to itself.
		return func(p unsafe.Pointer, d int) int64 { return (*s)(p, d) }
	}
	slot := new(sizer)
	ss[t] = slot
	*slot = ss.build(t)
	return *slot
}

func (ss sizers) build(t reflect.Type) sizer {
	switch t.Kind() {
	case reflect.String:
		return func(p unsafe.Pointer, _ int) int64 { return allocBytes(int64(len(*(*string)(p)))) }
	case reflect.Pointer:
		es, n := ss.sizerOf(t.Elem()), t.Elem().Size()
		return func(p unsafe.Pointer, d int) int64 { return pointee(es, n, *(*unsafe.Pointer)(p), d) }
	case reflect.Slice:
		es, n := ss.sizerOf(t.Elem()), t.Elem().Size()
		return func(p unsafe.Pointer, d int) int64 { return sliceBytes(es, n, *(*sliceHeader)(p), d) }
	case reflect.Array:
		es, n := ss.sizerOf(t.Elem()), t.Elem().Size()
		l := t.Len()
		return func(p unsafe.Pointer, d int) int64 { return elems(es, p, n, l, d) }
	case reflect.Struct:
		type field struct {
			off uintptr
			s   sizer
		}
		var fs []field
		for i := range t.NumField() {
			f := t.Field(i)
			if s := ss.sizerOf(f.Type); s != nil {
				fs = append(fs, field{f.Offset, s})
			}
		}
		return func(p unsafe.Pointer, d int) int64 {
			var b int64
			for _, f := range fs {
				b += f.s(unsafe.Add(p, f.off), d)
			}
			return b
		}
	case reflect.Map:
		return ss.mapSizer(t)
	case reflect.Interface:
		return func(p unsafe.Pointer, d int) int64 {
			v := reflect.NewAt(t, p).Elem()
			if v.IsNil() || d >= maxDepth {
				return 0
			}
			dt := v.Elem().Type()
			s := ss.sizerOf(dt)
			data := (*[2]unsafe.Pointer)(p)[1]
			if directIface(dt) {
				// The interface's data word is the value (a pointer).
				if s == nil {
					return 0
				}
				return s(unsafe.Pointer(&data), d)
			}
			b := allocBytes(int64(dt.Size()))
			if s != nil {
				b += s(data, d+1)
			}
			return b
		}
	}
	return nil // channels, functions, unsafe pointers: not state
}

// mapSizer measures a map: its slots (as slotBytes counts them) and
// header, and what its keys and values point to.
func (ss sizers) mapSizer(t reflect.Type) sizer {
	kt, vt := t.Key(), t.Elem()
	ks, vs := ss.sizerOf(kt), ss.sizerOf(vt)
	slot := (int64(kt.Size()+vt.Size()) + 1) * 16 / 7
	return func(p unsafe.Pointer, d int) int64 {
		m := reflect.NewAt(t, p).Elem()
		if m.IsNil() || d >= maxDepth {
			return 0
		}
		n := int64(m.Len())
		b := 64 + n*slot
		if (ks == nil && vs == nil) || n == 0 {
			return b
		}
		k, v := reflect.New(kt).Elem(), reflect.New(vt).Elem()
		var sum, seen int64
		for it := m.MapRange(); seen < sampleN && it.Next(); seen++ {
			if ks != nil {
				k.SetIterKey(it)
				sum += ks(k.Addr().UnsafePointer(), d+1)
			}
			if vs != nil {
				v.SetIterValue(it)
				sum += vs(v.Addr().UnsafePointer(), d+1)
			}
		}
		return b + sum*n/max(seen, 1)
	}
}

type sliceHeader struct {
	data     unsafe.Pointer
	len, cap int
}

// elems measures n elements of size sz from p (all, or sampleN of them
// scaled to n).
func elems(es sizer, p unsafe.Pointer, sz uintptr, n, d int) int64 {
	if es == nil || n == 0 {
		return 0
	}
	if n <= sampleN {
		var b int64
		for i := range n {
			b += es(unsafe.Add(p, uintptr(i)*sz), d)
		}
		return b
	}
	var b int64
	for i := range sampleN {
		b += es(unsafe.Add(p, uintptr(i*n/sampleN)*sz), d)
	}
	return b * int64(n) / sampleN
}

// allocBytes is the heap bytes an allocation of n bytes takes: rounded
// up to the allocator's size classes (at most an eighth more than n,
// above 16 bytes; 8-byte steps below).
func allocBytes(n int64) int64 {
	if n <= 16 {
		return (n + 7) &^ 7
	}
	step := int64(1) << max(bits.Len64(uint64(n-1))-3, 4)
	return (n + step - 1) &^ (step - 1)
}

// hasPointers says whether values of t point to anything.
func hasPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.String, reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
		return true
	case reflect.Array:
		return t.Len() > 0 && hasPointers(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if hasPointers(t.Field(i).Type) {
				return true
			}
		}
	}
	return false // numbers, booleans; channels, functions, unsafe pointers (not state)
}

// directIface says whether an interface holds a value of t in its data
// word (a pointer-shaped type) instead of pointing to a copy.
func directIface(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return true
	case reflect.Struct:
		return t.NumField() == 1 && directIface(t.Field(0).Type)
	case reflect.Array:
		return t.Len() == 1 && directIface(t.Elem())
	}
	return false
}

// pointee measures the allocation q points to, of n bytes, and what
// it points to (es).
func pointee(es sizer, n uintptr, q unsafe.Pointer, d int) int64 {
	if q == nil || d >= maxDepth {
		return 0
	}
	b := allocBytes(int64(n))
	if es != nil {
		b += es(q, d+1)
	}
	return b
}

// sliceBytes measures a slice's array (its capacity of n-byte elements)
// and what its elements point to (es).
func sliceBytes(es sizer, n uintptr, h sliceHeader, d int) int64 {
	if h.data == nil || d >= maxDepth {
		return 0
	}
	return allocBytes(int64(h.cap)*int64(n)) + elems(es, h.data, n, h.len, d+1)
}

// top measures a table's keys or values (of type T) where they are: a
// pointer, a slice or a string is read in place, so that measuring the
// key or value of a Get or Put moves neither to the heap (a sizer is
// called through a function value: escape analysis takes what it is
// given as escaping); any other type that points to something is copied
// to the heap to be measured (a struct of strings as a key, a map).
type top[T any] struct {
	kind reflect.Kind // reflect.Invalid: T points to nothing
	es   sizer        // a pointer's pointee's, a slice's elements'
	n    uintptr      // their size
	s    sizer        // the other kinds': the value's
}

func newTop[T any](ss sizers) top[T] {
	t := reflect.TypeFor[T]()
	if !hasPointers(t) {
		return top[T]{}
	}
	switch k := t.Kind(); k {
	case reflect.Pointer, reflect.Slice:
		return top[T]{kind: k, es: ss.sizerOf(t.Elem()), n: t.Elem().Size()}
	case reflect.String:
		return top[T]{kind: k}
	default:
		return top[T]{kind: k, s: ss.sizerOf(t)}
	}
}

// heap is the heap bytes *v points to.
func (t *top[T]) heap(v *T) int64 {
	switch t.kind {
	case reflect.Invalid:
		return 0
	case reflect.Pointer:
		return pointee(t.es, t.n, *(*unsafe.Pointer)(unsafe.Pointer(v)), 0)
	case reflect.Slice:
		return sliceBytes(t.es, t.n, *(*sliceHeader)(unsafe.Pointer(v)), 0)
	case reflect.String:
		return allocBytes(int64(len(*(*string)(unsafe.Pointer(v)))))
	}
	c := new(T)
	*c = *v
	return t.s(unsafe.Pointer(c), 0)
}
