package stage

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/state"
)

// Joins of two streams by key. Each is built from parts the planner already
// knows: both inputs are tagged (fused into their producers), merged, and
// partitioned by key, so that one instance of the join sees every record of
// a key from both sides; their watermarks meet in it as in any operator
// with several inputs.

// Either is a record of one of a join's two inputs, as the join operator
// receives it (package operators has its own for KeyedUnion, with the same
// encoding).
type Either[L, R any] struct {
	L     L    `msgpack:"l"`
	R     R    `msgpack:"r"`
	Right bool `msgpack:"s"` // R is set, else L
}

// WindowBuf is a key's records of both sides in one window.
type WindowBuf[L, R any] struct {
	Ls []L `msgpack:"l"`
	Rs []R `msgpack:"r"`
}

type stamped[V any] struct {
	T int64 `msgpack:"t"`
	V V     `msgpack:"v"`
}

type IntervalBuf[L, R any] struct {
	Ls []stamped[L] `msgpack:"l"`
	Rs []stamped[R] `msgpack:"r"`
}

// IntervalStage is the interval join: a key's records of both sides, kept
// in its state table until the watermark passes the last time a record of
// the other side could match them.
//
// When a key's records may be pruned: on the memory backend a heap entry
// per record (expiry, as it always was); on the disk backend an
// event-time timer per key with records in the stage's timer table
// (timers.go), at the earliest time one of its records may be pruned
// (firstDue): a record that moves it earlier moves the timer, a watermark
// fires the timers due in time order, and each prunes its key's records
// and sets the key's timer at the next such time, if records are left.
// So on disk what the join holds in memory is bounded by the budget, not
// by the keys.
type IntervalStage[K comparable, L, R, O any] struct {
	lend         lender[Either[L, R]] // gives the batches read back (giveBack)
	key          func(Either[L, R]) K
	join         func(L, R) O
	lower, upper int64
	wm           int64
	t            keyedTable[K, *IntervalBuf[L, R]]
	expiry       timeHeap[K]         // memory: a pruning time per record
	dt           *diskTimers[K]      // disk: a pruning timer per key with records
	dtErr        error               // disk: the timer table did not open
	prune        func(at int64, k K) // disk: pruneDisk, the timers' function
	empty        int                 // memory: keys emptied since the last compaction
	next         Pusher[O]
	sc           *Ctx
	out          OutBuf[O]
}

// open opens the join's table and, on disk, its timer table.
func (s *IntervalStage[K, L, R, O]) open() {
	s.t = openTable[K, *IntervalBuf[L, R]](s.sc)
	if s.t.disk != nil {
		s.dt, s.dtErr = openDiskTimers[K](s.sc)
		s.prune = s.pruneDisk // made once (a method value allocates)
	}
}

// checkTimers fails the stage if its timer table did not open.
func (s *IntervalStage[K, L, R, O]) checkTimers() {
	if s.dtErr != nil {
		s.sc.fail(s.dtErr)
	}
}

func (s *IntervalStage[K, L, R, O]) Push(b *Batch[Either[L, R]]) {
	defer s.sc.attribute()
	if end := passKeyed(s.sc, b, s.key); end != nil {
		defer end()
	}
	s.t.check(s.sc)
	s.checkTimers()
	s.sc.C.In.Add(int64(len(b.Vs)))
	if b.Ts == nil && len(b.Vs) > 0 {
		s.sc.fail(errNoEventTime)
	}
	mi := 0
	defer func() { s.out.cur = nil }()
	for i, e := range b.Vs {
		t := b.Ts[i]
		s.out.cur = nil
		for mi < len(b.Tr) && int(b.Tr[mi].I) < i {
			mi++
		}
		if mi < len(b.Tr) && int(b.Tr[mi].I) == i { // its pairs stay in its trace
			s.out.cur = &b.Tr[mi]
		}
		if t <= s.wm {
			s.sc.C.Late.Add(1)
			continue
		}
		k := s.key(e)
		var buf *IntervalBuf[L, R]
		var existed bool // the table has k (its buffer may be nil: a restored state's)
		if m := s.t.mem; m != nil {
			buf, existed = m.M[k]
			if buf == nil && existed {
				buf = &IntervalBuf[L, R]{}
				m.M[k] = buf
			}
		} else {
			buf, existed = s.t.tab.Get(k)
		}
		if buf == nil {
			buf = &IntervalBuf[L, R]{}
		}
		var due int64
		if e.Right {
			for _, l := range buf.Ls {
				if t >= l.T+s.lower && t <= l.T+s.upper {
					s.out.add(s.join(l.V, e.R), max(t, l.T))
				}
			}
			due = t - s.lower
		} else {
			for _, r := range buf.Rs {
				if r.T >= t+s.lower && r.T <= t+s.upper {
					s.out.add(s.join(e.L, r.V), max(t, r.T))
				}
			}
			due = t + s.upper
		}
		if s.t.mem != nil {
			s.expiry.add(due, k)
		} else if first, ok := s.firstDue(buf); !ok {
			s.dt.add(eventTime, due, k, false) // the key had no records: no timer
		} else if due < first { // its one timer, earlier
			s.dt.delete(eventTime, first, k)
			s.dt.add(eventTime, due, k, false)
		}
		if e.Right {
			buf.Rs = append(buf.Rs, stamped[R]{t, e.R})
		} else {
			buf.Ls = append(buf.Ls, stamped[L]{t, e.L})
		}
		if m := s.t.mem; m != nil {
			if !existed {
				m.Order = append(m.Order, k)
				m.M[k] = buf
			}
			m.Changed(k, existed)
		} else {
			s.t.tab.Put(k, buf, existed)
		}
	}
	s.out.flush()
	s.lend.giveBack(s.sc, b)
}

