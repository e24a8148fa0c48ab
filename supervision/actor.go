package supervision

import (
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/clock"
)

// ForActors adapts a Strategy to protoactor's actor.SupervisorStrategy, so
// that embedded actors get real backoff and restart budgets instead of
// protoactor's own (linear, nanosecond jitter, never giving up):
//
//	sup, _ := supervision.NewStrategy(supervision.WithBackoff(b), supervision.WithRestartBudget(5, time.Minute))
//	props := actor.PropsFromProducer(newWorker, actor.WithSupervisor(supervision.ForActors(sup, clk)))
//
// (An actor spawned with actors.System.Spawn takes the Strategy itself:
// actors.Supervise for its own failures, actors.SuperviseChildren for its
// children's, both on the System's clock.) The restart budget reads c.Now
// and the backoff waits on c.AfterFunc; nil is clock.Real(). Tests pass a
// clocktest.Manual, wait for the restart's timer with WaitForTimers and
// advance the clock past it.
//
// Restart waits the backoff's delay (a timer, never a sleep on an actor's
// goroutine; the failed actor's mailbox stays suspended meanwhile, so no
// message is lost but the one that failed, as protoactor does), Resume goes
// on with the next message, Stop stops the actor, Escalate passes the
// failure to the supervisor's own supervisor. A spent budget stops the
// actor. Under AllForOne the directive applies to every child of the
// supervisor, and the budget is shared.
func ForActors(s Strategy, c clock.Clock) actor.SupervisorStrategy {
	if c == nil {
		c = clock.Real()
	}
	return &actorStrategy{s: s, budgets: map[string]*Budget{}, now: c.Now,
		after: func(d time.Duration, f func()) { c.AfterFunc(d, f) }}
}

type actorStrategy struct {
	s       Strategy
	mu      sync.Mutex
	budgets map[string]*Budget // per child, or one under AllForOne
	now     func() time.Time
	after   func(time.Duration, func())
}

func (a *actorStrategy) budget(key string) *Budget {
	a.mu.Lock()
	defer a.mu.Unlock()
	b, ok := a.budgets[key]
	if !ok {
		b, _ = a.s.NewBudget() // a Strategy from NewStrategy has a valid budget
		a.budgets[key] = b
	}
	return b
}

// HandleFailure implements actor.SupervisorStrategy.
func (a *actorStrategy) HandleFailure(sys *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason, msg any) {
	err, ok := reason.(error)
	if !ok {
		err = fmt.Errorf("panic: %v", reason)
	}
	key := child.Id
	targets := []*actor.PID{child}
	if a.s.Scope == AllForOne {
		key = "*"
		targets = sup.Children()
	}
	d := a.s.OnFailure(err, a.budget(key), a.now())
	sys.EventStream.Publish(&actor.SupervisorEvent{Child: child, Reason: reason, Directive: toProto(d.Directive)})
	switch d.Directive {
	case Resume:
		sup.ResumeChildren(child)
	case Restart:
		a.after(d.Delay, func() { sup.RestartChildren(targets...) })
	case Stop:
		sup.StopChildren(targets...)
	case Escalate:
		sup.EscalateFailure(reason, msg)
	}
}

func toProto(d Directive) actor.Directive {
	switch d {
	case Resume:
		return actor.ResumeDirective
	case Restart:
		return actor.RestartDirective
	case Stop:
		return actor.StopDirective
	}
	return actor.EscalateDirective
}
