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
	"time"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
	"github.com/sluicehq/sluice/internal/state"
)

// diskTimers keeps a stage's timers on the disk backend (Process's
// event-time and processing-time timers, session windows' ends, an
// interval join's pruning times): a second disk table of the stage
// (state.TableOp(name, 1)), beside its state table and checkpointed with
// it in the same bundle, whose keys are the timers themselves, ordered by
// time:
//
//	queue and key group (1 byte) | time ^ 1<<63 (8 bytes, big-endian) | encoded key
//
// The first byte is the key group (0-127) of an event-time timer and
// 128 + the key group of a processing-time one (its queue, timeQueue); the
// table's own prefix is the key group, so each of the 128 key groups is a
// range holding its event-time queue, then its processing-time queue, each
// ordered by (time, key), and the timers due at a watermark (or at the
// clock's time) are a scan from the start of the queue in the groups whose
// earliest timer is due (Flink's timer service in RocksDB keeps a queue per
// key group the same way). What it holds in memory is bounded: the table's
// write-back cache (its share of the budget), a lower bound of each
// queue's earliest time, and, while firing, at most fireBatch timers a
// group (plus those the timers set at or before the cut).
type diskTimers[K comparable] struct {
	tab     *state.Disk[string, struct{}]
	kc      timerKeyCodec[K]
	hash    func(K) uint64
	heads   [2][maxKeyGroups]int64 // each queue's earliest timer, or less (MaxInt64: none)
	buf     []byte
	due     []dueTimer[K] // while firing: a min-heap by (at, id)
	read    []groupRead   // while firing: the groups a round read to their last due timer
	firing  bool
	q       timeQueue // while firing: the queue
	cut     int64     // while firing: a timer set at or before it joins due
	wm      int64     // while firing: the watermark
	maxHeld int       // the most timers due held at once (tests)
}

// timeQueue is one of a stage's two timer queues in its timer table.
type timeQueue int

const (
	eventTime      timeQueue = 0 // due at a watermark
	processingTime timeQueue = 1 // due at a time of the job's clock
)

// lead is the first byte of a timer of queue q and key group kg.
func (q timeQueue) lead(kg int) byte { return byte(int(q)<<7 | kg) }

// groupRead is a key group whose due timers a round read to the last
// (last, the time of the last; next, the time of the one after, MaxInt64
// none).
type groupRead struct {
	g          int
	last, next int64
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
	t.setHeads(math.MaxInt64) // a new table: empty
	return t, nil
}

// setHeads sets every queue's earliest time: MinInt64 unknown (after a
// restore), MaxInt64 none.
func (t *diskTimers[K]) setHeads(at int64) {
	for q := range t.heads {
		for i := range t.heads[q] {
			t.heads[q][i] = at
		}
	}
}

// earliest is a lower bound of queue q's earliest timer (MaxInt64: none).
func (t *diskTimers[K]) earliest(q timeQueue) int64 {
	return slices.Min(t.heads[q][:])
}

// set sets the timer of k at at in queue q; false: it was set already.
func (t *diskTimers[K]) set(q timeQueue, at int64, k K) bool { return t.add(q, at, k, true) }

// add sets the timer of k at at in queue q; check: false if it was set
// already, else (the caller knows it is not, or that a second call of its
// function for the timer does nothing) without reading the table.
func (t *diskTimers[K]) add(q timeQueue, at int64, k K, check bool) bool {
	kg := KeyGroupOf(t.hash(k))
	var err error
	t.buf, err = appendTimerID(t.buf[:0], t.kc, q.lead(kg), at, k)
	if err != nil {
		panic(err) // the stage's codec failed on a key it hashed: not a stored byte
	}
	id := string(t.buf)
	if check {
		if _, ok := t.tab.Get(id); ok {
			return false
		}
	}
	t.tab.Put(id, struct{}{}, false)
	t.heads[q][kg] = min(t.heads[q][kg], at)
	if t.firing && q == t.q && at <= t.wm && at <= t.cut {
		t.push(dueTimer[K]{id, at, k})
	}
	return true
}

// delete deletes the timer of k at at in queue q, if set (not while
// firing q: a timer read to fire would fire still).
func (t *diskTimers[K]) delete(q timeQueue, at int64, k K) {
	var err error
	t.buf, err = appendTimerID(t.buf[:0], t.kc, q.lead(KeyGroupOf(t.hash(k))), at, k)
	if err != nil {
		panic(err) // as in set
	}
	t.tab.Delete(string(t.buf))
}

