package actors_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/actors/actortest"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/supervision"
)

// TestMain fails the package when a test leaves a goroutine behind: actors'
// mailbox goroutines, Run's watcher goroutine, Request's and Stop's
// short-lived helper actors (protoactor's dead-letter throttle aside: see
// actortest.LeakOptions).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, actortest.LeakOptions()...) }

// Every *Envelope is a mailbox.Control.
var _ mailbox.Control = (*actors.Envelope)(nil)

// waitTimeout bounds every wait on a channel. In a synctest bubble the clock
// is fake, so it only fires when the bubble is deadlocked.
const waitTimeout = 10 * time.Second

func newSystem(t *testing.T) *actors.System { return newSystemOn(t, nil) }

// newSystemOn is newSystem on clock c (nil: the real clock).
func newSystemOn(t *testing.T, c clock.Clock) *actors.System {
	t.Helper()
	sys, err := actors.NewSystem(actors.Config{Clock: c})
	if err != nil {
		t.Fatalf("NewSystem: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := sys.Stop(ctx); err != nil {
			t.Errorf("System.Stop: %v", err)
		}
	})
	return sys
}

func timeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// counter counts; get{} asks for the total.
type (
	counter struct{ n int }
	add     int
	get     struct{}
)

func (c *counter) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case add:
		c.n += int(m)
	case get:
		ctx.Respond(c.n)
	case string:
		if m == "boom" {
			panic("boom")
		}
	}
}

// gate holds a recorder inside Receive until released.
type gate struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

// recorder forwards every user message but gates to got, and closes stopped
// when it has stopped.
type recorder struct {
	got     chan any
	stopped chan struct{}
}

func newRecorder(buffer int) *recorder {
	return &recorder{got: make(chan any, buffer), stopped: make(chan struct{})}
}

func (r *recorder) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Stopped:
		close(r.stopped)
	case actor.SystemMessage, actor.AutoReceiveMessage:
	case *gate:
		close(m.entered)
		<-m.release
	default:
		r.got <- m
	}
}

func (r *recorder) producer() actor.Actor { return r }

