package stage

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"github.com/sluicehq/sluice/internal/state"
)

// The interval join's pruning timers on the disk backend (timers.go's
// table): one a key with records, bounded in memory however many keys
// there are, pruning as the memory backend's heap does, checkpointed with
// the state table, restored and rescaled by key group.

type ijStage = *IntervalStage[int64, int64, int64, ijPair]

// ijPair is a pair the join emitted, at its event time T.
type ijPair struct{ L, R, T int64 }

// ijPusher keeps the pairs with their event times.
type ijPusher struct{ got []ijPair }

func (p *ijPusher) Push(b *Batch[ijPair]) {
	for i, v := range b.Vs {
		v.T = b.Ts[i]
		p.got = append(p.got, v)
	}
}
func (p *ijPusher) Watermark(int64) {}
func (p *ijPusher) Finish()         {}

// ijKeyDiv: a record's value is its key * ijKeyDiv + a sequence number.
const ijKeyDiv = 1_000_000

// newIJStage is an interval join of [lower, upper] keyed by value /
// ijKeyDiv, emitting the pair of values.
func newIJStage(t *testing.T, sc *Ctx, lower, upper int64, out *ijPusher) ijStage {
	t.Helper()
	key := func(e Either[int64, int64]) int64 {
		if e.Right {
			return e.R / ijKeyDiv
		}
		return e.L / ijKeyDiv
	}
	s := NewIntervalJoin(key, func(l, r int64) ijPair { return ijPair{L: l, R: r} }, lower, upper, out, sc).(ijStage)
	if s.t.tab == nil {
		t.Fatal(s.t.openErr)
	}
	t.Cleanup(func() { check(t, s.CloseState()) })
	return s
}

// ijPush: keys [from, to) each get a left record at (k%1000)*10 and a
// right one 5 later (one pair a key with [-10, 10]), in batches of 1000
// keys.
func ijPush(s ijStage, from, to int64) {
	for lo := from; lo < to; lo += 1000 {
		var b Batch[Either[int64, int64]]
		for k := lo; k < min(lo+1000, to); k++ {
			t := k % 1000 * 10
			b.Vs = append(b.Vs, Either[int64, int64]{L: k * ijKeyDiv}, Either[int64, int64]{R: k*ijKeyDiv + 1, Right: true})
			b.Ts = append(b.Ts, t, t+5)
		}
		s.Push(&b)
	}
}

// ijTimers reads the stage's timer table: each key's timers' times, and
// checks that the key has one and that it is at the earliest time one of
// its records may be pruned, and that every key with records has one.
func ijTimers(t *testing.T, s ijStage) map[int64]int64 {
	t.Helper()
	timers := map[int64]int64{}
	for id := range s.dt.tab.All {
		_, at, k, err := decodeTimerID(id, s.dt.kc)
		check(t, err)
		if prev, ok := timers[k]; ok {
			t.Fatalf("key %d has timers at %d and %d", k, prev, at)
		}
		timers[k] = at
	}
	keys := 0
	for k, buf := range s.t.tab.All {
		first, ok := s.firstDue(buf)
		if !ok {
			t.Fatalf("key %d: an empty buffer in the table", k)
		}
		keys++
		if at, ok := timers[k]; !ok || at != first {
			t.Fatalf("key %d: timer at %d (set: %v), want %d", k, at, ok, first)
		}
	}
	if len(timers) != keys {
		t.Fatalf("%d timers for %d keys with records", len(timers), keys)
	}
	return timers
}

// ijBufs is the table's keys with records, printed.
func ijBufs(s ijStage) map[int64]string {
	out := map[int64]string{}
	for k, buf := range s.t.tab.All {
		if buf != nil && (len(buf.Ls) > 0 || len(buf.Rs) > 0) {
			out[k] = fmt.Sprint(buf.Ls, buf.Rs)
		}
	}
	return out
}

