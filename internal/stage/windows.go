package stage

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/state"
	"go.opentelemetry.io/otel/attribute"
)

// Reduced is the accumulator of WindowReduce: the value so far, if any.
type Reduced[T any] struct {
	V   T    `msgpack:"v"`
	Set bool `msgpack:"s"`
}

// WinFns are what a window stage does with its records.
type WinFns[K comparable, T, A, O any] struct {
	Key   func(T) K
	Zero  func() A
	Add   func(A, T) A
	Merge func(A, A) A // sessions
	// Emit turns a key's accumulator of a closing window into outputs.
	Emit func(k K, start, end int64, acc A, out func(O))
	// Shed, when set, is applied to each key's accumulator of a window
	// that saw a record sampled by load shedding (of any key) before it is
	// emitted, with the lowest keep rate among them: a key none of whose
	// sampled records was kept still had records shed in that window
	// (approximate aggregations mark it so). Not for sessions.
	Shed func(acc A, keep float64) A
}

// lateOutput is the side output of a windowed stage: late records are
// counted and pushed to the LateRecords stream, if any.
type lateOutput[T any] struct {
	side Pusher[T] // the late records' stream (LateRecords), nil without one
	c    *Counters
	buf  Batch[T]
}

func newLateOutput[T any](sc *Ctx) *lateOutput[T] {
	l := &lateOutput[T]{c: sc.C}
	l.side, _ = sc.Late.(Pusher[T])
	return l
}

func (l *lateOutput[T]) add(v T, ts int64) {
	l.c.Late.Add(1)
	if l.side != nil {
		l.buf.Vs = append(l.buf.Vs, v)
		l.buf.Ts = append(l.buf.Ts, ts)
	}
}

func (l *lateOutput[T]) flush() {
	if len(l.buf.Vs) > 0 {
		l.side.Push(&l.buf)
		l.buf.Vs, l.buf.Ts = l.buf.Vs[:0], l.buf.Ts[:0]
	}
}

// watermark passes the window's event time on to the late records' stream.
func (l *lateOutput[T]) watermark(wm int64) {
	if l.side != nil {
		l.side.Watermark(wm)
	}
}

func (l *lateOutput[T]) Finish() {
	if l.side != nil {
		l.flush()
		l.side.Finish()
	}
}

// A window stage keeps its accumulators in a state table (the topology's
// backend, as a keyed aggregation's) by the user's key: a key's value is
// its slots, one per window it has records in, so that the key's group is
// the key's own and a rescale restores key-group ranges as for any keyed
// operator. A slot of a time window names the window by its end (Start
// unused); a session slot is the session. Beside the table the stage keeps
// in memory what is bounded by the number of open windows, not keys: each
// time window's end, whether it fired and its keep rate (wins), and the
// timers. Firing a time window reads the table once (every key, taking
// the window's slot); a key's sessions fire by its timers: on the memory
// backend a heap entry per open session (its end) and per fired session
// kept for the allowed lateness (its cleanup); on the disk backend the
// same timers in the stage's timer table (timers.go), bounded in memory
// by the budget however many sessions are open.
type session[A any] struct {
	Start int64 `msgpack:"b,omitempty"`
	End   int64 `msgpack:"e"` // a time window's end; a session's last record + gap
	Acc   A     `msgpack:"a"`
	Fired bool  `msgpack:"f,omitempty"` // a session's (a time window's is in winInfo)
	// timer is the time of the heap entry that will look at an open
	// session on the memory backend (0: none; not checkpointed, set again
	// on restore): at or before End. A record that extends a session sets
	// no new entry; the entry, once due, sets one at the session's end by
	// then (a heap entry per record was most of the CPU of sessions of
	// frequent records).
	timer int64
}

// winInfo is what the stage keeps in memory of one open time window.
type winInfo[K comparable] struct {
	fired bool                // fired, kept for the allowed lateness
	keep  float64             // the lowest keep rate below 1 of a record added (0: none)
	tr    map[K]*contributors // the sampled records of a key, nil when none (not checkpointed)
}

// sessKey names a key's session by its start (the sampled records of
// sessions, sessTr).
type sessKey[K comparable] struct {
	k     K
	start int64
}

