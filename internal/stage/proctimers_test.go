package stage

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/clock/clocktest"
	"github.com/sluicehq/sluice/internal/state"
)

// Process's processing-time timers on the disk backend (timers.go's
// table, its second queue): fired by the job's clock through one pending
// wake-up, bounded in memory, checkpointed, restored and rescaled by key
// group. Time is the manual clock's: no test sleeps.

var procEpoch = time.Unix(1_000, 0)

// raceScaled is n, or a fifth of it under the race detector.
func raceScaled(n int) int {
	if raceEnabled {
		return n / 5
	}
	return n
}

// clockCtx is testCtx on the manual clock c.
func clockCtx(i, p int, c *clocktest.Manual) *Ctx {
	sc := testCtx(i, p)
	sc.Now = c.Now
	sc.After = func(d time.Duration, f func()) func() {
		stop := c.AfterFunc(d, f)
		return func() { stop() }
	}
	return sc
}

type procStage = *ProcessStage[int64, int64, int, firedTimer]

// newProcStage: record n sets key n's processing-time timer at
// epoch + n%997 ms (twice: one timer); each timer fired emits (key, time)
// and sets one more 7 ms later, up to three a key (a restart whose clock
// has passed them fires them in the wake-up that set them).
func newProcStage(t *testing.T, sc *Ctx, out *firedPusher, probe ...func()) procStage {
	t.Helper()
	s := NewProcess(func(n int64) int64 { return n },
		func(c *ProcessContext[int64, int, firedTimer], n int64) {
			c.ProcessingTimer(procEpoch.Add(time.Duration(n%997) * time.Millisecond))
			c.ProcessingTimer(procEpoch.Add(time.Duration(n%997) * time.Millisecond))
		},
		func(c *ProcessContext[int64, int, firedTimer]) {
			if !c.IsProcessingTimer() {
				t.Errorf("key %d: an event-time timer fired", c.Key())
			}
			c.Emit(firedTimer{fmt.Sprint(c.Key()), c.Time().Sub(procEpoch).Milliseconds()})
			for _, p := range probe {
				p()
			}
			if st := c.State(); *st < 3 {
				*st++
				c.ProcessingTimer(c.Time().Add(7 * time.Millisecond))
			}
		}, out, sc).(procStage)
	t.Cleanup(func() { check(t, s.CloseState()) })
	return s
}

func pushKeys(s procStage, from, to int64) {
	for lo := from; lo < to; lo += 1000 {
		var b Batch[int64]
		for n := lo; n < min(lo+1000, to); n++ {
			b.Vs = append(b.Vs, n)
		}
		s.Push(&b)
	}
}

// firedByKey is each key's timers fired in the order they fired; every
// timer fires once.
func firedByKey(t *testing.T, got []firedTimer) map[string][]int64 {
	t.Helper()
	out := map[string][]int64{}
	seen := map[firedTimer]bool{}
	for _, f := range got {
		if seen[f] {
			t.Fatalf("timer %v fired twice", f)
		}
		seen[f] = true
		out[f.key] = append(out[f.key], f.at)
	}
	return out
}

