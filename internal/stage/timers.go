package stage

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
	"github.com/sluicehq/sluice/internal/state"
)

// diskTimers keeps a Process stage's event-time timers on the disk
// backend: a second disk table of the stage (state.TableOp(name, 1)),
// beside its state table and checkpointed with it in the same bundle,
// whose keys are the timers themselves, ordered by time:
//
//	key group (1 byte) | time ^ 1<<63 (8 bytes, big-endian) | encoded key
//
// The table's own prefix is that key group too, so each of the 128 key
// groups is a range ordered by (time, key), and the timers due at a
// watermark are a scan from the start of the groups whose earliest timer
// is due (Flink's timer service in RocksDB keeps a queue per key group
// the same way). What it holds in memory is bounded: the table's
// write-back cache (its share of the budget), a lower bound of each
// group's earliest time, and, while firing, at most fireBatch timers a
// group (plus those the timers set at or before the cut).
type diskTimers[K comparable] struct {
	tab     *state.Disk[string, struct{}]
	kc      timerKeyCodec[K]
	hash    func(K) uint64
	heads   [maxKeyGroups]int64 // each group's earliest timer, or less (MaxInt64: none)
	buf     []byte
	due     []dueTimer[K] // while firing: a min-heap by (at, id)
	firing  bool
	cut     int64 // while firing: a timer set at or before it joins due
	wm      int64 // while firing: the watermark
	maxHeld int   // the most timers due held at once (tests)
}

// fireBatch is how many due timers a fire reads of a key group at a time.
const fireBatch = 32

type dueTimer[K comparable] struct {
	id  string
	at  int64
	key K
}

func (a *dueTimer[K]) less(b *dueTimer[K]) bool {
	return a.at < b.at || a.at == b.at && a.id < b.id
}

// timerBudget is the timer table's budget beside a state table of
// budget bytes: a quarter (state.Spec.Budget is per table).
func timerBudget(budget int64) int64 {
	if budget <= 0 {
		budget = state.DefaultBudget
	}
	return max(budget/4, 64<<10)
}

// openDiskTimers opens the timer table of a stage on the disk backend.
func openDiskTimers[K comparable](sc *Ctx) (*diskTimers[K], error) {
	spec := sc.State
	spec.Budget = timerBudget(spec.Budget)
	tab, err := state.OpenDisk[string, struct{}](spec, state.TableOp(sc.Name, 1), sc.Instance, sc.Parts,
		func(id string) uint64 { return uint64(id[0]) }, func(err error) { sc.fail(err) })
	if err != nil {
		return nil, err
	}
	t := &diskTimers[K]{tab: tab, kc: newTimerKeyCodec[K](), hash: HasherFor[K]()}
	t.unknown()
	return t, nil
}

// unknown makes every group's earliest time unknown (after a restore).
func (t *diskTimers[K]) unknown() {
	for i := range t.heads {
		t.heads[i] = math.MinInt64
	}
}

// set sets the timer of k at at; false: it was set already.
func (t *diskTimers[K]) set(at int64, k K) bool {
	kg := KeyGroupOf(t.hash(k))
	var err error
	t.buf, err = appendTimerID(t.buf[:0], t.kc, kg, at, k)
	if err != nil {
		panic(err) // the stage's codec failed on a key it hashed: not a stored byte
	}
	if _, ok := t.tab.Get(string(t.buf)); ok {
		return false
	}
	id := string(t.buf)
	t.tab.Put(id, struct{}{}, false)
	t.heads[kg] = min(t.heads[kg], at)
	if t.firing && at <= t.wm && at <= t.cut {
		t.push(dueTimer[K]{id, at, k})
	}
	return true
}

