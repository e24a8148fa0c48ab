package stage

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/state"
)

// allTimers is every event-time timer a Process stage holds, by key:
// its times, sorted (either backend).
func (s *ProcCore[K, S, O]) allTimers(t testing.TB) map[K][]int64 {
	t.Helper()
	out := map[K][]int64{}
	if s.dt == nil {
		for id := range s.timerSet {
			out[id.key] = append(out[id.key], id.at)
		}
	} else {
		for id := range s.dt.tab.All {
			lead, at, k, err := decodeTimerID(id, s.dt.kc)
			if err != nil {
				t.Fatal(err)
			}
			if lead < maxKeyGroups { // not a processing-time timer
				out[k] = append(out[k], at)
			}
		}
	}
	for _, ats := range out {
		slices.Sort(ats)
	}
	return out
}

type firedTimer struct {
	key string
	at  int64
}

// firedPusher keeps the timers fired and, for each, how many watermarks
// had passed (the timers one watermark fires are in time order).
type firedPusher struct {
	got []firedTimer
	seg []int
	wms int
}

func (p *firedPusher) Push(b *Batch[firedTimer]) {
	p.got = append(p.got, b.Vs...)
	for range b.Vs {
		p.seg = append(p.seg, p.wms)
	}
}
func (p *firedPusher) Watermark(int64) { p.wms++ }
func (p *firedPusher) Finish()         {}

func (p *firedPusher) truncate(n int) { p.got, p.seg = p.got[:n], p.seg[:n] }

type timerStage = *ProcessStage[string, int, int, firedTimer]

