package admin_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
)

// TestConcurrentDocuments: documents applied at the same time (the file
// watcher and PUT /v1/desired, say) are each validated against the job as
// the one before them left it. The view of the jobs was read before the
// document waited for its turn: a document whose settings the job already
// had in that stale view was acknowledged "in force" with nothing applied
// while the job ran the previous version's settings (and a failing one
// would roll back to settings the job no longer had).
func TestConcurrentDocuments(t *testing.T) {
	sys, ctx := newSystem(t)
	feed := make(chan string)
	top := operators.NewTopology("orders")
	src := operators.Source(top, "src", operators.FromChannel(feed))
	operators.Sink(src, "store", operators.SinkFunc(func(string) error { return nil }), operators.Input(mailbox.Block(1024)))
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		close(feed)
		if err := run.Wait(ctx); err != nil {
			t.Error(err)
		}
	}()
	srv, err := admin.New(admin.Options{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Add(run); err != nil {
		t.Fatal(err)
	}
	doc := func(v uint64, capacity int) []byte {
		return fmt.Appendf(nil, `{"version": %d, "jobs": {"orders": {"operators": {"store": {"input": {"policy": "block", "capacity": %d}}}}}}`, v, capacity)
	}
	want := map[uint64]int{0: 1024}
	for round := range uint64(20) {
		// Version 2r+1 asks for 2048, version 2r+2 for 1024 (what the job
		// has before the round): applied in either order, the job must
		// end with the settings of the version the Server says is good.
		v1, v2 := 2*round+1, 2*round+2
		want[v1], want[v2] = 2048, 1024
		var wg sync.WaitGroup
		errs := make([]error, 2)
		start := make(chan struct{})
		for i, d := range [][]byte{doc(v1, 2048), doc(v2, 1024)} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = srv.ApplyDocument(ctx, "doc", d)
			}()
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		ds := srv.DesiredStatus()
		st, err := srv.Status("orders")
		if err != nil {
			t.Fatal(err)
		}
		var got int
		for _, in := range st.Inputs {
			if in.Operator == "store" {
				got = in.Input.Capacity
			}
		}
		if got != want[ds.Good] {
			t.Fatalf("round %d: version %d is in force (acknowledged), whose capacity is %d, but the job runs %d", round, ds.Good, want[ds.Good], got)
		}
		if got != 1024 { // leave the job as the next round expects it
			if err := srv.SetInput(ctx, "test", "orders", "store", admin.Input{Policy: "block", Capacity: 1024}); err != nil {
				t.Fatal(err)
			}
		}
	}
}