// 50,000 keys' processing-time timers (10,000 under the race detector) under a 64 KiB budget, each firing
// three more: one wake-up is pending at a time, the timers held in memory
// stay under the bound the budget and the fire batch give, every timer
// fires once, in the clock's order, and each key's timers are those the
// memory backend (a callback a timer) fires.
func TestProcessDiskProcessingTimers(t *testing.T) {
	keys := raceScaled(50_000)
	run := func(disk bool) ([]firedTimer, procStage) {
		clk := clocktest.NewManual(procEpoch)
		sc := clockCtx(0, 1, clk)
		if disk {
			sc.State = state.Spec{Dir: t.TempDir(), Budget: 64 << 10}
		}
		out := &firedPusher{}
		peak := 0
		var s procStage
		s = newProcStage(t, sc, out, func() {
			if disk {
				peak = max(peak, s.dt.held())
			}
		})
		check(t, s.Open())
		for lo := int64(0); lo < int64(keys); lo += 10_000 {
			pushKeys(s, lo, min(lo+10_000, int64(keys)))
			if disk {
				peak = max(peak, s.dt.held())
				if n := clk.Pending(); n != 1 {
					t.Fatalf("%d wake-ups pending, want 1", n)
				}
			}
		}
		for range 110 {
			clk.Advance(10 * time.Millisecond)
			if disk {
				peak = max(peak, s.dt.held())
			}
		}
		if disk {
			// As TestProcessDiskTimersBounded; a timer firing sets one
			// more, which joins the due ones at once when its time passed.
			minEntry := int(unsafe.Sizeof(""))*16/7 + 9 + 8
			cacheBound := int(timerBudget(sc.State.Budget)/2)/minEntry + 1
			dueBound := 2 * maxKeyGroups * fireBatch
			if peak > cacheBound+dueBound || s.dt.maxHeld > dueBound {
				t.Fatalf("held up to %d timers in memory (%d due at once), bound %d (cache %d)", peak, s.dt.maxHeld, cacheBound+dueBound, cacheBound)
			}
			if n := clk.Pending(); n != 0 || s.dt.earliest(processingTime) != math.MaxInt64 {
				t.Fatalf("%d wake-ups pending, a timer at %d, after the last timer", n, s.dt.earliest(processingTime))
			}
			t.Logf("%d keys' timers; at most %d held in memory (%d due at once), bound %d", keys, peak, s.dt.maxHeld, cacheBound+dueBound)
		}
		return out.got, s
	}
	got, _ := run(true)
	for i := 1; i < len(got); i++ {
		if got[i].at < got[i-1].at {
			t.Fatalf("timer %v fired after %v", got[i], got[i-1])
		}
	}
	disk := firedByKey(t, got)
	mem, _ := run(false)
	want := firedByKey(t, mem)
	if len(want) != keys || len(got) != 4*keys {
		t.Fatalf("%d keys' timers (%d) on disk, %d keys' in memory: want %d keys, 4 each", len(disk), len(got), len(want), keys)
	}
	for k, w := range want {
		if !slices.Equal(disk[k], w) {
			t.Fatalf("key %s: disk fired %v, memory %v", k, disk[k], w)
		}
	}
}

// A Process stage on disk restarted on the same files from a checkpoint
// (a base, then a delta) fires its pending processing-time timers once
// each (at once those whose time has passed); an older checkpoint, whose
// own part kept them as slices, restores into the timer table; the end
// of the input fires none.
func TestProcessDiskProcessingTimersRestart(t *testing.T) {
	keys := int64(raceScaled(5000))
	dir := t.TempDir()
	spec := state.Spec{Dir: dir, Budget: 4 << 10, MaxChain: 4}
	// The reference: one stage that never stops.
	clk := clocktest.NewManual(procEpoch)
	ref := &firedPusher{}
	r := newProcStage(t, clockCtx(0, 1, clk), ref)
	pushKeys(r, 0, keys)
	clk.Advance(2 * time.Second)
	want := firedByKey(t, ref.got)

	clk = clocktest.NewManual(procEpoch)
	sc := clockCtx(0, 1, clk)
	sc.State = spec
	out := &firedPusher{}
	a := newProcStage(t, sc, out)
	check(t, a.Open())
	pushKeys(a, 0, keys/2)
	b1, err := a.SnapshotState(1)
	check(t, err)
	a.CommittedState(1)
	pushKeys(a, keys/2, keys)
	clk.Advance(300 * time.Millisecond)
	b2, err := a.SnapshotState(2) // a delta of the timer table
	check(t, err)
	a.CommittedState(2)
	before := len(out.got)
	clk.Advance(300 * time.Millisecond) // fired, then lost with the crash: fired again after the restore
	check(t, a.CloseState())
	out.got = out.got[:before]

	// The restart, on a clock 100 ms on: the timers it passed fire at
	// once, in one wake-up (with those they set that are due).
	clk = clocktest.NewManual(procEpoch.Add(400 * time.Millisecond))
	sc = clockCtx(0, 1, clk)
	sc.State = spec
	b := newProcStage(t, sc, out)
	check(t, b.RestoreState(b2))
	check(t, b.Open())
	if n := clk.Pending(); n != 1 {
		t.Fatalf("%d wake-ups pending after the restore, want 1", n)
	}
	clk.Advance(2 * time.Second)
	if got := firedByKey(t, out.got); !equalFired(got, want) {
		t.Fatalf("after the restart: %d keys' timers, want %d", len(got), len(want))
	}

	// The first checkpoint again (retained), and an older form of it: the
	// timers as slices of its own part. Finish fires none; the clock
	// fires each once.
	meta, tabs1, err := state.Unbundle(b1)
	check(t, err)
	st, err := decodeProcess[int64, int](meta)
	check(t, err)
	st.PKeys, st.PAt = []int64{1, 2, 1}, []int64{procEpoch.Add(50 * time.Millisecond).UnixNano(), procEpoch.Add(20 * time.Millisecond).UnixNano(), procEpoch.Add(10 * time.Millisecond).UnixNano()}
	mb, err := msgpack.Marshal(&st)
	check(t, err)
	oldB, err := state.Bundle(mb, tabs1[0])
	check(t, err)
	for _, c := range []struct {
		state []byte
		want  int // timers fired
	}{{b1, int(4 * keys / 2)}, {oldB, 5 + 4}} { // key 1 at 10 and 50 ms, key 2 at 20
		clk = clocktest.NewManual(procEpoch)
		sc = clockCtx(0, 1, clk)
		sc.State = spec
		out := &firedPusher{}
		d := newProcStage(t, sc, out)
		check(t, d.RestoreState(c.state))
		check(t, d.Open())
		clk.Advance(2 * time.Second)
		if len(out.got) != c.want {
			t.Fatalf("%d timers fired, want %d", len(out.got), c.want)
		}
		firedByKey(t, out.got)
		pushKeys(d, 0, 10)
		d.Finish()
		clk.Advance(2 * time.Second)
		if n := len(out.got); n != c.want {
			t.Fatalf("%d timers fired after the end of the input", n-c.want)
		}
	}
}

