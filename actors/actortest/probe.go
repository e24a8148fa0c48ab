// Package actortest tests actors: a Probe is an actor that records every
// message it receives, so that a test can hand it to the code under test as
// a destination or a reply address and then check what arrived, within a
// deadline.
//
//	func TestGreeter(t *testing.T) {
//		sys, err := actors.NewSystem(actors.Config{})
//		if err != nil {
//			t.Fatal(err)
//		}
//		t.Cleanup(func() { sys.Stop(context.Background()) })
//		greeter, err := sys.Spawn("greeter", func() actor.Actor { return &Greeter{} })
//		if err != nil {
//			t.Fatal(err)
//		}
//
//		p := actortest.NewProbe(t, sys)
//		p.Send(greeter, Greet{Name: "ada"}) // the probe is the sender, so the reply comes to it
//		got := actortest.ExpectMsg[Greeting](p, time.Second)
//		if got.Text != "hello, ada" {
//			t.Errorf("greeting %q, want %q", got.Text, "hello, ada")
//		}
//		actortest.ExpectNoMsg(p, 50*time.Millisecond) // and nothing else comes
//	}
//
// The Expect functions take the probe's messages in the order they
// arrived. ExpectMsg wants the next message to be of a type, ExpectMsgThat
// wants it to satisfy a predicate, FishFor skips messages until one
// matches, and ExpectTerminated waits for the end of an actor the probe
// watches. They wait on channels and timers, never polling: each returns
// as soon as its message is there, and waits its whole deadline only to
// fail. ExpectNoMsg is the exception: it waits its whole duration by
// design, because that is what it checks.
//
// A failed expectation fails the test with t.Fatalf, and says what arrived
// instead: the types and values of the unexpected messages (long values
// truncated). The probe's actor stops when the test ends (t.Cleanup).
//
// A Probe's methods and the Expect functions are safe for concurrent use,
// but a test normally takes a probe's messages from one goroutine.
package actortest

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/actors"
)

// SendTimeout bounds how long Probe.Send waits while the destination's
// mailbox is full, and how long the probe's actor may take to stop at the
// end of the test.
const SendTimeout = 10 * time.Second

// Probe is an actor on a System that records the messages it receives, and
// the test's handle on them. Create it with NewProbe.
type Probe struct {
	t    testing.TB
	sys  *actors.System
	ref  *actors.Ref
	name string

	mu      sync.Mutex
	queue   []received    // arrived, not yet taken
	arrived chan struct{} // closed and replaced when a message arrives
	sender  *actor.PID    // of the message taken last
}

type received struct {
	msg    any
	sender *actor.PID
}

var probes atomic.Int64

// NewProbe spawns a probe on sys. Its actor is stopped when the test ends
// (t.Cleanup), unless the system has stopped first.
func NewProbe(t testing.TB, sys *actors.System) *Probe {
	t.Helper()
	p := &Probe{t: t, sys: sys, arrived: make(chan struct{})}
	p.name = fmt.Sprintf("actortest-probe-%d", probes.Add(1))
	ref, err := sys.Spawn(p.name, func() actor.Actor { return &probeActor{p: p} })
	if err != nil {
		t.Fatalf("actortest: new probe: %v", err)
		return p
	}
	p.ref = ref
	t.Cleanup(func() {
		if sys.ActorSystem().IsStopped() {
			return // the system stopped its actors
		}
		ctx, cancel := context.WithTimeout(context.Background(), SendTimeout)
		defer cancel()
		if err := ref.Stop(ctx); err != nil {
			t.Errorf("actortest: probe %s: stop: %v", p.name, err)
		}
	})
	return p
}

// probeActor records what it receives, lifecycle messages aside.
type probeActor struct{ p *Probe }

// watchRequest asks the probe's actor to watch an actor.
type watchRequest struct {
	pid  *actor.PID
	done chan struct{}
}

func (a *probeActor) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting:
		return
	case *watchRequest:
		c.Watch(m.pid)
		close(m.done)
		return
	}
	a.p.record(received{msg: c.Message(), sender: c.Sender()})
}

func (p *Probe) record(r received) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queue = append(p.queue, r)
	close(p.arrived)
	p.arrived = make(chan struct{})
}