// fire runs fn for every timer of queue q at or before wm (a watermark,
// or the clock's time), in time order (timers of one time by key group
// and encoded key, in each round), each once: a timer is deleted before
// fn runs, and fn may set timers (those of q due fire in this call).
//
// A round reads up to fireBatch due timers of each group whose earliest
// may be due; the cut is the earliest time of the last one read of a
// group that has more: the round fires every timer read at or before
// the cut (the rest are read again by the next round), so no timer fires
// before one of an earlier time.
func (t *diskTimers[K]) fire(q timeQueue, wm int64, fail func(error), fn func(at int64, k K)) {
	heads := &t.heads[q]
	for {
		t.due, t.read = t.due[:0], t.read[:0]
		cut := int64(math.MaxInt64)
		for g := range heads {
			if heads[g] > wm {
				continue
			}
			n, next, more := 0, int64(math.MaxInt64), false
			// From the queue's earliest time on (the timers fired before
			// it are deletions pebble has yet to compact away), to its end.
			lead := q.lead(g)
			from := append(t.buf[:0], lead)
			if h := heads[g]; h != math.MinInt64 {
				from = binary.BigEndian.AppendUint64(from, uint64(h)^1<<63)
			}
			var to []byte
			if q == eventTime {
				to = []byte{lead + 1} // the group's processing-time queue follows
			}
			t.tab.Range(g, from, to, func(id string, _ struct{}) bool {
				l, at, k, err := decodeTimerID(id, t.kc)
				if err == nil && l != lead {
					err = fmt.Errorf("%w: queue and key group %d stored under %d", errTimerBytes, l, lead)
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
				heads[g] = next
				continue
			}
			heads[g] = t.due[len(t.due)-n].at // a lower bound: they are deleted as they fire
			if more {
				cut = min(cut, t.due[len(t.due)-1].at)
			} else {
				t.read = append(t.read, groupRead{g, t.due[len(t.due)-1].at, next})
			}
		}
		if len(t.due) == 0 {
			return
		}
		// A group read to its last due timer, all of them firing in this
		// round, has its next timer's time as its earliest (timers set
		// while they fire lower it): no second read to learn it.
		for _, r := range t.read {
			if r.last <= cut {
				heads[r.g] = r.next
			}
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
		t.firing, t.q, t.cut, t.wm = true, q, cut, wm
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
// tables snaps (none: no timers), then sets the old-style event-time
// (keys, ats) and processing-time ones (pkeys, pats) given.
func (t *diskTimers[K]) restore(snaps [][]byte, lo, hi int, keys []K, ats []int64, pkeys []K, pats []int64) error {
	if len(snaps) == 0 {
		lo, hi = 0, 0
	}
	if err := t.tab.Restore(snaps, lo, hi); err != nil {
		return fmt.Errorf("timers: %w", err)
	}
	if len(snaps) == 0 {
		t.setHeads(math.MaxInt64)
	} else {
		t.setHeads(math.MinInt64)
	}
	for i, k := range keys {
		t.set(eventTime, ats[i], k)
	}
	for i, k := range pkeys {
		t.set(processingTime, pats[i], k)
	}
	return nil
}

// errTimerBytes is the cause of a stored timer that does not decode.
var errTimerBytes = errors.New("stored timer damaged")

// appendTimerID appends the stored key of k's timer at at, its first
// byte lead (timeQueue.lead).
func appendTimerID[K comparable](b []byte, kc timerKeyCodec[K], lead byte, at int64, k K) ([]byte, error) {
	b = append(b, lead)
	b = binary.BigEndian.AppendUint64(b, uint64(at)^1<<63)
	return kc.append(b, k)
}

// decodeTimerID decodes a stored timer key (hostile bytes: a named error,
// errTimerBytes, never a panic); lead is its queue and key group
// (timeQueue.lead: every byte is one).
func decodeTimerID[K comparable](id string, kc timerKeyCodec[K]) (lead byte, at int64, k K, err error) {
	if len(id) < 9 {
		return 0, 0, k, fmt.Errorf("%w: %d bytes, want at least 9", errTimerBytes, len(id))
	}
	at = int64(binary.BigEndian.Uint64([]byte(id[1:9])) ^ 1<<63)
	k, err = kc.decode([]byte(id[9:]))
	if err != nil {
		return 0, 0, k, fmt.Errorf("%w: key of the timer at %d: %w", errTimerBytes, at, err)
	}
	return id[0], at, k, nil
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
// (tstates[i] nil: none) and sets the timers st gives as slices (a
// checkpoint written before the timer table, or before it kept the
// processing-time timers).
func (s *ProcCore[K, S, O]) restoreTimers(tstates [][]byte, lo, hi int, st processState[K, S]) error {
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
	return s.dt.restore(snaps, lo, hi, st.TKeys, st.TAt, st.PKeys, st.PAt)
}

// fireDisk runs the disk timers due at or before wm.
func (s *ProcCore[K, S, O]) fireDisk(wm int64) {
	s.checkTimers()
	c := &s.ctx
	c.s, c.proc = s, false
	s.dt.fire(eventTime, wm, s.sc.fail, func(at int64, k K) {
		if s.onTimer == nil {
			return
		}
		c.key, c.at, c.cur = k, at, nil
		s.onTimer(c)
		c.done(false)
	})
}

// armWake makes sure a wake-up runs the disk's processing-time timers by
// at (MaxInt64: none): one wake-up is pending, for the earliest timer (or
// a lower bound of its time: then it finds none due and arms the next);
// one for a later time is cancelled. While those timers fire, the
// wake-up is armed once they are done.
func (s *ProcCore[K, S, O]) armWake(at int64) {
	if at == math.MaxInt64 || s.ended || s.dt.firing && s.dt.q == processingTime {
		return
	}
	if s.wakeStop != nil {
		if s.wake <= at {
			return
		}
		s.wakeStop()
	}
	var d time.Duration
	if now := s.sc.Now().UnixNano(); at > now {
		d = time.Duration(at - now)
		if d < 0 { // overflow
			d = math.MaxInt64
		}
	}
	s.wake = at
	s.wakeStop = s.sc.After(d, s.wakeDisk)
}

// wakeDisk fires the disk's processing-time timers due by the job's
// clock, in time order, and arms the wake-up for the next.
func (s *ProcCore[K, S, O]) wakeDisk() {
	defer s.sc.attribute()
	s.wakeStop = nil
	if s.ended {
		return
	}
	s.checkTimers()
	s.clk.tick(s.sc)
	now := s.clk.now()
	c := &s.ctx
	c.s = s
	s.dt.fire(processingTime, now, s.sc.fail, func(at int64, k K) {
		if s.onTimer == nil {
			return
		}
		c.key, c.at, c.proc, c.cur = k, at, true, nil
		s.onTimer(c)
		c.done(false)
		c.proc = false
	})
	s.out.flush()
	s.armWake(s.dt.earliest(processingTime))
}
