package actors_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/persistence"
)

// A request waits with a context that has no deadline for an event-sourced
// actor whose recovery always fails (an event type nobody registered):
// protoactor's default supervision restarts it 10 times and stops it, and
// the request returns at once with the *persistence.RecoveryError, as do
// Done and Err.
func TestRequestFailsWithTheRecoveryError(t *testing.T) {
	sys := newSystem(t)
	journal := persistence.NewMemoryJournal()
	if err := journal.Append(context.Background(), "acct", []persistence.Event{{Seq: 1, Type: "renamed", Data: []byte{0x80}}}); err != nil {
		t.Fatal(err)
	}
	p, err := persistence.EventSourced(persistence.Behavior[int, int, int]{
		ID: "acct", Journal: journal, Events: persistence.NewRegistry().Register("added", 0),
		Handle: func(s int, c int) ([]int, any, error) { return []int{c}, nil, nil },
		Apply:  func(s int, e int) int { return s + e },
	})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := sys.Spawn("acct", p)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() {
		_, err := ref.Request(context.Background(), 5) // no deadline: only the actor's end can end it
		got <- result{err, time.Now()}
	}()
	var ended time.Time
	select {
	case <-ref.Done():
		ended = time.Now()
	case <-time.After(waitTimeout):
		t.Fatal("the actor whose recovery fails never ended")
	}
	var r result
	select {
	case r = <-got:
	case <-time.After(waitTimeout):
		t.Fatal("the request did not return after the actor ended")
	}
	var re *persistence.RecoveryError
	if !errors.As(r.err, &re) || re.ID != "acct" || re.Seq != 1 {
		t.Fatalf("request: %v, want the *persistence.RecoveryError of acct at seq 1", r.err)
	}
	if d := r.at.Sub(ended); d > 100*time.Millisecond {
		t.Errorf("the request returned %v after the actor ended, want within 100 ms", d)
	}
	var failed *actors.FailedError
	if !errors.As(ref.Err(), &failed) || !errors.As(ref.Err(), &re) {
		t.Fatalf("Err() = %v, want a *FailedError wrapping the RecoveryError", ref.Err())
	}
	t.Logf("request: %v (%v after the end)", r.err, r.at.Sub(ended))
}

// blocker blocks on its first "block" until released, and never answers
// "get".
type blocker struct {
	blocked chan struct{}
	release chan struct{}
}

func (b *blocker) Receive(c actor.Context) {
	switch c.Message() {
	case "block":
		close(b.blocked)
		<-b.release
	}
}

// A request queued behind a message the actor is busy with fails with the
// stop when the actor is stopped meanwhile; Done closes and Err says it
// was stopped.
func TestRequestFailsWhenTheActorIsStopped(t *testing.T) {
	sys := newSystem(t)
	b := &blocker{blocked: make(chan struct{}), release: make(chan struct{})}
	ref, err := sys.Spawn("blocker", func() actor.Actor { return b })
	if err != nil {
		t.Fatal(err)
	}
	if err := ref.TrySend("block"); err != nil {
		t.Fatal(err)
	}
	<-b.blocked
	got := make(chan error, 1)
	go func() {
		_, err := ref.Request(context.Background(), "get")
		got <- err
	}()
	for ref.Stats().Depth == 0 { // the request is in the mailbox
		select {
		case err := <-got:
			t.Fatalf("the request returned %v before it was queued", err)
		case <-time.After(time.Millisecond):
		}
	}
	stopped := make(chan error, 1)
	go func() { stopped <- ref.Stop(context.Background()) }()
	close(b.release) // "get" is never answered: only the stop can end the request
	select {
	case err := <-got:
		if !errors.Is(err, actors.ErrActorStopped) {
			t.Fatalf("request: %v, want ErrActorStopped", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the request did not fail when the actor stopped")
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	select {
	case <-ref.Done():
	default:
		t.Fatal("Done is open after Stop")
	}
	if !errors.Is(ref.Err(), actors.ErrActorStopped) {
		t.Fatalf("Err() = %v, want ErrActorStopped", ref.Err())
	}
}

// panicker panics on "boom" and answers "get" with its count of messages.
type panicker struct{ n int }

func (p *panicker) Receive(c actor.Context) {
	switch c.Message() {
	case "boom":
		panic(errBoom)
	case "get":
		p.n++
		c.Respond(p.n)
	}
}

var errBoom = errors.New("boom")

// A request whose message makes the actor panic fails at once with the
// panic's reason; the actor restarts and answers the next one.
func TestRequestFailsWithThePanic(t *testing.T) {
	sys := newSystem(t)
	ref, err := sys.Spawn("panicker", func() actor.Actor { return &panicker{} })
	if err != nil {
		t.Fatal(err)
	}
	ctx := timeout(t)
	_, err = ref.Request(ctx, "boom")
	var rf *actors.RequestFailedError
	if !errors.As(err, &rf) || !errors.Is(err, errBoom) {
		t.Fatalf("request boom: %v, want a RequestFailedError wrapping the panic", err)
	}
	if n, err := actors.Ask[int](ctx, ref, "get"); err != nil || n != 1 {
		t.Fatalf("after the restart: %v, %v; want 1 (state reset)", n, err)
	}
	if _, err := actors.Ask[string](ctx, ref, "get"); err == nil {
		t.Fatal("Ask[string] of an int reply succeeded")
	}
	select {
	case <-ref.Done():
		t.Fatalf("the actor ended: %v", ref.Err())
	default:
	}
}

// An actor whose mailbox spills takes no requests, and says why.
func TestRequestThroughSpillIsRefused(t *testing.T) {
	sys := newSystem(t)
	st, err := sys.SpillStore()
	if err != nil {
		t.Fatal(err)
	}
	ref, err := sys.Spawn("spiller", func() actor.Actor { return &panicker{} },
		actors.Mailbox(mailbox.Spill(4, mailbox.SpillOptions{Store: st, Queue: "spiller", Codec: mailbox.NewTypeCodec().Register("s", "")})))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ref.Request(timeout(t), "get"); !errors.Is(err, actors.ErrRequestThroughSpill) {
		t.Fatalf("request: %v, want ErrRequestThroughSpill", err)
	}
}

// hangingJournal is a journal whose appends hang until their context ends.
type hangingJournal struct {
	persistence.Journal
	appending chan struct{}
}

func (j *hangingJournal) Append(ctx context.Context, id string, events []persistence.Event) error {
	close(j.appending)
	<-ctx.Done()
	return context.Cause(ctx)
}

// An event-sourced actor's I/O runs under the System's lifetime: a journal
// write that hangs is interrupted by System.Stop, which returns in time,
// and the request waiting for the write fails.
func TestSystemStopInterruptsAHungWrite(t *testing.T) {
	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		t.Fatal(err)
	}
	j := &hangingJournal{Journal: persistence.NewMemoryJournal(), appending: make(chan struct{})}
	p, err := persistence.EventSourced(persistence.Behavior[int, int, int]{
		ID: "acct", Journal: j, Events: persistence.NewRegistry().Register("added", 0),
		Handle: func(s int, c int) ([]int, any, error) { return []int{c}, nil, nil },
		Apply:  func(s int, e int) int { return s + e }, // no Context: the System's lifetime
	})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := sys.Spawn("acct", p)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := ref.Request(context.Background(), 5)
		got <- err
	}()
	<-j.appending
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := sys.Stop(ctx); err != nil {
		t.Fatalf("System.Stop with a hung write: %v", err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, actors.ErrStopped) {
			t.Fatalf("request: %v, want the write's error: the system stopped", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the request did not end")
	}
}
