package supervision

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
)

// DeadLetter is a record that could not be processed or delivered, kept
// with what is known about its failure so that it can be inspected,
// replayed or purged (see the sluice deadletters command).
type DeadLetter struct {
	// Seq is assigned by the store's Add: increasing, never reused, even
	// after deletes.
	Seq      uint64    `msgpack:"-"`
	Job      string    `msgpack:"job"`
	Operator string    `msgpack:"op"`
	Instance int       `msgpack:"inst"`
	Error    string    `msgpack:"err"`
	Attempts int       `msgpack:"attempts"`
	Time     time.Time `msgpack:"time"`
	TraceID  string    `msgpack:"trace,omitempty"` // W3C trace id of the record, if sampled
	// Payload is the record, msgpack-encoded (see EncodePayload).
	Payload []byte `msgpack:"payload"`
}

// Filter selects dead letters by job and operator; an empty field matches
// every value.
type Filter struct {
	Job      string
	Operator string
}

// Match says whether d passes the filter.
func (f Filter) Match(d DeadLetter) bool {
	return (f.Job == "" || f.Job == d.Job) && (f.Operator == "" || f.Operator == d.Operator)
}

func (f Filter) empty() bool { return f == Filter{} }

// DeadLetterStore keeps dead letters. Implementations are safe for
// concurrent use. List returns dead letters in the order of their Seq.
type DeadLetterStore interface {
	// Add stores d (its Seq is ignored) and returns the Seq assigned.
	Add(d DeadLetter) (uint64, error)
	// Get returns the dead letter seq, or an error wrapping ErrNotFound.
	Get(seq uint64) (DeadLetter, error)
	// List returns up to limit dead letters that pass f (limit <= 0: all).
	// Records that do not decode are left out and reported in the error
	// (wrapping ErrCorrupt), along with the records that do.
	List(f Filter, limit int) ([]DeadLetter, error)
	// Delete removes the dead letter seq, or returns an error wrapping
	// ErrNotFound.
	Delete(seq uint64) error
	// Purge removes the dead letters that pass f and returns how many it
	// removed. An empty filter removes every record, readable or not.
	Purge(f Filter) (int, error)
	// Len is the number of dead letters stored.
	Len() (int, error)
}

// EncodePayload encodes a record for DeadLetter.Payload (msgpack; structs
// become maps keyed by field name).
func EncodePayload(v any) ([]byte, error) {
	b, err := msgpack.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("supervision: encode dead-letter payload %T: %w", v, err)
	}
	return b, nil
}

// DecodePayload decodes the payload into plain values that encoding/json
// renders: maps with string keys (other keys are formatted with fmt),
// slices, strings, numbers (NaN and infinities become strings), booleans,
// times and nil; binary data stays []byte. An empty payload is nil. A
// payload that is not exactly one msgpack value (damaged, or text that a
// producer stored instead) is an error; it is checked with msgpacksafe
// first, so damaged bytes never cause a huge allocation.
func (d DeadLetter) DecodePayload() (any, error) {
	if len(d.Payload) == 0 {
		return nil, nil
	}
	// Text that starts like a small msgpack value ("{...", a digit) is
	// not msgpack: Decode refuses the bytes after the value.
	var v any
	err := msgpacksafe.Decode(d.Payload, &v, msgpacksafe.Limits{Source: "dead-letter payload",
		Configure: func(dec *msgpack.Decoder) { dec.SetMapDecoder(decodeStringMap) }})
	if err != nil {
		return nil, fmt.Errorf("supervision: dead letter %d: payload: %w", d.Seq, err)
	}
	return jsonable(v), nil
}

func decodeStringMap(dec *msgpack.Decoder) (any, error) {
	n, err := dec.DecodeMapLen()
	if err != nil || n < 0 {
		return nil, err
	}
	m := make(map[string]any, n)
	for range n {
		k, err := dec.DecodeInterface()
		if err != nil {
			return nil, err
		}
		v, err := dec.DecodeInterface()
		if err != nil {
			return nil, err
		}
		if s, ok := k.(string); ok {
			m[s] = v
		} else {
			m[fmt.Sprint(jsonable(k))] = v
		}
	}
	return m, nil
}

// jsonable replaces the values encoding/json refuses.
func jsonable(v any) any {
	switch x := v.(type) {
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Sprint(x)
		}
	case float32:
		return jsonable(float64(x))
	case []any:
		for i := range x {
			x[i] = jsonable(x[i])
		}
	case map[string]any:
		for k, e := range x {
			x[k] = jsonable(e)
		}
	}
	return v
}

