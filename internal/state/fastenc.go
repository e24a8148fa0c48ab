package state

import (
	"encoding"
	"encoding/binary"
	"math"
	"reflect"
	"strings"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
)

// A compiled msgpack encoder for the keys and values of a table: the bytes
// msgpack.Marshal writes for them, without its reflection per field (a
// reflect.Value per field, a slice of the fields kept and a boxed value
// per omitempty field of every struct it encodes). A whole-map snapshot
// of the memory backend encoded a winning-bid operator's state of 10 000
// auctions in milliseconds at every checkpoint; the compiled encoder walks
// the value's memory with offsets computed once per table.
//
// It knows the types msgpack encodes by their kind alone: booleans,
// integers, floats, strings, byte slices and arrays, slices, arrays,
// pointers and structs of those (exported fields, msgpack tags with a
// name, "-" and omitempty). Anything else (maps, interfaces, embedded
// structs, a struct-wide _msgpack tag, a type with its own encoding:
// msgpack.CustomEncoder or Marshaler, encoding.BinaryMarshaler or
// TextMarshaler, an IsZero method, recursive types) leaves the table on
// msgpack.Marshal. Its output is byte for byte msgpack's (the tests
// compare them), and a type msgpack would encode otherwise for having
// been registered with it is caught when the encoder is compiled: the
// zero value of every struct type met must encode as msgpack encodes it.

// encFn appends the encoding of the value at p.
type encFn func(b []byte, p unsafe.Pointer) []byte

// emptyFn is omitempty's test of the value at p (msgpack's isEmptyValue).
type emptyFn func(p unsafe.Pointer) bool

type encPlan struct {
	enc   encFn
	empty emptyFn
}

// The interfaces through which a type encodes itself (msgpack's
// _getEncoder) or says it is empty (isEmptyValue): such types are left to
// msgpack.
var ownEncodings = [...]reflect.Type{
	reflect.TypeFor[msgpack.CustomEncoder](),
	reflect.TypeFor[msgpack.Marshaler](),
	reflect.TypeFor[encoding.BinaryMarshaler](),
	reflect.TypeFor[encoding.TextMarshaler](),
	reflect.TypeFor[interface{ IsZero() bool }](),
}

func ownEncoding(t reflect.Type) bool {
	for _, i := range ownEncodings {
		if t.Implements(i) || t.Kind() != reflect.Pointer && reflect.PointerTo(t).Implements(i) {
			return true
		}
	}
	return false
}

// compileEnc returns the compiled encoder of values of type t, or nil
// when msgpack must encode them.
func compileEnc(t reflect.Type) encFn {
	c := encCompiler{busy: map[reflect.Type]bool{}}
	p, ok := c.plan(t)
	if !ok {
		return nil
	}
	for _, st := range append(c.structs, planned{t, p.enc}) {
		z := reflect.New(st.t)
		want, err := msgpack.Marshal(z.Elem().Interface())
		if err != nil || string(st.enc(nil, z.UnsafePointer())) != string(want) {
			return nil
		}
	}
	return p.enc
}

type encCompiler struct {
	busy    map[reflect.Type]bool // being planned: a recursive type
	structs []planned             // the struct types met
}

type planned struct {
	t   reflect.Type
	enc encFn
}

// numPlan is the plan of a number of Go type T that put appends;
// omitempty's empty is zero.
func numPlan[T int32 | int64 | uint8 | uint16 | uint32 | uint64](put func([]byte, T) []byte) encPlan {
	return encPlan{
		enc:   func(b []byte, p unsafe.Pointer) []byte { return put(b, *(*T)(p)) },
		empty: func(p unsafe.Pointer) bool { return *(*T)(p) == 0 },
	}
}

// sized is the plan of a sized integer kind (int8 to uint64): msgpack
// writes its code (signed, or unsigned for the unsigned kinds) and its
// bytes in full, big endian, as put appends them.
func sized[T uint8 | uint16 | uint32 | uint64](t reflect.Type, signed, unsigned byte, put func([]byte, T) []byte) encPlan {
	code := signed
	switch t.Kind() {
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		code = unsigned
	}
	return numPlan(func(b []byte, v T) []byte { return put(append(b, code), v) })
}

// planElem plans t's element type, with t marked busy meanwhile (a
// recursive type is left to msgpack).
func (c *encCompiler) planElem(t reflect.Type) (encPlan, bool) {
	c.busy[t] = true
	defer delete(c.busy, t)
	return c.plan(t.Elem())
}

// appendElems appends an array of n elements of size bytes from data.
func appendElems(b []byte, data unsafe.Pointer, n int, size uintptr, elem encFn) []byte {
	b = msgpacksafe.AppendArrayLen(b, n)
	for i := range n {
		b = elem(b, unsafe.Add(data, uintptr(i)*size))
	}
	return b
}

