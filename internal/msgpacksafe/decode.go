package msgpacksafe

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
)

// Defaults of Limits.
const (
	// DefaultMaxInput bounds the encoded size of one value: 64 MiB.
	DefaultMaxInput = 64 << 20
	// DefaultFactor and DefaultSlack bound the decoded size: what decoding
	// allocates (slice backing arrays, which msgpack allocates twice, map
	// tables, pointer targets, strings) may be at most DefaultFactor times
	// the input plus DefaultSlack bytes. A 1 MiB input can thus allocate at
	// most about 7 MiB, however it is made; a message of up to a few
	// hundred KiB always fits, and records written by msgpack fit at any
	// size unless they are dominated by maps or fixed arrays (a map of one
	// entry costs a table of 8 slots), for which a caller raises Factor
	// (snapshots of state do). A hostile array of one-byte elements meant
	// for a slice of large structs is refused.
	DefaultFactor = 6
	DefaultSlack  = 1 << 20
)

// Errors of Decode, for errors.Is; every error Decode returns is an *Error
// wrapping one of them.
var (
	// ErrMalformed: the bytes are not one msgpack value of the destination
	// type (truncated, an invalid code, a length the data cannot hold,
	// bytes after the value, a nil where the type cannot be nil).
	ErrMalformed = errors.New("msgpack: malformed input")
	// ErrTooLarge: the input, its nesting or its decoded size exceeds the
	// limits.
	ErrTooLarge = errors.New("msgpack: input exceeds the limits")
	// ErrPanic: the msgpack library panicked decoding the input; Decode
	// recovered.
	ErrPanic = errors.New("msgpack: decoder panicked")
)

// Limits bound one Decode. The zero value means the defaults.
type Limits struct {
	// MaxInput bounds the encoded size in bytes (0: DefaultMaxInput).
	MaxInput int
	// Factor and Slack bound the decoded size to Factor × len(data) +
	// Slack bytes (0: DefaultFactor, DefaultSlack).
	Factor, Slack int64
	// MaxDepth bounds the nesting (0: MaxDepth).
	MaxDepth int
	// Source names where the bytes came from in errors ("peer n2",
	// "spill file /var/x.db"); optional.
	Source string
	// Configure, if set, is called on the decoder before it decodes (for
	// example SetMapDecoder). It runs on a decoder reset for this call.
	Configure func(*msgpack.Decoder)
}

// Budget returns the decoded-size budget for n input bytes: Factor × n +
// Slack. A decoder that allocates by itself before handing bytes to
// Decode (a count read from a header of its own, times the element size)
// checks its allocation against it.
func (l Limits) Budget(n int) int64 {
	f, s := l.Factor, l.Slack
	if f <= 0 {
		f = DefaultFactor
	}
	if s <= 0 {
		s = DefaultSlack
	}
	return f*int64(n) + s
}

// Error is a refused input: what was decoded (Type), from where (Source),
// where in it (Path, Offset) and why.
type Error struct {
	Source string
	Type   reflect.Type
	// Path locates the value at fault in the destination: ".Items[3].At";
	// empty for the top level or when unknown.
	Path string
	// Offset is the byte offset in the input of the value at fault; -1
	// when unknown.
	Offset int
	// Kind is ErrMalformed, ErrTooLarge or ErrPanic.
	Kind error
	// Err says what was wrong.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("msgpack: decode ")
	if e.Type != nil {
		b.WriteString(e.Type.String())
	} else {
		b.WriteString("<nil>")
	}
	if e.Source != "" {
		b.WriteString(" from ")
		b.WriteString(e.Source)
	}
	if e.Path != "" || e.Offset >= 0 {
		b.WriteString(": at ")
		if e.Path != "" {
			b.WriteString(e.Path)
		}
		if e.Offset >= 0 {
			if e.Path != "" {
				b.WriteByte(' ')
			}
			b.WriteString("byte ")
			b.WriteString(strconv.Itoa(e.Offset))
		}
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns the kind and the cause.
func (e *Error) Unwrap() []error { return []error{e.Kind, e.Err} }

// Decode decodes the msgpack value in data into v, a non-nil pointer,
// and never panics, never allocates more than lim allows, and refuses
// bytes after the value. It first walks the input along v's type without
// decoding: lengths the data cannot hold, nesting deeper than the limit, a
// nil where the type cannot take one (a time.Time: msgpack v5.4.1 would
// panic) and a decoded size over the budget are refused there, naming
// the type, the field path and the byte offset. Then it decodes with
// msgpack, turning a panic into an error wrapping ErrPanic.
//
// Every decoder of bytes from the network or a file goes through Decode.
func Decode(data []byte, v any, lim Limits) (err error) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return &Error{Source: lim.Source, Type: reflect.TypeOf(v), Offset: -1, Kind: ErrMalformed,
			Err: errors.New("the destination is not a non-nil pointer")}
	}
	t := rv.Type().Elem()
	if err := CheckFor(data, t, lim); err != nil {
		return err
	}
	r := bytes.NewReader(data)
	dec := msgpack.GetDecoder()
	dec.Reset(r)
	if lim.Configure != nil {
		lim.Configure(dec)
	}
	defer func() {
		if p := recover(); p != nil {
			err = &Error{Source: lim.Source, Type: t, Offset: len(data) - r.Len(), Kind: ErrPanic,
				Err: fmt.Errorf("panic: %v", p)}
		}
		dec.Reset(nil)
		msgpack.PutDecoder(dec)
	}()
	if derr := dec.Decode(v); derr != nil {
		return &Error{Source: lim.Source, Type: t, Offset: len(data) - r.Len(), Kind: ErrMalformed, Err: derr}
	}
	if r.Len() != 0 {
		return &Error{Source: lim.Source, Type: t, Offset: len(data) - r.Len(), Kind: ErrMalformed,
			Err: fmt.Errorf("%d bytes after the value", r.Len())}
	}
	return nil
}