// Name returns the name of the probe's actor.
func (p *Probe) Name() string { return p.name }

// Ref returns the probe's actor, for code under test that sends to a Ref.
func (p *Probe) Ref() *actors.Ref { return p.ref }

// PID returns the probe's actor's PID, for code under test that sends from
// inside actors (actor.Context's Send or Request) or wants a reply address.
func (p *Probe) PID() *actor.PID { return p.ref.PID() }

// Send sends msg to the actor to with the probe as its sender, so that the
// actor's ctx.Respond (or a send to ctx.Sender()) comes back to the probe.
// It waits while to's mailbox is full, up to SendTimeout; a failure fails
// the test.
func (p *Probe) Send(to *actors.Ref, msg any) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.t.Context(), SendTimeout)
	defer cancel()
	if err := to.Send(ctx, &actor.MessageEnvelope{Message: msg, Sender: p.PID()}); err != nil {
		p.t.Fatalf("actortest: probe %s: send %s: %v", p.name, describe(msg), err)
	}
}

// SendPID sends msg to the actor pid with the probe as its sender, for
// actors the test knows by PID only (an actor's children, say). It does not
// wait: the message goes through protoactor's send, as from an actor.
func (p *Probe) SendPID(to *actor.PID, msg any) {
	p.sys.Root().RequestWithCustomSender(to, msg, p.PID())
}

// Sender returns the sender of the message the probe took last (nil when
// it had none, or when none was taken yet).
func (p *Probe) Sender() *actor.PID {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sender
}

// Reply sends msg to the sender of the message the probe took last, as the
// actor it stands for would with ctx.Respond: the probe plays the part of a
// server. A message without a sender fails the test.
func (p *Probe) Reply(msg any) {
	p.t.Helper()
	to := p.Sender()
	if to == nil {
		p.t.Fatalf("actortest: probe %s: reply %s: the last message taken had no sender", p.name, describe(msg))
		return
	}
	p.sys.Root().Send(to, msg)
}

// Watch makes the probe watch the actor pid: when it stops, the probe
// receives an *actor.Terminated (see ExpectTerminated). Watch returns once
// the watch is in place.
func (p *Probe) Watch(pid *actor.PID) {
	p.t.Helper()
	req := &watchRequest{pid: pid, done: make(chan struct{})}
	p.sys.Root().Send(p.PID(), req)
	timer := time.NewTimer(SendTimeout)
	defer timer.Stop()
	select {
	case <-req.done:
	case <-timer.C:
		p.t.Fatalf("actortest: probe %s: watch %s: the probe did not take the request within %v", p.name, pid.Id, SendTimeout)
	}
}

// next takes the next message, waiting up to within for it.
func (p *Probe) next(within time.Duration) (received, bool) {
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		p.mu.Lock()
		if len(p.queue) > 0 {
			r := p.queue[0]
			p.queue[0] = received{}
			p.queue = p.queue[1:]
			p.sender = r.sender
			p.mu.Unlock()
			return r, true
		}
		arrived := p.arrived
		p.mu.Unlock()
		select {
		case <-arrived:
		case <-timer.C:
			p.mu.Lock()
			empty := len(p.queue) == 0
			p.mu.Unlock()
			if empty {
				return received{}, false
			}
		}
	}
}

// rest takes the messages waiting, for a failure's report.
func (p *Probe) rest() []any {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]any, len(p.queue))
	for i, r := range p.queue {
		out[i] = r.msg
	}
	p.queue = nil
	return out
}

func typeName[T any]() string { return reflect.TypeFor[T]().String() }

// ExpectMsg takes the probe's next message, waiting up to within for it,
// and returns it if it is a T. Otherwise, or when nothing arrives in time,
// it fails the test, listing what arrived instead.
func ExpectMsg[T any](p *Probe, within time.Duration) T {
	p.t.Helper()
	var zero T
	r, ok := p.next(within)
	if !ok {
		p.t.Fatalf("actortest: probe %s: ExpectMsg[%s]: no message within %v", p.name, typeName[T](), within)
		return zero
	}
	if v, ok := r.msg.(T); ok {
		return v
	}
	p.t.Fatalf("actortest: probe %s: ExpectMsg[%s] within %v: got %s instead%s",
		p.name, typeName[T](), within, describe(r.msg), andThen(p.rest()))
	return zero
}