type winStage[K comparable, T, A, O any] struct {
	fns                        WinFns[K, T, A, O]
	kind                       windowKind
	size, slide, gap, lateness int64
	proc                       bool
	wm                         int64
	keep                       float64   // the keep rate of the batch being added (1 without Shed)
	lend                       lender[T] // gives the batches read back (giveBack)

	// The state backend: mem (the memory backend, whose map the record
	// loop uses directly) or tab.
	mem     *state.Mem[K, []session[A]]
	tab     state.Table[K, []session[A]]
	openErr error                        // the backend failed to open (tab nil)
	plain   bool                         // mem has no changelog (nothing tracks its changes)
	free    [][]session[A]               // memory backend: slot lists of deleted keys, reused
	gone    map[K]bool                   // memory backend: keys left without slots, deleted in one pass
	lateEnd []int64                      // windows a record found due but not fired (fired once it is stored)
	wins    map[int64]*winInfo[K]        // the open time windows, by end
	ends    timeHeap[struct{}]           // ends of windows to fire
	cleanup timeHeap[int64]              // fired windows to drop, at end-1+lateness
	sessTr  map[sessKey[K]]*contributors // the sampled records of sessions (not checkpointed)

	sessTimers  timeHeap[K] // memory: session ends to fire (stale entries are skipped)
	sessCleanup timeHeap[K] // memory: fired sessions to drop, at end-1+lateness
	// Sessions on disk: both timers of a key in one queue (sessionTimer),
	// a session's end at end-1.
	st    *diskTimers[K]
	stErr error // the timer table did not open

	late *lateOutput[T]
	next Pusher[O]
	sc   *Ctx
	out  OutBuf[O]
	at   int64   // the event time of the outputs being emitted
	emit func(O) // emitOne, made once (a method value allocates)

	restoredProc []int64 // restored processing-time windows, armed at open

	// The window of wins a record found last (nil: none), spared a map
	// lookup per record: a batch's records mostly fall in one window.
	lastEnd int64
	lastWin *winInfo[K]
}

func NewWinStage[K comparable, T, A, O any](fns WinFns[K, T, A, O], w Windows, lateness time.Duration, next Pusher[O], sc *Ctx) *winStage[K, T, A, O] {
	s := &winStage[K, T, A, O]{fns: fns, kind: w.kind, size: int64(w.size), slide: int64(w.slide), gap: int64(w.gap),
		lateness: int64(lateness), proc: w.proc, wm: math.MinInt64, wins: make(map[int64]*winInfo[K]),
		late: newLateOutput[T](sc), out: NewOutBuf(next, sc), next: next, sc: sc}
	s.emit = s.emitOne
	s.open()
	return s
}

// open opens the stage's state backend, as a keyed aggregation's.
func (s *winStage[K, T, A, O]) open() {
	h := HasherFor[K]()
	if !s.sc.State.Disk() {
		owns := func(k K, lo, hi int) bool { kg := KeyGroupOf(h(k)); return kg >= lo && kg < hi }
		if s.sc.State.Changelog == "" || !s.sc.FinalCheckpoint {
			s.mem = state.NewMem[K, []session[A]](owns)
			s.tab, s.plain = s.mem, true
			return
		}
		m, err := state.OpenChangelog[K, []session[A]](s.sc.State, s.sc.Name, s.sc.Instance, s.sc.Parts, owns)
		if err != nil {
			s.openErr = err
			return
		}
		s.mem, s.tab = m, m
		return
	}
	d, err := state.OpenDisk[K, []session[A]](s.sc.State, s.sc.Name, s.sc.Instance, s.sc.Parts, h, func(err error) { s.sc.fail(err) })
	if err != nil {
		s.openErr = err
		return
	}
	s.tab = d
	if s.kind == sessions {
		s.st, s.stErr = openDiskTimers[K](s.sc)
	}
}

// endTimer sets the timer that fires k's session ending at end.
func (s *winStage[K, T, A, O]) endTimer(end int64, k K) {
	if s.st == nil && s.stErr == nil {
		s.sessTimers.add(end, k)
		return
	}
	s.checkTimers()
	s.st.add(eventTime, end-1, k, false) // a second fire of a key's time does nothing (sessionTimer)
}

// cleanupTimer sets the timer that drops k's session ending at end, fired,
// once the allowed lateness has passed.
func (s *winStage[K, T, A, O]) cleanupTimer(end int64, k K) {
	if s.st == nil && s.stErr == nil {
		s.sessCleanup.add(end-1+s.lateness, k)
		return
	}
	s.checkTimers()
	s.st.add(eventTime, end-1+s.lateness, k, false)
}

// checkTimers fails the stage if its timer table did not open.
func (s *winStage[K, T, A, O]) checkTimers() {
	if s.stErr != nil {
		s.sc.fail(s.stErr)
	}
}

// fireDisk runs the disk's session timers due at wm: each is a key and a
// time, the end of a session (at its end-1) or the end of a fired one's
// allowed lateness, or both (sessionTimer); finish: the end of the input
// (every session fires, none kept).
func (s *winStage[K, T, A, O]) fireDisk(wm int64, finish bool) {
	s.checkTimers()
	keep := s.lateness > 0 && !finish
	s.st.fire(eventTime, wm, s.sc.fail, func(at int64, k K) { s.sessionTimer(k, at, wm, keep) })
}