// DecodeAs is Decode into a new value of type T.
func DecodeAs[T any](data []byte, lim Limits) (T, error) {
	var v T
	err := Decode(data, &v, lim)
	return v, err
}

// CheckFor walks data as one msgpack value to be decoded into a value of
// type t, without decoding, and returns the error Decode would return
// before decoding (an *Error), or nil.
func CheckFor(data []byte, t reflect.Type, lim Limits) error {
	maxIn := lim.MaxInput
	if maxIn <= 0 {
		maxIn = DefaultMaxInput
	}
	w := &walker{data: data, budget: lim.Budget(len(data)), maxDepth: lim.MaxDepth, pending: 1}
	if w.maxDepth <= 0 {
		w.maxDepth = MaxDepth
	}
	var err error
	switch {
	case t == nil:
		err = &Error{Offset: -1, Kind: ErrMalformed, Err: errors.New("no destination type")}
	case len(data) > maxIn:
		w.fail(ErrTooLarge, fmt.Errorf("%d bytes, more than the limit of %d", len(data), maxIn))
	case len(data) == 0:
		w.fail(ErrMalformed, errors.New("empty input"))
	default:
		w.value(shapeOf(t), 0)
		if w.err == nil && w.i != len(data) {
			w.fail(ErrMalformed, fmt.Errorf("%d bytes after the value", len(data)-w.i))
		}
	}
	if w.err != nil {
		w.err.Source, w.err.Type = lim.Source, t
		err = w.err
	}
	return err
}

// seg is one step of a path: a field name, or an index when name is "".
type seg struct {
	name string
	idx  int
}

// walker walks msgpack data along a destination shape, adding up what
// decoding would allocate.
type walker struct {
	data     []byte
	i        int
	pending  uint64 // values announced by headers and not yet started
	used     int64  // decoded bytes so far
	budget   int64
	maxDepth int
	path     []seg
	at       int // offset of the value being walked
	err      *Error
}

func (w *walker) fail(k error, err error) {
	if w.err != nil {
		return
	}
	var b strings.Builder
	for _, s := range w.path {
		if s.name != "" {
			b.WriteByte('.')
			b.WriteString(s.name)
		} else {
			fmt.Fprintf(&b, "[%d]", s.idx)
		}
	}
	w.err = &Error{Path: b.String(), Offset: w.at, Kind: k, Err: err}
}

// spend adds n decoded bytes, refusing them past the budget.
func (w *walker) spend(n int64, what string) bool {
	if n < 0 || n > w.budget-w.used {
		w.fail(ErrTooLarge, fmt.Errorf("%s would make the decoded size more than the budget of %d bytes for %d input bytes",
			what, w.budget, len(w.data)))
		return false
	}
	w.used += n
	return true
}

// be reads an n-byte big-endian length.
func (w *walker) be(n int) uint64 {
	if len(w.data)-w.i < n {
		w.fail(ErrMalformed, errors.New("truncated header"))
		return 0
	}
	var v uint64
	for _, c := range w.data[w.i : w.i+n] {
		v = v<<8 | uint64(c)
	}
	w.i += n
	return v
}

