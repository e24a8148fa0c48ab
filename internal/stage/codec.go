package stage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/msgpacksafe"
)

// Codec encodes the envelopes of an edge carrying records of type T
// for the spill. The header is binary; values of the common scalar and
// string types are written directly, others with msgpack.
//
//	kind(1) flags(1) channel seq count mark(varint) [headers] [times] values
type Codec[T any] struct{}

const (
	flagHeaders = 1 << iota
	flagTimes
)

func (Codec[T]) Encode(msg any) ([]byte, error) {
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
	out := make([]byte, 0, 32+env.Count*9)
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
	switch vs := any(b.Vs).(type) {
	case []int64:
		for _, v := range vs {
			out = binary.LittleEndian.AppendUint64(out, uint64(v))
		}
	case []int:
		for _, v := range vs {
			out = binary.LittleEndian.AppendUint64(out, uint64(v))
		}
	case []float64:
		for _, v := range vs {
			out = binary.LittleEndian.AppendUint64(out, math.Float64bits(v))
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

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

var errShort = errors.New("truncated envelope")

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

func (r *reader) fail() {
	if r.err == nil {
		r.err = errShort
	}
	r.b = nil
}

func (Codec[T]) Decode(data []byte) (any, error) {
	if len(data) < 2 {
		return nil, errShort
	}
	r := &reader{b: data[2:]}
	env := &actors.Envelope{Kind: actors.Kind(data[0])}
	flags := data[1]
	env.Channel = int(r.uvarint())
	env.Seq = r.uvarint()
	count := r.uvarint()
	env.Mark = r.varint()
	if flags&flagHeaders != 0 {
		n := r.uvarint()
		if n > uint64(len(r.b)) { // every header takes at least two bytes
			return nil, errShort
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
	if r.err != nil {
		return nil, r.err
	}
	if env.Kind != actors.Data {
		return env, nil
	}
	// Every record takes at least a byte: a count the data cannot hold is
	// refused before anything is allocated for it.
	if count > uint64(len(r.b)) {
		return nil, fmt.Errorf("envelope seq %d: %d records in %d bytes", env.Seq, count, len(r.b))
	}
	env.Count = int(count)
	b := &Batch[T]{Vs: make([]T, count)}
	if flags&flagTimes != 0 {
		b.Ts = make([]int64, count)
		for i := range b.Ts {
			b.Ts[i] = int64(r.u64())
		}
	}
	switch vs := any(b.Vs).(type) {
	case []int64:
		for i := range vs {
			vs[i] = int64(r.u64())
		}
	case []int:
		for i := range vs {
			vs[i] = int(r.u64())
		}
	case []float64:
		for i := range vs {
			vs[i] = math.Float64frombits(r.u64())
		}
	case []string:
		for i := range vs {
			vs[i] = r.str()
		}
	default:
		if err := checkedUnmarshal(r.b, &b.Vs); err != nil {
			return nil, fmt.Errorf("envelope seq %d: %w", env.Seq, err)
		}
		r.b = nil
	}
	if r.err != nil {
		return nil, fmt.Errorf("envelope seq %d: %w", env.Seq, r.err)
	}
	if len(b.Vs) != env.Count {
		return nil, fmt.Errorf("envelope seq %d: %d records, header says %d", env.Seq, len(b.Vs), env.Count)
	}
	env.Payload = b
	return env, nil
}

// checkedUnmarshal decodes msgpack data after checking that no length in it
// exceeds what the data can hold (msgpack v5.4 would allocate it first).
func checkedUnmarshal(data []byte, v any) error {
	if err := msgpacksafe.Check(data); err != nil {
		return err
	}
	return msgpack.Unmarshal(data, v)
}