func (c *encCompiler) plan(t reflect.Type) (encPlan, bool) {
	if ownEncoding(t) || c.busy[t] {
		return encPlan{}, false
	}
	switch t.Kind() {
	case reflect.Bool:
		return encPlan{
			enc: func(b []byte, p unsafe.Pointer) []byte {
				if *(*bool)(p) {
					return append(b, 0xc3)
				}
				return append(b, 0xc2)
			},
			empty: func(p unsafe.Pointer) bool { return !*(*bool)(p) },
		}, true
	case reflect.Int:
		if t.Size() == 4 {
			return numPlan(func(b []byte, v int32) []byte { return msgpacksafe.AppendInt(b, int64(v)) }), true
		}
		return numPlan(msgpacksafe.AppendInt), true
	case reflect.Uint:
		if t.Size() == 4 {
			return numPlan(func(b []byte, v uint32) []byte { return msgpacksafe.AppendUint(b, uint64(v)) }), true
		}
		return numPlan(msgpacksafe.AppendUint), true
	case reflect.Int8, reflect.Uint8:
		return sized(t, 0xd0, 0xcc, func(b []byte, v uint8) []byte { return append(b, v) }), true
	case reflect.Int16, reflect.Uint16:
		return sized(t, 0xd1, 0xcd, binary.BigEndian.AppendUint16), true
	case reflect.Int32, reflect.Uint32:
		return sized(t, 0xd2, 0xce, binary.BigEndian.AppendUint32), true
	case reflect.Int64, reflect.Uint64:
		return sized(t, 0xd3, 0xcf, binary.BigEndian.AppendUint64), true
	case reflect.Float32:
		return encPlan{
			enc: func(b []byte, p unsafe.Pointer) []byte {
				return binary.BigEndian.AppendUint32(append(b, 0xca), math.Float32bits(*(*float32)(p)))
			},
			empty: func(p unsafe.Pointer) bool { return *(*float32)(p) == 0 },
		}, true
	case reflect.Float64:
		return encPlan{
			enc: func(b []byte, p unsafe.Pointer) []byte {
				return binary.BigEndian.AppendUint64(append(b, 0xcb), math.Float64bits(*(*float64)(p)))
			},
			empty: func(p unsafe.Pointer) bool { return *(*float64)(p) == 0 },
		}, true
	case reflect.String:
		return encPlan{
			enc:   func(b []byte, p unsafe.Pointer) []byte { return msgpacksafe.AppendStr(b, *(*string)(p)) },
			empty: func(p unsafe.Pointer) bool { return len(*(*string)(p)) == 0 },
		}, true
	case reflect.Pointer:
		ep, ok := c.planElem(t)
		if !ok {
			return encPlan{}, false
		}
		elem := ep.enc
		return encPlan{
			enc: func(b []byte, p unsafe.Pointer) []byte {
				q := *(*unsafe.Pointer)(p)
				if q == nil {
					return append(b, 0xc0)
				}
				return elem(b, q)
			},
			empty: func(p unsafe.Pointer) bool { return *(*unsafe.Pointer)(p) == nil },
		}, true
	case reflect.Slice:
		empty := func(p unsafe.Pointer) bool { return (*sliceHeader)(p).len == 0 }
		if t.Elem().Kind() == reflect.Uint8 { // msgpack's bytes
			return encPlan{
				enc:   func(b []byte, p unsafe.Pointer) []byte { return msgpacksafe.AppendBin(b, *(*[]byte)(p)) },
				empty: empty,
			}, true
		}
		ep, ok := c.planElem(t)
		if !ok {
			return encPlan{}, false
		}
		elem, size := ep.enc, t.Elem().Size()
		return encPlan{
			enc: func(b []byte, p unsafe.Pointer) []byte {
				s := (*sliceHeader)(p)
				if s.data == nil {
					return append(b, 0xc0)
				}
				return appendElems(b, s.data, s.len, size, elem)
			},
			empty: empty,
		}, true
	case reflect.Array:
		n := t.Len()
		empty := func(unsafe.Pointer) bool { return n == 0 }
		if t.Elem().Kind() == reflect.Uint8 { // msgpack's bytes
			return encPlan{
				enc: func(b []byte, p unsafe.Pointer) []byte {
					return append(msgpacksafe.AppendBinHeader(b, n), unsafe.Slice((*byte)(p), n)...)
				},
				empty: empty,
			}, true
		}
		ep, ok := c.planElem(t)
		if !ok {
			return encPlan{}, false
		}
		elem, size := ep.enc, t.Elem().Size()
		return encPlan{
			enc: func(b []byte, p unsafe.Pointer) []byte {
				return appendElems(b, p, n, size, elem)
			},
			empty: empty,
		}, true
	case reflect.Struct:
		return c.planStruct(t)
	}
	return encPlan{}, false // maps, interfaces, uintptr, complex, channels, functions
}

