package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/cluster"
)

// One node per process. protoactor's remote sets gRPC's global logger
// each time it starts (grpclog.SetLoggerV2, documented as unsafe once gRPC
// runs), so a second node in a process races with the first one's gRPC
// goroutines. The tests therefore run one node in this process (shared,
// see parent) and the others in child processes (see child_test.go), as a
// real deployment does.

// TestMain fails the package when a test leaves a goroutine behind, once
// the shared node has stopped.
//
// Ignored, because protoactor owns them and they cannot be waited for:
// its throttles (actor.NewThrottle, NewThrottleWithLogger) start a
// goroutine on the first event of each period that waits one tick of a
// time.Ticker and exits: the dead-letter log throttle (1 s), and the
// cluster gossip's and gossip actor's log throttles (60 s). Their names
// depend on inlining.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" { // a child process of the process tests
		os.Exit(m.Run())
	}
	code := m.Run()
	if sharedNode != nil {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		if err := sharedNode.Stop(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "stop the shared node:", err)
			code = 1
		}
		cancel()
	}
	if code == 0 {
		if err := goleak.Find(
			goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
			goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
			goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottleWithLogger.func1.1"),
			goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster.(*Gossiper).StartGossiping.NewThrottle.func3.1"),
			goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster.NewGossipActor.NewThrottleWithLogger.func2.1"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// childEnv carries a child process's configuration (see child_test.go).
const childEnv = "SLUICE_CLUSTER_CHILD"

// waitTimeout bounds every wait in these tests.
const waitTimeout = 30 * time.Second

func timeout(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

func logger() *slog.Logger {
	if os.Getenv("SLUICE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// The messages of the tests.
type (
	Greet struct {
		Name string
		Seq  int
	}
	Greeting struct{ Text string }
	Count    struct{}
	Counted  struct {
		N        int
		Disorder []string
	}
	secret struct{ Key string } // never registered
)

func testRegistry() *cluster.Registry {
	r := cluster.NewRegistry()
	err := errors.Join(
		cluster.Register[Greet](r, "test.Greet"),
		cluster.Register[*Greeting](r, "test.Greeting"),
		cluster.Register[Count](r, "test.Count"),
		cluster.Register[*Counted](r, "test.Counted"),
	)
	if err != nil {
		panic(err)
	}
	return r
}

var (
	sharedOnce sync.Once
	sharedNode *cluster.Node
	sharedErr  error
)

// parent returns this process's node, started on first use and stopped by
// TestMain. Its cluster is "parent": child processes form clusters of
// their own, which it talks to without joining.
func parent(t testing.TB) *cluster.Node {
	t.Helper()
	sharedOnce.Do(func() {
		sharedNode, sharedErr = cluster.Start(context.Background(), cluster.Config{
			Name: "parent", ClusterName: "parent", Registry: testRegistry(), Logger: logger(),
			FailureTimeout: 2 * time.Second, Kinds: map[string]*actor.Props{"echo": echoProps()},
		})
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return sharedNode
}

// fresh returns base with a suffix of its own: an actor name that no
// earlier run of a test (go test -count) used on the shared parent node.
func fresh(base string) string {
	return fmt.Sprintf("%s-%d", base, freshSeq.Add(1))
}

var freshSeq atomic.Int64

// echoProps answers a Greet with a Greeting that repeats its name and the
// traceparent header it came with.
func echoProps() *actor.Props {
	return actor.PropsFromFunc(func(c actor.Context) {
		if g, ok := c.Message().(Greet); ok {
			text := "echo " + g.Name
			if tp := c.MessageHeader().Get("traceparent"); tp != "" {
				text += " traceparent=" + tp
			}
			c.Respond(&Greeting{Text: text})
		}
	})
}

// sinkProps counts Greets and checks that each sender's sequence numbers
// arrive in order; Count asks for the tally.
func sinkProps() *actor.Props {
	last := map[string]int{}
	counted := &Counted{}
	return actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case Greet:
			if m.Seq != last[m.Name]+1 && len(counted.Disorder) < 10 {
				counted.Disorder = append(counted.Disorder, fmt.Sprintf("%s: %d after %d", m.Name, m.Seq, last[m.Name]))
			}
			last[m.Name] = m.Seq
			counted.N++
		case Count:
			c.Respond(&Counted{N: counted.N, Disorder: counted.Disorder})
		}
	})
}
