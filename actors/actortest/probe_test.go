package actortest_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/actors/actortest"
)

// TestMain fails the package when a test leaves a goroutine behind, such as
// a probe's actor. The ignored goroutine is protoactor's dead-letter
// throttle (see actors/actors_test.go): a watch of an actor that has already
// stopped goes through dead letters.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
	)
}

// wait bounds the expectations that pass; they return as soon as their
// message is there.
const wait = 10 * time.Second

func newSystem(t testing.TB) *actors.System {
	t.Helper()
	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := sys.Stop(ctx); err != nil {
			t.Errorf("System.Stop: %v", err)
		}
	})
	return sys
}

func spawn(t testing.TB, sys *actors.System, name string, a actor.Actor) *actors.Ref {
	t.Helper()
	ref, err := sys.Spawn(name, func() actor.Actor { return a })
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

type (
	ping  struct{ N int }
	pong  struct{ N int }
	relay struct {
		To  *actor.PID
		Msg any
	}
	// ask makes the server ask To for a pong with a ping, and report the
	// pong to To as a string.
	ask struct{ To *actor.PID }
)

// server answers a ping with a pong, forwards a relay's message to its
// destination and carries out asks.
type server struct{ asker *actor.PID }

func (s *server) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case ping:
		c.Respond(pong(m))
	case relay:
		c.Send(m.To, m.Msg)
	case ask:
		s.asker = m.To
		c.Request(m.To, ping{100})
	case pong:
		c.Send(s.asker, fmt.Sprintf("the server got pong %d", m.N))
	}
}

func TestReplyComesBackToTheProbe(t *testing.T) {
	sys := newSystem(t)
	srv := spawn(t, sys, "server", &server{})
	p := actortest.NewProbe(t, sys)
	p.Send(srv, ping{1})
	if got := actortest.ExpectMsg[pong](p, wait); got != (pong{1}) {
		t.Fatalf("reply %+v, want pong{1}", got)
	}
	actortest.ExpectNoMsg(p, 20*time.Millisecond)
}

// An actor under test asks the probe (actor.Context's Request): the probe
// knows the sender and replies to it.
func TestProbeAnswersAnActor(t *testing.T) {
	sys := newSystem(t)
	srv := spawn(t, sys, "server", &server{})
	p := actortest.NewProbe(t, sys)
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	if err := srv.Send(ctx, ask{To: p.PID()}); err != nil {
		t.Fatal(err)
	}
	if got := actortest.ExpectMsg[ping](p, wait); got.N != 100 {
		t.Fatalf("the server asked %+v", got)
	}
	if !p.Sender().Equal(srv.PID()) {
		t.Fatalf("sender %v, want the server %v", p.Sender(), srv.PID())
	}
	p.Reply(pong{100})
	if got := actortest.ExpectMsg[string](p, wait); got != "the server got pong 100" {
		t.Fatalf("report %q", got)
	}
}

func TestProbeAsDestination(t *testing.T) {
	sys := newSystem(t)
	srv := spawn(t, sys, "server", &server{})
	p := actortest.NewProbe(t, sys)
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	for _, m := range []any{"hop 0", "hop 1", "hop 2", 42} {
		if err := srv.Send(ctx, relay{To: p.PID(), Msg: m}); err != nil {
			t.Fatal(err)
		}
	}
	if got := actortest.ExpectMsg[string](p, wait); got != "hop 0" {
		t.Fatalf("first message %q, want hop 0", got)
	}
	got := actortest.ExpectMsgThat(p, wait, func(m any) bool { return m == "hop 1" })
	if got != "hop 1" {
		t.Fatalf("ExpectMsgThat returned %v", got)
	}
	if n := actortest.FishFor(p, wait, func(n int) bool { return n > 40 }); n != 42 { // skips hop 2
		t.Fatalf("FishFor returned %d, want 42", n)
	}
	if err := p.Ref().Send(ctx, "direct"); err != nil { // straight to the probe's Ref
		t.Fatal(err)
	}
	if got := actortest.ExpectMsg[string](p, wait); got != "direct" {
		t.Fatalf("got %q, want direct", got)
	}
	actortest.ExpectNoMsg(p, 20*time.Millisecond)
}

