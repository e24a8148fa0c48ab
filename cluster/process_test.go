package cluster_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

// The process tests run a cluster of three child processes on loopback,
// replicate checkpoints through ReplicatedCheckpointStore and SIGKILL one.

const procFailureTimeout = 1500 * time.Millisecond

// TestLeaderKilled: node a completes a checkpoint every 50 ms, replicated
// to b and c (every replica acknowledges); a is SIGKILLed. b and c notice
// within the failure timeout and both still hold a's last completed
// checkpoint.
func TestLeaderKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes")
	}
	t.Parallel()
	cl := "killed-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cfg := func(name string, peers ...string) childConfig {
		return childConfig{Name: name, Cluster: cl, Peers: peers, Store: storeIn(t, name), FailureTimeout: procFailureTimeout, Replicas: 2}
	}
	a := startChild(t, cfg("a"))
	b := startChild(t, cfg("b", a.Address))
	c := startChild(t, cfg("c", a.Address))
	a.AwaitAll(10*time.Second, "EVENT joined b", "EVENT joined c")
	a.Send("loop orders 50")
	a.AwaitLine(20*time.Second, "checkpoint 5", func(f []string) bool { return len(f) == 3 && f[0] == "COMPLETED" && atou(f[2]) >= 5 })
	a.Kill()
	killed := time.Now()
	last := a.LastCompleted("orders")
	t.Logf("a killed after completing checkpoint %d", last)
	for _, s := range []*child{b, c} {
		s.AwaitLine(5*time.Second, "a's departure", func(f []string) bool { return len(f) == 4 && f[0] == "EVENT" && f[1] == "left" && f[3] == a.ID })
		d := time.Since(killed)
		t.Logf("%s noticed after %v", s.Cfg.Name, d)
		// A peer is declared lost FailureTimeout after the last ping it
		// answered, so at most FailureTimeout after the kill on a machine
		// that runs the survivors' timers on time. The bound allows as much
		// again for a machine slowed by load or -race (timers, the pipe).
		if d > 2*procFailureTimeout {
			t.Errorf("%s noticed a's death after %v, failure timeout %v", s.Cfg.Name, d, procFailureTimeout)
		}
	}
	for _, s := range []*child{b, c} {
		s.Send("latest orders")
		f := s.Expect(10*time.Second, "LATEST")
		got := atou(f[2])
		// Complete returned for last, so both hold it; a checkpoint in
		// flight when a died may have reached them too.
		if got != last && got != last+1 {
			t.Errorf("%s holds checkpoint %d, a completed %d", s.Cfg.Name, got, last)
		}
	}
}

// TestReplicaRestarts: a replicates to b and c (one acknowledgement is
// enough); c is SIGKILLed, a marks it retrying and then failed and goes on
// with b; c restarts on the same port and store, rejoins, syncs, is in
// sync again and holds a's newest checkpoint.
func TestReplicaRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes")
	}
	t.Parallel()
	cl := "restart-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cfg := func(name string, peers ...string) childConfig {
		return childConfig{Name: name, Cluster: cl, Peers: peers, Store: storeIn(t, name), FailureTimeout: procFailureTimeout,
			Replicas: 2, Acks: 1}
	}
	a := startChild(t, cfg("a"))
	b := startChild(t, cfg("b", a.Address))
	c := startChild(t, cfg("c", a.Address))
	a.AwaitAll(10*time.Second, "EVENT joined b", "EVENT joined c")
	a.Send("loop orders 50")
	a.AwaitAll(20*time.Second, "TRANSITION checkpoints/orders b syncing in-sync", "TRANSITION checkpoints/orders c syncing in-sync")
	_ = b // b goes on acknowledging while c is away

	cStore := c.Cfg.Store
	c.Kill()
	a.AwaitLine(20*time.Second, "c failed", func(f []string) bool {
		return len(f) == 5 && f[0] == "TRANSITION" && f[2] == "c" && f[4] == "failed"
	})
	before := a.LastCompleted("orders")
	a.AwaitLine(10*time.Second, "a checkpoint without c", func(f []string) bool {
		return len(f) == 3 && f[0] == "COMPLETED" && atou(f[2]) > before
	})

	restarted := cfg("c", a.Address)
	restarted.Port, restarted.Store = c.Port(), cStore
	c2 := startChild(t, restarted)
	a.AwaitLine(20*time.Second, "c in sync again", func(f []string) bool {
		return len(f) == 5 && f[0] == "TRANSITION" && f[2] == "c" && f[3] == "syncing" && f[4] == "in-sync"
	})
	a.Send("stop")
	a.Expect(10*time.Second, "STOPPED")
	last := a.LastCompleted("orders")
	// c acknowledged everything a had when it became in sync; the last
	// checkpoints follow within an acknowledgement's time.
	deadline := time.Now().Add(5 * time.Second)
	var got uint64
	for { // bounded poll: the other process has no event to wait on
		c2.Send("latest orders")
		got = atou(c2.Expect(5*time.Second, "LATEST")[2])
		if got >= last || time.Now().After(deadline) {
			break
		}
		awaitTick()
	}
	if got != last {
		t.Errorf("the restarted c holds checkpoint %d, a completed %d", got, last)
	}
	t.Logf("c caught up to checkpoint %d", got)
}

func atou(s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		panic(fmt.Sprintf("not a number: %q", s))
	}
	return n
}
