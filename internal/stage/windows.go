package stage

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/vmihailenco/msgpack/v5"
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

// pane holds the accumulators of the keys of one window, in first-seen order.
type pane[K comparable, A any] struct {
	idx   map[K]int
	keys  []K
	accs  []A
	fired bool                  // fired, kept for the allowed lateness
	tr    map[int]*contributors // the sampled records of a key (by its index), nil when none
	keep  float64               // the lowest keep rate below 1 of a record added (0: none)
}

type session[A any] struct {
	Start int64 `msgpack:"b"`
	End   int64 `msgpack:"e"` // last record + gap
	Acc   A     `msgpack:"a"`
	Fired bool  `msgpack:"f"`
	// tr are the sampled records merged into the session (not
	// checkpointed: a restored session links to none), nil when none.
	tr *contributors `msgpack:"-"`
}

type winStage[K comparable, T, A, O any] struct {
	fns                        WinFns[K, T, A, O]
	kind                       windowKind
	size, slide, gap, lateness int64
	proc                       bool
	wm                         int64
	keep                       float64 // the keep rate of the batch being added (1 without Shed)

	panes   map[int64]*pane[K, A] // by window end
	ends    timeHeap[struct{}]    // ends of windows to fire
	cleanup timeHeap[int64]       // fired windows to drop, at end-1+lateness

	sess        map[K][]session[A] // a key's sessions, by start
	sessTimers  timeHeap[K]        // session ends to fire (stale entries are skipped)
	sessCleanup timeHeap[K]

	late *lateOutput[T]
	next Pusher[O]
	sc   *Ctx
	out  OutBuf[O]
	at   int64 // the event time of the outputs being emitted

	restoredProc []int64 // restored processing-time windows, armed at open
}

func NewWinStage[K comparable, T, A, O any](fns WinFns[K, T, A, O], w Windows, lateness time.Duration, next Pusher[O], sc *Ctx) *winStage[K, T, A, O] {
	return &winStage[K, T, A, O]{fns: fns, kind: w.kind, size: int64(w.size), slide: int64(w.slide), gap: int64(w.gap),
		lateness: int64(lateness), proc: w.proc, wm: math.MinInt64,
		panes: make(map[int64]*pane[K, A]), sess: make(map[K][]session[A]),
		late: newLateOutput[T](sc), out: NewOutBuf(next, sc), next: next, sc: sc}
}

var errNoEventTime = errors.New("records carry no event time: add operators.Timestamps upstream, or use ProcessingTime windows")