// The probe plays a server: the code under test asks it, and it replies.
func TestProbeReplies(t *testing.T) {
	sys := newSystem(t)
	p := actortest.NewProbe(t, sys)
	answer := make(chan any, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		reply, err := p.Ref().Request(ctx, ping{7})
		if err != nil {
			reply = err
		}
		answer <- reply
	}()
	if got := actortest.ExpectMsg[ping](p, wait); got.N != 7 {
		t.Fatalf("request %+v", got)
	}
	p.Reply(pong{7})
	if got := <-answer; got != (pong{7}) {
		t.Fatalf("Request returned %v, want pong{7}", got)
	}
}

// SendPID reaches an actor known by PID, with the probe as the sender.
func TestSendPID(t *testing.T) {
	sys := newSystem(t)
	srv := spawn(t, sys, "server", &server{})
	p := actortest.NewProbe(t, sys)
	p.SendPID(srv.PID(), ping{3})
	if got := actortest.ExpectMsg[pong](p, wait); got.N != 3 {
		t.Fatalf("reply %+v", got)
	}
}

func TestWatchAndExpectTerminated(t *testing.T) {
	sys := newSystem(t)
	srv := spawn(t, sys, "server", &server{})
	p := actortest.NewProbe(t, sys)
	p.Watch(srv.PID())
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	if err := srv.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	actortest.ExpectTerminated(p, srv.PID(), wait)
}

// A probe's actor stops when its test ends.
func TestProbeStopsAtCleanup(t *testing.T) {
	sys := newSystem(t)
	watcher := actortest.NewProbe(t, sys)
	var pid *actor.PID
	t.Run("inner", func(t *testing.T) {
		pid = actortest.NewProbe(t, sys).PID()
		watcher.Watch(pid)
	})
	actortest.ExpectTerminated(watcher, pid, wait)
}

// In a synctest bubble the deadlines are on the bubble's fake clock:
// ExpectNoMsg of an hour costs no real time, and a message sent after
// (fake) minutes meets a deadline of an hour.
func TestInSynctestBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		p := actortest.NewProbe(t, sys)
		actortest.ExpectNoMsg(p, time.Hour)
		go func() {
			<-time.After(5 * time.Minute)
			p.SendPID(p.PID(), "late")
		}()
		start := time.Now()
		if got := actortest.ExpectMsg[string](p, time.Hour); got != "late" {
			t.Fatalf("got %q", got)
		}
		if waited := time.Since(start); waited != 5*time.Minute {
			t.Fatalf("ExpectMsg returned after %v of fake time, want 5m", waited)
		}
	})
}

// fakeTB records failures instead of failing; everything else goes to the
// real test.
type fakeTB struct {
	testing.TB
	mu       sync.Mutex
	failures []string
}

func (f *fakeTB) Fatalf(format string, args ...any) { f.record(fmt.Sprintf(format, args...)) }
func (f *fakeTB) Errorf(format string, args ...any) { f.record(fmt.Sprintf(format, args...)) }
func (f *fakeTB) Fatal(args ...any)                 { f.record(fmt.Sprint(args...)) }
func (f *fakeTB) Error(args ...any)                 { f.record(fmt.Sprint(args...)) }

func (f *fakeTB) record(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failures = append(f.failures, s)
}

// failure returns the one failure recorded.
func (f *fakeTB) failure(t *testing.T) string {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.failures) != 1 {
		t.Fatalf("%d failures %q, want 1", len(f.failures), f.failures)
	}
	return f.failures[0]
}

func wantAll(t *testing.T, msg string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(msg, p) {
			t.Errorf("failure message\n%s\ndoes not contain %q", msg, p)
		}
	}
}

