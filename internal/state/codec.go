package state

import (
	"encoding/binary"
	"fmt"
	"reflect"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
)

// codec writes keys and values of one type as bytes for the disk backend:
// integers and floats as 8 bytes, strings as they are, anything else as
// msgpack encodes it (with the compiled encoder when the type allows it,
// fastenc.go; decoded through msgpacksafe: the files are input too).
type codec[T any] struct {
	kind reflect.Kind
	what string
	fast encFn // msgpack's bytes for T, compiled (nil: msgpack.Marshal)
}

func newCodec[T any](what string) codec[T] {
	rt := reflect.TypeFor[T]()
	k := rt.Kind()
	switch k {
	case reflect.Int, reflect.Int64, reflect.Uint, reflect.Uint64, reflect.Float64:
		if rt.Size() != 8 {
			k = reflect.Invalid
		}
	case reflect.String:
	default:
		k = reflect.Invalid
	}
	c := codec[T]{kind: k, what: what}
	if k == reflect.Invalid {
		c.fast = compileEnc(rt)
	}
	return c
}

// fixed says whether values are written as 8 bytes.
func (c codec[T]) fixed() bool {
	switch c.kind {
	case reflect.Int, reflect.Int64, reflect.Uint, reflect.Uint64, reflect.Float64:
		return true
	}
	return false
}

func (c codec[T]) append(b []byte, v T) ([]byte, error) {
	switch c.kind {
	case reflect.Int, reflect.Int64, reflect.Uint, reflect.Uint64, reflect.Float64:
		return binary.BigEndian.AppendUint64(b, *(*uint64)(unsafe.Pointer(&v))), nil
	case reflect.String:
		return append(b, *(*string)(unsafe.Pointer(&v))...), nil
	}
	if c.fast != nil {
		x := v // on the heap only here
		return c.fast(b, unsafe.Pointer(&x)), nil
	}
	enc, err := msgpack.Marshal(v)
	if err != nil {
		return b, fmt.Errorf("encode %s: %w", c.what, err)
	}
	return append(b, enc...), nil
}

// appendPtr is append of *v.
func (c codec[T]) appendPtr(b []byte, v *T) ([]byte, error) {
	if c.kind == reflect.Invalid && c.fast != nil {
		return c.fast(b, unsafe.Pointer(v)), nil
	}
	return c.append(b, *v)
}

func (c codec[T]) decode(b []byte) (T, error) {
	var v T
	switch c.kind {
	case reflect.Int, reflect.Int64, reflect.Uint, reflect.Uint64, reflect.Float64:
		if len(b) != 8 {
			return v, fmt.Errorf("%s: %d bytes, want 8", c.what, len(b))
		}
		u := binary.BigEndian.Uint64(b)
		*(*uint64)(unsafe.Pointer(&v)) = u
		return v, nil
	case reflect.String:
		*(*string)(unsafe.Pointer(&v)) = string(b)
		return v, nil
	}
	err := msgpacksafe.Decode(b, &v, msgpacksafe.Limits{Source: c.what, Factor: 32})
	return v, err
}
