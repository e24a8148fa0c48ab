package state

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
)

// Spec chooses a topology's state backend: memory (Dir empty, the
// default) or disk (pebble under Dir, with a write-back cache of Budget
// bytes, keeping the newest Retain checkpoints). The memory backend
// checkpoints its whole map, or, with Changelog set, incrementally to
// files under Changelog (a base, then deltas of the changed keys, a base
// again after MaxChain deltas; see OpenChangelog), keeping the newest
// Retain checkpoints' files.
type Spec struct {
	Dir       string
	Budget    int64
	Retain    int
	Changelog string
	MaxChain  int
}

// Disk says whether the spec is the disk backend.
func (s Spec) Disk() bool { return s.Dir != "" }

// DefaultBudget is the disk backend's cache budget when none is given
// (per operator instance).
const DefaultBudget = 64 << 20

// DefaultRetain is how many checkpoints the disk backend keeps.
const DefaultRetain = 2

// Table is the seam every keyed operator's state goes through: one
// operator instance's values of type V by key K. A Table belongs to the
// instance's actor: it is not safe for concurrent use.
type Table[K comparable, V any] interface {
	// Get returns k's value, and whether k has one.
	Get(k K) (V, bool)
	// Put sets k's value; existed says that Get just found k (it spares
	// the backend a lookup).
	Put(k K, v V, existed bool)
	// Delete forgets k.
	Delete(k K)
	// All yields every key and its value: the memory backend in first-put
	// order, the disk backend by key group then encoded key.
	All(yield func(K, V) bool)
	// Snapshot records the table as of now for checkpoint id and returns
	// what the checkpoint keeps of it (the whole state in memory, a
	// handle to the files on disk).
	Snapshot(id uint64) ([]byte, error)
	// Committed says that checkpoint id is complete: older ones beyond
	// the retained may go.
	Committed(id uint64)
	// Restore replaces the table with the keys of groups [lo, hi) from
	// the snapshots of one or more instances (one when the parallelism is
	// unchanged, with lo, hi covering every group).
	Restore(snaps [][]byte, lo, hi int) error
	// Close releases the table's files.
	Close() error
}

// Error is a failure of the disk backend, naming the file or directory.
type Error struct {
	Path string
	Err  error
}