// fire runs fn for every timer at or before wm, in time order (timers of
// one time by key group and encoded key, in each round), each once: a
// timer is deleted before fn runs, and fn may set timers (those due fire
// in this call).
//
// A round reads up to fireBatch due timers of each group whose earliest
// may be due; the cut is the earliest time of the last one read of a
// group that has more: the round fires every timer read at or before
// the cut (the rest are read again by the next round), so no timer fires
// before one of an earlier time.
func (t *diskTimers[K]) fire(wm int64, fail func(error), fn func(at int64, k K)) {
	for {
		t.due = t.due[:0]
		cut := int64(math.MaxInt64)
		for g := range t.heads {
			if t.heads[g] > wm {
				continue
			}
			n, next, more := 0, int64(math.MaxInt64), false
			// From the group's earliest time on: the timers fired before
			// it are deletions pebble has yet to compact away.
			var from []byte
			if h := t.heads[g]; h != math.MinInt64 {
				from = binary.BigEndian.AppendUint64(append(t.buf[:0], byte(g)), uint64(h)^1<<63)
			}
			t.tab.Range(g, from, nil, func(id string, _ struct{}) bool {
				kg, at, k, err := decodeTimerID(id, t.kc)
				if err == nil && kg != g {
					err = fmt.Errorf("%w: key group %d stored under group %d", errTimerBytes, kg, g)
				}
				if err != nil {
					fail(err)
					return false
				}
				if at > wm || n == fireBatch {
					next, more = at, at <= wm
					return false
				}
				t.due = append(t.due, dueTimer[K]{id, at, k})
				n++
				return true
			})
			if n == 0 {
				t.heads[g] = next
				continue
			}
			t.heads[g] = t.due[len(t.due)-n].at // a lower bound: they are deleted as they fire
			if more {
				cut = min(cut, t.due[len(t.due)-1].at)
			}
		}
		if len(t.due) == 0 {
			return
		}
		sortDue(t.due)
		for i := range t.due { // those after the cut wait for the next round
			if t.due[i].at > cut {
				clear(t.due[i:])
				t.due = t.due[:i]
				break
			}
		}
		t.maxHeld = max(t.maxHeld, len(t.due))
		t.firing, t.cut, t.wm = true, cut, wm
		for len(t.due) > 0 {
			e := t.pop()
			t.tab.Delete(e.id)
			fn(e.at, e.key)
		}
		t.firing = false
	}
}