// hold sends a gate and waits until the actor is blocked on it.
func hold(t *testing.T, ref *actors.Ref) (release func()) {
	t.Helper()
	g := &gate{entered: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(g.open)
	if err := ref.TrySend(g); err != nil {
		t.Fatalf("TrySend(gate) = %v", err)
	}
	select {
	case <-g.entered:
	case <-time.After(waitTimeout):
		t.Fatalf("actor did not reach the gate within %v", waitTimeout)
	}
	return g.open
}

func (r *recorder) expect(t *testing.T, want ...any) {
	t.Helper()
	for i, w := range want {
		select {
		case m := <-r.got:
			if m != w {
				t.Fatalf("message %d = %v, want %v", i, m, w)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("message %d: nothing within %v, want %v", i, waitTimeout, w)
		}
	}
	select {
	case m := <-r.got:
		t.Fatalf("unexpected extra message %v", m)
	default:
	}
}

func TestSpawnSendRequestRoundTrip(t *testing.T) {
	sys := newSystem(t)
	ctx := timeout(t)
	ref, err := sys.Spawn("counter", func() actor.Actor { return &counter{} }, actors.Capacity(4))
	if err != nil {
		t.Fatalf("Spawn: %v", err)
	}
	if ref.PID() == nil || ref.PID().Id != "counter" {
		t.Fatalf("PID = %v, want Id %q", ref.PID(), "counter")
	}
	for i := 1; i <= 10; i++ { // more than the capacity: Send waits for room
		if err := ref.Send(ctx, add(i)); err != nil {
			t.Fatalf("Send(%d): %v", i, err)
		}
	}
	reply, err := ref.Request(ctx, get{})
	if err != nil {
		t.Fatalf("Request: %v", err)
	}
	if reply != 55 {
		t.Fatalf("Request(get) = %v (%T), want 55", reply, reply)
	}
	st := ref.Stats()
	if st.Capacity != 4 || st.Posted != 11 || st.Delivered != 11 || st.Depth != 0 || st.HighWater > 4 {
		t.Fatalf("Stats = %+v, want Capacity 4, Posted = Delivered = 11, Depth 0, HighWater <= 4", st)
	}
}

func TestSpawnDefaultCapacity(t *testing.T) {
	sys := newSystem(t)
	ref, err := sys.Spawn("default", func() actor.Actor { return &counter{} })
	if err != nil {
		t.Fatalf("Spawn: %v", err)
	}
	if got := ref.Stats().Capacity; got != actors.DefaultCapacity {
		t.Fatalf("Capacity = %d, want DefaultCapacity %d", got, actors.DefaultCapacity)
	}
}

func TestTrySendWrapsErrFull(t *testing.T) {
	sys := newSystem(t)
	rec := newRecorder(8)
	ref, err := sys.Spawn("gated", rec.producer, actors.Capacity(2))
	if err != nil {
		t.Fatalf("Spawn: %v", err)
	}
	release := hold(t, ref)
	for _, m := range []string{"a", "b"} {
		if err := ref.TrySend(m); err != nil {
			t.Fatalf("TrySend(%q) = %v", m, err)
		}
	}
	err = ref.TrySend("c")
	if !errors.Is(err, mailbox.ErrFull) {
		t.Fatalf("TrySend on a full mailbox = %v, want an error wrapping mailbox.ErrFull", err)
	}
	if want := "actors: send to gated: mailbox: full"; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	if st := ref.Stats(); st.Refused != 1 || st.Depth != 2 {
		t.Fatalf("Stats = %+v, want Refused 1, Depth 2", st)
	}
	release()
	rec.expect(t, "a", "b")
	if err := ref.TrySend("c"); err != nil {
		t.Fatalf("TrySend after the actor drained = %v", err)
	}
	rec.expect(t, "c")
}

func TestSendWaitsForRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		rec := newRecorder(4)
		ref, err := sys.Spawn("gated", rec.producer, actors.Capacity(1))
		if err != nil {
			t.Fatalf("Spawn: %v", err)
		}
		release := hold(t, ref)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if err := ref.Send(ctx, "a"); err != nil {
			t.Fatalf("Send(a) = %v", err)
		}
		done := make(chan error, 1)
		go func() { done <- ref.Send(ctx, "b") }()
		synctest.Wait() // the sender and the actor are both blocked
		select {
		case err := <-done:
			t.Fatalf("Send on a full mailbox returned %v before the actor consumed anything", err)
		default:
		}
		release()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Send(b) after release = %v", err)
			}
		case <-time.After(waitTimeout):
			t.Fatal("Send(b) did not return after the actor consumed")
		}
		rec.expect(t, "a", "b")
	})
}

func TestSendAndRequestHonourDeadlineWhenFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		ref, err := sys.Spawn("gated", newRecorder(1).producer, actors.Capacity(1))
		if err != nil {
			t.Fatalf("Spawn: %v", err)
		}
		hold(t, ref)
		if err := ref.TrySend("a"); err != nil {
			t.Fatalf("TrySend(a) = %v", err)
		}

		const d = 3 * time.Second
		ctx, cancel := context.WithTimeout(t.Context(), d)
		defer cancel()
		start := time.Now()
		err = ref.Send(ctx, "b")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Send on a full mailbox = %v, want an error wrapping context.DeadlineExceeded", err)
		}
		if !strings.HasPrefix(err.Error(), "actors: send to gated:") {
			t.Errorf("error %q does not name the actor", err)
		}
		if elapsed := time.Since(start); elapsed != d {
			t.Errorf("Send returned after %v, want the %v deadline", elapsed, d)
		}

		_, err = ref.Request(ctx, get{}) // ctx already ended
		if !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "actors: request to gated:") {
			t.Fatalf("Request on a full mailbox = %v, want \"actors: request to gated: ...\" wrapping DeadlineExceeded", err)
		}
	})
}

func TestRequestHonoursDeadlineWithoutReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		rec := newRecorder(1)
		ref, err := sys.Spawn("silent", rec.producer) // never responds
		if err != nil {
			t.Fatalf("Spawn: %v", err)
		}
		const d = 2 * time.Second
		ctx, cancel := context.WithTimeout(t.Context(), d)
		defer cancel()
		start := time.Now()
		reply, err := ref.Request(ctx, "ping")
		if !errors.Is(err, context.DeadlineExceeded) || reply != nil {
			t.Fatalf("Request without a reply = (%v, %v), want (nil, DeadlineExceeded)", reply, err)
		}
		if elapsed := time.Since(start); elapsed != d {
			t.Errorf("Request returned after %v, want the %v deadline", elapsed, d)
		}
		rec.expect(t, "ping") // it was delivered, just never answered
	})
}

