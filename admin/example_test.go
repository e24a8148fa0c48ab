package admin_test

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
)

// A desired-state document is applied whole or rejected whole: the bad
// value of version 2 names its field, and the job keeps version 1.
func ExampleServer_ApplyDocument() {
	ctx := context.Background()
	sys, _ := actors.NewSystem(actors.Config{})
	defer sys.Stop(ctx)
	feed := make(chan string)
	top := operators.NewTopology("orders")
	src := operators.Source(top, "src", operators.FromChannel(feed))
	operators.Sink(src, "store", operators.SinkFunc(func(string) error { return nil }), operators.Input(mailbox.Block(1024)))
	run, _ := sys.Run(ctx, top)

	srv, _ := admin.New(admin.Options{Token: "secret"})
	_ = srv.Add(run)
	err := srv.ApplyDocument(ctx, "v1.json", []byte(`{"version": 1, "jobs": {"orders": {"operators": {
		"store": {"input": {"policy": "drop-oldest", "capacity": 2048}}}}}}`))
	fmt.Println("v1:", err)
	err = srv.ApplyDocument(ctx, "v2.json", []byte(`{"version": 2, "jobs": {"orders": {"operators": {
		"src": {"paused": true},
		"store": {"input": {"policy": "throttle", "capacity": 2048}}}}}}`))
	fmt.Println("v2:", err)
	st, _ := srv.Status("orders")
	fmt.Printf("orders runs v%d of desired v%d: store %v, source paused %t\n", st.Applied, st.Desired, st.Inputs[1].Input, st.Inputs[0].Paused)

	close(feed)
	_ = run.Wait(ctx)
	// Output:
	// v1: <nil>
	// v2: desired: jobs.orders.operators.store.input.rate: 0: throttle's rate (records per second) must be positive and finite
	// orders runs v1 of desired v2: store drop-oldest:2048, source paused false
}