// skip takes n bytes of data.
func (w *walker) skip(n uint64) []byte {
	if left := uint64(len(w.data) - w.i); n > left {
		w.fail(ErrMalformed, fmt.Errorf("length %d exceeds the %d bytes left", n, left))
		return nil
	}
	w.i += int(n)
	return w.data[w.i-int(n) : w.i]
}

// header reads one value's code and returns its class: for containers
// the element count (pairs counted once for maps), for strings, binary
// and ext data their payload.
type header struct {
	code    byte
	class   byte // 'n' nil, 's' scalar, 't' str, 'b' bin, 'x' ext, 'a' array, 'm' map
	count   uint64
	payload []byte
}

func (w *walker) header() (h header) {
	if w.i >= len(w.data) {
		w.fail(ErrMalformed, fmt.Errorf("truncated: %d values missing", w.pending+1))
		return h
	}
	c := w.data[w.i]
	w.i++
	h.code = c
	switch {
	case c == 0xc0:
		h.class = 'n'
	case c <= 0x7f || c >= 0xe0, c == 0xc2, c == 0xc3:
		h.class = 's'
	case c <= 0x8f:
		h.class, h.count = 'm', uint64(c&0x0f)
	case c <= 0x9f:
		h.class, h.count = 'a', uint64(c&0x0f)
	case c <= 0xbf:
		h.class, h.payload = 't', w.skip(uint64(c&0x1f))
	case c == 0xd9 || c == 0xda || c == 0xdb:
		h.class = 't'
		h.payload = w.skip(w.be(1 << (c - 0xd9)))
	case c == 0xc4 || c == 0xc5 || c == 0xc6:
		h.class = 'b'
		h.payload = w.skip(w.be(1 << (c - 0xc4)))
	case c == 0xc7 || c == 0xc8 || c == 0xc9:
		h.class = 'x'
		n := w.be(1 << (c - 0xc7))
		h.payload = w.skip(n + 1)
	case c >= 0xca && c <= 0xd3:
		h.class = 's'
		w.skip([...]uint64{4, 8, 1, 2, 4, 8, 1, 2, 4, 8}[c-0xca])
	case c >= 0xd4 && c <= 0xd8:
		h.class = 'x'
		h.payload = w.skip(1 + 1<<(c-0xd4))
	case c == 0xdc || c == 0xdd:
		h.class, h.count = 'a', w.be(2<<(c-0xdc))
	case c == 0xde || c == 0xdf:
		h.class, h.count = 'm', w.be(2<<(c-0xde))
	default: // 0xc1
		w.fail(ErrMalformed, fmt.Errorf("invalid code %#x", c))
	}
	if w.err == nil && (h.class == 'a' || h.class == 'm') {
		elems := h.count
		if h.class == 'm' {
			elems *= 2
		}
		if left := uint64(len(w.data) - w.i); w.pending+elems > left {
			w.fail(ErrMalformed, fmt.Errorf("%d elements exceed the %d bytes left", elems, left))
		} else {
			w.pending += elems
		}
	}
	return h
}

// value walks one value decoded into s.
func (w *walker) value(s *shape, depth int) {
	if w.err != nil {
		return
	}
	w.typed(s, w.headerAt(), depth)
}

// typed walks the rest of a value decoded into s, whose header h has been
// read.
func (w *walker) typed(s *shape, h header, depth int) {
	if w.err != nil {
		return
	}
	if (h.class == 'a' || h.class == 'm') && depth >= w.maxDepth {
		w.fail(ErrTooLarge, fmt.Errorf("nested deeper than %d", w.maxDepth))
		return
	}
	if h.class == 'n' {
		if !s.nilable && s.kind != kAny && s.kind != kSkip {
			w.fail(ErrMalformed, fmt.Errorf("nil where a %v is expected", s.t))
		}
		return
	}
	switch s.kind {
	case kSkip, kScalar:
		w.generic(h, depth, 0, true)
	case kAny, kCustom:
		w.generic(h, depth, 0, false)
	case kString, kBytes:
		if h.class == 't' || h.class == 'b' {
			w.spend(int64(len(h.payload)), "a string")
			return
		}
		w.generic(h, depth, 0, false)
	case kPtr:
		// The pointer's target decodes this same value.
		if w.spend(s.size, "the target of a "+s.t.String()) {
			w.typed(s.elem, h, depth)
		}
	case kSlice, kArray:
		if h.class != 'a' {
			w.generic(h, depth, s.reach, false)
			return
		}
		if s.kind == kSlice && !w.spend(int64(h.count)*s.size,
			fmt.Sprintf("%d elements of %v (%d bytes each as decoded)", h.count, s.t.Elem(), s.size)) {
			return
		}
		for k := range h.count {
			w.path = append(w.path, seg{idx: int(k)})
			w.value(s.elem, depth+1)
			w.path = w.path[:len(w.path)-1]
			if w.err != nil {
				return
			}
		}
	case kMap:
		if h.class != 'm' {
			w.generic(h, depth, s.reach, false)
			return
		}
		if !w.spend(mapCost(s.size, h.count),
			fmt.Sprintf("a %v of %d entries", s.t, h.count)) {
			return
		}
		for k := range h.count {
			w.path = append(w.path, seg{idx: int(k)})
			w.value(s.key, depth+1)
			w.value(s.elem, depth+1)
			w.path = w.path[:len(w.path)-1]
			if w.err != nil {
				return
			}
		}
	case kStruct:
		w.structValue(s, h, depth)
	}
}