// sessionTimer handles key k's disk timer at at: it fires the session
// ending at at+1 if it has not fired (keep: marked fired, its cleanup
// timer set; else it goes), and drops the fired sessions whose allowed
// lateness ended by wm.
func (s *winStage[K, T, A, O]) sessionTimer(k K, at, wm int64, keep bool) {
	l, seen := s.get(k)
	n, changed := 0, false
	for i := range l {
		x := &l[i]
		if !x.Fired && x.End-1 == at {
			s.emitSession(k, x)
			x.Fired, changed = true, true
			if keep && x.End-1+s.lateness > wm {
				s.cleanupTimer(x.End, k)
			}
		}
		if x.Fired && (!keep || x.End-1+s.lateness <= wm) {
			if len(s.sessTr) > 0 {
				delete(s.sessTr, sessKey[K]{k, x.Start})
			}
			changed = true
			continue
		}
		l[n] = *x
		n++
	}
	if changed {
		clear(l[n:])
		s.put(k, l[:n], seen)
	}
}

// get is k's slots.
func (s *winStage[K, T, A, O]) get(k K) ([]session[A], bool) {
	if m := s.mem; m != nil {
		l, ok := m.M[k]
		return l, ok
	}
	return s.tab.Get(k)
}

// put stores k's slots (seen: get found k); a list left empty deletes k.
func (s *winStage[K, T, A, O]) put(k K, l []session[A], seen bool) {
	m := s.mem
	if len(l) == 0 {
		if !seen {
			return
		}
		if m == nil {
			s.tab.Delete(k)
			return
		}
		if s.gone == nil {
			s.gone = map[K]bool{}
		}
		m.M[k] = l
		m.Changed(k, true)
		s.gone[k] = true // Mem.Delete scans its order: deleted in one pass (flushGone)
		return
	}
	if m == nil {
		s.tab.Put(k, l, seen)
		return
	}
	if !seen {
		m.Order = append(m.Order, k)
	}
	m.M[k] = l
	m.Changed(k, seen)
}

// flushSomeGone is flushGone once the keys left without slots are many
// (at least 64 and a quarter of the table's keys): Mem.DeleteAll scans the
// whole key order, which after every batch and watermark cost a map lookup
// per live key (16 % of q11's CPU, sessions of 500 000 bids). Until then
// they stay in the map with an empty list, which get and put treat as a
// key without slots, and scanWindow skips; checkpoints and the end of the
// input flush them all. Amortized, a key left without slots costs four
// steps of the scan.
func (s *winStage[K, T, A, O]) flushSomeGone() {
	if n := len(s.gone); n >= 64 && 4*n >= len(s.mem.Order) {
		s.flushGone()
	}
}

// flushGone deletes the keys put left without slots (memory backend), and
// keeps their lists for new keys.
func (s *winStage[K, T, A, O]) flushGone() {
	if len(s.gone) == 0 {
		return
	}
	for k := range s.gone {
		l, ok := s.mem.M[k]
		if !ok || len(l) > 0 {
			delete(s.gone, k) // a slot again since
			continue
		}
		if len(s.free) < maxFreeLists && cap(l) > 0 {
			s.free = append(s.free, l[:0])
		}
	}
	s.mem.DeleteAll(s.gone)
	clear(s.gone)
}

// maxFreeLists bounds the slot lists a memory-backed window keeps for
// reuse.
const maxFreeLists = 4096

// newList is an empty list for a key that has none.
func (s *winStage[K, T, A, O]) newList() []session[A] {
	if n := len(s.free); n > 0 {
		l := s.free[n-1]
		s.free = s.free[:n-1]
		return l
	}
	return nil
}

func slotOf[A any](l []session[A], end int64) int {
	for i := range l {
		if l[i].End == end {
			return i
		}
	}
	return -1
}

var errNoEventTime = errors.New("records carry no event time: add operators.Timestamps upstream, or use ProcessingTime windows")

func (s *winStage[K, T, A, O]) Push(b *Batch[T]) {
	defer s.sc.attribute()
	if end := passKeyed(s.sc, b, s.fns.Key); end != nil {
		defer end()
	}
	if s.tab == nil {
		s.sc.fail(s.openErr)
	}
	mi := 0
	s.keep = 1
	if s.fns.Shed != nil {
		s.keep = s.sc.KeepRate() // the batch's (see Ctx.Keep)
	}
	s.sc.C.In.Add(int64(len(b.Vs)))
	var now int64
	if s.proc {
		now = s.sc.Now().UnixNano()
	} else if b.Ts == nil && len(b.Vs) > 0 {
		s.sc.fail(errNoEventTime)
	}
	for i, v := range b.Vs {
		t := now
		if !s.proc {
			t = b.Ts[i]
		}
		k := s.fns.Key(v)
		var m *Mark
		for mi < len(b.Tr) && int(b.Tr[mi].I) < i {
			mi++
		}
		if mi < len(b.Tr) && int(b.Tr[mi].I) == i {
			m = &b.Tr[mi]
		}
		var placed bool
		if s.kind == sessions {
			placed = s.addSession(k, v, t, m)
		} else {
			placed = s.addPanes(k, v, t, now, m)
		}
		if !placed {
			s.late.add(v, t)
		}
	}
	s.flushSomeGone()
	s.late.flush()
	s.out.flush()
	s.lend.giveBack(s.sc, b)
}

