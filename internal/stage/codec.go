package stage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"reflect"
	"slices"
	"strconv"

	"github.com/vmihailenco/msgpack/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/msgpacksafe"
)

// Codec encodes the envelopes of an edge carrying records of type T
// for the spill. The header is binary; values of the common scalar and
// string types are written directly, others with msgpack.
//
//	kind(1) flags(1) channel seq count mark(varint) [headers] [latency] [times] values
//
// Integers (int64, int) are written zigzagged in the fewest bytes that hold
// every value of the batch, all with that width (flagNarrow, a width byte
// of 1 to 7, then count × width bytes, little-endian): about the bytes
// varints would take, without a branch per value; a batch that needs 8
// bytes a value is written as before, 8 bytes each, without the flag.
//
// latency, when the envelope has any: born, sent (uvarint, unix ns) and
// keep (float64 bits, 0 meaning 1), so that an envelope that crosses
// processes (or waits in a spill) keeps its ingestion and send times and
// the sampling rate its records survived (DESIGN.md, Latency and
// shedding).
type Codec[T any] struct{}

const (
	flagHeaders = 1 << iota
	flagTimes
	flagTraces // the batch's sampled records (Mark): count, then index, id, trace id, span id, trace flags
	flagLatency
	flagNarrow // integers in a narrower width: see Codec
)

// maxMarkID bounds a sampled record's id on the wire.
const maxMarkID = 512

func (c Codec[T]) Encode(msg any) ([]byte, error) {
	return c.AppendEncode(nil, msg)
}

// EncodedSize is about what Encode writes for an envelope of count
// records of a fixed-size type (a capacity to allocate for it).
func EncodedSize(count int) int { return 48 + count*9 }

// narrowSize is about what Encode writes for an envelope of count integer
// records of width bytes each (with the room appendInts needs past them).
func narrowSize(count, width int) int { return 48 + 1 + 8 + count*width }

// EncodedSizeOf is about what AppendEncode writes for msg (a capacity to
// allocate for it): integer records in the width they need (see Codec),
// others as EncodedSize.
func (Codec[T]) EncodedSizeOf(msg any) int {
	env, ok := msg.(*actors.Envelope)
	if !ok {
		return EncodedSize(0)
	}
	if b, ok := env.Payload.(*Batch[T]); ok && b.Ts == nil {
		switch vs := any(b.Vs).(type) {
		case []int64:
			return narrowSize(len(vs), narrowWidth(vs))
		case []int:
			return narrowSize(len(vs), narrowWidth(vs))
		}
	}
	return EncodedSize(env.Count)
}

