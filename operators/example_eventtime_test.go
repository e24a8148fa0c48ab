package operators_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
)

type click struct {
	User string
	At   int64 // ms
}

// runExample runs t to its end on a fresh system.
func runExample(t *operators.Topology) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		panic(err)
	}
	defer sys.Stop(ctx)
	run, err := sys.Run(ctx, t)
	if err != nil {
		panic(err)
	}
	if err := run.Wait(ctx); err != nil {
		panic(err)
	}
}

// Clicks per user in tumbling windows of one minute of event time; a click
// that arrives after its window closed goes to the late output.
func ExampleWindowCount() {
	clicks := []click{{"ann", 10_000}, {"bob", 20_000}, {"ann", 59_999}, {"ann", 60_000}, {"bob", 130_000}, {"bob", 30_000}}
	t := operators.NewTopology("clicks", operators.BatchSize(1))
	src := operators.Source(t, "clicks", operators.FromSlice(clicks))
	ts := operators.Timestamps(src, "ts", func(c click) time.Time { return time.UnixMilli(c.At) })
	byUser := operators.KeyBy(ts, "by-user", func(c click) string { return c.User })
	late := operators.NewCollector[click]()
	counts := operators.WindowCount(byUser, "per-minute", operators.Tumbling(time.Minute))
	operators.Sink(operators.LateRecords(byUser, counts, "late"), "late-out", late)
	out := operators.NewCollector[operators.Windowed[string, int64]]()
	operators.Sink(counts, "collect", out)
	runExample(t)

	res := out.Items()
	slices.SortFunc(res, func(a, b operators.Windowed[string, int64]) int {
		return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.Key, b.Key))
	})
	for _, w := range res {
		fmt.Printf("%s %s-%s %d\n", w.Key, w.Start.Format("15:04"), w.End.Format("15:04"), w.Value)
	}
	fmt.Println("late:", late.Items())
	// Output:
	// ann 00:00-00:01 2
	// bob 00:00-00:01 1
	// ann 00:01-00:02 1
	// bob 00:02-00:03 1
	// late: [{bob 30000}]
}

// An interval join: each order with the payments of the same order id made
// within five minutes after it.
func ExampleIntervalJoin() {
	type order struct {
		ID string
		At int64
	}
	type payment struct {
		Order string
		At    int64
	}
	min := int64(60_000)
	t := operators.NewTopology("payments")
	orders := operators.Timestamps(operators.Source(t, "orders", operators.FromSlice([]order{{"a", 0}, {"b", 1 * min}})),
		"orders-ts", func(o order) time.Time { return time.UnixMilli(o.At) })
	payments := operators.Timestamps(operators.Source(t, "payments", operators.FromSlice([]payment{{"a", 4 * min}, {"b", 7 * min}})),
		"payments-ts", func(p payment) time.Time { return time.UnixMilli(p.At) })
	paid := operators.IntervalJoin(orders, payments, "paid", func(o order) string { return o.ID }, func(p payment) string { return p.Order },
		0, 5*time.Minute, func(o order, p payment) string { return fmt.Sprintf("%s paid after %d min", o.ID, (p.At-o.At)/min) })
	out := operators.NewCollector[string]()
	operators.Sink(paid, "collect", out)
	runExample(t)
	fmt.Println(out.Items())
	// Output: [a paid after 4 min]
}