// Processing-time timers restored by key-group ranges (a rescale from 2
// instances to 3): every timer fires once, in the instance that owns its
// key.
func TestProcessDiskProcessingTimersRescale(t *testing.T) {
	const keys = 3000
	dir := t.TempDir()
	h := HasherFor[int64]()
	clk := clocktest.NewManual(procEpoch)
	var states [][]byte
	for i := range 2 {
		sc := clockCtx(i, 2, clk)
		sc.State = state.Spec{Dir: dir, Budget: 8 << 10}
		s := newProcStage(t, sc, &firedPusher{})
		var b Batch[int64]
		for n := int64(0); n < keys; n++ {
			if InstanceFor(h(n), 2) == i {
				b.Vs = append(b.Vs, n)
			}
		}
		s.Push(&b)
		st, err := s.SnapshotState(1)
		check(t, err)
		states = append(states, st)
		s.Finish() // no wake-up left
	}
	clk = clocktest.NewManual(procEpoch)
	var all []firedTimer
	outs := make([]*firedPusher, 3)
	for i := range 3 {
		sc := clockCtx(i, 3, clk)
		sc.State = state.Spec{Dir: dir, Budget: 8 << 10}
		outs[i] = &firedPusher{}
		s := newProcStage(t, sc, outs[i])
		lo, hi := KeyGroupRange(i, 3)
		check(t, s.RestoreKeyGroups(states, lo, hi))
		check(t, s.Open())
	}
	clk.Advance(2 * time.Second)
	for i, out := range outs {
		for _, f := range out.got {
			var k int64
			fmt.Sscan(f.key, &k)
			if InstanceFor(h(k), 3) != i {
				t.Fatalf("instance %d of 3 fired key %d's timer", i, k)
			}
		}
		all = append(all, out.got...)
	}
	if got := firedByKey(t, all); len(got) != keys || len(all) != 4*keys {
		t.Fatalf("%d timers of %d keys fired, want %d of %d", len(all), len(got), 4*keys, keys)
	}
}

// A stored processing-time timer that does not decode fails the stage
// with a named error.
func TestProcessDiskProcessingTimerDamaged(t *testing.T) {
	clk := clocktest.NewManual(procEpoch)
	sc := clockCtx(0, 1, clk)
	sc.State = state.Spec{Dir: t.TempDir(), Budget: 4 << 10}
	s := newProcStage(t, sc, &firedPusher{})
	pushKeys(s, 0, 10)
	s.dt.tab.Put(string([]byte{maxKeyGroups + 5, 0x80}), struct{}{}, false) // key group 5's processing-time queue: 2 bytes
	s.dt.heads[processingTime][5] = math.MinInt64
	s.armWake(math.MinInt64)
	defer wantTimerFailure(t)
	clk.Advance(time.Second)
	t.Fatal("fired a damaged timer")
}
