package stage

import (
	"math"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/internal/state"
)

// Session windows' timers on the disk backend (timers.go's table): bounded
// in memory however many sessions are open, each session fired once and in
// the order of the ends, across a restart, alike the memory backend's.

type sessOut struct {
	K          int64
	Start, End int64
	N          int64
}

type sessStage = *winStage[int64, int64, int64, sessOut]

// newSessStage is a session window (gap 15) counting each key's records,
// key = record; onEmit, if set, runs as each session is emitted.
func newSessStage(t *testing.T, sc *Ctx, lateness time.Duration, out *sinkPusher[sessOut], onEmit func()) sessStage {
	t.Helper()
	fns := WinFns[int64, int64, int64, sessOut]{
		Key:   func(r int64) int64 { return r },
		Zero:  func() int64 { return 0 },
		Add:   func(a int64, _ int64) int64 { return a + 1 },
		Merge: func(a, b int64) int64 { return a + b },
		Emit: func(k, start, end int64, n int64, emit func(sessOut)) {
			if onEmit != nil {
				onEmit()
			}
			emit(sessOut{k, start, end, n})
		},
	}
	s := NewWinStage(fns, Sessions(15), lateness, out, sc)
	if s.tab == nil {
		t.Fatal(s.openErr)
	}
	t.Cleanup(func() { check(t, s.CloseState()) })
	return s
}

// sessInput: keys [from, to) each get two records, at (k%1000)*10 and 5
// later (one session [t, t+20) a key), pushed in batches of 1000.
func sessPush(s sessStage, from, to int64) {
	for lo := from; lo < to; lo += 1000 {
		var b Batch[int64]
		for k := lo; k < min(lo+1000, to); k++ {
			t := k % 1000 * 10
			b.Vs, b.Ts = append(b.Vs, k, k), append(b.Ts, t, t+5)
		}
		s.Push(&b)
	}
}

// checkSessions: every key of [0, keys) emitted its session once, with
// both records, in the order of the sessions' ends.
func checkSessions(t *testing.T, got []sessOut, keys int64) {
	t.Helper()
	seen := map[int64]bool{}
	for i, o := range got {
		if seen[o.K] {
			t.Fatalf("key %d's session emitted twice", o.K)
		}
		seen[o.K] = true
		if want := o.K % 1000 * 10; o.Start != want || o.End != want+20 || o.N != 2 {
			t.Fatalf("key %d: session %+v, want [%d, %d) of 2", o.K, o, want, want+20)
		}
		if i > 0 && o.End < got[i-1].End {
			t.Fatalf("session %+v emitted after %+v", o, got[i-1])
		}
	}
	if int64(len(seen)) != keys {
		t.Fatalf("%d sessions emitted, want %d", len(seen), keys)
	}
}

// 100,000 open sessions (20,000 under the race detector) under a 64 KiB budget: the session timers held in
// memory (the timer table's cache entries and the due timers read to
// fire) stay under the bound the budget and the fire batch give, with
// allowed lateness (each session's end fired sets its cleanup timer,
// which may join the timers due), and every session fires once, in the
// order of the ends; the memory heaps stay empty.
func TestSessionDiskTimersBounded(t *testing.T) {
	keys := int64(raceScaled(100_000))
	sc := testCtx(0, 1)
	sc.State = state.Spec{Dir: t.TempDir(), Budget: 64 << 10}
	out := &sinkPusher[sessOut]{}
	peak := 0
	var s sessStage
	s = newSessStage(t, sc, 30, out, func() { peak = max(peak, s.st.held()) })
	// As TestProcessDiskTimersBounded: a cache entry takes at least its
	// key's string header and bytes (9 of time and group, 8 of key) in a
	// map slot; the due timers are a fire batch a group, and as many
	// cleanup timers their firing sets at or before the cut.
	minEntry := int(unsafe.Sizeof(""))*16/7 + 9 + 8
	cacheBound := int(timerBudget(sc.State.Budget)/2)/minEntry + 1
	dueBound := 2 * maxKeyGroups * fireBatch
	for lo := int64(0); lo < keys; lo += 10_000 {
		sessPush(s, lo, min(lo+10_000, keys))
		peak = max(peak, s.st.held())
	}
	for wm := int64(0); wm < 11_000; wm += 500 {
		s.Watermark(wm)
		peak = max(peak, s.st.held())
	}
	if n := s.st.earliest(eventTime); n != math.MaxInt64 {
		t.Fatalf("a timer left at %d after the last cleanup", n)
	}
	s.Finish()
	checkSessions(t, out.got, keys)
	if len(s.sessTimers) != 0 || len(s.sessCleanup) != 0 {
		t.Fatalf("%d and %d entries in the memory heaps on disk", len(s.sessTimers), len(s.sessCleanup))
	}
	if peak > cacheBound+dueBound || s.st.maxHeld > dueBound {
		t.Fatalf("held up to %d timers in memory (%d due at once), bound %d (cache %d)", peak, s.st.maxHeld, cacheBound+dueBound, cacheBound)
	}
	t.Logf("%d sessions; at most %d timers held in memory (%d due at once), bound %d", keys, peak, s.st.maxHeld, cacheBound+dueBound)
}

