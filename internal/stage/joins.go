package stage

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"go.opentelemetry.io/otel/trace"
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

type IntervalStage[K comparable, L, R, O any] struct {
	key          func(Either[L, R]) K
	join         func(L, R) O
	lower, upper int64
	wm           int64
	bufs         map[K]*IntervalBuf[L, R]
	expiry       timeHeap[K] // when a key's records may be pruned
	next         Pusher[O]
	sc           *Ctx
	out          OutBuf[O]
}

func (s *IntervalStage[K, L, R, O]) Push(b *Batch[Either[L, R]]) {
	defer s.sc.attribute()
	if end := passKeyed(s.sc, b, s.key); end != nil {
		defer end()
	}
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
		buf := s.bufs[k]
		if buf == nil {
			buf = &IntervalBuf[L, R]{}
			s.bufs[k] = buf
		}
		if e.Right {
			for _, l := range buf.Ls {
				if t >= l.T+s.lower && t <= l.T+s.upper {
					s.out.add(s.join(l.V, e.R), max(t, l.T))
				}
			}
			buf.Rs = append(buf.Rs, stamped[R]{t, e.R})
			s.expiry.add(t-s.lower, k)
		} else {
			for _, r := range buf.Rs {
				if r.T >= t+s.lower && r.T <= t+s.upper {
					s.out.add(s.join(e.L, r.V), max(t, r.T))
				}
			}
			buf.Ls = append(buf.Ls, stamped[L]{t, e.L})
			s.expiry.add(t+s.upper, k)
		}
	}
	s.out.flush()
}

func (s *IntervalStage[K, L, R, O]) Watermark(wm int64) {
	defer s.sc.attribute()
	if wm <= s.wm {
		return
	}
	s.wm = wm
	for e, ok := s.expiry.due(wm); ok; e, ok = s.expiry.due(wm) {
		buf := s.bufs[e.v]
		if buf == nil {
			continue
		}
		// No right record later than wm can match l once l+upper <= wm, nor
		// a left one r once r-lower <= wm.
		buf.Ls = slices.DeleteFunc(buf.Ls, func(l stamped[L]) bool { return l.T+s.upper <= wm })
		buf.Rs = slices.DeleteFunc(buf.Rs, func(r stamped[R]) bool { return r.T-s.lower <= wm })
		if len(buf.Ls) == 0 && len(buf.Rs) == 0 {
			delete(s.bufs, e.v)
		}
	}
	s.next.Watermark(wm)
}

func (s *IntervalStage[K, L, R, O]) Finish() { s.bufs = nil; s.next.Finish() }

type keyedBufs[K comparable, B any] struct {
	Wm   int64 `msgpack:"wm"`
	Keys []K   `msgpack:"k"`
	Bufs []B   `msgpack:"b"`
}

func (s *IntervalStage[K, L, R, O]) SnapshotState(uint64) ([]byte, error) {
	return encodeKeyed(s.wm, s.bufs)
}

func (s *IntervalStage[K, L, R, O]) RestoreState(b []byte) error {
	wm, bufs, err := decodeKeyed[K, IntervalBuf[L, R]](b)
	if err != nil {
		return err
	}
	return s.restoreFrom(wm, bufs)
}

// RestoreKeyGroups implements KeyGroupRestorer.
func (s *IntervalStage[K, L, R, O]) RestoreKeyGroups(states [][]byte, lo, hi int) error {
	wm, bufs, err := mergeKeyed[K, IntervalBuf[L, R]](states, lo, hi, s.wm)
	if err != nil {
		return err
	}
	return s.restoreFrom(wm, bufs)
}

func (s *IntervalStage[K, L, R, O]) restoreFrom(wm int64, bufs map[K]*IntervalBuf[L, R]) error {
	s.wm, s.bufs = wm, bufs
	for k, buf := range bufs {
		for _, l := range buf.Ls {
			s.expiry.add(l.T+s.upper, k)
		}
		for _, r := range buf.Rs {
			s.expiry.add(r.T-s.lower, k)
		}
	}
	return nil
}

func encodeKeyed[K comparable, B any](wm int64, bufs map[K]*B) ([]byte, error) {
	st := keyedBufs[K, B]{Wm: wm, Keys: make([]K, 0, len(bufs)), Bufs: make([]B, 0, len(bufs))}
	for k, b := range bufs {
		st.Keys = append(st.Keys, k)
		st.Bufs = append(st.Bufs, *b)
	}
	b, err := msgpack.Marshal(&st)
	if err != nil {
		return nil, fmt.Errorf("encode state of %d keys: %w", len(st.Keys), err)
	}
	return b, nil
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

// mergeKeyed decodes several keyed states and keeps the keys of groups
// [lo, hi), with the lowest event time (wm when there are none).
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
	Touched int64 `msgpack:"t"` // processing time of the key's last record (StateTTL)
}

type JoinStage[K comparable, L, R, O any] struct {
	key     func(Either[L, R]) K
	join    func(L, R) O
	ttl     int64
	bufs    map[K]*JoinBuf[L, R]
	sweeper bool             // a TTL sweep is scheduled
	marks   map[K]*joinMarks // the sampled records buffered, nil when none
	next    Pusher[O]
	sc      *Ctx
	out     OutBuf[O]
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
	s.sc.C.In.Add(int64(len(b.Vs)))
	mi := 0
	var now int64
	if s.ttl > 0 {
		now = s.sc.Now().UnixNano()
		if !s.sweeper {
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
		buf := s.bufs[k]
		if buf == nil {
			buf = &JoinBuf[L, R]{}
			s.bufs[k] = buf
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
	}
	s.out.flush()
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
// state is left.
func (s *JoinStage[K, L, R, O]) sweep() {
	cutoff := s.sc.Now().UnixNano() - s.ttl
	for k, buf := range s.bufs {
		if buf.Touched <= cutoff {
			delete(s.bufs, k)
			delete(s.marks, k)
		}
	}
	s.sweeper = len(s.bufs) > 0
	if s.sweeper {
		s.sc.After(time.Duration(s.ttl), s.sweep)
	}
}

func (s *JoinStage[K, L, R, O]) Watermark(wm int64) { s.next.Watermark(wm) }

func (s *JoinStage[K, L, R, O]) Finish() { s.bufs = nil; s.next.Finish() }

func (s *JoinStage[K, L, R, O]) SnapshotState(uint64) ([]byte, error) { return encodeKeyed(0, s.bufs) }

func (s *JoinStage[K, L, R, O]) RestoreState(b []byte) error {
	_, bufs, err := decodeKeyed[K, JoinBuf[L, R]](b)
	if err != nil {
		return err
	}
	return s.restoreFrom(bufs)
}

// RestoreKeyGroups implements KeyGroupRestorer.
func (s *JoinStage[K, L, R, O]) RestoreKeyGroups(states [][]byte, lo, hi int) error {
	_, bufs, err := mergeKeyed[K, JoinBuf[L, R]](states, lo, hi, 0)
	if err != nil {
		return err
	}
	return s.restoreFrom(bufs)
}

func (s *JoinStage[K, L, R, O]) restoreFrom(bufs map[K]*JoinBuf[L, R]) error {
	now := s.sc.Now().UnixNano()
	for _, buf := range bufs {
		buf.Touched = now // the TTL counts from the restart
	}
	s.bufs = bufs
	return nil
}