// firstDue is the earliest time at which some record of buf may be
// pruned (false: buf is empty).
func (s *IntervalStage[K, L, R, O]) firstDue(buf *IntervalBuf[L, R]) (int64, bool) {
	first, ok := int64(math.MaxInt64), false
	for _, l := range buf.Ls {
		first, ok = min(first, l.T+s.upper), true
	}
	for _, r := range buf.Rs {
		first, ok = min(first, r.T-s.lower), true
	}
	return first, ok
}

func (s *IntervalStage[K, L, R, O]) Watermark(wm int64) {
	defer s.sc.attribute()
	if wm <= s.wm {
		return
	}
	s.wm = wm
	if s.t.tab == nil {
		s.next.Watermark(wm)
		return
	}
	if s.t.mem == nil {
		s.checkTimers()
		s.dt.fire(eventTime, wm, s.sc.fail, s.prune)
		s.next.Watermark(wm)
		return
	}
	for e, ok := s.expiry.due(wm); ok; e, ok = s.expiry.due(wm) {
		buf := s.t.mem.M[e.v]
		if buf == nil {
			continue
		}
		nl, nr := len(buf.Ls), len(buf.Rs)
		s.pruneBuf(buf)
		switch {
		case len(buf.Ls) == 0 && len(buf.Rs) == 0:
			s.t.mem.Changed(e.v, true)
			s.empty++ // left in place: compacted below
		case len(buf.Ls) != nl || len(buf.Rs) != nr:
			s.t.mem.Changed(e.v, true)
		}
	}
	if s.empty > 64 && s.empty > len(s.t.mem.M)/2 {
		s.t.compact(func(b *IntervalBuf[L, R]) bool { return b == nil || len(b.Ls) == 0 && len(b.Rs) == 0 })
		s.empty = 0
	}
	s.next.Watermark(wm)
}

// pruneBuf drops the records of buf no record later than the watermark
// can match: no right record later than wm matches l once l+upper <= wm,
// nor a left one r once r-lower <= wm.
func (s *IntervalStage[K, L, R, O]) pruneBuf(buf *IntervalBuf[L, R]) {
	wm := s.wm
	buf.Ls = slices.DeleteFunc(buf.Ls, func(l stamped[L]) bool { return l.T+s.upper <= wm })
	buf.Rs = slices.DeleteFunc(buf.Rs, func(r stamped[R]) bool { return r.T-s.lower <= wm })
}

// pruneDisk is key k's timer on disk, fired at the watermark (its time at
// or before it): it prunes the key's records and sets its timer at the
// next time one of them may be pruned (after the watermark: it fires at a
// later one), or deletes the key if none is left.
func (s *IntervalStage[K, L, R, O]) pruneDisk(_ int64, k K) {
	buf, _ := s.t.tab.Get(k)
	if buf == nil {
		return
	}
	nl, nr := len(buf.Ls), len(buf.Rs)
	s.pruneBuf(buf)
	next, ok := s.firstDue(buf)
	if !ok {
		s.t.tab.Delete(k)
		return
	}
	s.dt.add(eventTime, next, k, false) // its one timer: the one firing is deleted
	if len(buf.Ls) != nl || len(buf.Rs) != nr {
		s.t.tab.Put(k, buf, true)
	}
}