// addPanes adds a record to every window it belongs to that is still open
// (or within the allowed lateness) and reports whether there was one.
func (s *winStage[K, T, A, O]) addPanes(k K, v T, t, now int64, m *Mark) bool {
	l, seen := s.get(k)
	grown, placed := false, false
	for start := floorDiv(t, s.slide) * s.slide; start > t-s.size; start -= s.slide {
		end := start + s.size
		if !s.proc && end-1+s.lateness <= s.wm {
			break // this window and every earlier one are past
		}
		w := s.lastWin
		if w == nil || s.lastEnd != end {
			w = s.wins[end]
		}
		fresh := w == nil
		if fresh {
			w = &winInfo[K]{}
			s.wins[end] = w
			if s.proc {
				s.sc.After(time.Duration(end-now), func() { s.fireProc(end) })
			} else {
				s.ends.add(end, struct{}{})
			}
		}
		s.lastEnd, s.lastWin = end, w
		i := slotOf(l, end)
		if i < 0 {
			if l == nil {
				l = s.newList()
			}
			l = append(l, session[A]{End: end, Acc: s.fns.Zero()})
			i, grown = len(l)-1, true
		}
		l[i].Acc = s.fns.Add(l[i].Acc, v)
		if k := s.keep; k < 1 && (w.keep == 0 || k < w.keep) {
			w.keep = k
		}
		placed = true
		if m != nil {
			if w.tr == nil {
				w.tr = map[K]*contributors{}
			}
			c := w.tr[k]
			if c == nil {
				c = &contributors{}
				w.tr[k] = c
			}
			c.add(*m)
		}
		if !s.proc && end-1 <= s.wm { // a late record within the allowed lateness
			if !w.fired {
				w.fired = true
				s.cleanup.add(end-1+s.lateness, end)
				if !fresh { // other keys' results are due too: once l is stored
					s.lateEnd = append(s.lateEnd, end)
					continue
				}
			}
			s.at = end - 1
			s.emitKey(w, k, start, end, l[i].Acc)
		}
	}
	switch {
	case !placed:
	case s.mem != nil && seen && !grown:
		s.mem.Changed(k, true) // l is the map's: changed in place
	default:
		s.put(k, l, seen)
	}
	for _, end := range s.lateEnd {
		s.scanWindow(end, true, false)
	}
	s.lateEnd = s.lateEnd[:0]
	return placed
}

// addSession merges a record (m when it is sampled) into its key's
// sessions.
func (s *winStage[K, T, A, O]) addSession(k K, v T, t int64, m *Mark) bool {
	l, seen := s.get(k)
	merged := session[A]{Start: t, End: t + s.gap}
	// The sessions the record joins: a run of the list (sorted by start,
	// disjoint).
	i0, i1 := -1, -1
	for i, x := range l {
		if x.Start < merged.End && merged.Start < x.End {
			merged.Start, merged.End = min(merged.Start, x.Start), max(merged.End, x.End)
			if i0 < 0 {
				i0 = i
			}
			i1 = i + 1
		}
	}
	if merged.End-1+s.lateness <= s.wm {
		return false
	}
	if i0 < 0 {
		i0, _ = slices.BinarySearchFunc(l, merged.Start, func(x session[A], start int64) int { return cmpInt64(x.Start, start) })
		i1 = i0
	}
	acc := s.fns.Add(s.fns.Zero(), v)
	var tr *contributors
	for _, x := range l[i0:i1] {
		acc = s.fns.Merge(x.Acc, acc)
		if len(s.sessTr) > 0 {
			sk := sessKey[K]{k, x.Start}
			tr = mergeContributors(tr, s.sessTr[sk])
			delete(s.sessTr, sk)
		}
	}
	merged.Acc = acc
	if m != nil {
		if tr == nil {
			tr = &contributors{}
		}
		tr.add(*m)
	}
	if tr != nil {
		if s.sessTr == nil {
			s.sessTr = map[sessKey[K]]*contributors{}
		}
		s.sessTr[sessKey[K]{k, merged.Start}] = tr
	}
	lazy := s.st == nil && s.stErr == nil // memory: see session.timer
	if lazy {
		for _, x := range l[i0:i1] {
			if x.timer != 0 && !x.Fired && (merged.timer == 0 || x.timer < merged.timer) {
				merged.timer = x.timer // at or before merged.End: it looks at the merged session
			}
		}
	}
	switch {
	case merged.End-1 <= s.wm: // within the allowed lateness: fire now
		merged.Fired, merged.timer = true, 0
		s.cleanupTimer(merged.End, k)
		s.emitSession(k, &merged)
	case lazy:
		if merged.timer == 0 {
			merged.timer = merged.End
			s.endTimer(merged.End, k)
		}
	case i1-i0 != 1 || l[i0].End != merged.End || l[i0].Fired:
		s.endTimer(merged.End, k) // not the end of an open session, whose timer is set
	}
	if s.st != nil { // disk: the ends of the open sessions merged go (memory: skipped as they fire)
		for _, x := range l[i0:i1] {
			if !x.Fired && (x.End != merged.End || merged.Fired) && !s.cleanupAt(l, &merged, x.End-1) {
				s.st.delete(eventTime, x.End-1, k)
			}
		}
	}
	if l == nil {
		l = s.newList()
	}
	l = slices.Replace(l, i0, i1, merged)
	s.put(k, l, seen)
	return true
}

