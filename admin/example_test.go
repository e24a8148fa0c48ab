package admin_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/persistence"
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

// A job added with its Starter can be rescaled: the Server stops it with
// a savepoint and starts it again from it at the new parallelism, and
// Wait follows it to its end.
func ExampleServer_Rescale() {
	ctx := context.Background()
	sys, _ := actors.NewSystem(actors.Config{})
	defer sys.Stop(ctx)
	var mu sync.Mutex
	total := map[int64]int64{} // the last count of every key
	top := operators.NewTopology("clicks")
	src := operators.Source(top, "src", operators.Generate(operators.Unbounded, func(i int64) int64 { return i }))
	keyed := operators.KeyBy(src, "by-user", func(v int64) int64 { return v % 10 }, operators.Parallelism(2))
	operators.Sink(operators.Count(keyed, "count"), "sink", operators.SinkFunc(func(kv operators.KV[int64, int64]) error {
		mu.Lock()
		total[kv.Key] = kv.Value
		mu.Unlock()
		return nil
	}))
	opts := []operators.TopologyOption{operators.Checkpoints(time.Hour), operators.CheckpointStore(persistence.NewMemoryCheckpointStore())}
	job, _ := operators.Start(ctx, sys, top, opts...)
	dir, _ := os.MkdirTemp("", "savepoints")
	defer os.RemoveAll(dir)
	srv, _ := admin.New(admin.Options{Token: "secret", SavepointDir: dir})
	_ = srv.AddRestartable(job.Run(), admin.TopologyStarter(sys, top, opts...))

	r, err := srv.Rescale(ctx, "ops", "clicks", map[string]int{"count": 4})
	fmt.Println("count at parallelism", r.Parallelism["count"], "was", r.Was["count"], err)
	_, _ = srv.Stop(ctx, "ops", "clicks")
	_ = srv.Wait(ctx, "clicks")
	read := func(run *actors.Run) (n int64) {
		for _, s := range run.Stats() {
			if s.Name == "src" {
				n = s.Out
			}
		}
		return n
	}
	second, _ := srv.Current("clicks")
	var counted int64
	for _, n := range total {
		counted += n
	}
	// Every record is counted once across both runs: the second read on
	// from the first one's offset, with its counts.
	fmt.Println("every record counted once:", counted == read(job.Run())+read(second))
	// Output:
	// count at parallelism 4 was 2 <nil>
	// every record counted once: true
}