// AppendEncode appends the encoding of msg (an *actors.Envelope) to out,
// growing it as needed: a caller that frames the envelope (a message to
// another process) encodes it in place, once.
func (Codec[T]) AppendEncode(out []byte, msg any) ([]byte, error) {
	env, ok := msg.(*actors.Envelope)
	if !ok {
		return nil, fmt.Errorf("not an envelope: %T", msg)
	}
	var b *Batch[T]
	if env.Kind == actors.Data {
		if b, ok = env.Payload.(*Batch[T]); !ok {
			return nil, fmt.Errorf("envelope seq %d: payload %T, want records of %T", env.Seq, env.Payload, *new(T))
		}
	}
	flags := byte(0)
	if len(env.Headers) > 0 {
		flags |= flagHeaders
	}
	if b != nil && b.Ts != nil {
		flags |= flagTimes
	}
	if b != nil && len(b.Tr) > 0 {
		flags |= flagTraces
	}
	if env.Born != 0 || env.Sent != 0 || env.Keep != 0 {
		flags |= flagLatency
	}
	width := 8
	if b != nil {
		switch vs := any(b.Vs).(type) {
		case []int64:
			width = narrowWidth(vs)
		case []int:
			width = narrowWidth(vs)
		}
		if width < 8 {
			flags |= flagNarrow
		}
	}
	if out == nil {
		size := EncodedSize(env.Count)
		if b != nil && b.Ts == nil && width < 8 {
			size = narrowSize(env.Count, width)
		}
		out = make([]byte, 0, size)
	}
	out = append(out, byte(env.Kind), flags)
	out = binary.AppendUvarint(out, uint64(env.Channel))
	out = binary.AppendUvarint(out, env.Seq)
	out = binary.AppendUvarint(out, uint64(env.Count))
	out = binary.AppendVarint(out, env.Mark)
	if flags&flagHeaders != 0 {
		out = binary.AppendUvarint(out, uint64(len(env.Headers)))
		for k, v := range env.Headers {
			out = appendString(out, k)
			out = appendString(out, v)
		}
	}
	if flags&flagLatency != 0 {
		if env.Born < 0 || env.Sent < 0 || !(env.Keep >= 0 && env.Keep <= 1) {
			return nil, fmt.Errorf("envelope seq %d: born %d, sent %d, keep %v: out of range", env.Seq, env.Born, env.Sent, env.Keep)
		}
		out = binary.AppendUvarint(out, uint64(env.Born))
		out = binary.AppendUvarint(out, uint64(env.Sent))
		out = binary.LittleEndian.AppendUint64(out, math.Float64bits(env.Keep))
	}
	if b == nil {
		return out, nil
	}
	if len(b.Vs) != env.Count {
		return nil, fmt.Errorf("envelope seq %d: %d records, header says %d", env.Seq, len(b.Vs), env.Count)
	}
	if flags&flagTimes != 0 {
		for _, t := range b.Ts {
			out = binary.LittleEndian.AppendUint64(out, uint64(t))
		}
	}
	if flags&flagTraces != 0 {
		out = binary.AppendUvarint(out, uint64(len(b.Tr)))
		for _, m := range b.Tr {
			if m.I < 0 || int(m.I) >= env.Count {
				return nil, fmt.Errorf("envelope seq %d: sampled record %d of %d", env.Seq, m.I, env.Count)
			}
			if len(m.ID) > maxMarkID { // Decode refuses it
				return nil, fmt.Errorf("envelope seq %d: sampled record %d: id of %d bytes (at most %d): %.64q", env.Seq, m.I, len(m.ID), maxMarkID, m.ID)
			}
			out = binary.AppendUvarint(out, uint64(m.I))
			out = appendString(out, m.ID)
			tid, sid := m.SC.TraceID(), m.SC.SpanID()
			out = append(out, tid[:]...)
			out = append(out, sid[:]...)
			out = append(out, byte(m.SC.TraceFlags()))
		}
	}
	switch vs := any(b.Vs).(type) {
	case []int64:
		out = appendInts(out, vs, width)
	case []int:
		out = appendInts(out, vs, width)
	case []float64:
		at := len(out)
		out = slices.Grow(out, 8*len(vs))[:at+8*len(vs)]
		for i, v := range vs {
			binary.LittleEndian.PutUint64(out[at+8*i:], math.Float64bits(v))
		}
	case []string:
		for _, v := range vs {
			out = appendString(out, v)
		}
	default:
		body, err := msgpack.Marshal(b.Vs)
		if err != nil {
			return nil, fmt.Errorf("envelope seq %d: %w", env.Seq, err)
		}
		out = append(out, body...)
	}
	return out, nil
}

// narrowWidth is the fewest bytes (1 to 8) that hold every zigzagged value
// of vs (zigzag maps 0, -1, 1, -2, ... to 0, 1, 2, 3, ...: the size follows
// the magnitude).
func narrowWidth[I int64 | int](vs []I) int {
	var or uint64
	for _, v := range vs {
		or |= uint64(int64(v)<<1) ^ uint64(int64(v)>>63) // zigzag, by hand: generic code does not inline it
	}
	return max(1, (bits.Len64(or)+7)/8)
}

