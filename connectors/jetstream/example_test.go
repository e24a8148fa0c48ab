package jetstream_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/connectors/jetstream"
	"github.com/sluicehq/sluice/operators"
)

// The id that the sink gives record 41 of partition 2: a replay after a
// restore gives it the same id, and the stream drops it.
func ExampleMsgID() {
	fmt.Println(jetstream.MsgID("orders-job/publish", 2, 41))
	// Output: orders-job/publish/2/41
}

type order struct {
	ID     string
	Amount int64
}

// A job that reads the stream ORDERS, keeps the large orders and publishes
// them to big.orders, exactly once: checkpoints record the source's stream
// sequence and the sink's record count together.
func Example() {
	ctx := context.Background()
	sys, err := actors.NewSystem(actors.Config{Store: "orders.db"})
	if err != nil {
		panic(err)
	}
	defer sys.Stop(ctx)

	t := operators.NewTopology("orders-job", operators.Checkpoints(time.Second))
	orders := operators.Source(t, "orders", jetstream.NewSource(jetstream.SourceConfig[order]{
		URL:      "nats://127.0.0.1:4222",
		Stream:   "ORDERS",
		Consumer: "orders-job",
	}))
	big := operators.Filter(orders, "big", func(o order) bool { return o.Amount >= 1000 })
	operators.Sink(big, "publish", jetstream.NewSink(jetstream.SinkConfig[order]{
		URL:     "nats://127.0.0.1:4222",
		Subject: "big.orders",
		Name:    "orders-job/publish",
	}))
	run, err := sys.Run(ctx, t)
	if err != nil {
		panic(err)
	}
	_ = run.Wait(ctx) // runs until drained: run.Drain(ctx)
}