// deadLetterFormat is the first byte of a stored dead letter, before its
// msgpack map: the record format's version.
const deadLetterFormat = 1

// encodeDeadLetter is the stored form of d (without Seq, which is the key).
func encodeDeadLetter(d DeadLetter) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte(deadLetterFormat)
	enc := msgpack.NewEncoder(&buf)
	if err := enc.Encode(&d); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// decodeDeadLetter decodes the stored form; the caller sets Seq. It never
// panics and never allocates more than the data can describe.
func decodeDeadLetter(b []byte) (DeadLetter, error) {
	var d DeadLetter
	if len(b) == 0 {
		return d, errors.New("empty record")
	}
	if b[0] != deadLetterFormat {
		return d, fmt.Errorf("record format %d, this build reads %d", b[0], deadLetterFormat)
	}
	body := b[1:]
	if len(body) == 0 || body[0]&0xf0 != 0x80 && body[0] != 0xde && body[0] != 0xdf {
		return d, errors.New("not a msgpack map")
	}
	if err := msgpacksafe.Decode(body, &d, msgpacksafe.Limits{Source: "dead-letter record"}); err != nil {
		return DeadLetter{}, err
	}
	d.Payload = bytes.Clone(d.Payload) // do not alias the caller's buffer
	return d, nil
}

var (
	_ DeadLetterStore = (*MemoryDeadLetters)(nil)
	_ DeadLetterStore = (*BoltDeadLetters)(nil)
)

// MemoryDeadLetters is a DeadLetterStore in memory, for tests and jobs
// without a store file.
type MemoryDeadLetters struct {
	mu       sync.Mutex
	capacity int
	next     uint64
	items    []DeadLetter // by Seq
}

// NewMemoryDeadLetters returns an empty store that holds up to capacity
// dead letters (0: no limit); Add refuses more with an error wrapping
// ErrFull.
func NewMemoryDeadLetters(capacity int) (*MemoryDeadLetters, error) {
	if capacity < 0 {
		return nil, errorf(ErrInvalidConfig, "supervision: dead letters: negative capacity %d", capacity)
	}
	return &MemoryDeadLetters{capacity: capacity}, nil
}

func cloneLetter(d DeadLetter) DeadLetter {
	d.Payload = bytes.Clone(d.Payload)
	return d
}

// Add implements DeadLetterStore.
func (m *MemoryDeadLetters) Add(d DeadLetter) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.capacity > 0 && len(m.items) >= m.capacity {
		return 0, errorf(ErrFull, "supervision: dead letters: full at its capacity of %d", m.capacity)
	}
	m.next++
	d = cloneLetter(d)
	d.Seq = m.next
	m.items = append(m.items, d)
	return d.Seq, nil
}

func (m *MemoryDeadLetters) find(seq uint64) (int, bool) {
	return slices.BinarySearchFunc(m.items, seq, func(d DeadLetter, s uint64) int {
		switch {
		case d.Seq < s:
			return -1
		case d.Seq > s:
			return 1
		}
		return 0
	})
}

// Get implements DeadLetterStore.
func (m *MemoryDeadLetters) Get(seq uint64) (DeadLetter, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i, ok := m.find(seq)
	if !ok {
		return DeadLetter{}, errorf(ErrNotFound, "supervision: dead letter %d: not found", seq)
	}
	return cloneLetter(m.items[i]), nil
}

// List implements DeadLetterStore.
func (m *MemoryDeadLetters) List(f Filter, limit int) ([]DeadLetter, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []DeadLetter
	for _, d := range m.items {
		if limit > 0 && len(out) >= limit {
			break
		}
		if f.Match(d) {
			out = append(out, cloneLetter(d))
		}
	}
	return out, nil
}

// Delete implements DeadLetterStore.
func (m *MemoryDeadLetters) Delete(seq uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	i, ok := m.find(seq)
	if !ok {
		return errorf(ErrNotFound, "supervision: dead letter %d: not found", seq)
	}
	m.items = slices.Delete(m.items, i, i+1)
	return nil
}

// Purge implements DeadLetterStore.
func (m *MemoryDeadLetters) Purge(f Filter) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := len(m.items)
	m.items = slices.DeleteFunc(m.items, f.Match)
	return n - len(m.items), nil
}

// Len implements DeadLetterStore.
func (m *MemoryDeadLetters) Len() (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.items), nil
}
