// Package clock is the time source that sluice's timers read: the time now,
// and functions that run once a duration has passed. Code that takes a
// Clock instead of calling time.Now and time.AfterFunc can be tested with a
// clock the test moves itself (package clocktest), without sleeping and
// without flaky margins.
//
// Production code passes Real, the system clock. A function that waits
// takes a Clock:
//
//	// Every calls beat every d on c until stop is called.
//	func Every(c clock.Clock, d time.Duration, beat func(at time.Time)) (stop func()) {
//		var mu sync.Mutex
//		stopped := false
//		var cancel func() bool
//		var tick func()
//		tick = func() {
//			beat(c.Now())
//			mu.Lock()
//			defer mu.Unlock()
//			if !stopped {
//				cancel = c.AfterFunc(d, tick)
//			}
//		}
//		mu.Lock()
//		defer mu.Unlock()
//		cancel = c.AfterFunc(d, tick)
//		return func() { mu.Lock(); defer mu.Unlock(); stopped = true; cancel() }
//	}
//
// and its test moves a clocktest.Manual, with no sleep and no margin:
//
//	func TestEvery(t *testing.T) {
//		start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
//		c := clocktest.NewManual(start)
//		var beats []time.Duration
//		stop := Every(c, time.Second, func(at time.Time) { beats = append(beats, at.Sub(start)) })
//		defer stop()
//		c.Advance(3500 * time.Millisecond) // runs the beats due at 1s, 2s and 3s, in order
//		if want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}; !slices.Equal(beats, want) {
//			t.Fatalf("beats at %v, want %v", beats, want)
//		}
//	}
//
// Timers that the code under test sets from its own goroutines (an actor's,
// say) are waited for with Manual.WaitForTimers before the test advances
// the clock.
//
// Clock has the method set of operators.Clock, so that one clock drives a
// job's processing time, its timers and a supervisor's backoff.
package clock

import "time"

// Clock tells the time and runs functions once a duration has passed.
// Implementations are safe for concurrent use.
type Clock interface {
	// Now returns the current time on this clock.
	Now() time.Time
	// AfterFunc calls f once d has passed on this clock, unless stop is
	// called first; stop reports whether it prevented the call (false: f
	// has run, is running, or was stopped before). f may run on another
	// goroutine than the caller's.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// Real returns the system clock: time.Now and time.AfterFunc (each f runs
// on a goroutine of its own). Inside a testing/synctest bubble it reads the
// bubble's fake time, as those functions do.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// Since returns the time elapsed on c since t: c.Now().Sub(t).
func Since(c Clock, t time.Time) time.Duration { return c.Now().Sub(t) }

// Until returns the duration on c until t: t.Sub(c.Now()).
func Until(c Clock, t time.Time) time.Duration { return t.Sub(c.Now()) }

// After returns a channel that receives c's time once d has passed on c,
// and a function that stops the timer (as time.Timer's Stop: it reports
// whether it prevented the send). It is AfterFunc for code that waits in a
// select. The channel has room for the one value, so the send never blocks
// and nothing is left waiting when nobody receives.
func After(c Clock, d time.Duration) (ch <-chan time.Time, stop func() bool) {
	out := make(chan time.Time, 1)
	stop = c.AfterFunc(d, func() { out <- c.Now() })
	return out, stop
}