func TestPanicRestartsActorWithFreshState(t *testing.T) {
	sys := newSystem(t)
	ctx := timeout(t)
	ref, err := sys.Spawn("fragile", func() actor.Actor { return &counter{} })
	if err != nil {
		t.Fatalf("Spawn: %v", err)
	}
	for _, m := range []any{add(5), "boom", add(2)} {
		if err := ref.Send(ctx, m); err != nil {
			t.Fatalf("Send(%v): %v", m, err)
		}
	}
	reply, err := ref.Request(ctx, get{})
	if err != nil || reply != 2 {
		t.Fatalf("Request after a panic = (%v, %v), want (2, nil): restarted with fresh state, later messages kept", reply, err)
	}
}

// parent spawns one child on start; "boom" makes the child panic.
type parent struct {
	child      *actor.PID
	terminated chan<- string
}

func (p *parent) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		p.child = c.Spawn(actor.PropsFromFunc(func(c actor.Context) {
			if c.Message() == "boom" {
				panic("boom")
			}
		}))
	case string:
		c.Send(p.child, m)
	case *actor.Terminated: // protoactor tells a parent when a child stops
		p.terminated <- m.Who.Id
	}
}

func TestSupervisorGovernsChildren(t *testing.T) {
	sys := newSystem(t)
	terminated := make(chan string, 1)
	p := &parent{terminated: terminated}
	stopOnFailure, err := supervision.NewStrategy(supervision.WithDecider(func(error) supervision.Directive { return supervision.Stop }))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := sys.Spawn("parent", func() actor.Actor { return p }, actors.SuperviseChildren(stopOnFailure))
	if err != nil {
		t.Fatalf("Spawn: %v", err)
	}
	if err := ref.TrySend("boom"); err != nil {
		t.Fatalf("TrySend: %v", err)
	}
	// With protoactor's default strategy the child would be restarted and
	// no Terminated would arrive.
	select {
	case who := <-terminated:
		if who != p.child.Id {
			t.Fatalf("Terminated for %q, want the child %q", who, p.child.Id)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the failing child was not stopped by the parent's supervisor strategy")
	}
}

func TestStopThenSystemStop(t *testing.T) {
	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		t.Fatalf("NewSystem: %v", err)
	}
	ctx := timeout(t)
	rec := newRecorder(1)
	ref, err := sys.Spawn("worker", rec.producer)
	if err != nil {
		t.Fatalf("Spawn: %v", err)
	}
	if err := ref.Stop(ctx); err != nil {
		t.Fatalf("Ref.Stop = %v", err)
	}
	select {
	case <-rec.stopped: // Stop returned only after the actor had stopped
	default:
		t.Fatal("Ref.Stop returned before the actor received *actor.Stopped")
	}
	if err := ref.TrySend("x"); !errors.Is(err, mailbox.ErrClosed) {
		t.Errorf("TrySend after Stop = %v, want ErrClosed", err)
	}
	if err := ref.Send(ctx, "x"); !errors.Is(err, mailbox.ErrClosed) {
		t.Errorf("Send after Stop = %v, want ErrClosed", err)
	}
	if _, err := ref.Request(ctx, get{}); !errors.Is(err, mailbox.ErrClosed) {
		t.Errorf("Request after Stop = %v, want ErrClosed", err)
	}
	// Stopping a stopped actor returns at once (protoactor answers the
	// watch of a dead PID with Terminated, through its dead letters).
	if err := ref.Stop(ctx); err != nil {
		t.Errorf("second Ref.Stop = %v, want nil", err)
	}

	if err := sys.Stop(ctx); err != nil {
		t.Fatalf("System.Stop = %v", err)
	}
	if err := sys.Stop(ctx); err != nil {
		t.Errorf("second System.Stop = %v, want nil (idempotent)", err)
	}
	if _, err := sys.Spawn("late", rec.producer); !errors.Is(err, actors.ErrStopped) {
		t.Errorf("Spawn after System.Stop = %v, want ErrStopped", err)
	}
	if _, err := sys.Run(ctx, &fakeJob{name: "late", exec: newFakeExec()}); !errors.Is(err, actors.ErrStopped) {
		t.Errorf("Run after System.Stop = %v, want ErrStopped", err)
	}
}

