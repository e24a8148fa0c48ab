package shed_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/shed"
)

// A pipeline whose count handles 1000 records a second, offered 3000: the
// controller samples at the sources, deeper while they read the backlog
// that built up outside and the count works through its queue, and then
// at 90 % of the count's capacity.
func ExampleController() {
	c := shed.New(shed.Config{Target: 200 * time.Millisecond, Tasks: []shed.Task{
		{Name: "source"},
		{Name: "count", Point: "source", Sample: true},
	}})
	window := func(p99, lag time.Duration, queued int64) shed.Window {
		return shed.Window{Length: time.Second, P99: p99, Arrivals: 3000, Lag: lag, Loads: []shed.Load{
			{Busy: 100 * time.Millisecond, Parallelism: 1},
			{Busy: time.Second, Parallelism: 1, Capacity: 1000, Gain: 1, Queued: queued},
		}}
	}
	for _, w := range []shed.Window{window(900*time.Millisecond, 600*time.Millisecond, 256), window(150*time.Millisecond, 0, 20)} {
		var acts []shed.Action
		c, acts = c.Step(w)
		fmt.Println(acts)
	}
	// Output:
	// [{source 0.176 false}]
	// [{source 0.3 false}]
}
