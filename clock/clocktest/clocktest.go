// Package clocktest provides a clock.Clock that only moves when the test
// moves it, for code that takes a clock.Clock instead of calling time.Now
// and time.AfterFunc.
//
// A Manual clock starts at a given time. Now returns it; AfterFunc records
// a timer; Advance and Set move the time and run, on the caller's
// goroutine, the timers that came due, in the order of their due times.
// Nothing happens between those calls, so a test states exactly when every
// timer fires, without sleeping:
//
//	func TestSessionExpires(t *testing.T) {
//		c := clocktest.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
//		expired := make(chan string, 1)
//		s := NewSessions(c, 30*time.Minute, func(id string) { expired <- id }) // code under test
//		s.Touch("alice")
//
//		c.Advance(29 * time.Minute)
//		if c.Pending() != 1 {
//			t.Fatalf("%d timers pending, want alice's", c.Pending())
//		}
//		c.Advance(time.Minute) // runs alice's expiry before returning
//		select {
//		case id := <-expired:
//			if id != "alice" {
//				t.Fatalf("expired %q, want alice", id)
//			}
//		default:
//			t.Fatal("alice's session did not expire after 30 minutes")
//		}
//	}
//
// When the code under test sets its timers from other goroutines (an
// actor's, a worker's), the test first waits for them with WaitForTimers,
// which blocks on a channel (no polling, no sleep), then advances the clock.
//
// A Manual works inside a testing/synctest bubble: WaitForTimers blocks
// durably there, so a test that waits for a timer that is never set ends
// with the bubble's deadlock report or its context's deadline instead of
// hanging. Create the clock inside the bubble that uses it.
package clocktest

import (
	"container/heap"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/clock"
)

// Manual is a clock.Clock moved by hand. It is safe for concurrent use.
type Manual struct {
	mu      sync.Mutex
	now     time.Time
	timers  timerHeap // pending, by due time, then by the order they were set
	seq     uint64
	waiters []*waiter
}

var _ clock.Clock = (*Manual)(nil)

type timer struct {
	at    time.Time
	seq   uint64
	f     func()
	index int // in the heap; -1 once fired or stopped
}

type waiter struct {
	n  int
	ch chan struct{} // closed once n timers are pending
}

// NewManual returns a clock whose time is start.
func NewManual(start time.Time) *Manual { return &Manual{now: start} }

// Now returns the clock's time.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// AfterFunc records a timer that calls f when the clock has advanced by d,
// unless stop is called first; stop reports whether it prevented the call.
// f runs on the goroutine that calls Advance or Set. A timer with d <= 0 is
// due at once: it runs at the next Advance or Set (Advance(0) runs it).
func (m *Manual) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	t := &timer{at: m.now.Add(max(d, 0)), seq: m.seq, f: f}
	heap.Push(&m.timers, t)
	// Wake the waiters whose count is reached.
	kept := m.waiters[:0]
	for _, w := range m.waiters {
		if len(m.timers) >= w.n {
			close(w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	clear(m.waiters[len(kept):])
	m.waiters = kept
	return func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		if t.index < 0 {
			return false
		}
		heap.Remove(&m.timers, t.index)
		return true
	}
}

// Advance moves the clock forward by d and runs the timers that come due
// on the way, one at a time on the caller's goroutine, in the order of their
// due times (timers due at the same time in the order they were set). While
// a timer's function runs, Now returns its due time, and a timer it sets
// that falls due within the span runs too, in its turn. Advance returns
// when the clock has reached its new time and every timer due by then has
// run. d must not be negative: Advance panics if it is.
//
// Timer functions must not call Advance or Set themselves. Concurrent
// calls to Advance are safe: they share out the due timers between them,
// and the time never goes back.
func (m *Manual) Advance(d time.Duration) {
	if d < 0 {
		panic(fmt.Sprintf("clocktest: Advance(%v): negative duration", d))
	}
	m.mu.Lock()
	target := m.now.Add(d)
	m.mu.Unlock()
	m.runUntil(target)
}

// Set moves the clock to t and runs the timers due by then, as Advance
// does. Set may move the clock backward (a wall clock set back): the
// pending timers keep their due times, and fire when the clock reaches
// them again.
func (m *Manual) Set(t time.Time) {
	m.mu.Lock()
	if !t.After(m.now) {
		m.now = t
	}
	m.mu.Unlock()
	m.runUntil(t)
}

// runUntil runs the timers due by target, in order, and leaves the clock
// at target (or later, if a concurrent Advance went further).
func (m *Manual) runUntil(target time.Time) {
	for {
		m.mu.Lock()
		if len(m.timers) == 0 || m.timers[0].at.After(target) {
			if target.After(m.now) {
				m.now = target
			}
			m.mu.Unlock()
			return
		}
		t := heap.Pop(&m.timers).(*timer)
		if t.at.After(m.now) {
			m.now = t.at
		}
		m.mu.Unlock()
		t.f()
	}
}

// Pending returns the number of timers waiting to fire: set, and neither
// fired nor stopped.
func (m *Manual) Pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.timers)
}

// Next returns the duration from now until the earliest pending timer is
// due (zero or less when it is already due), and false when no timer is
// pending. Advance(d) runs it.
func (m *Manual) Next() (d time.Duration, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.timers) == 0 {
		return 0, false
	}
	return m.timers[0].at.Sub(m.now), true
}

// WaitForTimers waits until at least n timers are pending, which is how a
// test knows that code running on other goroutines has set the timers it
// is about to advance past. It blocks on a channel that AfterFunc closes
// (no polling, no sleep), and returns an error wrapping context.Cause(ctx)
// if ctx ends first. Pending counts timers that have not fired: after an
// Advance that ran every timer, WaitForTimers(ctx, 1) waits for the next
// one to be set.
func (m *Manual) WaitForTimers(ctx context.Context, n int) error {
	m.mu.Lock()
	if len(m.timers) >= n {
		m.mu.Unlock()
		return nil
	}
	w := &waiter{n: n, ch: make(chan struct{})}
	m.waiters = append(m.waiters, w)
	m.mu.Unlock()
	select {
	case <-w.ch:
		return nil
	case <-ctx.Done():
		m.mu.Lock()
		defer m.mu.Unlock()
		select {
		case <-w.ch: // reached meanwhile
			return nil
		default:
		}
		for i, o := range m.waiters {
			if o == w {
				m.waiters = append(m.waiters[:i], m.waiters[i+1:]...)
				break
			}
		}
		return fmt.Errorf("clocktest: waiting for %d timers, %d pending: %w", n, len(m.timers), context.Cause(ctx))
	}
}

// timerHeap orders timers by due time, then by the order they were set.
type timerHeap []*timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *timerHeap) Push(x any) {
	t := x.(*timer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.index = -1
	return t
}
