package msgpacksafe

import (
	"encoding"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// kind says how msgpack decodes into a destination type, as far as the
// walk needs to know: what a value there allocates and what its parts
// decode into.
type kind uint8

const (
	kAny    kind = iota // an interface: msgpack's generic values
	kSkip               // a field msgpack does not know: skipped, nothing allocated
	kScalar             // bool, number: nothing allocated
	kString             // string: its bytes
	kBytes              // []byte: its bytes
	kSlice              // []T: count × size of T
	kArray              // [N]T: nothing beyond the destination
	kMap                // map[K]V: count × entry size
	kPtr                // *T: the T, when the value is not nil
	kStruct             // fields by name (a map) or in order (an array)
	kCustom             // a type with its own decoder (time.Time, Unmarshaler, ...)
)

// shape is what the walk knows about a destination type.
type shape struct {
	t    reflect.Type
	kind kind
	// elem is a slice's, array's, map's or pointer's element; key a map's key.
	elem, key *shape
	// size is the bytes one element of a slice or one entry of a map
	// allocates, or that a pointer allocates for its target.
	size int64
	// fields of a struct by msgpack name, and list in msgpack's order (the
	// array form).
	fields map[string]*field
	list   []*field
	// reach bounds what one element of anything reachable from this type
	// allocates: the cost assumed for a part the walk cannot place (an
	// unknown struct field, a custom decoder).
	reach int64
	// nilable: msgpack accepts nil for it without panicking.
	nilable bool
}

type field struct {
	name  string
	shape *shape
}

// Costs, measured against what msgpack v5.4.1 allocates (see
// TestEstimateMatchesAllocation): msgpack grows a slice with
// reflect.AppendSlice onto a new array, so its elements are allocated
// twice; a map costs its header and groups; a pointer its target and the
// decoder's bookkeeping.
const (
	sliceTwice = 2  // slice elements are allocated twice
	anyElem    = 32 // an interface in a []any, allocated twice
	anyBox     = 24 // boxing a value into an interface
	mapBase    = 48 // a map's header
	mapEntry   = 33 // a map[string]any slot: key, value, control byte
	ptrExtra   = 8  // a pointer's target beyond its size (size classes)
)

// mapCost is what a map of count entries of slot bytes each allocates:
// its header, then, when it has entries, a first group of 8 slots and
// about 3 slots per entry as the table grows.
func mapCost(slot int64, count uint64) int64 {
	if count == 0 {
		return mapBase
	}
	return mapBase + slot*(8+3*int64(count))
}

var (
	shapes   sync.Map // reflect.Type -> *shape
	timeType = reflect.TypeFor[time.Time]()
	custom   = []reflect.Type{
		reflect.TypeFor[msgpack.CustomDecoder](),
		reflect.TypeFor[msgpack.Unmarshaler](),
		reflect.TypeFor[encoding.BinaryUnmarshaler](),
		reflect.TypeFor[encoding.TextUnmarshaler](),
	}
)

// shapeOf returns the shape of t, built once per type.
func shapeOf(t reflect.Type) *shape {
	if s, ok := shapes.Load(t); ok {
		return s.(*shape)
	}
	b := &builder{seen: map[reflect.Type]*shape{}}
	s := b.build(t)
	b.finish()
	actual, _ := shapes.LoadOrStore(t, s)
	return actual.(*shape)
}

type builder struct {
	seen  map[reflect.Type]*shape
	order []*shape
}

func hasCustomDecoder(t reflect.Type) bool {
	for _, c := range custom {
		if t.Implements(c) || t.Kind() != reflect.Pointer && reflect.PointerTo(t).Implements(c) {
			return true
		}
	}
	return false
}

func (b *builder) build(t reflect.Type) *shape {
	if s, ok := b.seen[t]; ok {
		return s
	}
	s := &shape{t: t}
	b.seen[t] = s
	b.order = append(b.order, s)
	k := t.Kind()
	s.nilable = k == reflect.Pointer || k == reflect.Interface || k == reflect.Slice || k == reflect.Map
	switch {
	case t == timeType || k != reflect.Pointer && k != reflect.Interface && hasCustomDecoder(t):
		s.kind = kCustom
	case k == reflect.Interface:
		s.kind = kAny
	case k == reflect.Bool || k >= reflect.Int && k <= reflect.Complex128:
		s.kind, s.nilable = kScalar, true
	case k == reflect.String:
		s.kind, s.nilable = kString, true
	case k == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
		s.kind = kBytes
	case k == reflect.Slice && t.Elem().Kind() == reflect.String:
		s.kind, s.elem, s.size = kSlice, b.build(t.Elem()), int64(t.Elem().Size()) // made once
	case k == reflect.Slice:
		s.kind, s.elem, s.size = kSlice, b.build(t.Elem()), sliceTwice*int64(t.Elem().Size())
	case k == reflect.Array:
		s.kind, s.elem, s.nilable = kArray, b.build(t.Elem()), true
	case k == reflect.Map:
		s.kind, s.key, s.elem = kMap, b.build(t.Key()), b.build(t.Elem())
		s.size = int64(t.Key().Size()+t.Elem().Size()) + 1 // a slot: see mapCost
	case k == reflect.Pointer:
		s.kind, s.elem, s.size = kPtr, b.build(t.Elem()), int64(t.Elem().Size())+ptrExtra
	case k == reflect.Struct:
		s.kind, s.nilable = kStruct, true
		s.fields = map[string]*field{}
		b.addFields(s, t, nil, 0)
	default: // chan, func, unsafe.Pointer: msgpack refuses them
		s.kind = kAny
	}
	return s
}

// addFields adds the fields of struct t to s as msgpack names them: the
// msgpack tag's name or the Go name, "-" skipped, unexported skipped,
// embedded structs inlined unless tagged noinline.
func (b *builder) addFields(s *shape, t reflect.Type, via []int, depth int) {
	if depth > 8 {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("msgpack")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.PkgPath != "" && !f.Anonymous {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if f.Anonymous && !strings.Contains(","+opts+",", ",noinline,") {
			et := f.Type
			for et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct && !hasCustomDecoder(et) && et != timeType {
				b.addFields(s, et, append(via, i), depth+1)
				continue
			}
		}
		if f.PkgPath != "" {
			continue
		}
		fd := &field{name: name, shape: b.build(f.Type)}
		if _, dup := s.fields[name]; !dup {
			s.fields[name] = fd
		}
		s.list = append(s.list, fd)
		if alias, ok := tagOption(opts, "alias"); ok {
			if _, dup := s.fields[alias]; !dup {
				s.fields[alias] = fd
			}
		}
	}
}

func tagOption(opts, name string) (string, bool) {
	for o := range strings.SplitSeq(opts, ",") {
		if k, v, ok := strings.Cut(o, ":"); ok && k == name {
			return v, true
		}
	}
	return "", false
}

// finish computes reach for every shape built, to a fixed point (types
// may be recursive).
func (b *builder) finish() {
	for changed := true; changed; {
		changed = false
		for _, s := range b.order {
			r := max(int64(mapEntry), s.size)
			for _, p := range []*shape{s.elem, s.key} {
				if p != nil {
					r = max(r, p.reach)
				}
			}
			for _, f := range s.list {
				r = max(r, f.shape.reach)
			}
			if r > s.reach {
				s.reach, changed = r, true
			}
		}
	}
}