// 100,000 keys with records (20,000 under the race detector) under a
// 64 KiB budget: the pruning timers held in memory (the timer table's
// cache entries and the due timers read to fire) stay under the bound the
// budget and the fire batch give, far below a heap entry per key; every
// key's pair is emitted once and every key pruned by the last watermark.
func TestIntervalDiskTimersBounded(t *testing.T) {
	keys := int64(raceScaled(100_000))
	sc := testCtx(0, 1)
	sc.State = state.Spec{Dir: t.TempDir(), Budget: 64 << 10}
	out := &ijPusher{}
	s := newIJStage(t, sc, -10, 10, out)
	// As TestSessionDiskTimersBounded: a cache entry takes at least its
	// key's string header and bytes (9 of time and group, 8 of key) in a
	// map slot; the due timers are a fire batch a group (a pruned key's
	// next timer is after the watermark: it does not join them).
	minEntry := int(unsafe.Sizeof(""))*16/7 + 9 + 8
	cacheBound := int(timerBudget(sc.State.Budget)/2)/minEntry + 1
	dueBound := maxKeyGroups * fireBatch
	if int64(cacheBound+dueBound) >= keys {
		t.Fatalf("bound %d not below the %d keys: the test tells nothing", cacheBound+dueBound, keys)
	}
	peak := 0
	for lo := int64(0); lo < keys; lo += 10_000 {
		ijPush(s, lo, min(lo+10_000, keys))
		peak = max(peak, s.dt.held())
	}
	for wm := int64(0); wm < 11_000; wm += 500 {
		s.Watermark(wm)
		peak = max(peak, s.dt.held())
	}
	if n := s.dt.earliest(eventTime); n != math.MaxInt64 {
		t.Fatalf("a timer left at %d after the last watermark", n)
	}
	if left := ijBufs(s); len(left) > 0 {
		t.Fatalf("%d keys' records left after the last watermark", len(left))
	}
	if len(ijTimers(t, s)) != 0 {
		t.Fatal("timers left in the table")
	}
	s.Finish()
	if int64(len(out.got)) != keys {
		t.Fatalf("%d pairs, want %d", len(out.got), keys)
	}
	for i, p := range out.got {
		if k := int64(i); p.L != k*ijKeyDiv || p.R != k*ijKeyDiv+1 || p.T != k%1000*10+5 {
			t.Fatalf("pair %d: %+v", i, p)
		}
	}
	if len(s.expiry) != 0 {
		t.Fatalf("%d entries in the memory heap on disk", len(s.expiry))
	}
	if peak > cacheBound+dueBound || s.dt.maxHeld > dueBound {
		t.Fatalf("held up to %d timers in memory (%d due at once), bound %d (cache %d)", peak, s.dt.maxHeld, cacheBound+dueBound, cacheBound)
	}
	t.Logf("%d keys; at most %d timers held in memory (%d due at once), bound %d", keys, peak, s.dt.maxHeld, cacheBound+dueBound)
}

// ijStep is a batch, or a watermark (b nil).
type ijStep struct {
	b  *Batch[Either[int64, int64]]
	wm int64
}

// ijInput: 400 steps (200 under the race detector) over 300 keys, batches of 64 records of either side
// around an event time advancing 10 a step (from 60 behind to 40 ahead:
// out of order, some late), a watermark 30 behind every fifth step, and
// one at the end past every record.
func ijInput() []ijStep {
	r := rand.New(rand.NewPCG(21, 7))
	var steps []ijStep
	seq := int64(0)
	n := 400
	if raceEnabled {
		n = 200
	}
	for i := range n {
		base := int64(i) * 10
		if i%5 == 4 {
			steps = append(steps, ijStep{wm: base - 30})
			continue
		}
		b := &Batch[Either[int64, int64]]{}
		for range 64 {
			seq++
			v := r.Int64N(300)*ijKeyDiv + seq
			e := Either[int64, int64]{L: v}
			if r.IntN(2) == 1 {
				e = Either[int64, int64]{R: v, Right: true}
			}
			b.Vs, b.Ts = append(b.Vs, e), append(b.Ts, base+r.Int64N(101)-60)
		}
		steps = append(steps, ijStep{b: b})
	}
	return append(steps, ijStep{wm: int64(n)*10 + 100})
}

// ijRun runs steps on s, with check after every 50th.
func ijRun(s ijStage, steps []ijStep, check func(i int)) {
	for i, st := range steps {
		if st.b != nil {
			s.Push(st.b)
		} else {
			s.Watermark(st.wm)
		}
		if check != nil && i%50 == 49 {
			check(i)
		}
	}
}