func TestStopHonoursDeadline(t *testing.T) {
	// Real time, not a synctest bubble: when the actor finally stops, its
	// Terminated goes to the watcher that Stop already removed, a dead letter
	// whose throttle goroutine would outlive the bubble (see TestMain).
	sys := newSystem(t)
	rec := newRecorder(1)
	ref, err := sys.Spawn("busy", rec.producer)
	if err != nil {
		t.Fatalf("Spawn: %v", err)
	}
	release := hold(t, ref) // the actor cannot process its Stop while held

	const d = 50 * time.Millisecond
	start := time.Now() // before the deadline is computed
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	err = ref.Stop(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "actors: stop busy:") {
		t.Fatalf("Stop of a busy actor = %v, want \"actors: stop busy: ...\" wrapping DeadlineExceeded", err)
	}
	if elapsed := time.Since(start); elapsed < d {
		t.Errorf("Stop returned after %v, before the %v deadline", elapsed, d)
	}
	release()
	select {
	case <-rec.stopped: // the Stop is still carried out
	case <-time.After(waitTimeout):
		t.Fatal("actor did not stop after it was released")
	}
}

func TestSpawnRejectsBadArguments(t *testing.T) {
	sys := newSystem(t)
	producer := func() actor.Actor { return &counter{} }
	tests := []struct {
		name     string
		producer func() actor.Actor
		opts     []actors.SpawnOption
		want     string
	}{
		{"zero", producer, []actors.SpawnOption{actors.Capacity(0)}, `actors: spawn "zero": mailbox: capacity 0: must be at least 1`},
		{"negative", producer, []actors.SpawnOption{actors.Capacity(-3)}, `actors: spawn "negative": mailbox: capacity -3: must be at least 1`},
		{"nil", nil, nil, `actors: spawn "nil": nil producer`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ref, err := sys.Spawn(tt.name, tt.producer, tt.opts...)
			if err == nil || err.Error() != tt.want || ref != nil {
				t.Fatalf("Spawn = (%v, %v), want (nil, %q)", ref, err, tt.want)
			}
		})
	}
	// A refused spawn does not take the name.
	if _, err := sys.Spawn("zero", producer); err != nil {
		t.Fatalf("Spawn(zero) with a valid capacity: %v", err)
	}
}

func TestSpawnDuplicateName(t *testing.T) {
	sys := newSystem(t)
	ctx := timeout(t)
	first, err := sys.Spawn("only", func() actor.Actor { return &counter{n: 1} })
	if err != nil {
		t.Fatalf("Spawn: %v", err)
	}
	second, err := sys.Spawn("only", func() actor.Actor { return &counter{n: 2} })
	if !errors.Is(err, actor.ErrNameExists) || second != nil {
		t.Fatalf("second Spawn(only) = (%v, %v), want (nil, an error wrapping actor.ErrNameExists)", second, err)
	}
	if want := `actors: spawn "only": spawn: name exists`; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	// The first actor is untouched.
	if reply, err := first.Request(ctx, get{}); err != nil || reply != 1 {
		t.Fatalf("first actor's Request = (%v, %v), want (1, nil)", reply, err)
	}
}

func TestEnvelopeKinds(t *testing.T) {
	tests := []struct {
		kind    actors.Kind
		name    string
		control bool
	}{
		{actors.Data, "data", false},
		{actors.EndOfStream, "end-of-stream", true},
		{actors.Barrier, "barrier", true},
		{actors.Watermark, "watermark", true},
		{actors.Kind(9), "kind(9)", true},
	}
	for _, tt := range tests {
		if got := tt.kind.String(); got != tt.name {
			t.Errorf("Kind(%d).String() = %q, want %q", uint8(tt.kind), got, tt.name)
		}
		if got := (&actors.Envelope{Kind: tt.kind}).IsControl(); got != tt.control {
			t.Errorf("Envelope{Kind: %v}.IsControl() = %v, want %v", tt.kind, got, tt.control)
		}
	}
}