// appendInts appends vs: width 8, each value's 8 bytes; narrower, the
// width byte and each zigzagged value in width bytes (see Codec).
func appendInts[I int64 | int](out []byte, vs []I, width int) []byte {
	if width >= 8 {
		at := len(out)
		out = slices.Grow(out, 8*len(vs))[:at+8*len(vs)]
		for i, v := range vs {
			binary.LittleEndian.PutUint64(out[at+8*i:], uint64(v))
		}
		return out
	}
	out = append(out, byte(width))
	at, n := len(out), width*len(vs)
	// Each value is written as 8 bytes whose top ones are zero and are
	// overwritten by the next value: room for 8 past the last one.
	w := slices.Grow(out, n+8)[:at+n+8]
	dst := w[at:]
	for _, v := range vs {
		binary.LittleEndian.PutUint64(dst, uint64(int64(v)<<1)^uint64(int64(v)>>63))
		dst = dst[width:]
	}
	return w[:at+n]
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

var (
	errShort = errors.New("truncated envelope")
	errWidth = errors.New("narrow integers of a width other than 1 to 7 bytes")
)

type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) u64() uint64 {
	if len(r.b) < 8 {
		r.fail()
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

// narrow reads n integers written by appendInts with flagNarrow into vs.
func narrow[I int64 | int](r *reader, vs []I) {
	if r.err != nil || len(r.b) == 0 {
		r.fail()
		return
	}
	width := int(r.b[0])
	if width < 1 || width > 7 {
		r.err, r.b = fmt.Errorf("%w: %d", errWidth, width), nil
		return
	}
	b := r.b[1:]
	if uint64(len(b))/uint64(width) < uint64(len(vs)) {
		r.fail()
		return
	}
	rest := b[width*len(vs):]
	mask := uint64(1)<<(8*width) - 1
	i := 0
	for ; i < len(vs) && len(b) >= 8; i++ { // a whole word at a time while 8 bytes are left
		u := binary.LittleEndian.Uint64(b) & mask
		vs[i] = I(int64(u>>1) ^ -int64(u&1))
		b = b[width:]
	}
	for ; i < len(vs); i++ {
		var u uint64
		for j := width - 1; j >= 0; j-- {
			u = u<<8 | uint64(b[j])
		}
		vs[i] = I(int64(u>>1) ^ -int64(u&1))
		b = b[width:]
	}
	r.b = rest
}

// fixed takes n eight-byte values at once (nil, failing, when fewer are
// left).
func (r *reader) fixed(n int) []byte {
	if r.err != nil || uint64(len(r.b))/8 < uint64(n) {
		r.fail()
		return nil
	}
	b := r.b[:8*n]
	r.b = r.b[8*n:]
	return b
}

func (r *reader) str() string {
	n := r.uvarint()
	if r.err != nil || uint64(len(r.b)) < n {
		r.fail()
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// markBytes is the least a sampled record takes on the wire.
const markBytes = 1 + 1 + 16 + 8 + 1

// marks reads the sampled records of a batch of count records: in
// increasing order, within the batch, with valid trace contexts.
func (r *reader) marks(count uint64, budget int64) ([]Mark, error) {
	n := r.uvarint()
	if r.err != nil {
		return nil, r.err
	}
	if n == 0 || n > count || n > uint64(len(r.b))/markBytes {
		return nil, fmt.Errorf("%d sampled records of %d in %d bytes: %w", n, count, len(r.b), errShort)
	}
	if n*uint64(reflect.TypeOf(Mark{}).Size()) > uint64(budget) {
		return nil, fmt.Errorf("%d sampled records: %w", n, msgpacksafe.ErrTooLarge)
	}
	ms := make([]Mark, n)
	last := int64(-1)
	for j := range ms {
		i := r.uvarint()
		if r.err == nil && uint64(len(r.b)) > 0 {
			if l, k := binary.Uvarint(r.b); k > 0 && l > maxMarkID {
				return nil, fmt.Errorf("sampled record %d: id of %d bytes (at most %d)", j, l, maxMarkID)
			}
		}
		id := r.str()
		if r.err != nil || len(r.b) < 25 {
			r.fail()
			return nil, r.err
		}
		if i >= count || int64(i) <= last {
			return nil, fmt.Errorf("sampled record %d: index %d after %d in a batch of %d", j, i, last, count)
		}
		last = int64(i)
		var tid trace.TraceID
		var sid trace.SpanID
		copy(tid[:], r.b[:16])
		copy(sid[:], r.b[16:24])
		fl := trace.TraceFlags(r.b[24])
		r.b = r.b[25:]
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: fl, Remote: true})
		if !sc.IsValid() {
			return nil, fmt.Errorf("sampled record %d (%q): invalid trace context", j, id)
		}
		ms[j] = Mark{I: int32(i), ID: id, SC: sc}
	}
	return ms, nil
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = errShort
	}
	r.b = nil
}

// headerCost is what one header of an envelope allocates besides its
// strings' bytes (two string headers and its share of the map's table).
const headerCost = 64

// Decode decodes an envelope written by Encode. It never panics and
// allocates at most msgpacksafe's budget for the input's size: counts
// from the envelope's own header are checked against the data left and,
// times what one element allocates, against the budget before anything
// is allocated for them, and records encoded with msgpack are decoded by
// msgpacksafe.Decode. Errors name the envelope's sequence number and the
// record type.
func (Codec[T]) Decode(data []byte) (any, error) { return decodeEnvelope[T](data, nil) }

// DecodeLent is Decode that takes the array of a batch of int64, int or
// float64 records from a, the job's arrays of capacity size (see Arrays),
// when it lends one that holds them, instead of allocating it: records
// from another process decoded into the arrays that the job's sinks and
// its encodings for other processes (Reclaim) gave back. The checks and
// the bound on what is allocated are Decode's; a lent array is
// overwritten whole.
func (Codec[T]) DecodeLent(data []byte, a *Arrays, size int) (any, error) {
	return decodeEnvelope[T](data, arraysFor[T](a, size, true))
}

// decodeEnvelope is Decode, the array of int64, int or float64 records
// taken from free (nil: allocated).
func decodeEnvelope[T any](data []byte, free *freeArrays[T]) (any, error) {
	if len(data) < 2 {
		return nil, errShort
	}
	budget := msgpacksafe.Limits{}.Budget(len(data))
	r := &reader{b: data[2:]}
	env := &actors.Envelope{Kind: actors.Kind(data[0])}
	flags := data[1]
	env.Channel = int(r.uvarint())
	env.Seq = r.uvarint()
	count := r.uvarint()
	env.Mark = r.varint()
	if flags&flagHeaders != 0 {
		n := r.uvarint()
		// Every header takes at least two bytes.
		if n > uint64(len(r.b))/2 || int64(n) > budget/headerCost {
			return nil, fmt.Errorf("envelope seq %d: %d headers in %d bytes: %w", env.Seq, n, len(r.b), errShort)
		}
		env.Headers = make(map[string]string, n)
		for range n {
			k := r.str()
			env.Headers[k] = r.str()
			if r.err != nil {
				return nil, r.err
			}
		}
	}
	if flags&flagLatency != 0 {
		born, sent := r.uvarint(), r.uvarint()
		keep := math.Float64frombits(r.u64())
		if r.err != nil {
			return nil, fmt.Errorf("envelope seq %d: latency: %w", env.Seq, r.err)
		}
		if born > math.MaxInt64 || sent > math.MaxInt64 || !(keep >= 0 && keep <= 1) {
			return nil, fmt.Errorf("envelope seq %d: born %d, sent %d, keep %v: out of range", env.Seq, born, sent, keep)
		}
		env.Born, env.Sent, env.Keep = int64(born), int64(sent), keep
	}
	if r.err != nil {
		return nil, r.err
	}
	if env.Kind != actors.Data {
		return env, nil
	}
	var zero T
	// Every record takes at least a byte, and a time eight: a count the
	// data cannot hold, or whose slices would take more than the budget,
	// is refused before anything is allocated for it.
	per := uint64(1)
	size := uint64(reflect.TypeOf(&zero).Elem().Size())
	if flags&flagTimes != 0 {
		per += 8
		size += 8
	}
	if count > uint64(len(r.b))/per {
		return nil, fmt.Errorf("envelope seq %d: %d records of %T in %d bytes", env.Seq, count, zero, len(r.b))
	}
	if size > 0 && count > uint64(budget)/size {
		return nil, fmt.Errorf("envelope seq %d: %d records of %T (%d bytes each) in %d bytes: %w",
			env.Seq, count, zero, size, len(data), msgpacksafe.ErrTooLarge)
	}
	env.Count = int(count)
	b := &Batch[T]{}
	if flags&flagTimes != 0 {
		b.Ts = make([]int64, count)
		for i := range b.Ts {
			b.Ts[i] = int64(r.u64())
		}
	}
	if flags&flagTraces != 0 {
		ms, err := r.marks(count, budget)
		if err != nil {
			return nil, fmt.Errorf("envelope seq %d: %w", env.Seq, err)
		}
		b.Tr = ms
	}
	switch any(zero).(type) {
	case int64, int, float64: // every value is written below
		b.Vs = free.take(int(count))
	case string:
		b.Vs = make([]T, count)
	}
	if flags&flagNarrow != 0 {
		switch any(zero).(type) {
		case int64, int:
		default:
			return nil, fmt.Errorf("envelope seq %d: narrow integers for records of %T", env.Seq, zero)
		}
	}
	narrowed := flags&flagNarrow != 0
	switch vs := any(b.Vs).(type) {
	case []int64:
		if narrowed {
			narrow(r, vs)
		} else if fixed := r.fixed(len(vs)); fixed != nil {
			for i := range vs {
				vs[i] = int64(binary.LittleEndian.Uint64(fixed[8*i:]))
			}
		}
	case []int:
		if narrowed {
			narrow(r, vs)
		} else if fixed := r.fixed(len(vs)); fixed != nil {
			for i := range vs {
				vs[i] = int(binary.LittleEndian.Uint64(fixed[8*i:]))
			}
		}
	case []float64:
		if fixed := r.fixed(len(vs)); fixed != nil {
			for i := range vs {
				vs[i] = math.Float64frombits(binary.LittleEndian.Uint64(fixed[8*i:]))
			}
		}
	case []string:
		for i := range vs {
			vs[i] = r.str()
		}
	default:
		if r.err != nil {
			break
		}
		// Decoded into a nil slice: msgpacksafe bounds what the slice and
		// its records allocate; the count is checked after.
		if err := msgpacksafe.Decode(r.b, &b.Vs, msgpacksafe.Limits{Source: "envelope seq " + strconv.FormatUint(env.Seq, 10)}); err != nil {
			return nil, err
		}
		r.b = nil
	}
	if r.err != nil {
		return nil, fmt.Errorf("envelope seq %d: %w", env.Seq, r.err)
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("envelope seq %d: %d bytes after the records", env.Seq, len(r.b))
	}
	if len(b.Vs) != env.Count {
		return nil, fmt.Errorf("envelope seq %d: %d records of %T, header says %d", env.Seq, len(b.Vs), zero, env.Count)
	}
	env.Payload = b
	return env, nil
}

// decodeState decodes an operator's state from a checkpoint with
// msgpacksafe.Decode. State is mostly maps and keyed slices, which decode
// to up to ten times their encoding: the budget is 32 × the input (as the
// snapshots of package persistence allow).
func decodeState(b []byte, v any, what string) error {
	return msgpacksafe.Decode(b, v, msgpacksafe.Limits{Source: what, Factor: 32})
}

// Header is what an encoded envelope says of itself before its records.
type Header struct {
	Kind    actors.Kind
	Channel int
	Seq     uint64
	Count   int
	Mark    int64
}

// DecodeHeader reads the header of an envelope written by Codec.Encode
// without decoding its records (an unaligned checkpoint sorts spilled
// envelopes by channel and sequence and keeps their bytes). It never
// panics.
func DecodeHeader(data []byte) (Header, error) {
	if len(data) < 2 {
		return Header{}, errShort
	}
	r := &reader{b: data[2:]}
	h := Header{Kind: actors.Kind(data[0])}
	ch := r.uvarint()
	h.Seq = r.uvarint()
	n := r.uvarint()
	h.Mark = r.varint()
	if r.err != nil {
		return Header{}, r.err
	}
	if ch > math.MaxInt32 || n > math.MaxInt32 {
		return Header{}, fmt.Errorf("envelope seq %d: channel %d, %d records: out of range", h.Seq, ch, n)
	}
	h.Channel, h.Count = int(ch), int(n)
	return h, nil
}