func (s *IntervalStage[K, L, R, O]) Finish() { s.t.clear(); s.expiry = nil; s.next.Finish() }

// CommittedState and CloseState: the state backend's (see KeyedStage),
// the timer table's beside the state table's on disk.
func (s *IntervalStage[K, L, R, O]) CommittedState(id uint64) {
	s.t.committed(id)
	if s.dt != nil {
		s.dt.tab.Committed(id)
	}
}

func (s *IntervalStage[K, L, R, O]) CloseState() error {
	err := s.t.close()
	if s.dt != nil {
		err = errors.Join(err, s.dt.tab.Close())
	}
	return err
}

type keyedBufs[K comparable, B any] struct {
	Wm   int64 `msgpack:"wm"`
	Keys []K   `msgpack:"k"`
	Bufs []B   `msgpack:"b"`
}

// joinOwn is a join's own part of its checkpoint (beside its table).
type joinOwn struct {
	Wm int64 `msgpack:"wm"`
}

func encodeOwn(v any) ([]byte, error) {
	b, err := msgpack.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode the operator's state: %w", err)
	}
	return b, nil
}

func (s *IntervalStage[K, L, R, O]) SnapshotState(id uint64) ([]byte, error) {
	own, err := encodeOwn(&joinOwn{Wm: s.wm})
	if err != nil {
		return nil, err
	}
	if s.t.disk != nil { // disk: the timer table's part beside the state table's
		if s.dtErr != nil {
			return nil, s.dtErr
		}
		tb, err := s.dt.tab.Snapshot(id)
		if err != nil {
			return nil, err
		}
		return s.t.snapshot(id, own, tb)
	}
	return s.t.snapshot(id, own)
}

func (s *IntervalStage[K, L, R, O]) RestoreState(b []byte) error {
	return s.RestoreKeyGroups([][]byte{b}, 0, state.AllGroups)
}

// RestoreKeyGroups implements KeyGroupRestorer: the keys of groups
// [lo, hi), the lowest event time; on disk the timers of those groups, or
// (a checkpoint without the timer table) a timer for each key restored.
func (s *IntervalStage[K, L, R, O]) RestoreKeyGroups(states [][]byte, lo, hi int) error {
	own, timers, err := s.t.restoreExtra(states, lo, hi, s.t.disk != nil)
	if errors.Is(err, errOldState) {
		wm, bufs, err := mergeKeyed[K, IntervalBuf[L, R]](states, lo, hi, s.wm)
		if err != nil {
			return err
		}
		s.t.load(bufs)
		s.wm = wm
	} else if err != nil {
		return err
	} else {
		for i, b := range own {
			var o joinOwn
			if err := decodeState(b, &o, "interval join state"); err != nil {
				return wrapState(i, len(own), err)
			}
			if i == 0 || o.Wm < s.wm {
				s.wm = o.Wm
			}
		}
	}
	s.expiry = nil
	if s.t.disk != nil {
		return s.restoreTimers(timers, lo, hi)
	}
	for k, buf := range s.t.mem.M {
		if buf == nil {
			continue
		}
		for _, l := range buf.Ls {
			s.expiry.add(l.T+s.upper, k)
		}
		for _, r := range buf.Rs {
			s.expiry.add(r.T-s.lower, k)
		}
	}
	return nil
}

// restoreTimers restores the timer tables of the bundles that have one
// (tstates[i] nil: none, or the state is of before the bundles); with
// none, it sets a timer for each key of the restored table (one read of
// it).
func (s *IntervalStage[K, L, R, O]) restoreTimers(tstates [][]byte, lo, hi int) error {
	if s.dtErr != nil {
		return s.dtErr
	}
	var snaps [][]byte
	for _, b := range tstates {
		if b != nil {
			snaps = append(snaps, b)
		}
	}
	if len(snaps) > 0 {
		if len(snaps) < len(tstates) {
			return fmt.Errorf("%d of %d states keep their timers in a table, the others not: not one checkpoint", len(snaps), len(tstates))
		}
		return s.dt.restore(snaps, lo, hi, nil, nil, nil, nil)
	}
	if err := s.dt.restore(nil, 0, 0, nil, nil, nil, nil); err != nil { // empty
		return err
	}
	for k, buf := range s.t.tab.All {
		if buf == nil {
			continue
		}
		if first, ok := s.firstDue(buf); ok {
			s.dt.add(eventTime, first, k, false)
		}
	}
	return nil
}