// A session stage on disk restarted on the same files from a checkpoint
// (a base, then a delta) fires its pending sessions once each: the output
// equals a run without a restart, and that of the memory backend; a disk
// checkpoint of before the timer table (one table) restores too.
func TestSessionDiskTimersRestart(t *testing.T) {
	keys := int64(raceScaled(20_000))
	for _, lateness := range []time.Duration{0, 30} {
		dir := t.TempDir()
		spec := state.Spec{Dir: dir, Budget: 16 << 10, MaxChain: 4}
		run := func(sc *Ctx) []sessOut {
			out := &sinkPusher[sessOut]{}
			s := newSessStage(t, sc, lateness, out, nil)
			sessPush(s, 0, keys)
			s.Watermark(3000)
			s.Watermark(12000)
			s.Finish()
			return out.got
		}
		want := run(testCtx(0, 1))
		checkSessions(t, want, keys)
		want = sortSess(want)
		sc := testCtx(0, 1)
		sc.State = state.Spec{Dir: t.TempDir(), Budget: 16 << 10}
		if got := sortSess(run(sc)); !slices.Equal(got, want) {
			t.Fatalf("lateness %v: disk emitted %d sessions, memory %d, or not alike", lateness, len(got), len(want))
		}

		out := &sinkPusher[sessOut]{}
		sc = testCtx(0, 1)
		sc.State = spec
		a := newSessStage(t, sc, lateness, out, nil)
		sessPush(a, 0, keys/2)
		b1, err := a.SnapshotState(1)
		check(t, err)
		a.CommittedState(1)
		sessPush(a, keys/2, keys)
		a.Watermark(3000)
		b2, err := a.SnapshotState(2) // a delta of both tables
		check(t, err)
		a.CommittedState(2)
		before := len(out.got)
		a.Watermark(6000) // fired, then lost with the crash: fired again after the restore
		check(t, a.CloseState())
		out.got = out.got[:before]

		_, tabs, err := state.Unbundle(b2)
		check(t, err)
		if len(tabs) != 2 || !state.IsDiskHandle(tabs[1]) {
			t.Fatalf("the checkpoint's bundle holds %d tables, want the sessions' and their timers' on disk", len(tabs))
		}
		sc = testCtx(0, 1)
		sc.State = spec
		b := newSessStage(t, sc, lateness, out, nil)
		check(t, b.RestoreState(b2))
		b.Watermark(12000)
		b.Finish()
		if !slices.Equal(sortSess(out.got), want) {
			t.Fatalf("lateness %v: after the restart %d sessions, want %d, or not alike", lateness, len(out.got), len(want))
		}

		// The first checkpoint (the base), and the same without its timer
		// table (a disk checkpoint of before it): every session of the
		// first half fires once.
		meta, tabs1, err := state.Unbundle(b1)
		check(t, err)
		old, err := state.Bundle(meta, tabs1[0])
		check(t, err)
		for _, b := range [][]byte{b1, old} {
			out := &sinkPusher[sessOut]{}
			sc = testCtx(0, 1)
			sc.State = spec
			c := newSessStage(t, sc, lateness, out, nil)
			check(t, c.RestoreState(b))
			c.Finish()
			checkSessions(t, out.got, keys/2)
		}
	}
}