// cleanupAt says whether a fired session of l, or merged, has its
// cleanup timer at at (a key's timer is one for both: sessionTimer).
func (s *winStage[K, T, A, O]) cleanupAt(l []session[A], merged *session[A], at int64) bool {
	if s.lateness == 0 {
		return false
	}
	if merged.Fired && merged.End-1+s.lateness == at {
		return true
	}
	for i := range l {
		if l[i].Fired && l[i].End-1+s.lateness == at {
			return true
		}
	}
	return false
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (s *winStage[K, T, A, O]) emitOne(o O) { s.out.add(o, s.at) }

// scanWindow reads the table once for the window ending at end: emit
// emits every key's result, drop removes the window's slots.
func (s *winStage[K, T, A, O]) scanWindow(end int64, emit, drop bool) {
	w := s.wins[end]
	if w == nil {
		w = &winInfo[K]{}
	}
	s.at = end - 1
	if m := s.mem; m != nil && s.plain {
		// The memory backend's: one pass over its map and order, which
		// drops the keys left without slots as it goes.
		j := 0
		for _, k := range m.Order {
			l := m.M[k]
			if i := slotOf(l, end); i >= 0 {
				if emit {
					s.emitKey(w, k, end-s.size, end, l[i].Acc)
				}
				if drop {
					if l = slices.Delete(l, i, i+1); len(l) == 0 {
						delete(m.M, k)
						if len(s.free) < maxFreeLists && cap(l) > 0 {
							s.free = append(s.free, l)
						}
						continue
					}
					m.M[k] = l
				}
			}
			m.Order[j] = k
			j++
		}
		clear(m.Order[j:])
		m.Order = m.Order[:j]
		return
	}
	for k, l := range s.tab.All {
		i := slotOf(l, end)
		if i < 0 {
			continue
		}
		if emit {
			s.emitKey(w, k, end-s.size, end, l[i].Acc)
		}
		if drop {
			s.put(k, slices.Delete(l, i, i+1), true)
		}
	}
	s.flushGone()
}

// emitKey emits the result acc of key k in window w: in the trace of its
// first sampled record, linked to all, when it has some.
func (s *winStage[K, T, A, O]) emitKey(w *winInfo[K], k K, start, end int64, acc A) {
	if c := w.tr[k]; c != nil && s.sc.Tracer != nil {
		m, done := s.sc.Tracer.emit(s.sc, c, KeyString(k), attribute.Int64("sluice.window.start", start),
			attribute.Int64("sluice.window.end", end), attribute.Int64("sluice.event_time", end-1))
		s.out.cur = &m
		defer func() { s.out.cur = nil; done() }()
	}
	if s.fns.Shed != nil && w.keep > 0 {
		acc = s.fns.Shed(acc, w.keep)
	}
	s.fns.Emit(k, start, end, acc, s.emit)
}

// emitSession emits the results of key k's session x: in the trace of its
// first sampled record, linked to all, when it has some (as emitKey).
func (s *winStage[K, T, A, O]) emitSession(k K, x *session[A]) {
	s.at = x.End - 1
	if c := s.sessTr[sessKey[K]{k, x.Start}]; c != nil && s.sc.Tracer != nil {
		m, done := s.sc.Tracer.emit(s.sc, c, KeyString(k), attribute.Int64("sluice.window.start", x.Start),
			attribute.Int64("sluice.window.end", x.End), attribute.Int64("sluice.event_time", x.End-1))
		s.out.cur = &m
		defer func() { s.out.cur = nil; done() }()
	}
	s.fns.Emit(k, x.Start, x.End, x.Acc, s.emit)
}

// mergeContributors is the sampled records of two merged sessions, a's
// first.
func mergeContributors(a, b *contributors) *contributors {
	if a == nil {
		return b
	}
	if b != nil {
		for _, m := range b.marks {
			a.add(m)
		}
		a.dropped += b.dropped
	}
	return a
}

// dropWin forgets the window ending at end.
func (s *winStage[K, T, A, O]) dropWin(end int64) {
	delete(s.wins, end)
	if s.lastEnd == end {
		s.lastWin = nil
	}
}

// fireProc fires a processing-time window when the clock passed its end.
func (s *winStage[K, T, A, O]) fireProc(end int64) {
	defer s.sc.attribute()
	if s.wins[end] != nil && s.tab != nil {
		s.scanWindow(end, true, true)
		s.dropWin(end)
	}
	s.out.flush()
}

func (s *winStage[K, T, A, O]) Watermark(wm int64) {
	s.late.watermark(wm)
	defer s.sc.attribute()
	if wm <= s.wm {
		return
	}
	s.wm = wm
	if !s.proc && s.tab != nil {
		for e, ok := s.ends.due(wm + 1); ok; e, ok = s.ends.due(wm + 1) {
			w := s.wins[e.at]
			if w == nil || w.fired {
				continue
			}
			if s.lateness > 0 {
				s.scanWindow(e.at, true, false)
				w.fired = true
				s.cleanup.add(e.at-1+s.lateness, e.at)
			} else {
				s.scanWindow(e.at, true, true)
				s.dropWin(e.at)
			}
		}
		for c, ok := s.cleanup.due(wm); ok; c, ok = s.cleanup.due(wm) {
			if s.wins[c.v] != nil {
				s.scanWindow(c.v, false, true)
				s.dropWin(c.v)
			}
		}
		if s.kind == sessions && s.mem == nil {
			s.fireDisk(wm, false)
		}
		for e, ok := s.sessTimers.due(wm + 1); ok; e, ok = s.sessTimers.due(wm + 1) {
			s.fireSessions(e.v, e.at, s.lateness > 0)
		}
		for c, ok := s.sessCleanup.due(wm); ok; c, ok = s.sessCleanup.due(wm) {
			s.dropSessions(c.v)
		}
		s.flushSomeGone()
	}
	s.out.flush()
	s.next.Watermark(wm)
}

// fireSessions handles key k's heap entry at end: the open sessions it
// looks at (session.timer) fire if they end at end, keep marking them
// fired (the allowed lateness), else they go; those extended since get
// an entry at their end.
func (s *winStage[K, T, A, O]) fireSessions(k K, end int64, keep bool) {
	l, seen := s.get(k)
	changed := false
	for i := 0; i < len(l); {
		x := &l[i]
		if x.timer != end || x.Fired {
			i++
			continue // another entry's, or fired
		}
		changed = true
		if x.End != end { // extended since the entry was set (x.End > end)
			x.timer = x.End
			s.endTimer(x.End, k)
			i++
			continue
		}
		x.timer = 0
		s.emitSession(k, x)
		if keep {
			x.Fired = true
			s.cleanupTimer(x.End, k)
			i++
			continue
		}
		if len(s.sessTr) > 0 {
			delete(s.sessTr, sessKey[K]{k, x.Start})
		}
		l = slices.Delete(l, i, i+1)
	}
	if changed {
		s.put(k, l, seen)
	}
}

// dropSessions forgets the key's fired sessions past the allowed lateness.
func (s *winStage[K, T, A, O]) dropSessions(k K) {
	l, seen := s.get(k)
	n := len(l)
	l = slices.DeleteFunc(l, func(x session[A]) bool {
		if x.Fired && x.End-1+s.lateness <= s.wm {
			if len(s.sessTr) > 0 {
				delete(s.sessTr, sessKey[K]{k, x.Start})
			}
			return true
		}
		return false
	})
	if len(l) != n {
		s.put(k, l, seen)
	}
}

// finish fires every window still open, in the order of their ends.
func (s *winStage[K, T, A, O]) Finish() {
	defer s.sc.attribute()
	if s.tab != nil {
		ends := make([]int64, 0, len(s.wins))
		for e, w := range s.wins {
			if !w.fired {
				ends = append(ends, e)
			}
		}
		slices.Sort(ends)
		for _, e := range ends {
			s.scanWindow(e, true, false)
		}
		if s.kind == sessions && s.mem == nil {
			s.fireDisk(math.MaxInt64, true)
		}
		for e, ok := s.sessTimers.due(math.MaxInt64); ok; e, ok = s.sessTimers.due(math.MaxInt64) {
			s.fireSessions(e.v, e.at, false)
		}
		s.flushGone()
	}
	s.wins, s.sessTr, s.lastWin = nil, nil, nil
	s.out.flush()
	s.late.Finish()
	s.next.Finish()
}

// open arms the timers of restored processing-time windows, once the
// instance runs.
func (s *winStage[K, T, A, O]) Open() error {
	now := s.sc.Now().UnixNano()
	for _, end := range s.restoredProc {
		s.sc.After(time.Duration(max(0, end-now)), func() { s.fireProc(end) })
	}
	s.restoredProc = nil
	return nil
}

func (s *winStage[K, T, A, O]) Abort() {}

// CommittedState tells the state backend that checkpoint id is complete.
func (s *winStage[K, T, A, O]) CommittedState(id uint64) {
	if s.tab != nil {
		s.tab.Committed(id)
	}
	if s.st != nil {
		s.st.tab.Committed(id)
	}
}

// CloseState releases the state backend's files (the instance stops).
func (s *winStage[K, T, A, O]) CloseState() error {
	var errs []error
	if s.tab != nil {
		errs = append(errs, s.tab.Close())
	}
	if s.st != nil {
		errs = append(errs, s.st.tab.Close())
	}
	return errors.Join(errs...)
}

// winMeta is what a window stage's checkpoint keeps beside its table (a
// state.Bundle of the two): the event time and the open time windows.
type winMeta struct {
	V    int       `msgpack:"v"` // winMetaVersion
	Wm   int64     `msgpack:"wm"`
	Wins []winMark `msgpack:"w,omitempty"`
}

type winMark struct {
	End   int64   `msgpack:"e"`
	Fired bool    `msgpack:"f,omitempty"`
	Keep  float64 `msgpack:"kp,omitempty"` // winInfo.keep
}

const winMetaVersion = 2

func (s *winStage[K, T, A, O]) SnapshotState(id uint64) ([]byte, error) {
	if s.tab == nil {
		return nil, s.openErr
	}
	s.flushGone() // no key without slots in the checkpoint
	meta := winMeta{V: winMetaVersion, Wm: s.wm}
	for e, w := range s.wins {
		meta.Wins = append(meta.Wins, winMark{End: e, Fired: w.fired, Keep: w.keep})
	}
	slices.SortFunc(meta.Wins, func(a, b winMark) int { return cmpInt64(a.End, b.End) })
	mb, err := msgpack.Marshal(&meta)
	if err != nil {
		return nil, fmt.Errorf("encode %d windows: %w", len(meta.Wins), err)
	}
	tb, err := s.tab.Snapshot(id)
	if err != nil {
		return nil, err
	}
	if s.kind == sessions && s.mem == nil { // sessions on disk: the timer table beside
		if s.stErr != nil {
			return nil, s.stErr
		}
		sb, err := s.st.tab.Snapshot(id)
		if err != nil {
			return nil, err
		}
		return state.Bundle(mb, tb, sb)
	}
	return state.Bundle(mb, tb)
}

func (s *winStage[K, T, A, O]) RestoreState(b []byte) error {
	return s.RestoreKeyGroups([][]byte{b}, 0, state.AllGroups)
}

// RestoreKeyGroups implements KeyGroupRestorer: the windows and sessions
// of the keys in [lo, hi) from every state (the table's Restore), the
// lowest event time, every open window (its keep rate the lowest).
// A state of the format before the table (whole maps of windows) is
// restored too, into the table.
func (s *winStage[K, T, A, O]) RestoreKeyGroups(states [][]byte, lo, hi int) error {
	s.lastWin = nil // the windows are restored anew
	if s.tab == nil {
		return s.openErr
	}
	var legacy []winState[K, A]
	var tables, timers [][]byte // timers: the session timer tables (disk)
	var merged winMeta
	wins := map[int64]int{}
	for i, b := range states {
		if !state.IsBundle(b) {
			var st winState[K, A]
			if err := decodeState(b, &st, "window state"); err != nil {
				return wrapState(i, len(states), err)
			}
			legacy = append(legacy, st)
			continue
		}
		mb, tabs, err := state.Unbundle(b)
		if err == nil && (len(tabs) < 1 || len(tabs) > 2) {
			err = fmt.Errorf("window state: %d tables, want 1 or 2", len(tabs))
		}
		var meta winMeta
		if err == nil {
			err = decodeState(mb, &meta, "window state")
		}
		if err == nil && meta.V != winMetaVersion {
			err = fmt.Errorf("window state: version %d, this sluice reads %d", meta.V, winMetaVersion)
		}
		if err != nil {
			return wrapState(i, len(states), err)
		}
		tables = append(tables, tabs[0])
		if len(tabs) == 2 {
			timers = append(timers, tabs[1])
		}
		if len(tables) == 1 || meta.Wm < merged.Wm {
			merged.Wm = meta.Wm
		}
		for _, w := range meta.Wins {
			if w.Keep < 0 || w.Keep >= 1 || math.IsNaN(w.Keep) {
				return wrapState(i, len(states), fmt.Errorf("window ending %d: keep rate %v out of (0, 1)", w.End, w.Keep))
			}
			j, ok := wins[w.End]
			if !ok {
				wins[w.End] = len(merged.Wins)
				merged.Wins = append(merged.Wins, w)
				continue
			}
			if k := w.Keep; k > 0 && (merged.Wins[j].Keep == 0 || k < merged.Wins[j].Keep) {
				merged.Wins[j].Keep = k
			}
		}
	}
	if len(legacy) > 0 {
		if len(tables) > 0 {
			return fmt.Errorf("window state: %d states of the format before the state table beside %d of it", len(legacy), len(tables))
		}
		if hi == state.AllGroups {
			hi = maxKeyGroups
		}
		return s.restoreLegacy(legacy, lo, hi)
	}
	if err := s.tab.Restore(tables, lo, hi); err != nil {
		return err
	}
	s.wm = merged.Wm
	for _, w := range merged.Wins {
		s.wins[w.End] = &winInfo[K]{fired: w.Fired, keep: w.Keep}
		s.armRestored(w.End, w.Fired)
	}
	if s.st != nil && len(timers) == len(tables) { // sessions on disk, their timers checkpointed
		if err := s.st.restore(timers, lo, hi, nil, nil, nil, nil); err != nil {
			return err
		}
		return nil
	}
	return s.armSessions()
}

func wrapState(i, n int, err error) error {
	if n == 1 {
		return err
	}
	return fmt.Errorf("state %d of %d: %w", i+1, n, err)
}

// armRestored arms the timer of a restored time window.
func (s *winStage[K, T, A, O]) armRestored(end int64, fired bool) {
	switch {
	case s.proc:
		s.restoredProc = append(s.restoredProc, end)
	case fired:
		s.cleanup.add(end-1+s.lateness, end)
	default:
		s.ends.add(end, struct{}{})
	}
}

// armSessions arms the timers of the restored sessions (a read of the
// whole table): a checkpoint whose sessions' timers were not checkpointed
// (the memory backend, or a disk one written before the timer table).
func (s *winStage[K, T, A, O]) armSessions() error {
	if s.kind != sessions {
		return nil
	}
	if s.stErr != nil {
		return s.stErr
	}
	if s.st != nil {
		if err := s.st.restore(nil, 0, 0, nil, nil, nil, nil); err != nil { // empty
			return err
		}
	}
	for k, l := range s.tab.All {
		for i := range l {
			x := &l[i]
			if x.Fired {
				s.cleanupTimer(x.End, k)
			} else {
				s.endTimer(x.End, k)
				x.timer = x.End // l is the memory table's own (on disk: unused)
			}
		}
	}
	return nil
}

// winState is the checkpointed form of a window stage before its state
// went into a table (whole maps of windows and sessions): still restored.
type winState[K comparable, A any] struct {
	Wm    int64             `msgpack:"wm"`
	Panes []paneState[K, A] `msgpack:"p,omitempty"`
	Sess  []sessState[K, A] `msgpack:"s,omitempty"`
}

type paneState[K comparable, A any] struct {
	End   int64   `msgpack:"e"`
	Fired bool    `msgpack:"f"`
	Keys  []K     `msgpack:"k"`
	Accs  []A     `msgpack:"a"`
	Keep  float64 `msgpack:"kp,omitempty"` // pane.keep
}

type sessState[K comparable, A any] struct {
	Key  K            `msgpack:"k"`
	List []session[A] `msgpack:"l"`
}

// restoreLegacy restores states of the format before the table: the keys
// of groups [lo, hi) put into the table.
func (s *winStage[K, T, A, O]) restoreLegacy(states []winState[K, A], lo, hi int) error {
	owns := ownsKeys[K](lo, hi)
	for i, st := range states {
		if i == 0 || st.Wm < s.wm {
			s.wm = st.Wm
		}
		for _, ps := range st.Panes {
			if len(ps.Keys) != len(ps.Accs) {
				return fmt.Errorf("window ending %d: %d keys but %d values", ps.End, len(ps.Keys), len(ps.Accs))
			}
			if ps.Keep < 0 || ps.Keep >= 1 || math.IsNaN(ps.Keep) {
				return fmt.Errorf("window ending %d: keep rate %v out of (0, 1)", ps.End, ps.Keep)
			}
			w := s.wins[ps.End]
			for j, k := range ps.Keys {
				if !owns(k) {
					continue
				}
				if w == nil {
					w = &winInfo[K]{fired: ps.Fired}
					s.wins[ps.End] = w
					s.armRestored(ps.End, ps.Fired)
				}
				l, seen := s.get(k)
				if slotOf(l, ps.End) >= 0 {
					continue // the first state's
				}
				s.put(k, append(l, session[A]{End: ps.End, Acc: ps.Accs[j]}), seen)
			}
			if k := ps.Keep; w != nil && k > 0 && (w.keep == 0 || k < w.keep) {
				w.keep = k
			}
		}
		for _, ss := range st.Sess {
			if !owns(ss.Key) || len(ss.List) == 0 {
				continue
			}
			if _, seen := s.get(ss.Key); !seen {
				s.put(ss.Key, slices.Clone(ss.List), false)
			}
		}
	}
	s.flushGone()
	return s.armSessions()
}
