package clocktest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/clock/clocktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// recorder records which timers ran and the clock's time when they did.
type recorder struct {
	c   *clocktest.Manual
	mu  sync.Mutex
	ran []string
}

func (r *recorder) timer(name string) func() {
	return func() {
		at := r.c.Now().Sub(t0)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.ran = append(r.ran, fmt.Sprintf("%s@%v", name, at))
	}
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.ran
	r.ran = nil
	return out
}

func TestAdvanceRunsDueTimersInOrder(t *testing.T) {
	c := clocktest.NewManual(t0)
	r := &recorder{c: c}
	c.AfterFunc(3*time.Second, r.timer("c"))
	c.AfterFunc(time.Second, r.timer("a"))
	c.AfterFunc(2*time.Second, r.timer("b1"))
	c.AfterFunc(2*time.Second, r.timer("b2")) // same due time: in the order set
	c.AfterFunc(10*time.Second, r.timer("late"))

	c.Advance(999 * time.Millisecond)
	if got := r.take(); len(got) != 0 {
		t.Fatalf("ran %v before any timer was due", got)
	}
	c.Advance(2001 * time.Millisecond)
	if got, want := r.take(), []string{"a@1s", "b1@2s", "b2@2s", "c@3s"}; !slices.Equal(got, want) {
		t.Fatalf("ran %v, want %v", got, want)
	}
	if got := c.Now(); !got.Equal(t0.Add(3 * time.Second)) {
		t.Fatalf("Now = %v after advancing 3s", got.Sub(t0))
	}
	if c.Pending() != 1 {
		t.Fatalf("Pending = %d, want 1 (late)", c.Pending())
	}
	if d, ok := c.Next(); !ok || d != 7*time.Second {
		t.Fatalf("Next = %v, %v; want 7s, true", d, ok)
	}
}

// A timer set by a timer's function runs within the same Advance when it
// falls due within the span, in time order with the others; timers due at
// the same time run in the order they were set ("zero" was set before the
// second tick, "now" after it).
func TestAdvanceRunsTimersSetByTimers(t *testing.T) {
	c := clocktest.NewManual(t0)
	r := &recorder{c: c}
	var tick func()
	n := 0
	tick = func() {
		r.timer("tick")()
		if n++; n < 10 {
			c.AfterFunc(time.Second, tick)
		}
	}
	c.AfterFunc(time.Second, tick)
	c.AfterFunc(2500*time.Millisecond, r.timer("other"))
	c.AfterFunc(2*time.Second, func() {
		r.timer("zero")()
		c.AfterFunc(0, r.timer("now")) // due at once: before the next tick
	})

	c.Advance(3500 * time.Millisecond)
	want := []string{"tick@1s", "zero@2s", "tick@2s", "now@2s", "other@2.5s", "tick@3s"}
	if got := r.take(); !slices.Equal(got, want) {
		t.Fatalf("ran %v, want %v", got, want)
	}
	if d, ok := c.Next(); !ok || d != 500*time.Millisecond {
		t.Fatalf("Next = %v, %v; want the 4th tick in 500ms", d, ok)
	}
}

func TestStop(t *testing.T) {
	c := clocktest.NewManual(t0)
	r := &recorder{c: c}
	stopA := c.AfterFunc(time.Second, r.timer("a"))
	stopB := c.AfterFunc(time.Second, r.timer("b"))
	if c.Pending() != 2 {
		t.Fatalf("Pending = %d, want 2", c.Pending())
	}
	if !stopA() {
		t.Fatal("stop of a pending timer returned false")
	}
	if stopA() {
		t.Fatal("a second stop returned true")
	}
	if c.Pending() != 1 {
		t.Fatalf("Pending = %d after a stop, want 1", c.Pending())
	}
	c.Advance(time.Second)
	if got := r.take(); !slices.Equal(got, []string{"b@1s"}) {
		t.Fatalf("ran %v, want only b", got)
	}
	if stopB() {
		t.Fatal("stop of a fired timer returned true")
	}
	if _, ok := c.Next(); ok || c.Pending() != 0 {
		t.Fatalf("Next ok %v, Pending %d with no timer", ok, c.Pending())
	}
}

func TestZeroAndNegativeDelays(t *testing.T) {
	c := clocktest.NewManual(t0)
	r := &recorder{c: c}
	c.AfterFunc(0, r.timer("zero"))
	c.AfterFunc(-time.Hour, r.timer("negative"))
	if got := r.take(); len(got) != 0 {
		t.Fatalf("AfterFunc ran %v at once; due timers run at the next Advance", got)
	}
	if d, ok := c.Next(); !ok || d != 0 {
		t.Fatalf("Next = %v, %v; want 0, true", d, ok)
	}
	c.Advance(0)
	if got, want := r.take(), []string{"zero@0s", "negative@0s"}; !slices.Equal(got, want) {
		t.Fatalf("Advance(0) ran %v, want %v", got, want)
	}
}

func TestSet(t *testing.T) {
	c := clocktest.NewManual(t0)
	r := &recorder{c: c}
	c.AfterFunc(time.Hour, r.timer("hour"))
	c.Set(t0.Add(30 * time.Minute))
	if got := r.take(); len(got) != 0 {
		t.Fatalf("ran %v before its time", got)
	}
	c.Set(t0.Add(-time.Hour)) // backward: the timer keeps its due time
	if got := c.Now(); !got.Equal(t0.Add(-time.Hour)) {
		t.Fatalf("Now = %v after Set back", got)
	}
	if d, _ := c.Next(); d != 2*time.Hour {
		t.Fatalf("Next = %v after Set back an hour, want 2h", d)
	}
	c.Set(t0.Add(2 * time.Hour))
	if got, want := r.take(), []string{"hour@1h0m0s"}; !slices.Equal(got, want) {
		t.Fatalf("Set forward ran %v, want %v", got, want)
	}
	if got := c.Now(); !got.Equal(t0.Add(2 * time.Hour)) {
		t.Fatalf("Now = %v, want t0+2h", got.Sub(t0))
	}
}

func TestAdvanceNegativePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Advance(-1s) did not panic")
		}
	}()
	clocktest.NewManual(t0).Advance(-time.Second)
}

// WaitForTimers returns once code on another goroutine has set the timers.
func TestWaitForTimers(t *testing.T) {
	c := clocktest.NewManual(t0)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := c.WaitForTimers(ctx, 0); err != nil {
		t.Fatalf("WaitForTimers(0) = %v", err)
	}
	fired := make(chan int, 3)
	go func() {
		for i := 1; i <= 3; i++ {
			c.AfterFunc(time.Duration(i)*time.Second, func() { fired <- i })
		}
	}()
	if err := c.WaitForTimers(ctx, 3); err != nil {
		t.Fatalf("WaitForTimers(3) = %v", err)
	}
	c.Advance(3 * time.Second)
	for i := 1; i <= 3; i++ {
		if got := <-fired; got != i { // Advance returned: all three have run
			t.Fatalf("timer %d fired in place of %d", got, i)
		}
	}
}

func TestWaitForTimersContext(t *testing.T) {
	c := clocktest.NewManual(t0)
	c.AfterFunc(time.Second, func() {})
	ctx, cancel := context.WithCancelCause(t.Context())
	errGaveUp := errors.New("gave up")
	cancel(errGaveUp)
	err := c.WaitForTimers(ctx, 2)
	if !errors.Is(err, errGaveUp) {
		t.Fatalf("WaitForTimers after cancel = %v, want the cause", err)
	}
	if want := "clocktest: waiting for 2 timers, 1 pending: gave up"; err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
}

// Inside a synctest bubble: the code under test runs on its own goroutine,
// takes (fake) time before it sets its timer, and reacts to the timer; the
// test waits for the timer, advances the manual clock, and waits for the
// bubble to settle. A wait for a timer that is never set ends at the
// context's deadline, at once in real time.
func TestInSynctestBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := clocktest.NewManual(t0)
		var mu sync.Mutex
		var log []string
		note := func(s string) { mu.Lock(); log = append(log, s); mu.Unlock() }
		done := make(chan struct{})
		go func() { // the code under test
			defer close(done)
			<-time.After(time.Hour) // slow setup, on the bubble's fake time
			fired := make(chan struct{})
			c.AfterFunc(5*time.Minute, func() { close(fired) })
			note("armed")
			<-fired
			note("fired at " + clock.Since(c, t0).String())
		}()

		if err := c.WaitForTimers(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the goroutine has noted "armed" and waits for its timer
		c.Advance(4 * time.Minute)
		synctest.Wait()
		mu.Lock()
		if want := []string{"armed"}; !slices.Equal(log, want) {
			t.Fatalf("log %v after 4 minutes, want %v", log, want)
		}
		mu.Unlock()
		c.Advance(time.Minute)
		<-done
		if want := []string{"armed", "fired at 5m0s"}; !slices.Equal(log, want) {
			t.Fatalf("log %v, want %v", log, want)
		}

		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		start := time.Now()
		if err := c.WaitForTimers(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitForTimers with no timer coming = %v, want the deadline", err)
		}
		if waited := time.Since(start); waited != time.Minute {
			t.Fatalf("waited %v of fake time, want 1m", waited)
		}
	})
}

// Many goroutines set, stop and wait for timers while others advance the
// clock: run with -race. Every timer either fires exactly once or is
// stopped, and the time never goes back.
func TestConcurrentUse(t *testing.T) {
	c := clocktest.NewManual(t0)
	const setters, each = 8, 200
	var mu sync.Mutex
	fired := map[int]int{}
	stopped := map[int]bool{}
	var wg sync.WaitGroup
	for g := range setters {
		wg.Go(func() {
			for i := range each {
				id := g*each + i
				stop := c.AfterFunc(time.Duration(i%7)*time.Millisecond, func() {
					mu.Lock()
					fired[id]++
					mu.Unlock()
				})
				if i%3 == 0 && stop() {
					mu.Lock()
					stopped[id] = true
					mu.Unlock()
				}
			}
		})
	}
	var last time.Time
	var advancers sync.WaitGroup
	for range 2 {
		advancers.Go(func() {
			for range 100 {
				c.Advance(time.Millisecond)
				_ = c.Pending()
				_, _ = c.Next()
			}
		})
	}
	advancers.Go(func() {
		for range 200 {
			now := c.Now()
			if now.Before(last) {
				t.Errorf("time went back from %v to %v", last, now)
			}
			last = now
		}
	})
	wg.Wait()
	advancers.Wait()
	c.Advance(time.Second) // everything left is due
	if c.Pending() != 0 {
		t.Fatalf("Pending = %d after everything came due", c.Pending())
	}
	for id := range setters * each {
		switch {
		case stopped[id] && fired[id] != 0:
			t.Fatalf("timer %d was stopped and fired", id)
		case !stopped[id] && fired[id] != 1:
			t.Fatalf("timer %d fired %d times", id, fired[id])
		}
	}
}