// failingProbe returns a probe on a fake TB and a function that delivers
// messages to it and returns once the probe has recorded them all, so that
// a failure's report lists them.
func failingProbe(t *testing.T) (*fakeTB, *actortest.Probe, func(...any)) {
	sys := newSystem(t)
	other := spawn(t, sys, "other", &server{})
	f := &fakeTB{TB: t}
	p := actortest.NewProbe(f, sys)
	deliver := func(ms ...any) {
		ctx, cancel := context.WithTimeout(t.Context(), wait)
		defer cancel()
		for _, m := range ms {
			if err := p.Ref().Send(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		// Watch's request queues behind the messages in the probe's
		// mailbox, and Watch returns once the probe's actor has taken it:
		// a barrier that takes none of the messages.
		p.Watch(other.PID())
	}
	return f, p, deliver
}

func TestFailureMessages(t *testing.T) {
	t.Run("ExpectMsg of another type", func(t *testing.T) {
		f, p, deliver := failingProbe(t)
		deliver("hi", pong{2}, 3)
		got := actortest.ExpectMsg[pong](p, wait)
		if got != (pong{}) {
			t.Errorf("returned %+v after failing, want the zero value", got)
		}
		wantAll(t, f.failure(t), p.Name(), "ExpectMsg[actortest_test.pong]", `got string "hi" instead`,
			"then 2 more:", "1. actortest_test.pong {N:2}", "2. int 3")
	})
	t.Run("ExpectMsg with nothing", func(t *testing.T) {
		f, p, _ := failingProbe(t)
		actortest.ExpectMsg[pong](p, 10*time.Millisecond)
		wantAll(t, f.failure(t), "ExpectMsg[actortest_test.pong]: no message within 10ms")
	})
	t.Run("ExpectMsgThat refused", func(t *testing.T) {
		f, p, deliver := failingProbe(t)
		deliver(ping{9})
		if got := actortest.ExpectMsgThat(p, wait, func(m any) bool { return m == ping{1} }); got != nil {
			t.Errorf("returned %v after failing", got)
		}
		wantAll(t, f.failure(t), "ExpectMsgThat", "got actortest_test.ping {N:9}, which the predicate refused")
	})
	t.Run("FishFor lists what it skipped, truncated", func(t *testing.T) {
		f, p, deliver := failingProbe(t)
		long := strings.Repeat("x", 500)
		var ms []any
		ms = append(ms, long)
		for i := range 12 {
			ms = append(ms, i)
		}
		deliver(ms...)
		actortest.FishFor(p, 20*time.Millisecond, func(n int) bool { return n > 100 })
		msg := f.failure(t)
		wantAll(t, msg, "FishFor[int]: no match within 20ms; skipped 13:",
			`1. string "`+strings.Repeat("x", 199)+"…", "2. int 0", "10. int 8", "… and 3 more")
		if strings.Contains(msg, strings.Repeat("x", 200)) || strings.Contains(msg, "11.") {
			t.Errorf("failure message not truncated:\n%s", msg)
		}
	})
	t.Run("FishFor with nothing", func(t *testing.T) {
		f, p, _ := failingProbe(t)
		actortest.FishFor[ping](p, 10*time.Millisecond, nil)
		wantAll(t, f.failure(t), "FishFor[actortest_test.ping]: no match within 10ms; no message arrived")
	})
	t.Run("ExpectNoMsg", func(t *testing.T) {
		f, p, deliver := failingProbe(t)
		deliver(pong{5}, "and this")
		actortest.ExpectNoMsg(p, wait) // fails at once: the messages are there
		wantAll(t, f.failure(t), "ExpectNoMsg(10s): got actortest_test.pong {N:5} after", `then 1 more:`, `1. string "and this"`)
	})
	t.Run("Reply without a sender", func(t *testing.T) {
		f, p, deliver := failingProbe(t)
		deliver(1)
		actortest.ExpectMsg[int](p, wait)
		p.Reply("to nobody")
		wantAll(t, f.failure(t), `reply string "to nobody": the last message taken had no sender`)
	})
	t.Run("nil and pointers", func(t *testing.T) {
		f, p, deliver := failingProbe(t)
		deliver(&pong{6})
		actortest.ExpectMsg[pong](p, wait)
		wantAll(t, f.failure(t), "got *actortest_test.pong &{N:6} instead")
	})
}