// Session timers restored by key-group ranges (a rescale from 2 instances
// to 3): every session fires once, in the instance that owns its key.
func TestSessionDiskTimersRescale(t *testing.T) {
	keys := int64(raceScaled(6000))
	dir := t.TempDir()
	h := HasherFor[int64]()
	var states [][]byte
	for i := range 2 {
		sc := testCtx(i, 2)
		sc.State = state.Spec{Dir: dir, Budget: 16 << 10}
		s := newSessStage(t, sc, 30, &sinkPusher[sessOut]{}, nil)
		var b Batch[int64]
		for k := int64(0); k < keys; k++ {
			if InstanceFor(h(k), 2) == i {
				t := k % 1000 * 10
				b.Vs, b.Ts = append(b.Vs, k, k), append(b.Ts, t, t+5)
			}
		}
		s.Push(&b)
		st, err := s.SnapshotState(1)
		check(t, err)
		states = append(states, st)
	}
	var all []sessOut
	for i := range 3 {
		sc := testCtx(i, 3)
		sc.State = state.Spec{Dir: dir, Budget: 16 << 10}
		out := &sinkPusher[sessOut]{}
		s := newSessStage(t, sc, 30, out, nil)
		lo, hi := KeyGroupRange(i, 3)
		check(t, s.RestoreKeyGroups(states, lo, hi))
		s.Watermark(20_000)
		for _, o := range out.got {
			if InstanceFor(h(o.K), 3) != i {
				t.Fatalf("instance %d of 3 fired key %d's session", i, o.K)
			}
		}
		all = append(all, out.got...)
	}
	checkSessions(t, sortSess(all), keys)
}

// sortSess sorts by end, then key (the order of sessions of one end
// differs between the backends).
func sortSess(got []sessOut) []sessOut {
	slices.SortStableFunc(got, func(a, b sessOut) int {
		if c := cmpInt64(a.End, b.End); c != 0 {
			return c
		}
		return cmpInt64(a.K, b.K)
	})
	return got
}

// A stored session timer that does not decode fails the stage with a
// named error.
func TestSessionDiskTimerDamaged(t *testing.T) {
	sc := testCtx(0, 1)
	sc.State = state.Spec{Dir: t.TempDir(), Budget: 16 << 10}
	s := newSessStage(t, sc, 0, &sinkPusher[sessOut]{}, nil)
	sessPush(s, 0, 10)
	s.st.tab.Put("\x05\x80\x00", struct{}{}, false) // key group 5: 3 bytes
	s.st.heads[eventTime][5] = math.MinInt64
	defer wantTimerFailure(t)
	s.Watermark(1000)
	t.Fatal("fired a damaged timer")
}

// Memory sessions extended by many records keep one heap entry per open
// session, not one per record, and still fire when the watermark passes
// their end (not before, not only at the end of the input), each once;
// two sessions of a key with entries at one time both fire; a restore
// arms every open session again.
func TestSessionMemoryTimersLazy(t *testing.T) {
	sc := testCtx(0, 1)
	out := &sinkPusher[sessOut]{}
	s := newSessStage(t, sc, 0, out, nil)
	// Key 1: one session of 100 records 10 apart, [0, 1005); key 2: two
	// sessions, [0, 15) and [100, 115).
	var b Batch[int64]
	for i := range int64(100) {
		b.Vs, b.Ts = append(b.Vs, 1), append(b.Ts, i*10)
	}
	b.Vs, b.Ts = append(b.Vs, 2, 2), append(b.Ts, 0, 100)
	s.Push(&b)
	if n := len(s.sessTimers); n > 3 {
		t.Fatalf("%d heap entries for 3 open sessions of 102 records", n)
	}
	s.Watermark(20) // key 2's first session ended at 15
	if len(out.got) != 1 || out.got[0] != (sessOut{2, 0, 15, 1}) {
		t.Fatalf("at watermark 20: %+v, want key 2's [0, 15)", out.got)
	}
	snap, err := s.SnapshotState(1)
	check(t, err)
	s.Watermark(1003) // key 1's session ends at 1005: not yet
	if len(out.got) != 2 || out.got[1] != (sessOut{2, 100, 115, 1}) {
		t.Fatalf("at watermark 1003: %+v, want key 2's [100, 115) and no more", out.got)
	}
	s.Watermark(1004)
	if len(out.got) != 3 || out.got[2] != (sessOut{1, 0, 1005, 100}) {
		t.Fatalf("at watermark 1004: %+v, want key 1's [0, 1005) of 100", out.got)
	}
	if n := len(s.sessTimers); n != 0 {
		t.Fatalf("%d heap entries left", n)
	}
	// Restored from the checkpoint at watermark 20: key 1's session and
	// key 2's second fire once the watermark passes their ends.
	out2 := &sinkPusher[sessOut]{}
	r := newSessStage(t, testCtx(0, 1), 0, out2, nil)
	check(t, r.RestoreState(snap))
	r.Watermark(1004)
	if len(out2.got) != 2 || out2.got[0] != (sessOut{2, 100, 115, 1}) || out2.got[1] != (sessOut{1, 0, 1005, 100}) {
		t.Fatalf("restored, at watermark 1004: %+v", out2.got)
	}
	r.Finish()
	if len(out2.got) != 2 {
		t.Fatalf("restored: %+v after the end", out2.got)
	}
}
