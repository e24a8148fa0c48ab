package etcd_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/cluster/etcd"
)

// endpoints are the client ports of the 3-member etcd that .ci/services
// starts on loopback.
var endpoints = []string{"127.0.0.1:2379", "127.0.0.1:22379", "127.0.0.1:32379"}

// needEtcd skips the test without an etcd on loopback, unless
// SLUICE_REQUIRE_SERVICES=1 (CI), where it fails.
func needEtcd(t *testing.T) {
	t.Helper()
	for _, ep := range endpoints {
		c, err := net.DialTimeout("tcp", ep, time.Second)
		if err != nil {
			if os.Getenv("SLUICE_REQUIRE_SERVICES") == "1" {
				t.Fatalf("etcd at %s: %v (bash .ci/services starts it)", ep, err)
			}
			t.Skipf("no etcd at %s (bash .ci/services starts a 3-member one): %v", ep, err)
		}
		c.Close()
	}
}

// Two nodes register in the real etcd under a fresh cluster name: each
// sees the other join through etcd's watch; when one stops, its key goes
// with its lease and the other sees it leave.
func TestMembersJoinAndLeaveThroughEtcd(t *testing.T) {
	needEtcd(t)
	ctx := context.Background()
	name := "etcd-test-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	start := func(node string) (*cluster.Node, <-chan cluster.MemberEvent) {
		t.Helper()
		p, err := etcd.New(etcd.Config{Endpoints: endpoints, BaseKey: "/sluice-test"})
		if err != nil {
			t.Fatal(err)
		}
		n, err := cluster.Start(ctx, cluster.Config{Name: node, ClusterName: name, Provider: p, FailureTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		events := make(chan cluster.MemberEvent, 16)
		n.Subscribe(func(ev cluster.MemberEvent) {
			select {
			case events <- ev:
			default:
			}
		})
		return n, events
	}
	a, aEvents := start("a")
	defer a.Stop(ctx)
	b, _ := start("b")
	stopped := false
	defer func() {
		if !stopped {
			b.Stop(ctx)
		}
	}()
	await := func(events <-chan cluster.MemberEvent, kind cluster.EventKind, who string) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case ev := <-events:
				if ev.Kind == kind && ev.Member.Name == who {
					return
				}
			case <-deadline:
				t.Fatalf("no %v event for %s within 30s", kind, who)
			}
		}
	}
	await(aEvents, cluster.Joined, "b")
	// b found a in etcd when it started: a is among its members from the
	// start (no event after Start returned).
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	members, err := b.AwaitMembers(actx, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		if m.ID != a.ID() && m.ID != b.ID() {
			t.Errorf("b's member %+v is neither a (%s) nor b (%s)", m, a.ID(), b.ID())
		}
	}
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	stopped = true
	await(aEvents, cluster.Left, "b")
	fmt.Fprintln(os.Stderr, "a saw b join and leave through etcd")
}