func TestControlEnvelopesBypassCapacity(t *testing.T) {
	sys := newSystem(t)
	rec := newRecorder(8)
	ref, err := sys.Spawn("operator", rec.producer, actors.Capacity(1))
	if err != nil {
		t.Fatalf("Spawn: %v", err)
	}
	release := hold(t, ref)
	data := &actors.Envelope{Kind: actors.Data, Count: 3}
	if err := ref.TrySend(data); err != nil {
		t.Fatalf("TrySend(data) = %v", err)
	}
	if err := ref.TrySend(&actors.Envelope{Kind: actors.Data}); !errors.Is(err, mailbox.ErrFull) {
		t.Fatalf("second TrySend(data) = %v, want ErrFull", err)
	}
	barrier := &actors.Envelope{Kind: actors.Barrier, Mark: 7}
	watermark := &actors.Envelope{Kind: actors.Watermark, Mark: 1000}
	eos := &actors.Envelope{Kind: actors.EndOfStream}
	for _, env := range []*actors.Envelope{barrier, watermark, eos} {
		if err := ref.TrySend(env); err != nil {
			t.Fatalf("TrySend(%v) on a full mailbox = %v, want nil", env.Kind, err)
		}
	}
	release()
	rec.expect(t, data, barrier, watermark, eos)
}

func TestNewSystemDefaults(t *testing.T) {
	sys := newSystem(t)
	if sys.Name() != "sluice" || sys.Config().Name != "sluice" {
		t.Errorf("Name = %q, Config().Name = %q, want the default %q", sys.Name(), sys.Config().Name, "sluice")
	}
	if sys.Logger() == nil || sys.Tracer("t") == nil || sys.Meter("m") == nil {
		t.Error("default Logger, Tracer or Meter is nil")
	}
	if sys.ActorSystem() == nil || sys.Root() == nil || sys.Root() == sys.ActorSystem().Root {
		t.Error("Root must be sluice's own root context, not the shared sys.Root")
	}

	named, err := actors.NewSystem(actors.Config{Name: "edge"})
	if err != nil {
		t.Fatalf("NewSystem: %v", err)
	}
	defer named.Stop(timeout(t))
	if named.Name() != "edge" {
		t.Errorf("Name = %q, want %q", named.Name(), "edge")
	}
}

// fakeExec is an Execution whose behaviour the test chooses.
type fakeExec struct {
	done     chan struct{}
	once     sync.Once
	err      error           // set before done is closed
	onDrain  func(*fakeExec) // nil: Drain is ignored
	drains   atomic.Int32
	aborts   atomic.Int32
	opStats  []actors.OperatorStats
	finished atomic.Bool
}

var errAborted = errors.New("aborted")

func newFakeExec() *fakeExec { return &fakeExec{done: make(chan struct{})} }

func (e *fakeExec) finish(err error) {
	e.once.Do(func() {
		e.err = err
		e.finished.Store(true)
		close(e.done)
	})
}

func (e *fakeExec) Done() <-chan struct{}         { return e.done }
func (e *fakeExec) Err() error                    { <-e.done; return e.err }
func (e *fakeExec) Stats() []actors.OperatorStats { return e.opStats }
func (e *fakeExec) Abort()                        { e.aborts.Add(1); e.finish(errAborted) }
func (e *fakeExec) Drain() {
	e.drains.Add(1)
	if e.onDrain != nil {
		e.onDrain(e)
	}
}

func drainsCleanly(e *fakeExec) { e.finish(nil) }

type fakeJob struct {
	name     string
	exec     *fakeExec
	startErr error
	sys      *actors.System // the system Start was given
}

func (j *fakeJob) Name() string { return j.name }

func (j *fakeJob) Start(_ context.Context, sys *actors.System) (actors.Execution, error) {
	j.sys = sys
	if j.startErr != nil {
		return nil, j.startErr
	}
	return j.exec, nil
}

func TestRunWaitReturnsOutcome(t *testing.T) {
	sys := newSystem(t)
	ctx := timeout(t)
	errJob := errors.New("sink failed")
	exec := newFakeExec()
	exec.opStats = []actors.OperatorStats{{Name: "src", Kind: "source", In: 0, Out: 3}}
	job := &fakeJob{name: "etl", exec: exec}
	run, err := sys.Run(ctx, job)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if job.sys != sys {
		t.Error("Job.Start was not given the system")
	}
	if run.Name() != "etl" || len(run.Stats()) != 1 || run.Stats()[0].Out != 3 {
		t.Errorf("Name = %q, Stats = %+v, want the job's", run.Name(), run.Stats())
	}
	exec.finish(errJob) // the job ends by itself
	if err := run.Wait(ctx); !errors.Is(err, errJob) {
		t.Fatalf("Wait = %v, want the job's error", err)
	}
	select {
	case <-run.Done():
	default:
		t.Fatal("Done not closed after Wait returned")
	}
	if exec.drains.Load() != 0 || exec.aborts.Load() != 0 {
		t.Errorf("drains %d, aborts %d; Wait must not touch the job", exec.drains.Load(), exec.aborts.Load())
	}
}

func TestRunWaitHonoursDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		exec := newFakeExec()
		run, err := sys.Run(t.Context(), &fakeJob{name: "long", exec: exec})
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		const d = 3 * time.Second
		ctx, cancel := context.WithTimeout(t.Context(), d)
		defer cancel()
		err = run.Wait(ctx)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), `actors: wait for "long":`) {
			t.Fatalf("Wait = %v, want `actors: wait for \"long\": ...` wrapping DeadlineExceeded", err)
		}
		if exec.finished.Load() || exec.aborts.Load() != 0 {
			t.Fatal("Wait's deadline must leave the job running")
		}
		if got := run.Elapsed(); got != d {
			t.Errorf("Elapsed = %v, want %v", got, d)
		}
		if err := run.Stop(t.Context()); err != nil {
			t.Fatalf("Stop = %v", err)
		}
	})
}

func TestRunDrain(t *testing.T) {
	sys := newSystem(t)
	ctx := timeout(t)
	exec := newFakeExec()
	exec.onDrain = drainsCleanly
	run, err := sys.Run(ctx, &fakeJob{name: "drainable", exec: exec})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := run.Drain(ctx); err != nil {
		t.Fatalf("Drain = %v, want nil", err)
	}
	if exec.drains.Load() != 1 || exec.aborts.Load() != 0 {
		t.Fatalf("drains %d, aborts %d, want 1, 0", exec.drains.Load(), exec.aborts.Load())
	}
}

func TestRunDrainTimeoutStopsJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		exec := newFakeExec() // ignores Drain
		run, err := sys.Run(t.Context(), &fakeJob{name: "stuck", exec: exec})
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		const d = 5 * time.Second
		ctx, cancel := context.WithTimeout(t.Context(), d)
		defer cancel()
		start := time.Now()
		err = run.Drain(ctx)
		if !errors.Is(err, actors.ErrDrainTimeout) {
			t.Fatalf("Drain = %v, want ErrDrainTimeout", err)
		}
		if elapsed := time.Since(start); elapsed != d {
			t.Errorf("Drain returned after %v, want the %v deadline", elapsed, d)
		}
		if exec.drains.Load() != 1 || exec.aborts.Load() != 1 || !exec.finished.Load() {
			t.Fatalf("drains %d, aborts %d, finished %v; want the job asked to drain, then aborted and finished",
				exec.drains.Load(), exec.aborts.Load(), exec.finished.Load())
		}
	})
}

func TestRunStop(t *testing.T) {
	sys := newSystem(t)
	ctx := timeout(t)
	exec := newFakeExec()
	run, err := sys.Run(ctx, &fakeJob{name: "stoppable", exec: exec})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := run.Stop(ctx); err != nil {
		t.Fatalf("Stop = %v", err)
	}
	if exec.aborts.Load() != 1 || exec.drains.Load() != 0 || !exec.finished.Load() {
		t.Fatalf("aborts %d, drains %d, finished %v; want aborted without draining",
			exec.aborts.Load(), exec.drains.Load(), exec.finished.Load())
	}
}

func TestRunRefusesBadJobs(t *testing.T) {
	sys := newSystem(t)
	ctx := timeout(t)
	if run, err := sys.Run(ctx, nil); err == nil || run != nil {
		t.Fatalf("Run(nil) = (%v, %v), want an error", run, err)
	}
	errStart := errors.New("no such source")
	run, err := sys.Run(ctx, &fakeJob{name: "broken", startErr: errStart})
	if !errors.Is(err, errStart) || run != nil {
		t.Fatalf("Run with a failing Start = (%v, %v), want (nil, the start error)", run, err)
	}
	// The failed run is not tracked: System.Stop (in Cleanup) does not
	// touch it.
}

