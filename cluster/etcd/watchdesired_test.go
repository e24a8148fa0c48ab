package etcd_test

import (
	"context"
	"fmt"
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

// TestDesiredStateReachesEveryNode: three node processes on etcd; a
// coordinates the counting job (its counters on all three) and watches
// the desired-state document in an etcd key. A new version put there is
// carried by the coordinator to every node hosting the counters and
// applied on all of them (each prints the change in force, with the
// time): printed per node, from the Put to the change in force there. The
// issue asks for within 1 s; the assertion is looser (3 s), so that a
// loaded machine cannot make it flake; the figures are in the log.
func TestDesiredStateReachesEveryNode(t *testing.T) {
	needEtcd(t)
	dir := t.TempDir()
	key := "/sluice-test/desired/nodes-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cl := "etcd-desired-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cfg := func(name string) childConfig {
		return childConfig{Name: name, Cluster: cl, Store: t.TempDir() + "/" + name + ".db", Endpoints: endpoints, BaseKey: "/sluice-test",
			LeaseTTL: testLease, FailureTimeout: testFailure, JobN: jobRecords, JobDir: dir, HoldSource: true, DesiredKey: key}
	}
	a := startChild(t, cfg("a"))
	b := startChild(t, cfg("b"))
	c := startChild(t, cfg("c"))
	event(a, 20*time.Second, "joined", b.ID)
	event(a, 20*time.Second, "joined", c.ID)
	event(b, 20*time.Second, "joined", c.ID)
	nodes := []*child{a, b, c}
	where := runCounting(t, a, dir)
	for _, n := range nodes {
		if where[n.Address] == 0 {
			t.Fatalf("node %s hosts no counter: %v", n.Cfg.Name, where)
		}
	}
	a.Expect(10*time.Second, "WATCHING")
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	defer cli.Delete(context.Background(), key)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	put := func(version int, doc string) {
		t.Helper()
		start := time.Now()
		if _, err := cli.Put(ctx, key, doc); err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			f := n.AwaitLine(20*time.Second, fmt.Sprintf("version %d in force", version), func(f []string) bool {
				return len(f) == 6 && f[0] == "CHANGED" && f[1] == "counting" && f[2] == "count" && f[4] == strconv.Itoa(version)
			})
			d := time.Unix(0, int64(atou(f[5]))).Sub(start)
			t.Logf("version %d: from the put to in force on %s: %v", version, n.Cfg.Name, d)
			if d > 3*time.Second {
				t.Errorf("version %d took %v to reach node %s", version, d, n.Cfg.Name)
			}
		}
	}
	put(1, `{"version": 1, "jobs": {"counting": {"operators": {"count": {"input": {"policy": "drop-oldest", "capacity": 4096}}}}}}`)
	put(2, `{"version": 2, "jobs": {"counting": {"operators": {"count": {"input": {"policy": "block", "capacity": 1024}}}}}}`)
	open(a, b, c)
	a.Expect(2*time.Minute, "RUNEND")
	if f := a.Expect(30*time.Second, "RESTARTS"); f[1] != "0" {
		t.Errorf("the job restarted: %v", f)
	}
}
