package clock_test

import (
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/clock/clocktest"
)

// Every calls beat every d on c until stop is called: code under test that
// takes its clock instead of calling time.AfterFunc.
func Every(c clock.Clock, d time.Duration, beat func(at time.Time)) (stop func()) {
	var mu sync.Mutex
	stopped := false
	var cancel func() bool
	var tick func()
	tick = func() {
		beat(c.Now())
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			cancel = c.AfterFunc(d, tick)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	cancel = c.AfterFunc(d, tick)
	return func() { mu.Lock(); defer mu.Unlock(); stopped = true; cancel() }
}

// A test drives code that takes a Clock with a clocktest.Manual: advancing
// it runs the timers that came due, in time order, including those they set.
func Example() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := clocktest.NewManual(start)
	stop := Every(c, time.Second, func(at time.Time) { fmt.Println("beat at", at.Sub(start)) })
	defer stop()

	c.Advance(3500 * time.Millisecond)
	fmt.Println("now", clock.Since(c, start), "next beat in", clock.Until(c, start.Add(4*time.Second)))
	// Output:
	// beat at 1s
	// beat at 2s
	// beat at 3s
	// now 3.5s next beat in 500ms
}

// After turns a timer into a channel, for code that waits in a select.
func ExampleAfter() {
	c := clocktest.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ch, stop := clock.After(c, time.Minute)
	defer stop()
	c.Advance(time.Minute)
	select {
	case at := <-ch:
		fmt.Println("fired at", at.Format(time.TimeOnly))
	default:
		fmt.Println("not fired")
	}
	// Output: fired at 00:01:00
}

// Real is the system clock, for production.
func ExampleReal() {
	c := clock.Real()
	done := make(chan struct{})
	c.AfterFunc(time.Millisecond, func() { close(done) })
	<-done
	fmt.Println(clock.Since(c, time.Now().Add(-time.Hour)) >= time.Hour)
	// Output: true
}