func (w *walker) structValue(s *shape, h header, depth int) {
	switch h.class {
	case 'm':
		for range h.count {
			kh := w.headerAt()
			if w.err != nil {
				return
			}
			var f *field
			name := "?"
			if kh.class == 't' || kh.class == 'b' {
				name = string(kh.payload)
				f = s.fields[name]
			} else {
				w.generic(kh, depth+1, 0, true) // msgpack refuses it
			}
			if f == nil {
				// msgpack skips an unknown field; should it know a name
				// this walk does not, assume the costliest part.
				w.path = append(w.path, seg{name: name})
				w.generic(w.headerAt(), depth+1, s.reach, false)
				w.path = w.path[:len(w.path)-1]
			} else {
				w.path = append(w.path, seg{name: f.name})
				w.value(f.shape, depth+1)
				w.path = w.path[:len(w.path)-1]
			}
			if w.err != nil {
				return
			}
		}
	case 'a':
		for k := range h.count {
			if int(k) < len(s.list) {
				f := s.list[k]
				w.path = append(w.path, seg{name: f.name})
				w.value(f.shape, depth+1)
			} else {
				w.path = append(w.path, seg{idx: int(k)})
				w.generic(w.headerAt(), depth+1, s.reach, false)
			}
			w.path = w.path[:len(w.path)-1]
			if w.err != nil {
				return
			}
		}
	default:
		w.generic(h, depth, s.reach, false)
	}
}

// headerAt reads the header of the next value, for generic.
func (w *walker) headerAt() header {
	if w.err != nil {
		return header{}
	}
	w.at = w.i
	w.pending--
	return w.header()
}

// generic walks the rest of a value whose header h has been read, as
// msgpack's generic decoding (into an interface) allocates, or at cost
// per element when cost is larger (a part the walk cannot place), or
// allocating nothing when skipped.
func (w *walker) generic(h header, depth int, cost int64, skipped bool) {
	if w.err != nil {
		return
	}
	per := func(generic int64) int64 {
		if skipped {
			return 0
		}
		return max(generic, cost)
	}
	switch h.class {
	case 'n', 's':
		w.spend(per(0), "a scalar")
		return
	case 't', 'b', 'x':
		w.spend(per(int64(len(h.payload))+anyBox), "a string")
		return
	case 'a':
		if depth >= w.maxDepth {
			w.fail(ErrTooLarge, fmt.Errorf("nested deeper than %d", w.maxDepth))
			return
		}
		if !w.spend(per(anyBox)+int64(h.count)*per(anyElem), fmt.Sprintf("an array of %d elements", h.count)) {
			return
		}
		for k := range h.count {
			w.path = append(w.path, seg{idx: int(k)})
			w.generic(w.headerAt(), depth+1, cost, skipped)
			w.path = w.path[:len(w.path)-1]
			if w.err != nil {
				return
			}
		}
	case 'm':
		if depth >= w.maxDepth {
			w.fail(ErrTooLarge, fmt.Errorf("nested deeper than %d", w.maxDepth))
			return
		}
		var n int64
		if !skipped {
			n = max(mapCost(mapEntry, h.count), cost*int64(1+h.count))
		}
		if !w.spend(n, fmt.Sprintf("a map of %d entries", h.count)) {
			return
		}
		for k := range 2 * h.count {
			w.path = append(w.path, seg{idx: int(k / 2)})
			w.generic(w.headerAt(), depth+1, cost, skipped)
			w.path = w.path[:len(w.path)-1]
			if w.err != nil {
				return
			}
		}
	}
}