// newTimerStage: each record n sets its key's timers at n%97 and n%31+40
// (some twice), and each timer fired sets one more 7 later, up to three
// a key: timers set while timers fire, some due at once.
func newTimerStage(t *testing.T, sc *Ctx, out *firedPusher) timerStage {
	s := NewProcess(func(n int) string { return fmt.Sprintf("k%d", n%5000) },
		func(c *ProcessContext[string, int, firedTimer], n int) {
			c.Timer(time.Unix(0, int64(n%97)))
			c.Timer(time.Unix(0, int64(n%31+40)))
			c.Timer(time.Unix(0, int64(n%97)))
		},
		func(c *ProcessContext[string, int, firedTimer]) {
			c.Emit(firedTimer{c.Key(), c.Time().UnixNano()})
			if st := c.State(); *st < 3 {
				*st++
				c.Timer(c.Time().Add(7))
			}
		}, out, sc).(timerStage)
	t.Cleanup(func() {
		if err := s.CloseState(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func feedTimers(s timerStage, from, to int) {
	for lo := from; lo < to; lo += 500 {
		var vs []int
		var ts []int64
		for n := lo; n < min(lo+500, to); n++ {
			vs, ts = append(vs, n), append(ts, 0)
		}
		s.Push(&Batch[int]{Vs: vs, Ts: ts})
	}
}

// byKey is each key's timers fired, in the order they fired; those one
// watermark fired are in time order, each once.
func byKey(t *testing.T, p *firedPusher) map[string][]int64 {
	t.Helper()
	out := map[string][]int64{}
	seen := map[firedTimer]int{}
	for i, f := range p.got {
		if i > 0 && p.seg[i] == p.seg[i-1] && f.at < p.got[i-1].at {
			t.Fatalf("timer %d (%v) fired after a later one (%v) at one watermark", i, f, p.got[i-1])
		}
		if s, dup := seen[f]; dup && s == p.seg[i] {
			t.Fatalf("timer %v fired twice at one watermark", f)
		}
		seen[f] = p.seg[i]
		out[f.key] = append(out[f.key], f.at)
	}
	return out
}

// Process's event-time timers on the disk backend (a cache of a few dozen
// timers, the rest in pebble) fire as the memory backend's do: every
// timer once, in time order, those set while firing included.
func TestProcessDiskTimersModel(t *testing.T) {
	run := func(disk bool) map[string][]int64 {
		sc := testCtx(0, 1)
		if disk {
			sc.State = state.Spec{Dir: t.TempDir(), Budget: 4 << 10}
		}
		out := &firedPusher{}
		s := newTimerStage(t, sc, out)
		feedTimers(s, 0, 12000)
		for wm := int64(-5); wm < 120; wm += 13 {
			s.Watermark(wm)
		}
		feedTimers(s, 12000, 15000) // late: due at the next watermark
		s.Watermark(130)
		if n := len(s.allTimers(t)); n != 0 {
			t.Fatalf("disk %v: %d keys' timers left after the last timer's time", disk, n)
		}
		feedTimers(s, 15000, 16000)
		s.Finish()
		if disk && s.dt.maxHeld > maxKeyGroups*fireBatch+64 {
			t.Fatalf("held %d due timers at once", s.dt.maxHeld)
		}
		return byKey(t, out)
	}
	mem, disk := run(false), run(true)
	if len(mem) != 5000 {
		t.Fatalf("memory: timers of %d keys fired, want 5000", len(mem))
	}
	n := 0
	for k, want := range mem {
		n += len(want)
		if got := disk[k]; !slices.Equal(got, want) {
			t.Fatalf("key %s: disk fired %v, memory %v", k, got, want)
		}
	}
	if len(disk) != len(mem) {
		t.Fatalf("disk fired the timers of %d keys, memory %d", len(disk), len(mem))
	}
	t.Logf("%d timers of %d keys, alike", n, len(mem))
}

// A Process stage on disk restarted on the same files from a checkpoint
// (a base, then deltas) fires its pending timers once each, and only
// those; an older checkpoint, whose own part kept the timers as slices,
// restores into the timer table.
func TestProcessDiskTimersRestart(t *testing.T) {
	dir := t.TempDir()
	spec := state.Spec{Dir: dir, Budget: 4 << 10, MaxChain: 4}
	// The reference: one stage that never stops.
	ref := &firedPusher{}
	r := newTimerStage(t, testCtx(0, 1), ref)
	feedTimers(r, 0, 6000)
	r.Watermark(30)
	feedTimers(r, 6000, 8000)
	r.Watermark(60)
	r.Watermark(200)
	want := byKey(t, ref)

	out := &firedPusher{}
	sc := testCtx(0, 1)
	sc.State = spec
	a := newTimerStage(t, sc, out)
	feedTimers(a, 0, 6000)
	b1, err := a.SnapshotState(1)
	check(t, err)
	a.CommittedState(1)
	a.Watermark(30)
	feedTimers(a, 6000, 8000)
	b2, err := a.SnapshotState(2) // a delta of the timer table
	check(t, err)
	a.CommittedState(2)
	before := len(out.got)
	a.Watermark(60) // fired, then lost with the crash: fired again after the restore
	check(t, a.CloseState())
	out.truncate(before)

	_, tabs, err := state.Unbundle(b2)
	check(t, err)
	if len(tabs) != 2 || !state.IsDiskHandle(tabs[1]) {
		t.Fatalf("the checkpoint's bundle holds %d tables, want the state's and the timers' on disk", len(tabs))
	}
	sc = testCtx(0, 1)
	sc.State = spec
	b := newTimerStage(t, sc, out)
	check(t, b.RestoreState(b2))
	b.Watermark(60)
	b.Watermark(200)
	if got := byKey(t, out); !equalFired(got, want) {
		t.Fatalf("after the restart: %d keys' timers, want %d (alike: %v)", len(got), len(want), equalFired(got, want))
	}
	if n := len(b.allTimers(t)); n != 0 {
		t.Fatalf("%d keys' timers left", n)
	}

	// The first checkpoint again (retained: Retain 2), into another restart.
	out2 := &firedPusher{}
	sc = testCtx(0, 1)
	sc.State = spec
	c := newTimerStage(t, sc, out2)
	check(t, c.RestoreState(b1))
	if got := len(c.allTimers(t)); got != 5000 {
		t.Fatalf("checkpoint 1 restored the timers of %d keys, want 5000", got)
	}

	// A checkpoint of before the timer table: its timers as slices.
	meta, tabs1, err := state.Unbundle(b1)
	check(t, err)
	st, err := decodeProcess[string, int](meta)
	check(t, err)
	st.TKeys, st.TAt = []string{"k1", "k2", "k1"}, []int64{50, 20, 10}
	mb, err := msgpack.Marshal(&st)
	check(t, err)
	oldB, err := state.Bundle(mb, tabs1[0])
	check(t, err)
	out3 := &firedPusher{}
	sc = testCtx(0, 1)
	sc.State = spec
	d := newTimerStage(t, sc, out3)
	check(t, d.RestoreState(oldB))
	d.Watermark(25)
	if want := []firedTimer{{"k1", 10}, {"k1", 17}, {"k2", 20}, {"k1", 24}}; !slices.Equal(out3.got, want) {
		t.Fatalf("the old checkpoint's timers fired %v, want %v", out3.got, want)
	}
}

func equalFired(a, b map[string][]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// 200,000 keys with a timer each under a small budget: the timers held in
// memory (the timer table's cache entries and the due timers read to
// fire) stay under the bound the budget and the fire batch give, while
// every timer fires once. Under the race detector 40,000 keys: still
// dozens of times the cache's bound (about 600 entries for this budget),
// so the cache is cleared many times over and the bound is tested as
// hard (48 s of the package's 228 s under -race with 200,000).
func TestProcessDiskTimersBounded(t *testing.T) {
	keys := raceScaled(200_000)
	sc := testCtx(0, 1)
	sc.State = state.Spec{Dir: t.TempDir(), Budget: 64 << 10}
	fired, peak := 0, 0
	var s *ProcessStage[int64, int64, struct{}, int]
	s = NewProcess(func(n int64) int64 { return n }, func(c *ProcessContext[int64, struct{}, int], n int64) {
		c.Timer(time.Unix(0, n%1000))
	}, func(c *ProcessContext[int64, struct{}, int]) {
		fired++
		peak = max(peak, s.dt.held())
	}, &sinkPusher[int]{}, sc).(*ProcessStage[int64, int64, struct{}, int])
	t.Cleanup(func() { check(t, s.CloseState()) })
	// A cache entry takes at least its key's string header and bytes (9 of
	// time and group, 8 of key) in a map slot: the cache, cleared whole
	// once over its budget (half the timer table's), holds at most so many.
	idLen := 9 + 8
	minEntry := int(unsafe.Sizeof(""))*16/7 + idLen
	cacheBound := int(timerBudget(sc.State.Budget)/2)/minEntry + 1
	bound := cacheBound + maxKeyGroups*fireBatch
	for lo := int64(0); lo < int64(keys); lo += 1000 {
		vs := make([]int64, 1000)
		for i := range vs {
			vs[i] = lo + int64(i)
		}
		s.Push(&Batch[int64]{Vs: vs, Ts: make([]int64, len(vs))})
		peak = max(peak, s.dt.held())
	}
	for wm := int64(0); wm < 1000; wm += 100 {
		s.Watermark(wm)
	}
	s.Finish()
	if fired != keys {
		t.Fatalf("%d timers fired, want %d", fired, keys)
	}
	if peak > bound || s.dt.maxHeld > maxKeyGroups*fireBatch {
		t.Fatalf("held up to %d timers in memory (%d due at once), bound %d (cache %d)", peak, s.dt.maxHeld, bound, cacheBound)
	}
	t.Logf("%d timers; at most %d held in memory (%d due at once), bound %d", keys, peak, s.dt.maxHeld, bound)
}

// wantTimerFailure, deferred, fails the test unless the stage failed with
// errTimerBytes (a stored timer that does not decode).
func wantTimerFailure(t *testing.T) {
	t.Helper()
	r := recover()
	f, ok := r.(*Failure)
	if !ok || !errors.Is(f.err, errTimerBytes) {
		t.Fatalf("recovered %v, want a failure with errTimerBytes", r)
	}
}

// A stored timer that does not decode fails the stage with a named error.
func TestProcessDiskTimerDamaged(t *testing.T) {
	sc := testCtx(0, 1)
	sc.State = state.Spec{Dir: t.TempDir(), Budget: 4 << 10}
	out := &firedPusher{}
	s := newTimerStage(t, sc, out)
	feedTimers(s, 0, 10)
	s.dt.tab.Put("\x05\x80", struct{}{}, false) // key group 5: 2 bytes
	s.dt.heads[eventTime][5] = math.MinInt64
	defer wantTimerFailure(t)
	s.Watermark(1000)
	t.Fatal("fired a damaged timer")
}

type timerKey struct {
	Name string
	At   time.Time
	N    int32
	P    *int
}

// FuzzTimerID feeds hostile bytes to the decoder of stored timers (either
// queue), for
// string, integer and struct keys (times, pointers): a named error or a
// timer that encodes back to the same bytes, never a panic.
func FuzzTimerID(f *testing.F) {
	seven := 7
	add := func(b []byte, err error) {
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	add(appendTimerID(nil, newTimerKeyCodec[string](), 3, -5, "key-1"))
	add(appendTimerID(nil, newTimerKeyCodec[int64](), 127, math.MaxInt64, int64(-9)))
	add(appendTimerID(nil, newTimerKeyCodec[int64](), processingTime.lead(9), 1_700_000_000_000_000_000, int64(4))) // a processing-time timer
	add(appendTimerID(nil, newTimerKeyCodec[timerKey](), 0, 1_700_000_000_000_000_000,
		timerKey{Name: "ann", At: time.Unix(1_700_000_000, 5).UTC(), N: -3, P: &seven}))
	f.Add([]byte{200, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzTimerID[string](t, data)
		fuzzTimerID[int64](t, data)
		fuzzTimerID[timerKey](t, data)
	})
}

func fuzzTimerID[K comparable](t *testing.T, data []byte) {
	kc := newTimerKeyCodec[K]()
	kg, at, k, err := decodeTimerID(string(data), kc)
	if err != nil {
		if !errors.Is(err, errTimerBytes) {
			t.Fatalf("%T: error %v is not errTimerBytes", k, err)
		}
		return
	}
	b, err := appendTimerID(nil, kc, kg, at, k)
	if err != nil {
		t.Fatalf("%T: decoded %v, encode: %v", k, k, err)
	}
	kg2, at2, k2, err := decodeTimerID(string(b), kc)
	if err != nil || kg2 != kg || at2 != at {
		t.Fatalf("%T: %x decoded %d %d %v, re-encoded %x decodes %d %d (%v)", k, data, kg, at, k, b, kg2, at2, err)
	}
	b2, _ := appendTimerID(nil, kc, kg2, at2, k2)
	if !bytes.Equal(b, b2) {
		t.Fatalf("%T: encodes %x then %x", k, b, b2)
	}
}