// The disk backend's join emits what the memory backend's does, in the
// same order, on input out of order with late records, and holds the same
// records after each watermark (pruned alike), for windows around the
// record, after it and before it (a record's pruning time may be behind
// the watermark as it arrives): each key with records has one timer, at
// the earliest pruning time of its records.
func TestIntervalDiskMatchesMemory(t *testing.T) {
	steps := ijInput()
	for _, w := range [][2]int64{{-20, 30}, {0, 0}, {-40, -10}, {15, 45}} {
		t.Run(fmt.Sprint(w), func(t *testing.T) {
			mout, dout := &ijPusher{}, &ijPusher{}
			msc, dsc := testCtx(0, 1), testCtx(0, 1)
			dsc.State = state.Spec{Dir: t.TempDir(), Budget: 16 << 10}
			m := newIJStage(t, msc, w[0], w[1], mout)
			d := newIJStage(t, dsc, w[0], w[1], dout)
			var mstate []map[int64]string
			ijRun(m, steps, func(int) { mstate = append(mstate, ijBufs(m)) })
			ijRun(d, steps, func(i int) {
				if got, want := ijBufs(d), mstate[i/50]; !maps.Equal(got, want) {
					t.Fatalf("after step %d: %d keys with records on disk, %d in memory, or not alike", i, len(got), len(want))
				}
				ijTimers(t, d)
			})
			if !slices.Equal(dout.got, mout.got) {
				t.Fatalf("disk emitted %d pairs, memory %d, or not alike", len(dout.got), len(mout.got))
			}
			if len(mout.got) == 0 {
				t.Fatal("no pairs")
			}
			ml, dl := msc.C.Late.Load(), dsc.C.Late.Load()
			if ml != dl || ml == 0 {
				t.Fatalf("late records: disk %d, memory %d (want some)", dl, ml)
			}
			if left := ijBufs(d); len(left) > 0 || d.dt.earliest(eventTime) != math.MaxInt64 {
				t.Fatalf("%d keys' records left, a timer at %d", len(left), d.dt.earliest(eventTime))
			}
			t.Logf("%d pairs, %d late", len(dout.got), dl)
		})
	}
}

// A join on disk restarted on the same files from a checkpoint (a base,
// then a delta of both tables) and fed the rest of the input emits what a
// run without a restart emits after that checkpoint; so does a restore of
// the base without its timer table (a disk checkpoint of before it: the
// timers rebuilt from the state).
func TestIntervalDiskTimersRestart(t *testing.T) {
	steps := ijInput()
	const lower, upper = -20, 30
	whole := &ijPusher{}
	sc := testCtx(0, 1)
	sc.State = state.Spec{Dir: t.TempDir(), Budget: 16 << 10}
	w := newIJStage(t, sc, lower, upper, whole)
	var at []int // pairs emitted before each step
	for _, st := range steps {
		at = append(at, len(whole.got))
		ijRun(w, []ijStep{st}, nil)
	}
	c1, c2 := len(steps)/3+9, 2*len(steps)/3-6 // the checkpoints, before these steps

	spec := state.Spec{Dir: t.TempDir(), Budget: 16 << 10, MaxChain: 4}
	sc = testCtx(0, 1)
	sc.State = spec
	a := newIJStage(t, sc, lower, upper, &ijPusher{})
	ijRun(a, steps[:c1], nil)
	b1, err := a.SnapshotState(1)
	check(t, err)
	a.CommittedState(1)
	ijRun(a, steps[c1:c2], nil)
	b2, err := a.SnapshotState(2)
	check(t, err)
	a.CommittedState(2)
	ijRun(a, steps[c2:c2+40], nil) // lost with the crash
	check(t, a.CloseState())

	_, tabs, err := state.Unbundle(b2)
	check(t, err)
	if len(tabs) != 2 || !state.IsDiskHandle(tabs[1]) {
		t.Fatalf("the checkpoint's bundle holds %d tables, want the join's and its timers' on disk", len(tabs))
	}
	own, tabs1, err := state.Unbundle(b1)
	check(t, err)
	old, err := state.Bundle(own, tabs1[0])
	check(t, err)
	for _, c := range []struct {
		name string
		b    []byte
		from int
	}{{"delta", b2, c2}, {"base", b1, c1}, {"base without timers", old, c1}} {
		out := &ijPusher{}
		sc := testCtx(0, 1)
		sc.State = spec
		s := newIJStage(t, sc, lower, upper, out)
		check(t, s.RestoreState(c.b))
		ijTimers(t, s)
		ijRun(s, steps[c.from:], func(int) { ijTimers(t, s) })
		if want := whole.got[at[c.from]:]; !slices.Equal(out.got, want) {
			t.Fatalf("%s: after the restart %d pairs, want %d, or not alike", c.name, len(out.got), len(want))
		}
		if s.dt.earliest(eventTime) != math.MaxInt64 {
			t.Fatalf("%s: a timer left at %d", c.name, s.dt.earliest(eventTime))
		}
	}
}

