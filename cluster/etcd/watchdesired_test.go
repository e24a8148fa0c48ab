package etcd_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/cluster/etcd"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
)

// TestDesiredStateThroughEtcd: three processes' control planes (three
// systems here, each running its own job "q") watch one etcd key; a new
// version put there is applied by all three, a version with a bad value
// is rejected by all three with the field named, each keeping the last
// good version.
func TestDesiredStateThroughEtcd(t *testing.T) {
	needEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := "/sluice-test/desired/" + strconv.FormatInt(time.Now().UnixNano(), 36)
	type node struct {
		srv  *admin.Server
		feed chan int64
		run  *actors.Run
	}
	var nodes []node
	for i := range 3 {
		sys, err := actors.NewSystem(actors.Config{Name: "n" + strconv.Itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
		defer sys.Stop(ctx)
		feed := make(chan int64)
		top := operators.NewTopology("q")
		src := operators.Source(top, "src", operators.FromChannel(feed))
		operators.Sink(src, "sink", operators.SinkFunc(func(int64) error { return nil }), operators.Input(mailbox.Block(64)))
		run, err := sys.Run(ctx, top)
		if err != nil {
			t.Fatal(err)
		}
		srv, err := admin.New(admin.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Add(run); err != nil {
			t.Fatal(err)
		}
		stop, err := etcd.WatchDesired(ctx, etcd.DesiredConfig{Endpoints: endpoints, Key: key}, srv)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		nodes = append(nodes, node{srv, feed, run})
	}
	defer func() {
		for _, n := range nodes {
			close(n.feed)
			if err := n.run.Wait(ctx); err != nil {
				t.Error(err)
			}
		}
	}()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	defer cli.Delete(context.Background(), key)
	put := func(doc string, done func(admin.DesiredStatus) bool) time.Duration {
		t.Helper()
		start := time.Now()
		if _, err := cli.Put(ctx, key, doc); err != nil {
			t.Fatal(err)
		}
		deadline := time.After(20 * time.Second)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for i := range nodes {
			for !done(nodes[i].srv.DesiredStatus()) {
				select {
				case <-deadline:
					t.Fatalf("node %d: %+v", i, nodes[i].srv.DesiredStatus())
				case <-tick.C:
				}
			}
		}
		return time.Since(start)
	}
	d1 := put(`{"version": 1, "jobs": {"q": {"operators": {"sink": {"input": {"policy": "drop-oldest", "capacity": 128}}}}}}`,
		func(s admin.DesiredStatus) bool { return s.Good == 1 && s.Applied["q"] == 1 })
	d2 := put(`{"version": 2, "jobs": {"q": {"operators": {"sink": {"input": {"policy": "sample", "capacity": 128, "sample_every": 0}}}}}}`,
		func(s admin.DesiredStatus) bool { return s.Rejected == 2 })
	for i, n := range nodes {
		ds := n.srv.DesiredStatus()
		st, _ := n.srv.Status("q")
		if ds.Good != 1 || !strings.Contains(ds.Reason, "jobs.q.operators.sink.input.sample_every") || st.Inputs[1].Input.Policy != "drop-oldest" {
			t.Fatalf("node %d after a bad v2: %+v, input %+v", i, ds, st.Inputs[1].Input)
		}
	}
	d3 := put(`{"version": 3, "jobs": {"q": {"operators": {"sink": {"input": {"policy": "block", "capacity": 64}}}}}}`,
		func(s admin.DesiredStatus) bool { return s.Good == 3 })
	t.Logf("from the put to all 3 nodes applied: v1 %v, v2 (rejected) %v, v3 %v", d1, d2, d3)
}