func TestSystemStopDrainsRunningJobs(t *testing.T) {
	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		t.Fatalf("NewSystem: %v", err)
	}
	ctx := timeout(t)
	errFlush := errors.New("flush failed")
	clean, failing := newFakeExec(), newFakeExec()
	clean.onDrain = drainsCleanly
	failing.onDrain = func(e *fakeExec) { e.finish(errFlush) }
	var runs []*actors.Run
	for i, exec := range []*fakeExec{clean, failing} {
		run, err := sys.Run(ctx, &fakeJob{name: fmt.Sprint("job", i), exec: exec})
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		runs = append(runs, run)
	}
	// Stop reports only whether everything stopped in time; a job's own
	// outcome is reported by its Run.
	if err := sys.Stop(ctx); err != nil {
		t.Fatalf("System.Stop = %v, want nil", err)
	}
	for i, exec := range []*fakeExec{clean, failing} {
		if exec.drains.Load() != 1 || exec.aborts.Load() > 1 || !exec.finished.Load() {
			t.Errorf("job%d: drains %d, aborts %d, finished %v; want drained and finished",
				i, exec.drains.Load(), exec.aborts.Load(), exec.finished.Load())
		}
	}
	if err := runs[0].Wait(ctx); err != nil {
		t.Errorf("clean job's Wait = %v, want nil", err)
	}
	if err := runs[1].Wait(ctx); !errors.Is(err, errFlush) {
		t.Errorf("failing job's Wait = %v, want its error", err)
	}
}

func TestSystemStopDeadlineAbortsJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys, err := actors.NewSystem(actors.Config{})
		if err != nil {
			t.Fatalf("NewSystem: %v", err)
		}
		exec := newFakeExec() // ignores Drain
		if _, err := sys.Run(t.Context(), &fakeJob{name: "stuck", exec: exec}); err != nil {
			t.Fatalf("Run: %v", err)
		}
		const d = 4 * time.Second
		ctx, cancel := context.WithTimeout(t.Context(), d)
		defer cancel()
		start := time.Now()
		err = sys.Stop(ctx)
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, actors.ErrDrainTimeout) {
			t.Fatalf("System.Stop = %v, want the context's error (not ErrDrainTimeout)", err)
		}
		if elapsed := time.Since(start); elapsed != d {
			t.Errorf("System.Stop returned after %v, want the %v deadline", elapsed, d)
		}
		if exec.aborts.Load() == 0 || !exec.finished.Load() {
			t.Fatal("a job that did not drain in time must be aborted")
		}
	})
}

// slowStartJob blocks in Start until released, to race System.Stop with Run.
type slowStartJob struct {
	started, release chan struct{}
	exec             *fakeExec
}

func (j *slowStartJob) Name() string { return "slow-start" }

func (j *slowStartJob) Start(context.Context, *actors.System) (actors.Execution, error) {
	close(j.started)
	<-j.release
	return j.exec, nil
}

func TestSystemStopDuringJobStart(t *testing.T) {
	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := timeout(t)
	j := &slowStartJob{started: make(chan struct{}), release: make(chan struct{}), exec: newFakeExec()}
	runErr := make(chan error, 1)
	go func() {
		_, err := sys.Run(ctx, j)
		runErr <- err
	}()
	<-j.started
	stopped := make(chan error, 1)
	go func() { stopped <- sys.Stop(ctx) }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Stop = %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Stop did not return")
	}
	close(j.release)
	select {
	case err := <-runErr:
		if !errors.Is(err, actors.ErrStopped) {
			t.Fatalf("Run that raced Stop = %v, want ErrStopped", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Run did not return")
	}
	if j.exec.aborts.Load() != 1 {
		t.Fatalf("the job that started after Stop was aborted %d times, want 1", j.exec.aborts.Load())
	}
}

func TestSystemStopStopsEmbeddedActors(t *testing.T) {
	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := timeout(t)
	rec := newRecorder(16)
	ref, err := sys.Spawn("held", rec.producer, actors.Capacity(1))
	if err != nil {
		t.Fatal(err)
	}
	release := hold(t, ref)
	if err := ref.TrySend("fills"); err != nil {
		t.Fatal(err)
	}
	sendErr := make(chan error, 1)
	go func() { sendErr <- ref.Send(ctx, "waits") }()
	stopped := make(chan error, 1)
	go func() { stopped <- sys.Stop(ctx) }()
	select {
	case err := <-sendErr:
		if !errors.Is(err, mailbox.ErrClosed) {
			t.Fatalf("Send blocked during System.Stop = %v, want ErrClosed", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Send blocked on a full mailbox was not woken by System.Stop")
	}
	release()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if err := ref.Send(ctx, "after"); !errors.Is(err, mailbox.ErrClosed) {
		t.Fatalf("Send after System.Stop = %v, want ErrClosed", err)
	}
}