// ExpectMsgThat takes the probe's next message, waiting up to within for
// it, and returns it if pred accepts it. Otherwise, or when nothing arrives
// in time, it fails the test, listing what arrived instead.
func ExpectMsgThat(p *Probe, within time.Duration, pred func(any) bool) any {
	p.t.Helper()
	r, ok := p.next(within)
	if !ok {
		p.t.Fatalf("actortest: probe %s: ExpectMsgThat: no message within %v", p.name, within)
		return nil
	}
	if pred(r.msg) {
		return r.msg
	}
	p.t.Fatalf("actortest: probe %s: ExpectMsgThat within %v: got %s, which the predicate refused%s",
		p.name, within, describe(r.msg), andThen(p.rest()))
	return nil
}

// FishFor takes the probe's messages until one is a T that pred accepts
// (nil pred: any T), and returns it; the messages before it are discarded.
// When none comes within the deadline it fails the test, listing the
// messages it skipped.
func FishFor[T any](p *Probe, within time.Duration, pred func(T) bool) T {
	p.t.Helper()
	var zero T
	deadline := time.Now().Add(within)
	var skipped []any
	for {
		r, ok := p.next(max(time.Until(deadline), 0))
		if !ok {
			p.t.Fatalf("actortest: probe %s: FishFor[%s]: no match within %v; %s",
				p.name, typeName[T](), within, listSkipped(skipped))
			return zero
		}
		if v, ok := r.msg.(T); ok && (pred == nil || pred(v)) {
			return v
		}
		skipped = append(skipped, r.msg)
	}
}

// ExpectTerminated waits up to within for the end of pid, which the probe
// must watch (Watch), skipping other messages as FishFor does.
func ExpectTerminated(p *Probe, pid *actor.PID, within time.Duration) {
	p.t.Helper()
	FishFor(p, within, func(m *actor.Terminated) bool { return m.Who.Equal(pid) })
}

// ExpectNoMsg checks that no message arrives for d. It waits the whole of
// d when none does (that is its contract, so keep d short: tens of
// milliseconds), on a timer, and fails the test as soon as one arrives,
// listing it and those waiting with it. A message that arrived before the
// call and was not taken fails it too.
func ExpectNoMsg(p *Probe, d time.Duration) {
	p.t.Helper()
	start := time.Now()
	r, ok := p.next(d)
	if !ok {
		return
	}
	p.t.Fatalf("actortest: probe %s: ExpectNoMsg(%v): got %s after %v%s",
		p.name, d, describe(r.msg), time.Since(start).Round(time.Microsecond), andThen(p.rest()))
}

// Limits of a failure's report.
const (
	maxValueLen = 200 // runes of one message's value
	maxListed   = 10  // messages listed
)

// describe shows a message's type and value, the value truncated.
func describe(m any) string {
	if m == nil {
		return "nil"
	}
	var v string
	if s, ok := m.(string); ok {
		v = fmt.Sprintf("%q", s)
	} else {
		v = fmt.Sprintf("%+v", m)
	}
	if utf8.RuneCountInString(v) > maxValueLen {
		v = string([]rune(v)[:maxValueLen]) + "…"
	}
	return fmt.Sprintf("%T %s", m, v)
}

// list shows messages one a line, at most maxListed of them.
func list(ms []any) string {
	var b strings.Builder
	for i, m := range ms {
		if i == maxListed {
			fmt.Fprintf(&b, "\n\t… and %d more", len(ms)-maxListed)
			break
		}
		fmt.Fprintf(&b, "\n\t%d. %s", i+1, describe(m))
	}
	return b.String()
}

// andThen lists the messages that were waiting behind the unexpected one.
func andThen(ms []any) string {
	if len(ms) == 0 {
		return ""
	}
	return fmt.Sprintf("; then %d more:%s", len(ms), list(ms))
}

func listSkipped(ms []any) string {
	if len(ms) == 0 {
		return "no message arrived"
	}
	return fmt.Sprintf("skipped %d:%s", len(ms), list(ms))
}
