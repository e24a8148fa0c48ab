package stage

import (
	"testing"

	"github.com/sluicehq/sluice/internal/state"
)

// creditPusher takes window records, then says it is blocked until the
// test grants it room again; it counts Finish.
type creditPusher struct {
	got      []int64
	room     int
	finished int
}

func (p *creditPusher) Push(b *Batch[int64]) { p.got = append(p.got, b.Vs...); p.room -= len(b.Vs) }
func (p *creditPusher) Watermark(int64)      {}
func (p *creditPusher) Finish()              { p.finished++ }

// TestEmitAtEndWaitsForCredits: under EmitAtEnd a keyed stage's Finish
// emits only as far as its outputs have room (Ctx.Blocked), hands the rest
// to Ctx.Resume, and goes on from there each time it is resumed, until
// every key's result went out once; only then does it finish the rest of
// the chain. Without it, the results of the whole state would wait in the
// outputs' queues, in memory.
func TestEmitAtEndWaitsForCredits(t *testing.T) {
	const keys, window = 5000, 256
	for _, disk := range []bool{false, true} {
		sc := testCtx(0, 1)
		if disk {
			sc.State = state.Spec{Dir: t.TempDir(), Budget: 1 << 20}
		}
		p := &creditPusher{room: window}
		var resume func()
		sc.Blocked = func() bool { return p.room <= 0 }
		sc.Resume = func(f func()) {
			if resume != nil {
				t.Fatal("Resume called twice before the stage was resumed")
			}
			resume = f
		}
		s := NewKeyed(func(v int64) int64 { return v }, func(a int64, _ bool, _ int64) int64 { return a + 1 },
			func(k, a int64) int64 { return k*10 + a }, EmitAtEnd, p, sc).(*KeyedStage[int64, int64, int64, int64])
		b := &Batch[int64]{}
		for k := range int64(keys) {
			b.Vs = append(b.Vs, k)
		}
		s.Push(b)
		s.Finish()
		steps := 0
		for resume != nil {
			if len(p.got) > (steps+1)*window+sc.BatchSize {
				t.Fatalf("disk %v: %d results out after %d grants of %d", disk, len(p.got), steps, window)
			}
			if p.finished != 0 {
				t.Fatalf("disk %v: the chain finished with %d of %d results out", disk, len(p.got), keys)
			}
			steps++
			p.room += window
			f := resume
			resume = nil
			f()
		}
		if p.finished != 1 || len(p.got) != keys {
			t.Fatalf("disk %v: %d results, finished %d times; want %d, once", disk, len(p.got), p.finished, keys)
		}
		if steps < keys/window-1 {
			t.Fatalf("disk %v: resumed %d times, want about %d", disk, steps, keys/window)
		}
		seen := map[int64]bool{}
		for _, r := range p.got {
			if r%10 != 1 || seen[r] {
				t.Fatalf("disk %v: result %d twice or wrong", disk, r)
			}
			seen[r] = true
		}
		if err := s.CloseState(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEmitAtEndStoppedMidway: a stage closed while it emits at the end
// (the job cancelled) stops its pull of the table (no goroutine left).
func TestEmitAtEndStoppedMidway(t *testing.T) {
	sc := testCtx(0, 1)
	sc.State = state.Spec{Dir: t.TempDir(), Budget: 1 << 20}
	p := &creditPusher{room: 32}
	var resumed bool
	sc.Blocked = func() bool { return p.room <= 0 }
	sc.Resume = func(func()) { resumed = true }
	s := NewKeyed(func(v int64) int64 { return v }, func(a int64, _ bool, _ int64) int64 { return a + 1 },
		func(k, a int64) int64 { return a }, EmitAtEnd, p, sc).(*KeyedStage[int64, int64, int64, int64])
	b := &Batch[int64]{}
	for k := range int64(1000) {
		b.Vs = append(b.Vs, k)
	}
	s.Push(b)
	s.Finish()
	if !resumed || p.finished != 0 {
		t.Fatalf("resumed %v, finished %d: want a stage waiting to resume", resumed, p.finished)
	}
	if err := s.CloseState(); err != nil {
		t.Fatal(err)
	}
	if s.endStop != nil {
		t.Fatal("the pull is still open after CloseState")
	}
}
