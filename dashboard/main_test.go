package dashboard

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: the
// dashboard's poller, its event streams, the jobs' actors, Serve's server.
//
// The protoactor goroutine that actors' own TestMain ignores is ignored here
// for the same reason: a dead letter logged through actor.NewDeadLetter's
// throttle starts a goroutine that waits one tick of a one-second ticker
// and exits; protoactor owns it and nothing can wait for it. Its name
// depends on inlining.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
	)
}