func (e *Error) Error() string { return "state " + e.Path + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// ErrCorrupt is the cause of an Error for a checkpoint whose files do not
// match their manifest.
var ErrCorrupt = errors.New("corrupt checkpoint")

// Mem is the memory backend: a Go map, and the keys in first-put order so
// that results emitted at the end are deterministic. Its Snapshot is the
// format keyed aggregations always wrote ({k: keys, a: values}).
//
// With a changelog (OpenChangelog) its checkpoints are incremental: a
// caller that writes M and Order itself must call Changed after each put
// (Put, Delete and DeleteAll do their part).
type Mem[K comparable, V any] struct {
	M     map[K]V
	Order []K
	// owns says whether a key's group lies in [lo, hi) (KeyBy's hash).
	owns func(k K, lo, hi int) bool

	// The changelog's (nil: every snapshot is the whole map).
	log   *changelog
	kc    codec[K]
	vc    codec[V]
	track bool        // changes are tracked (a delta may follow)
	full  bool        // the next snapshot is a base
	dirty map[K]uint8 // the keys changed since the last snapshot: wasPresent, removed
	fresh int         // the keys at the end of Order appended since
	// changed counts the dirty keys that had a value at the last snapshot
	// (updated or deleted since); more than limit: the next snapshot is a
	// base. Appended keys do not count: a delta writes them as a base
	// would, so a table that only grows goes on with deltas (until the
	// chain's rules call for a base).
	changed int
	limit   int
	// Intervals between snapshots that overflowed (resetTracking): over,
	// the one under way; overs, the tracked ones in a row; skip, the
	// untracked ones still to come; skipping, the one under way is.
	over     bool
	overs    int
	skip     int
	skipping bool
	// The compiled encoders of whole-map snapshots (nil: msgpack's).
	kenc, venc encFn
	// lastPerKey is the encoded bytes per key of the last fast snapshot
	// (the next one's buffer is sized by it).
	lastPerKey int
}

// NewMem is an empty memory table; owns tells Restore which keys belong
// to a range of key groups.
func NewMem[K comparable, V any](owns func(k K, lo, hi int) bool) *Mem[K, V] {
	return &Mem[K, V]{M: make(map[K]V), owns: owns, kc: newCodec[K]("key"), vc: newCodec[V]("state"),
		kenc: compileEnc(reflect.TypeFor[K]()), venc: compileEnc(reflect.TypeFor[V]())}
}

func (m *Mem[K, V]) Get(k K) (V, bool) { v, ok := m.M[k]; return v, ok }

func (m *Mem[K, V]) Put(k K, v V, existed bool) {
	if !existed {
		m.Order = append(m.Order, k)
	}
	m.M[k] = v
	if m.track {
		m.touch(k, existed)
	}
}

// Delete forgets k (a scan of Order: use DeleteAll for many keys).
func (m *Mem[K, V]) Delete(k K) {
	if _, ok := m.M[k]; ok {
		if m.track {
			m.deleted(k)
		}
		delete(m.M, k)
		for i, o := range m.Order {
			if o == k {
				m.Order = append(m.Order[:i], m.Order[i+1:]...)
				break
			}
		}
	}
}

// Clear forgets every key. With a changelog the next snapshot is a base
// (of an empty table, unless keys are put before it), so no tombstone is
// tracked per key.
func (m *Mem[K, V]) Clear() {
	clear(m.M)
	clear(m.Order)
	m.Order = m.Order[:0]
	if m.log != nil { // as overflow, but no churn: the next interval is tracked
		m.track, m.full, m.fresh, m.changed = false, true, 0, 0
	}
}

// DeleteAll forgets the keys gone says, in one pass over Order.
func (m *Mem[K, V]) DeleteAll(gone map[K]bool) {
	for k := range gone {
		if _, ok := m.M[k]; ok && m.track {
			m.deleted(k)
		}
		delete(m.M, k)
	}
	j := 0
	for _, k := range m.Order {
		if !gone[k] {
			m.Order[j] = k
			j++
		}
	}
	clear(m.Order[j:])
	m.Order = m.Order[:j]
}

func (m *Mem[K, V]) All(yield func(K, V) bool) {
	for _, k := range m.Order {
		if !yield(k, m.M[k]) {
			return
		}
	}
}

type memState[K comparable, V any] struct {
	Keys []K `msgpack:"k"`
	Accs []V `msgpack:"a"`
}

// Snapshot returns the whole map ({k: keys, a: values} in msgpack) or,
// with a changelog, writes the checkpoint's base or delta and returns the
// handle of its chain.
func (m *Mem[K, V]) Snapshot(id uint64) ([]byte, error) {
	if m.log != nil {
		b, _, err := m.snapshotChangelog(id, nil)
		return b, err
	}
	if m.kenc != nil && m.venc != nil {
		return m.snapshotFast(), nil
	}
	st := memState[K, V]{Keys: m.Order, Accs: make([]V, len(m.Order))}
	for i, k := range m.Order {
		st.Accs[i] = m.M[k]
	}
	b, err := msgpack.Marshal(&st)
	if err != nil {
		return nil, fmt.Errorf("encode state of %d keys: %w", len(m.Order), err)
	}
	return b, nil
}

// snapshotFast is the whole map as msgpack.Marshal(&memState{...})
// writes it, byte for byte, with the compiled encoders of the keys and
// values (fastenc.go).
func (m *Mem[K, V]) snapshotFast() []byte {
	b := make([]byte, 0, 64+len(m.Order)*(16+m.lastPerKey))
	b = append(b, 0x82, 0xa1, 'k') // {k: keys, a: values}
	if m.Order == nil {
		b = append(b, 0xc0)
	} else {
		b = msgpacksafe.AppendArrayLen(b, len(m.Order))
	}
	for i := range m.Order {
		b = m.kenc(b, unsafe.Pointer(&m.Order[i]))
	}
	b = append(b, 0xa1, 'a')
	b = msgpacksafe.AppendArrayLen(b, len(m.Order))
	start := len(b)
	var v V // one for every key: its address goes to the encoder
	for _, k := range m.Order {
		v = m.M[k]
		b = m.venc(b, unsafe.Pointer(&v))
	}
	if len(m.Order) > 0 {
		m.lastPerKey = (len(b) - start) / len(m.Order)
	}
	return b
}

// Restore replaces the table with the keys of groups [lo, hi) of snaps:
// whole maps, changelog handles (their files read from the changelog
// directory) or inline chains (a savepoint's). A table with a changelog
// writes a base at its next snapshot. On an error the table is as it was.
func (m *Mem[K, V]) Restore(snaps [][]byte, lo, hi int) error {
	order, M, recs, err := m.restore(snaps, lo, hi)
	if err != nil {
		return err
	}
	if m.log != nil {
		m.log.snaps = append(m.log.snaps, recs...)
	}
	m.Order, m.M = order, M
	if m.M == nil {
		m.M = map[K]V{}
	}
	m.track, m.full, m.dirty, m.fresh = false, true, nil, 0
	m.over, m.overs, m.skip, m.skipping = false, 0, 0, true
	if m.log != nil {
		m.log.chain = nil
	}
	return nil
}

func (m *Mem[K, V]) restore(snaps [][]byte, lo, hi int) ([]K, map[K]V, []snapRec, error) {
	var recs []snapRec // the restored checkpoints' files: kept while they are retained
	var order []K
	var M map[K]V
	all := len(snaps) == 1 && lo <= 0 && hi == AllGroups
	if !all {
		M = map[K]V{}
	}
	for i, b := range snaps {
		var files [][]byte
		var err error
		switch {
		case IsChangelog(b):
			root := ""
			if m.log != nil {
				root = m.log.root
			}
			files, err = readChain(b, root)
			if err == nil {
				id, refs, _ := decodeHandle(b)
				recs = append(recs, snapRec{id: id, files: refs, committed: true, restored: true})
			}
		case bytes.HasPrefix(b, inlineMagic):
			files, err = decodeInline(b)
		}
		if err != nil {
			return nil, nil, nil, wrapN(i, len(snaps), err)
		}
		if files != nil {
			if M, order, err = m.applyChain(files, M, order, lo, hi, all); err != nil {
				return nil, nil, nil, wrapN(i, len(snaps), &Error{Path: "changelog", Err: err})
			}
			continue
		}
		var st memState[K, V]
		if err := msgpacksafe.Decode(b, &st, msgpacksafe.Limits{Source: "per-key state", Factor: 32}); err != nil {
			return nil, nil, nil, wrapN(i, len(snaps), err)
		}
		if len(st.Keys) != len(st.Accs) {
			return nil, nil, nil, wrapN(i, len(snaps), fmt.Errorf("%d keys but %d values", len(st.Keys), len(st.Accs)))
		}
		if all {
			order = st.Keys
			M = make(map[K]V, len(st.Keys))
		}
		for j, k := range st.Keys {
			if all {
				M[k] = st.Accs[j]
				continue
			}
			if _, dup := M[k]; !dup && m.owns(k, lo, hi) {
				order = append(order, k)
				M[k] = st.Accs[j]
			}
		}
	}
	return order, M, recs, nil
}

// AllGroups is the hi of Restore for "every key" (a restore at the same
// parallelism keeps the snapshot's keys as they are).
const AllGroups = math.MaxInt

func wrapN(i, n int, err error) error {
	if n == 1 {
		return err
	}
	return fmt.Errorf("state %d of %d: %w", i+1, n, err)
}