func (s *winStage[K, T, A, O]) Push(b *Batch[T]) {
	defer s.sc.attribute()
	if end := passKeyed(s.sc, b, s.fns.Key); end != nil {
		defer end()
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
	s.late.flush()
	s.out.flush()
}

// addPanes adds a record to every window it belongs to that is still open
// (or within the allowed lateness) and reports whether there was one.
func (s *winStage[K, T, A, O]) addPanes(k K, v T, t, now int64, m *Mark) bool {
	placed := false
	for start := floorDiv(t, s.slide) * s.slide; start > t-s.size; start -= s.slide {
		end := start + s.size
		if !s.proc && end-1+s.lateness <= s.wm {
			break // this window and every earlier one are past
		}
		p := s.panes[end]
		if p == nil {
			p = &pane[K, A]{idx: make(map[K]int)}
			s.panes[end] = p
			if s.proc {
				s.sc.After(time.Duration(end-now), func() { s.fireProc(end) })
			} else {
				s.ends.add(end, struct{}{})
			}
		}
		i, ok := p.idx[k]
		if !ok {
			i = len(p.keys)
			p.idx[k] = i
			p.keys = append(p.keys, k)
			p.accs = append(p.accs, s.fns.Zero())
		}
		p.accs[i] = s.fns.Add(p.accs[i], v)
		if k := s.keep; k < 1 && (p.keep == 0 || k < p.keep) {
			p.keep = k
		}
		placed = true
		if m != nil {
			if p.tr == nil {
				p.tr = map[int]*contributors{}
			}
			c := p.tr[i]
			if c == nil {
				c = &contributors{}
				p.tr[i] = c
			}
			c.add(*m)
		}
		if !s.proc && end-1 <= s.wm { // a late record within the allowed lateness
			if !p.fired {
				p.fired = true
				s.cleanup.add(end-1+s.lateness, end)
				s.firePane(p, end)
				continue
			}
			s.at = end - 1
			s.emitKey(p, i, k, start, end)
		}
	}
	return placed
}

// addSession merges a record (m when it is sampled) into its key's
// sessions.
func (s *winStage[K, T, A, O]) addSession(k K, v T, t int64, m *Mark) bool {
	merged := session[A]{Start: t, End: t + s.gap}
	list := s.sess[k]
	var rest []session[A]
	var parts []session[A]
	for _, x := range list {
		if x.Start < merged.End && merged.Start < x.End {
			merged.Start, merged.End = min(merged.Start, x.Start), max(merged.End, x.End)
			parts = append(parts, x)
		} else {
			rest = append(rest, x)
		}
	}
	if merged.End-1+s.lateness <= s.wm {
		return false
	}
	acc := s.fns.Add(s.fns.Zero(), v)
	for _, x := range parts {
		acc = s.fns.Merge(x.Acc, acc)
		merged.tr = mergeContributors(merged.tr, x.tr)
	}
	merged.Acc = acc
	if m != nil {
		if merged.tr == nil {
			merged.tr = &contributors{}
		}
		merged.tr.add(*m)
	}
	if merged.End-1 <= s.wm { // within the allowed lateness: fire now
		merged.Fired = true
		s.sessCleanup.add(merged.End-1+s.lateness, k)
		s.emitSession(k, &merged)
	} else {
		s.sessTimers.add(merged.End, k)
	}
	i, _ := slices.BinarySearchFunc(rest, merged.Start, func(x session[A], start int64) int { return cmpInt64(x.Start, start) })
	s.sess[k] = slices.Insert(rest, i, merged)
	return true
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

func (s *winStage[K, T, A, O]) firePane(p *pane[K, A], end int64) {
	s.at = end - 1
	for i, k := range p.keys {
		s.emitKey(p, i, k, end-s.size, end)
	}
}

// emitKey emits the results of key k (at i) of pane p: in the trace of its
// first sampled record, linked to all, when it has some.
func (s *winStage[K, T, A, O]) emitKey(p *pane[K, A], i int, k K, start, end int64) {
	if c := p.tr[i]; c != nil && s.sc.Tracer != nil {
		m, done := s.sc.Tracer.emit(s.sc, c, KeyString(k), attribute.Int64("sluice.window.start", start),
			attribute.Int64("sluice.window.end", end), attribute.Int64("sluice.event_time", end-1))
		s.out.cur = &m
		defer func() { s.out.cur = nil; done() }()
	}
	acc := p.accs[i]
	if s.fns.Shed != nil && p.keep > 0 {
		acc = s.fns.Shed(acc, p.keep)
	}
	s.fns.Emit(k, start, end, acc, s.emitOne)
}

// emitSession emits the results of key k's session x: in the trace of its
// first sampled record, linked to all, when it has some (as emitKey).
func (s *winStage[K, T, A, O]) emitSession(k K, x *session[A]) {
	s.at = x.End - 1
	if x.tr != nil && s.sc.Tracer != nil {
		m, done := s.sc.Tracer.emit(s.sc, x.tr, KeyString(k), attribute.Int64("sluice.window.start", x.Start),
			attribute.Int64("sluice.window.end", x.End), attribute.Int64("sluice.event_time", x.End-1))
		s.out.cur = &m
		defer func() { s.out.cur = nil; done() }()
	}
	s.fns.Emit(k, x.Start, x.End, x.Acc, s.emitOne)
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

// fireProc fires a processing-time window when the clock passed its end.
func (s *winStage[K, T, A, O]) fireProc(end int64) {
	defer s.sc.attribute()
	if p := s.panes[end]; p != nil {
		s.firePane(p, end)
		delete(s.panes, end)
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
	if !s.proc {
		for e, ok := s.ends.due(wm + 1); ok; e, ok = s.ends.due(wm + 1) {
			p := s.panes[e.at]
			if p == nil || p.fired {
				continue
			}
			s.firePane(p, e.at)
			if s.lateness > 0 {
				p.fired = true
				s.cleanup.add(e.at-1+s.lateness, e.at)
			} else {
				delete(s.panes, e.at)
			}
		}
		for c, ok := s.cleanup.due(wm); ok; c, ok = s.cleanup.due(wm) {
			delete(s.panes, c.v)
		}
		for e, ok := s.sessTimers.due(wm + 1); ok; e, ok = s.sessTimers.due(wm + 1) {
			s.fireSessions(e.v, e.at)
		}
		for c, ok := s.sessCleanup.due(wm); ok; c, ok = s.sessCleanup.due(wm) {
			s.dropSessions(c.v)
		}
	}
	s.out.flush()
	s.next.Watermark(wm)
}

// fireSessions fires the key's session that ends at end, if it still does.
func (s *winStage[K, T, A, O]) fireSessions(k K, end int64) {
	list := s.sess[k]
	for i := range list {
		x := &list[i]
		if x.End != end || x.Fired {
			continue
		}
		s.emitSession(k, x)
		if s.lateness > 0 {
			x.Fired = true
			s.sessCleanup.add(x.End-1+s.lateness, k)
		} else {
			s.sess[k] = slices.Delete(list, i, i+1)
			if len(s.sess[k]) == 0 {
				delete(s.sess, k)
			}
		}
		return
	}
}

// dropSessions forgets the key's fired sessions past the allowed lateness.
func (s *winStage[K, T, A, O]) dropSessions(k K) {
	list := slices.DeleteFunc(s.sess[k], func(x session[A]) bool { return x.Fired && x.End-1+s.lateness <= s.wm })
	if len(list) == 0 {
		delete(s.sess, k)
		return
	}
	s.sess[k] = list
}

// finish fires every window still open, in the order of their ends.
func (s *winStage[K, T, A, O]) Finish() {
	defer s.sc.attribute()
	ends := make([]int64, 0, len(s.panes))
	for e, p := range s.panes {
		if !p.fired {
			ends = append(ends, e)
		}
	}
	slices.Sort(ends)
	for _, e := range ends {
		s.firePane(s.panes[e], e)
	}
	type open struct {
		k K
		x session[A]
	}
	var all []open
	for k, list := range s.sess {
		for _, x := range list {
			if !x.Fired {
				all = append(all, open{k, x})
			}
		}
	}
	slices.SortStableFunc(all, func(a, b open) int { return cmpInt64(a.x.End, b.x.End) })
	for _, o := range all {
		s.emitSession(o.k, &o.x)
	}
	s.panes, s.sess = nil, nil
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

// winState is the checkpointed form of a window stage.
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

func (s *winStage[K, T, A, O]) SnapshotState(uint64) ([]byte, error) {
	st := winState[K, A]{Wm: s.wm}
	for e, p := range s.panes {
		st.Panes = append(st.Panes, paneState[K, A]{End: e, Fired: p.fired, Keys: p.keys, Accs: p.accs, Keep: p.keep})
	}
	slices.SortFunc(st.Panes, func(a, b paneState[K, A]) int { return cmpInt64(a.End, b.End) })
	for k, list := range s.sess {
		st.Sess = append(st.Sess, sessState[K, A]{Key: k, List: list})
	}
	b, err := msgpack.Marshal(&st)
	if err != nil {
		return nil, fmt.Errorf("encode %d windows and %d keys' sessions: %w", len(st.Panes), len(st.Sess), err)
	}
	return b, nil
}

func (s *winStage[K, T, A, O]) RestoreState(b []byte) error {
	var st winState[K, A]
	if err := decodeState(b, &st, "window state"); err != nil {
		return err
	}
	return s.restoreFrom(st)
}

// RestoreKeyGroups implements KeyGroupRestorer: the panes and sessions of
// the keys in [lo, hi) from every state, the lowest event time.
func (s *winStage[K, T, A, O]) RestoreKeyGroups(states [][]byte, lo, hi int) error {
	owns := ownsKeys[K](lo, hi)
	merged := winState[K, A]{Wm: s.wm}
	panes := map[int64]int{}
	for i, b := range states {
		var st winState[K, A]
		if err := decodeState(b, &st, "window state"); err != nil {
			return fmt.Errorf("state %d of %d: %w", i+1, len(states), err)
		}
		if i == 0 || st.Wm < merged.Wm {
			merged.Wm = st.Wm
		}
		for _, ps := range st.Panes {
			if len(ps.Keys) != len(ps.Accs) {
				return fmt.Errorf("window ending %d: %d keys but %d values", ps.End, len(ps.Keys), len(ps.Accs))
			}
			j, ok := panes[ps.End]
			if !ok {
				j = len(merged.Panes)
				panes[ps.End] = j
				merged.Panes = append(merged.Panes, paneState[K, A]{End: ps.End, Fired: ps.Fired})
			}
			if k := ps.Keep; k > 0 && (merged.Panes[j].Keep == 0 || k < merged.Panes[j].Keep) {
				merged.Panes[j].Keep = k
			}
			for x, k := range ps.Keys {
				if owns(k) {
					merged.Panes[j].Keys = append(merged.Panes[j].Keys, k)
					merged.Panes[j].Accs = append(merged.Panes[j].Accs, ps.Accs[x])
				}
			}
		}
		for _, ss := range st.Sess {
			if owns(ss.Key) {
				merged.Sess = append(merged.Sess, ss)
			}
		}
	}
	merged.Panes = slices.DeleteFunc(merged.Panes, func(p paneState[K, A]) bool { return len(p.Keys) == 0 })
	return s.restoreFrom(merged)
}

func (s *winStage[K, T, A, O]) restoreFrom(st winState[K, A]) error {
	s.wm = st.Wm
	for _, ps := range st.Panes {
		if len(ps.Keys) != len(ps.Accs) {
			return fmt.Errorf("window ending %d: %d keys but %d values", ps.End, len(ps.Keys), len(ps.Accs))
		}
		if ps.Keep < 0 || ps.Keep >= 1 || math.IsNaN(ps.Keep) {
			return fmt.Errorf("window ending %d: keep rate %v out of (0, 1)", ps.End, ps.Keep)
		}
		p := &pane[K, A]{idx: make(map[K]int, len(ps.Keys)), keys: ps.Keys, accs: ps.Accs, fired: ps.Fired, keep: ps.Keep}
		for i, k := range ps.Keys {
			p.idx[k] = i
		}
		s.panes[ps.End] = p
		end := ps.End
		switch {
		case s.proc:
			s.restoredProc = append(s.restoredProc, end)
		case ps.Fired:
			s.cleanup.add(end-1+s.lateness, end)
		default:
			s.ends.add(end, struct{}{})
		}
	}
	for _, ss := range st.Sess {
		s.sess[ss.Key] = ss.List
		for _, x := range ss.List {
			if x.Fired {
				s.sessCleanup.add(x.End-1+s.lateness, ss.Key)
			} else {
				s.sessTimers.add(x.End, ss.Key)
			}
		}
	}
	return nil
}