// Timers restored by key-group ranges (a rescale from 2 instances to 3):
// each instance holds the timers of the keys it owns, one each; the right
// records routed to it join its keys' left ones, and its last watermark
// prunes them all.
func TestIntervalDiskTimersRescale(t *testing.T) {
	keys := int64(raceScaled(6000))
	dir := t.TempDir()
	h := HasherFor[int64]()
	var states [][]byte
	for i := range 2 {
		sc := testCtx(i, 2)
		sc.State = state.Spec{Dir: dir, Budget: 16 << 10}
		s := newIJStage(t, sc, -10, 10, &ijPusher{})
		var b Batch[Either[int64, int64]]
		for k := int64(0); k < keys; k++ {
			if InstanceFor(h(k), 2) == i {
				b.Vs, b.Ts = append(b.Vs, Either[int64, int64]{L: k * ijKeyDiv}), append(b.Ts, k%1000*10)
			}
		}
		s.Push(&b)
		s.Watermark(-100)
		st, err := s.SnapshotState(1)
		check(t, err)
		states = append(states, st)
	}
	seen := map[int64]bool{}
	for i := range 3 {
		sc := testCtx(i, 3)
		sc.State = state.Spec{Dir: dir, Budget: 16 << 10}
		out := &ijPusher{}
		s := newIJStage(t, sc, -10, 10, out)
		lo, hi := KeyGroupRange(i, 3)
		check(t, s.RestoreKeyGroups(states, lo, hi))
		if s.wm != -100 {
			t.Fatalf("instance %d of 3: event time %d, want -100", i, s.wm)
		}
		owned := 0
		for k := range ijTimers(t, s) {
			if InstanceFor(h(k), 3) != i {
				t.Fatalf("instance %d of 3 holds key %d's timer", i, k)
			}
			owned++
		}
		var b Batch[Either[int64, int64]]
		for k := int64(0); k < keys; k++ {
			if InstanceFor(h(k), 3) == i {
				b.Vs, b.Ts = append(b.Vs, Either[int64, int64]{R: k*ijKeyDiv + 1, Right: true}), append(b.Ts, k%1000*10+5)
			}
		}
		if owned != len(b.Vs) {
			t.Fatalf("instance %d of 3: %d timers, %d keys owned", i, owned, len(b.Vs))
		}
		s.Push(&b)
		s.Watermark(20_000)
		for _, p := range out.got {
			k := p.L / ijKeyDiv
			if p.R != k*ijKeyDiv+1 || seen[k] {
				t.Fatalf("instance %d of 3: pair %+v (key seen: %v)", i, p, seen[k])
			}
			seen[k] = true
		}
		if left := ijBufs(s); len(left) > 0 || s.dt.earliest(eventTime) != math.MaxInt64 {
			t.Fatalf("instance %d of 3: %d keys' records left, a timer at %d", i, len(left), s.dt.earliest(eventTime))
		}
	}
	if int64(len(seen)) != keys {
		t.Fatalf("%d keys joined, want %d", len(seen), keys)
	}
}

// A stored pruning timer that does not decode fails the stage with a
// named error.
func TestIntervalDiskTimerDamaged(t *testing.T) {
	sc := testCtx(0, 1)
	sc.State = state.Spec{Dir: t.TempDir(), Budget: 16 << 10}
	s := newIJStage(t, sc, -10, 10, &ijPusher{})
	ijPush(s, 0, 10)
	s.dt.tab.Put("\x05\x80\x00", struct{}{}, false) // key group 5: 3 bytes
	s.dt.heads[eventTime][5] = math.MinInt64
	defer wantTimerFailure(t)
	s.Watermark(1000)
	t.Fatal("fired a damaged timer")
}