func decodeKeyed[K comparable, B any](b []byte) (int64, map[K]*B, error) {
	var st keyedBufs[K, B]
	if err := decodeState(b, &st, "join state"); err != nil {
		return 0, nil, err
	}
	if len(st.Keys) != len(st.Bufs) {
		return 0, nil, fmt.Errorf("%d keys but %d values", len(st.Keys), len(st.Bufs))
	}
	m := make(map[K]*B, len(st.Keys))
	for i, k := range st.Keys {
		m[k] = &st.Bufs[i]
	}
	return st.Wm, m, nil
}

// mergeKeyed decodes several keyed states of the format written before
// the state tables and keeps the keys of groups [lo, hi), with the lowest
// event time (wm when there are none).
func mergeKeyed[K comparable, B any](states [][]byte, lo, hi int, wm int64) (int64, map[K]*B, error) {
	owns := ownsKeys[K](lo, hi)
	out := map[K]*B{}
	for i, b := range states {
		w, bufs, err := decodeKeyed[K, B](b)
		if err != nil {
			return 0, nil, fmt.Errorf("state %d of %d: %w", i+1, len(states), err)
		}
		if i == 0 || w < wm {
			wm = w
		}
		for k, v := range bufs {
			if owns(k) {
				out[k] = v
			}
		}
	}
	return wm, out, nil
}

type JoinBuf[L, R any] struct {
	Ls      []L   `msgpack:"l"`
	Rs      []R   `msgpack:"r"`
	Touched int64 `msgpack:"t"` // processing time of the key's last record (StateTTL, memory backend)
}

// JoinStage is the unbounded join: every record of a key is kept (in its
// state table) until the key has seen none for the TTL.
type JoinStage[K comparable, L, R, O any] struct {
	lend    lender[Either[L, R]] // gives the batches read back (giveBack)
	key     func(Either[L, R]) K
	join    func(L, R) O
	ttl     int64
	t       keyedTable[K, *JoinBuf[L, R]]
	sweeper bool             // a TTL sweep is scheduled
	clk     msgClock         // the disk table's time (StateTTL)
	ended   bool             // Finish: no more sweeps
	marks   map[K]*joinMarks // the sampled records buffered, nil when none
	next    Pusher[O]
	sc      *Ctx
	out     OutBuf[O]
}

// open opens the join's table; on disk with a TTL the table forgets a
// key's buffer a TTL after it was last put (each record puts it).
func (s *JoinStage[K, L, R, O]) open() {
	s.t = openTable[K, *JoinBuf[L, R]](s.sc)
	if s.t.disk != nil && s.ttl > 0 {
		s.t.disk.SetTTL(time.Duration(s.ttl), s.clk.now, func(k K, _ *JoinBuf[L, R]) { delete(s.marks, k) })
	}
}

func (s *JoinStage[K, L, R, O]) Push(b *Batch[Either[L, R]]) {
	defer s.sc.attribute()
	if s.sc.Tracer != nil {
		// A sampled arriving record links to the sampled records of the
		// other side it is joined with.
		if end := passLinked(s.sc, b, s.key, func(i int) []trace.Link {
			jm := s.marks[s.key(b.Vs[i])]
			if jm == nil {
				return nil
			}
			if b.Vs[i].Right {
				return sideLinks(jm.ls)
			}
			return sideLinks(jm.rs)
		}); end != nil {
			defer end()
		}
	}
	s.t.check(s.sc)
	s.sc.C.In.Add(int64(len(b.Vs)))
	mi := 0
	var now int64
	if s.ttl > 0 {
		s.clk.tick(s.sc)
		now = s.clk.now()
		if !s.sweeper && !s.ended {
			s.sweeper = true
			s.sc.After(time.Duration(s.ttl), s.sweep)
		}
	}
	for i, e := range b.Vs {
		t := int64(math.MinInt64) // the input carries no event times: nor do the results
		if b.Ts != nil {
			t = b.Ts[i]
		}
		k := s.key(e)
		var buf *JoinBuf[L, R]
		var existed bool // the table has k (its buffer may be nil: a restored state's)
		if m := s.t.mem; m != nil {
			buf, existed = m.M[k]
			if buf == nil && existed {
				buf = &JoinBuf[L, R]{}
				m.M[k] = buf
			}
		} else {
			buf, existed = s.t.tab.Get(k)
		}
		if buf == nil {
			buf = &JoinBuf[L, R]{}
		}
		buf.Touched = now
		var m *Mark
		for mi < len(b.Tr) && int(b.Tr[mi].I) < i {
			mi++
		}
		if mi < len(b.Tr) && int(b.Tr[mi].I) == i {
			m = &b.Tr[mi]
		}
		jm := s.marks[k]
		if m != nil && jm == nil {
			if s.marks == nil {
				s.marks = map[K]*joinMarks{}
			}
			jm = &joinMarks{ls: map[int]Mark{}, rs: map[int]Mark{}}
			s.marks[k] = jm
		}
		if e.Right {
			for p, l := range buf.Ls {
				s.out.cur = outMark(m, jm, true, p)
				s.out.add(s.join(l, e.R), t)
			}
			if m != nil {
				jm.rs[len(buf.Rs)] = m.held()
			}
			buf.Rs = append(buf.Rs, e.R)
		} else {
			for p, r := range buf.Rs {
				s.out.cur = outMark(m, jm, false, p)
				s.out.add(s.join(e.L, r), t)
			}
			if m != nil {
				jm.ls[len(buf.Ls)] = m.held()
			}
			buf.Ls = append(buf.Ls, e.L)
		}
		s.out.cur = nil
		if mt := s.t.mem; mt != nil {
			if !existed {
				mt.Order = append(mt.Order, k)
				mt.M[k] = buf
			}
			mt.Changed(k, existed)
		} else {
			s.t.tab.Put(k, buf, existed)
		}
	}
	s.out.flush()
	s.lend.giveBack(s.sc, b)
}

