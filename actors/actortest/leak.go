package actortest

import "go.uber.org/goleak"

// LeakOptions are the goleak options for tests of code that runs actors.
// They ignore one protoactor goroutine: when a message goes to a stopped
// PID (a late reply to a finished request, a Terminated reaching a watcher
// that has stopped), protoactor logs a dead letter through the throttle
// built in actor.NewDeadLetter, and the first event of each period starts
// a goroutine that waits one tick of a time.Ticker
// (DeadLetterThrottleInterval, 1 s by default) and then exits. It is
// bounded and owned by protoactor, and cannot be waited for. Its name
// depends on inlining: NewThrottle is normally inlined into NewDeadLetter.
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(m, actortest.LeakOptions()...) }
func LeakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
	}
}
