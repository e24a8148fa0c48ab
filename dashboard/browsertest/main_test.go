package browsertest

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: the
// dashboard's, the jobs' actors, chromedp's (its browser, its targets, the
// console reader), the test server's.
//
// The protoactor goroutine that the actors package ignores is ignored here
// for the same reason (a dead letter logged through actor.NewDeadLetter's
// throttle starts a goroutine that waits one tick of a one-second ticker;
// protoactor owns it and nothing can wait for it).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
	)
}