// outMark is the trace a join's pair goes on in: the arriving record's
// when it is sampled, else its partner's (at p on the other side), if that
// one is.
func outMark(m *Mark, jm *joinMarks, right bool, p int) *Mark {
	if m != nil || jm == nil {
		return m
	}
	side := jm.rs
	if right {
		side = jm.ls
	}
	if pm, ok := side[p]; ok {
		return &pm
	}
	return nil
}

// sweep forgets the keys idle for longer than the TTL and runs again while
// state is left: in memory by each buffer's time, on disk by the table's
// (Disk.Expire: the times it stores with the values).
func (s *JoinStage[K, L, R, O]) sweep() {
	defer s.sc.attribute()
	s.sweeper = false
	if s.ended || s.t.tab == nil {
		return
	}
	if s.t.disk != nil {
		s.clk.tick(s.sc)
		s.sweeper = s.t.disk.Expire() > 0
	} else {
		cutoff := s.sc.Now().UnixNano() - s.ttl
		var gone map[K]bool
		for k, buf := range s.t.mem.M {
			if buf == nil || buf.Touched <= cutoff {
				if gone == nil {
					gone = map[K]bool{}
				}
				gone[k] = true
				delete(s.marks, k)
			}
		}
		if gone != nil {
			s.t.mem.DeleteAll(gone)
		}
		s.sweeper = len(s.t.mem.M) > 0
	}
	if s.sweeper {
		s.sc.After(time.Duration(s.ttl), s.sweep)
	}
}

func (s *JoinStage[K, L, R, O]) Watermark(wm int64) { s.next.Watermark(wm) }

func (s *JoinStage[K, L, R, O]) Finish() { s.ended = true; s.t.clear(); s.next.Finish() }

// CommittedState and CloseState: the state backend's (see KeyedStage).
func (s *JoinStage[K, L, R, O]) CommittedState(id uint64) { s.t.committed(id) }
func (s *JoinStage[K, L, R, O]) CloseState() error        { return s.t.close() }

func (s *JoinStage[K, L, R, O]) SnapshotState(id uint64) ([]byte, error) {
	return s.t.snapshot(id, nil)
}

func (s *JoinStage[K, L, R, O]) RestoreState(b []byte) error {
	return s.RestoreKeyGroups([][]byte{b}, 0, state.AllGroups)
}

// RestoreKeyGroups implements KeyGroupRestorer.
func (s *JoinStage[K, L, R, O]) RestoreKeyGroups(states [][]byte, lo, hi int) error {
	_, err := s.t.restore(states, lo, hi)
	if errors.Is(err, errOldState) {
		_, bufs, err := mergeKeyed[K, JoinBuf[L, R]](states, lo, hi, 0)
		if err != nil {
			return err
		}
		s.t.load(bufs)
	} else if err != nil {
		return err
	}
	if m := s.t.mem; m != nil {
		now := s.sc.Now().UnixNano()
		for _, buf := range m.M {
			if buf == nil {
				continue
			}
			buf.Touched = now // the TTL counts from the restart (on disk: from the time stored)
		}
	}
	return nil
}
