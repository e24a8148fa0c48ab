package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clock/clocktest"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/persistence"
	"github.com/sluicehq/sluice/persistence/persisttest"
	"github.com/sluicehq/sluice/supervision"
)

var namespaces atomic.Int64

// newStore returns a store on the parent node in a namespace of its own.
func newStore(t *testing.T, cfg cluster.ReplicationConfig) *cluster.ReplicatedCheckpointStore {
	t.Helper()
	if cfg.Namespace == "" {
		cfg.Namespace = fmt.Sprint("t", namespaces.Add(1))
	}
	s, err := cluster.NewReplicatedCheckpointStore(parent(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Without replicas the store is a plain local CheckpointStore, and passes
// the conformance suite of every CheckpointStore.
func TestCheckpointStoreConformance(t *testing.T) {
	persisttest.TestCheckpointStore(t, func(t *testing.T) persistence.CheckpointStore {
		return newStore(t, cluster.ReplicationConfig{})
	})
}

func TestNotEnoughReplicas(t *testing.T) {
	s := newStore(t, cluster.ReplicationConfig{Replicas: 1, Peers: []string{"nobody"}, AckTimeout: 100 * time.Millisecond,
		MaxAttempts: 2, Backoff: supervision.Backoff{Initial: 10 * time.Millisecond}})
	err := s.Complete(timeout(t), "job", persistence.Checkpoint{ID: 1})
	if !errors.Is(err, cluster.ErrNotEnoughReplicas) {
		t.Errorf("Complete with an absent replica = %v, want ErrNotEnoughReplicas", err)
	}
	bad := []cluster.ReplicationConfig{
		{Replicas: 1, Acks: 2},
		{Replicas: 1, Peers: []string{"parent"}},
		{Replicas: 2, Peers: []string{"x"}},
		{Replicas: -1},
		{Namespace: "a/b"},
	}
	for _, cfg := range bad {
		if _, err := cluster.NewReplicatedCheckpointStore(parent(t), cfg); !errors.Is(err, cluster.ErrInvalidConfig) {
			t.Errorf("%+v: %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

// awaitMember waits until the parent lists a member of that name.
func awaitMember(t *testing.T, n *cluster.Node, name string, present bool) {
	t.Helper()
	done := make(chan struct{})
	var closed atomic.Bool
	cancel := n.Subscribe(func(cluster.MemberEvent) {
		if _, ok := n.Member(name); ok == present && closed.CompareAndSwap(false, true) {
			close(done)
		}
	})
	defer cancel()
	if _, ok := n.Member(name); ok == present {
		return
	}
	select {
	case <-done:
	case <-timeout(t).Done():
		t.Fatalf("%s: member %s present=%v: timed out", n.Name(), name, !present)
	}
}

// held returns the newest checkpoint of a log that the node at addr holds.
func held(t *testing.T, addr, log string) uint64 {
	t.Helper()
	st, err := parent(t).Status(timeout(t), addr)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range st.Held {
		if h.Log == log {
			return h.Checkpoint
		}
	}
	return 0
}

func replicaPhase(s *cluster.ReplicatedCheckpointStore, replica string) (cluster.ReplicaStatus, cluster.LogStatus) {
	for _, ls := range s.Status() {
		for _, r := range ls.Replicas {
			if r.Name == replica {
				return r, ls
			}
		}
	}
	return cluster.ReplicaStatus{}, cluster.LogStatus{}
}

// TestReplicatedStore: the parent leads, two child processes hold the
// replicas. Each completed checkpoint is on both when Complete returns; a
// clear reaches them too. When one replica is killed, the parent notices,
// the replica goes from retrying to failed, and checkpoints that need it
// fail with ErrNotEnoughReplicas instead of waiting for ever.
func TestReplicatedStore(t *testing.T) {
	t.Parallel()
	p := parent(t)
	b := startChild(t, childConfig{Name: "rb", Cluster: "parent", Peers: []string{p.Address()}, Replicas: -1})
	c := startChild(t, childConfig{Name: "rc", Cluster: "parent", Peers: []string{p.Address()}, Replicas: -1})
	awaitMember(t, p, "rb", true)
	awaitMember(t, p, "rc", true)
	failed := make(chan struct{}, 1)
	ns := fmt.Sprint("t", namespaces.Add(1))
	s := newStore(t, cluster.ReplicationConfig{Namespace: ns, Replicas: 2, Peers: []string{"rb", "rc"}, AckTimeout: 300 * time.Millisecond,
		MaxAttempts: 3, Backoff: supervision.Backoff{Initial: 50 * time.Millisecond, Max: 200 * time.Millisecond},
		OnTransition: func(tr cluster.ReplicaTransition) {
			if tr.Replica == "rc" && tr.To == "failed" {
				failed <- struct{}{}
			}
		}})
	log := "checkpoints/" + ns + "/orders"
	for id := uint64(1); id <= 5; id++ {
		cp := persistence.Checkpoint{ID: id, Time: time.Unix(int64(id), 0), States: map[string][]byte{"op/0": []byte(fmt.Sprint(id))}}
		if err := s.Complete(timeout(t), "orders", cp); err != nil {
			t.Fatalf("Complete(%d): %v", id, err)
		}
		for _, ch := range []*child{b, c} {
			if got := held(t, ch.Address, log); got != id {
				t.Fatalf("after Complete(%d) %s holds checkpoint %d", id, ch.Cfg.Name, got)
			}
		}
	}
	for _, r := range []string{"rb", "rc"} {
		st, ls := replicaPhase(s, r)
		if st.Phase != "in-sync" || st.Lag != 0 || ls.Commit != ls.Last {
			t.Errorf("%s: %+v in %+v, want in sync", r, st, ls)
		}
	}
	if err := s.Clear(timeout(t), "orders"); err != nil {
		t.Fatal(err)
	}
	if got := held(t, b.Address, log); got != 0 {
		t.Errorf("after Clear rb holds checkpoint %d", got)
	}
	if _, ok, _ := s.Latest(timeout(t), "orders"); ok {
		t.Error("Latest after Clear found a checkpoint")
	}

	c.Kill()
	killed := time.Now()
	awaitMember(t, p, "rc", false)
	t.Logf("the parent noticed rc's death after %v", time.Since(killed))
	// Lost FailureTimeout (2 s) after its last answered ping; as much
	// again for a machine slowed by load or -race.
	if d := time.Since(killed); d > 2*2*time.Second {
		t.Errorf("rc's death noticed after %v; failure timeout 2s", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.Complete(ctx, "orders", persistence.Checkpoint{ID: 6})
	if !errors.Is(err, cluster.ErrNotEnoughReplicas) {
		t.Fatalf("Complete with rc dead = %v, want ErrNotEnoughReplicas", err)
	}
	select {
	case <-failed:
	case <-timeout(t).Done():
		t.Fatal("rc never failed")
	}
	if st, _ := replicaPhase(s, "rc"); st.Phase != "failed" || !strings.Contains(fmt.Sprint(p.Stats().Replication), "rc") {
		t.Errorf("rc: %+v, want failed and visible in the node's stats", st)
	}
	// rb still gets it. Complete failed as soon as the entry was
	// appended (one live replica of the two it needs), not after rb's
	// acknowledgement, so rb may still be writing it: its status is asked
	// until it holds 6 or the test's deadline passes.
	awaitHeld(t, b.Address, log, 6)
}

// awaitHeld asks the node at addr for the newest checkpoint of log it holds
// until that is want, and fails the test at its deadline. Each question is
// a round trip to the node, so the loop goes at the pace of its answers.
func awaitHeld(t *testing.T, addr, log string, want uint64) {
	t.Helper()
	ctx := timeout(t)
	for {
		got := held(t, addr, log)
		if got == want {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s holds checkpoint %d of %s, want %d", addr, got, log, want)
		}
	}
}

// TestStaleLeaderFenced: the parent leads a job's log (epoch 1) with a
// child as its replica; the child takes the job over (it leads the copy it
// holds, epoch 2, with the parent as its replica). The parent's next
// checkpoint is refused with ErrFenced: the newer leader's append reached
// its copy first. The child's checkpoint is the newest on both.
func TestStaleLeaderFenced(t *testing.T) {
	t.Parallel()
	p := parent(t)
	ns := fmt.Sprint("t", namespaces.Add(1))
	f := startChild(t, childConfig{Name: "fb", Cluster: "parent", Peers: []string{p.Address()},
		Replicas: 1, ReplicaPeers: []string{"parent"}, Namespace: ns})
	awaitMember(t, p, "fb", true)
	s := newStore(t, cluster.ReplicationConfig{Namespace: ns, Replicas: 1, Peers: []string{"fb"}})
	for id := uint64(1); id <= 3; id++ {
		if err := s.Complete(timeout(t), "job", persistence.Checkpoint{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	f.Send("complete job 4")
	f.Expect(10*time.Second, "COMPLETED job 4")
	err := s.Complete(timeout(t), "job", persistence.Checkpoint{ID: 5})
	if !errors.Is(err, cluster.ErrFenced) {
		t.Fatalf("the old leader's Complete = %v, want ErrFenced", err)
	}
	cp, ok, err := s.Latest(timeout(t), "job")
	if err != nil || !ok || cp.ID != 4 {
		t.Errorf("Latest on the old leader = %d, %v, %v; want the new leader's 4", cp.ID, ok, err)
	}
	if st := s.Status(); len(st) != 1 || st[0].Role != "stepped-down" {
		t.Errorf("the old leader's status %+v, want stepped-down", st)
	}
	// It stays fenced.
	if err := s.Complete(timeout(t), "job", persistence.Checkpoint{ID: 6}); !errors.Is(err, cluster.ErrFenced) {
		t.Errorf("a later Complete = %v, want ErrFenced", err)
	}
}

// TestRetryTimersOnTheClock drives the leader's timers with a manual
// clock: a replica that cannot be reached is retried after the Backoff's
// delays, exactly when the clock says, and fails when the budget is spent.
func TestRetryTimersOnTheClock(t *testing.T) {
	c := clocktest.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	trans := make(chan string, 32)
	s := newStore(t, cluster.ReplicationConfig{Replicas: 1, Peers: []string{"ghost"}, Clock: c, MaxAttempts: 3,
		AckTimeout: time.Second, Backoff: supervision.Backoff{Initial: 100 * time.Millisecond, Jitter: supervision.NoJitter},
		OnTransition: func(tr cluster.ReplicaTransition) { trans <- tr.From + " -> " + tr.To }})
	done := make(chan error, 1)
	go func() { done <- s.Complete(timeout(t), "job", persistence.Checkpoint{ID: 1}) }()
	expect := func(want ...string) {
		t.Helper()
		for _, w := range want {
			select {
			case got := <-trans:
				if got != w {
					t.Fatalf("transition %q, want %q", got, w)
				}
			case <-timeout(t).Done():
				t.Fatalf("no transition %q", w)
			}
		}
	}
	// ghost is no member: the first attempt fails at once.
	expect("syncing -> retrying")
	for _, delay := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond} {
		if err := c.WaitForTimers(timeout(t), 1); err != nil {
			t.Fatal(err)
		}
		c.Advance(delay - time.Millisecond)
		select {
		case tr := <-trans:
			t.Fatalf("%s before the backoff's %v passed", tr, delay)
		default:
		}
		c.Advance(time.Millisecond)
		if delay == 100*time.Millisecond {
			expect("retrying -> syncing", "syncing -> retrying")
		} else {
			expect("retrying -> syncing", "syncing -> failed")
		}
	}
	if err := <-done; !errors.Is(err, cluster.ErrNotEnoughReplicas) {
		t.Errorf("Complete = %v, want ErrNotEnoughReplicas", err)
	}
	if n := c.Pending(); n != 0 {
		t.Errorf("%d timers left pending", n)
	}
}