// sortDue sorts by (at, id): a sorted slice is a min-heap.
func sortDue[K comparable](d []dueTimer[K]) {
	slices.SortFunc(d, func(a, b dueTimer[K]) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
}

func (t *diskTimers[K]) push(e dueTimer[K]) {
	t.due = append(t.due, e)
	d := t.due
	for i := len(d) - 1; i > 0; {
		p := (i - 1) / 2
		if !d[i].less(&d[p]) {
			break
		}
		d[i], d[p] = d[p], d[i]
		i = p
	}
	t.maxHeld = max(t.maxHeld, len(d))
}

func (t *diskTimers[K]) pop() dueTimer[K] {
	d := t.due
	e := d[0]
	n := len(d) - 1
	d[0] = d[n]
	d[n] = dueTimer[K]{}
	d = d[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && d[l].less(&d[m]) {
			m = l
		}
		if r := l + 1; r < n && d[r].less(&d[m]) {
			m = r
		}
		if m == i {
			break
		}
		d[i], d[m] = d[m], d[i]
		i = m
	}
	t.due = d
	return e
}

// held is how many timers the structure holds in memory: the table's
// cache entries and the due timers.
func (t *diskTimers[K]) held() int { return t.tab.CacheLen() + len(t.due) }

// restore replaces the timers with those of groups [lo, hi) of the timer
// tables snaps (none: no timers), then sets the old-style ones given.
func (t *diskTimers[K]) restore(snaps [][]byte, lo, hi int, keys []K, ats []int64) error {
	if len(snaps) == 0 {
		lo, hi = 0, 0
	}
	if err := t.tab.Restore(snaps, lo, hi); err != nil {
		return fmt.Errorf("timers: %w", err)
	}
	t.unknown()
	for i, k := range keys {
		t.set(ats[i], k)
	}
	return nil
}

// errTimerBytes is the cause of a stored timer that does not decode.
var errTimerBytes = errors.New("stored timer damaged")

// appendTimerID appends the stored key of k's timer at at.
func appendTimerID[K comparable](b []byte, kc timerKeyCodec[K], kg int, at int64, k K) ([]byte, error) {
	b = append(b, byte(kg))
	b = binary.BigEndian.AppendUint64(b, uint64(at)^1<<63)
	return kc.append(b, k)
}

// decodeTimerID decodes a stored timer key (hostile bytes: a named error,
// errTimerBytes, never a panic).
func decodeTimerID[K comparable](id string, kc timerKeyCodec[K]) (kg int, at int64, k K, err error) {
	if len(id) < 9 {
		return 0, 0, k, fmt.Errorf("%w: %d bytes, want at least 9", errTimerBytes, len(id))
	}
	if id[0] >= maxKeyGroups {
		return 0, 0, k, fmt.Errorf("%w: key group %d of %d", errTimerBytes, id[0], maxKeyGroups)
	}
	at = int64(binary.BigEndian.Uint64([]byte(id[1:9])) ^ 1<<63)
	k, err = kc.decode([]byte(id[9:]))
	if err != nil {
		return 0, 0, k, fmt.Errorf("%w: key of the timer at %d: %w", errTimerBytes, at, err)
	}
	return int(id[0]), at, k, nil
}

// timerKeyCodec writes a timer's key: 8-byte integers big-endian,
// strings as they are, anything else with msgpack (decoded through
// msgpacksafe).
type timerKeyCodec[K comparable] struct{ kind reflect.Kind }

func newTimerKeyCodec[K comparable]() timerKeyCodec[K] {
	rt := reflect.TypeFor[K]()
	k := rt.Kind()
	switch k {
	case reflect.Int, reflect.Int64, reflect.Uint, reflect.Uint64:
		if rt.Size() != 8 {
			k = reflect.Invalid
		}
	case reflect.String:
	default:
		k = reflect.Invalid
	}
	return timerKeyCodec[K]{k}
}

func (c timerKeyCodec[K]) append(b []byte, k K) ([]byte, error) {
	switch c.kind {
	case reflect.Int, reflect.Int64, reflect.Uint, reflect.Uint64:
		return binary.BigEndian.AppendUint64(b, *(*uint64)(unsafe.Pointer(&k))), nil
	case reflect.String:
		return append(b, *(*string)(unsafe.Pointer(&k))...), nil
	}
	enc, err := msgpack.Marshal(k)
	if err != nil {
		return b, fmt.Errorf("encode a timer's key %T: %w", k, err)
	}
	return append(b, enc...), nil
}

func (c timerKeyCodec[K]) decode(b []byte) (K, error) {
	var k K
	switch c.kind {
	case reflect.Int, reflect.Int64, reflect.Uint, reflect.Uint64:
		if len(b) != 8 {
			return k, fmt.Errorf("%d bytes, want 8", len(b))
		}
		*(*uint64)(unsafe.Pointer(&k)) = binary.BigEndian.Uint64(b)
		return k, nil
	case reflect.String:
		*(*string)(unsafe.Pointer(&k)) = string(b)
		return k, nil
	}
	err := msgpacksafe.Decode(b, &k, msgpacksafe.Limits{Source: "timer key", Factor: 32})
	return k, err
}

// The Process stage's side of its disk timers (process.go calls these).

// openTimers opens the timer table with the disk backend.
func (s *ProcCore[K, S, O]) openTimers() {
	if s.t.disk == nil {
		return
	}
	s.dt, s.dtErr = openDiskTimers[K](s.sc)
}

// checkTimers fails the stage if its timer table did not open.
func (s *ProcCore[K, S, O]) checkTimers() {
	if s.dtErr != nil {
		s.sc.fail(s.dtErr)
	}
}

func (s *ProcCore[K, S, O]) snapshotTimers(id uint64) ([]byte, error) {
	if s.dtErr != nil {
		return nil, s.dtErr
	}
	return s.dt.tab.Snapshot(id)
}

func (s *ProcCore[K, S, O]) committedTimers(id uint64) {
	if s.dt != nil {
		s.dt.tab.Committed(id)
	}
}

func (s *ProcCore[K, S, O]) closeTimers() error {
	if s.dt == nil {
		return nil
	}
	return s.dt.tab.Close()
}

// restoreTimers restores the timer tables of the bundles that have one
// (tstates[i] nil: none) and sets the timers given as slices (a
// checkpoint written before the timer table).
func (s *ProcCore[K, S, O]) restoreTimers(tstates [][]byte, lo, hi int, keys []K, ats []int64) error {
	if s.dtErr != nil {
		return s.dtErr
	}
	var snaps [][]byte
	for _, b := range tstates {
		if b != nil {
			snaps = append(snaps, b)
		}
	}
	if len(snaps) > 0 && len(snaps) < len(tstates) {
		return fmt.Errorf("%d of %d states keep their timers in a table, the others not: not one checkpoint", len(snaps), len(tstates))
	}
	return s.dt.restore(snaps, lo, hi, keys, ats)
}

// fireDisk runs the disk timers due at or before wm.
func (s *ProcCore[K, S, O]) fireDisk(wm int64) {
	s.checkTimers()
	c := &s.ctx
	c.s, c.proc = s, false
	s.dt.fire(wm, s.sc.fail, func(at int64, k K) {
		if s.onTimer == nil {
			return
		}
		c.key, c.at, c.cur = k, at, nil
		s.onTimer(c)
		c.done(false)
	})
}
