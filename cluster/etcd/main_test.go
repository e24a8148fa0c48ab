package etcd_test

import (
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The tests run every node in a child process of its own (child_test.go):
// protoactor's remote sets gRPC's global logger whenever it starts, so two
// nodes in one process race (see the cluster package's doc).

// TestMain fails the package when a test leaves a goroutine behind
// (protoactor's log throttles excepted, as in package cluster's tests).
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(m.Run())
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(
			goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
			goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
			goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottleWithLogger.func1.1"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// childEnv carries a child process's configuration (see child_test.go).
const childEnv = "SLUICE_ETCD_CHILD"

// endpoints are the client ports of the 3-member etcd that .ci/services
// starts on loopback.
var endpoints = []string{"127.0.0.1:2379", "127.0.0.1:22379", "127.0.0.1:32379"}

// needEtcd skips the test without an etcd on loopback, unless
// SLUICE_REQUIRE_ETCD=1 or SLUICE_REQUIRE_SERVICES=1 (CI, .ci/run), where
// it fails.
func needEtcd(t *testing.T) {
	t.Helper()
	for _, ep := range endpoints {
		c, err := net.DialTimeout("tcp", ep, time.Second)
		if err != nil {
			if os.Getenv("SLUICE_REQUIRE_ETCD") == "1" || os.Getenv("SLUICE_REQUIRE_SERVICES") == "1" {
				t.Fatalf("etcd at %s: %v (bash .ci/services starts it)", ep, err)
			}
			t.Skipf("no etcd at %s (bash .ci/services starts a 3-member one): %v", ep, err)
		}
		c.Close()
	}
}