// fieldPlan is one encoded field of a struct.
type fieldPlan struct {
	off   uintptr
	name  []byte // its name, encoded
	enc   encFn
	empty emptyFn // with omitempty, else nil
}

// planStruct is msgpack's encodeStructValue as a map (its getFields and
// OmitEmpty).
func (c *encCompiler) planStruct(t reflect.Type) (encPlan, bool) {
	c.busy[t] = true
	defer delete(c.busy, t)
	var fields []fieldPlan
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("msgpack")
		if strings.ContainsAny(tag, "'") {
			return encPlan{}, false
		}
		opts := strings.Split(tag, ",")
		name := strings.TrimSpace(opts[0])
		if name == "-" {
			continue
		}
		if f.Name == "_msgpack" || f.Anonymous || strings.Contains(name, ":") {
			return encPlan{}, false
		}
		if !f.IsExported() {
			continue
		}
		omit := false
		for _, o := range opts[1:] {
			o, _, _ = strings.Cut(strings.TrimSpace(o), ":")
			switch strings.TrimSpace(o) {
			case "omitempty":
				omit = true
			case "intern":
				return encPlan{}, false
			}
		}
		if name == "" {
			name = f.Name
		}
		fp, ok := c.plan(f.Type)
		if !ok {
			return encPlan{}, false
		}
		x := fieldPlan{off: f.Offset, name: msgpacksafe.AppendStr(nil, name), enc: fp.enc}
		if omit {
			x.empty = fp.empty
		}
		fields = append(fields, x)
	}
	omits, always := false, false // some field omitempty; some field not (never empty)
	for _, f := range fields {
		omits = omits || f.empty != nil
		always = always || f.empty == nil
	}
	if !omits {
		head := msgpacksafe.AppendMapLen(nil, len(fields))
		return c.structDone(t, encPlan{
			enc: func(b []byte, p unsafe.Pointer) []byte {
				b = append(b, head...)
				for i := range fields {
					f := &fields[i]
					b = f.enc(append(b, f.name...), unsafe.Add(p, f.off))
				}
				return b
			},
			empty: func(unsafe.Pointer) bool { return len(fields) == 0 },
		}), true
	}
	empty := func(p unsafe.Pointer) bool {
		if always {
			return false
		}
		for i := range fields {
			if f := &fields[i]; !f.empty(unsafe.Add(p, f.off)) {
				return false
			}
		}
		return true
	}
	if len(fields) > 64 { // each field's emptiness asked twice
		return c.structDone(t, encPlan{
			enc: func(b []byte, p unsafe.Pointer) []byte {
				n := 0
				for i := range fields {
					if f := &fields[i]; f.empty == nil || !f.empty(unsafe.Add(p, f.off)) {
						n++
					}
				}
				b = msgpacksafe.AppendMapLen(b, n)
				for i := range fields {
					f := &fields[i]
					fp := unsafe.Add(p, f.off)
					if f.empty == nil || !f.empty(fp) {
						b = f.enc(append(b, f.name...), fp)
					}
				}
				return b
			},
			empty: empty,
		}), true
	}
	return c.structDone(t, encPlan{
		enc: func(b []byte, p unsafe.Pointer) []byte {
			var omitted uint64 // the fields left out, asked once each
			n := len(fields)
			for i := range fields {
				if f := &fields[i]; f.empty != nil && f.empty(unsafe.Add(p, f.off)) {
					omitted |= 1 << i
					n--
				}
			}
			b = msgpacksafe.AppendMapLen(b, n)
			for i := range fields {
				if omitted&(1<<i) == 0 {
					f := &fields[i]
					b = f.enc(append(b, f.name...), unsafe.Add(p, f.off))
				}
			}
			return b
		},
		empty: empty,
	}), true
}

// structDone records struct type t, planned as sp, for compileEnc's check.
func (c *encCompiler) structDone(t reflect.Type, sp encPlan) encPlan {
	c.structs = append(c.structs, planned{t, sp.enc})
	return sp
}

// Marshaler returns msgpack.Marshal for values of type T, byte for byte:
// the compiled encoder when T allows it (else msgpack.Marshal itself).
func Marshaler[T any]() func(v *T) ([]byte, error) {
	if enc := compileEnc(reflect.TypeFor[T]()); enc != nil {
		return func(v *T) ([]byte, error) { return enc(nil, unsafe.Pointer(v)), nil }
	}
	return func(v *T) ([]byte, error) { return msgpack.Marshal(v) }
}
