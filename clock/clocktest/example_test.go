package clocktest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/clock/clocktest"
)

// Advance runs the timers that came due, in time order, on the caller's
// goroutine; nothing fires between calls.
func ExampleManual() {
	c := clocktest.NewManual(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC))
	c.AfterFunc(2*time.Second, func() { fmt.Println("second timer at", c.Now().Format(time.TimeOnly)) })
	c.AfterFunc(time.Second, func() { fmt.Println("first timer at", c.Now().Format(time.TimeOnly)) })
	stop := c.AfterFunc(time.Hour, func() { fmt.Println("never") })

	fmt.Println("pending:", c.Pending())
	c.Advance(90 * time.Second)
	fmt.Println("now:", c.Now().Format(time.TimeOnly), "pending:", c.Pending())
	fmt.Println("stopped:", stop())
	// Output:
	// pending: 3
	// first timer at 09:00:01
	// second timer at 09:00:02
	// now: 09:01:30 pending: 1
	// stopped: true
}

// A test whose code under test sets timers on other goroutines waits for
// them before advancing the clock.
func ExampleManual_WaitForTimers() {
	c := clocktest.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	done := make(chan string)
	go func() { // the code under test, on its own goroutine
		c.AfterFunc(time.Minute, func() { done <- "retried" })
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitForTimers(ctx, 1); err != nil {
		fmt.Println(err)
		return
	}
	d, _ := c.Next()
	fmt.Println("timer due in", d)
	go c.Advance(d)
	fmt.Println(<-done)
	// Output:
	// timer due in 1m0s
	// retried
}
