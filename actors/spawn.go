package actors

import (
	"context"
	"fmt"
	"sync"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/mailbox"
)

// DefaultCapacity is the mailbox capacity of an actor spawned without the
// Capacity option.
const DefaultCapacity = 1024

// SpawnOption configures an actor spawned with System.Spawn.
type SpawnOption func(*spawnConfig)

type spawnConfig struct {
	mailbox    mailbox.Config
	supervisor actor.SupervisorStrategy
	guardian   actor.SupervisorStrategy
}

// Capacity sets the capacity of the actor's bounded mailbox (default
// DefaultCapacity). With the default Block policy, Ref.Send waits while it
// is full and Ref.TrySend fails with mailbox.ErrFull.
func Capacity(n int) SpawnOption { return func(c *spawnConfig) { c.mailbox.Capacity = n } }

// Mailbox sets the actor's whole mailbox configuration: its capacity and
// overflow policy (mailbox.Block, DropNewest, DropOldest, Spill, Sample,
// Throttle). Under a policy other than Block, Send never waits, and returns
// an error wrapping mailbox.ErrDropped when the policy discarded the message.
func Mailbox(cfg mailbox.Config) SpawnOption { return func(c *spawnConfig) { c.mailbox = cfg } }

// Supervisor sets the protoactor supervisor strategy that governs the actor's
// children. The actor itself is supervised by the System: a panic restarts it
// (protoactor's default, state reset; the failing message is lost).
func Supervisor(s actor.SupervisorStrategy) SpawnOption {
	return func(c *spawnConfig) { c.supervisor = s }
}

// Supervise sets how the actor itself is supervised when it fails (a panic
// in Receive). The default is protoactor's: restart, up to 10 times in 10 s.
// supervision.ForActors turns a supervision.Strategy (exponential backoff
// with jitter, a restart budget, resume / restart / stop / escalate) into
// one.
func Supervise(s actor.SupervisorStrategy) SpawnOption {
	return func(c *spawnConfig) { c.guardian = s }
}

// Ref is a handle to an actor spawned on a System.
type Ref struct {
	sys *System
	pid *actor.PID

	mu sync.Mutex
	mb *mailbox.Mailbox // replaced if protoactor builds a new mailbox
}

// Spawn starts an actor named name. Names are unique within the system.
func (s *System) Spawn(name string, producer func() actor.Actor, opts ...SpawnOption) (*Ref, error) {
	if producer == nil {
		return nil, fmt.Errorf("actors: spawn %q: nil producer", name)
	}
	cfg := spawnConfig{mailbox: mailbox.Config{Capacity: DefaultCapacity}}
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.mailbox.Validate(); err != nil {
		return nil, fmt.Errorf("actors: spawn %q: %w", name, err)
	}
	if s.isStopped() {
		return nil, fmt.Errorf("actors: spawn %q: %w", name, ErrStopped)
	}
	ref := &Ref{sys: s}
	mbProducer, err := cfg.mailbox.Producer(func(mb *mailbox.Mailbox) {
		ref.mu.Lock()
		ref.mb = mb
		ref.mu.Unlock()
	})
	if err != nil {
		return nil, fmt.Errorf("actors: spawn %q: %w", name, err)
	}
	props := actor.PropsFromProducer(producer, actor.WithMailbox(mbProducer))
	if cfg.supervisor != nil {
		props.Configure(actor.WithSupervisor(cfg.supervisor))
	}
	if cfg.guardian != nil {
		props.Configure(actor.WithGuardian(cfg.guardian))
	}
	pid, err := s.root.SpawnNamed(props, name)
	if err != nil {
		return nil, fmt.Errorf("actors: spawn %q: %w", name, err)
	}
	ref.pid = pid
	if err := s.trackRef(ref); err != nil { // the system stopped meanwhile
		_ = stopAndWait(context.Background(), s.root, pid)
		return nil, fmt.Errorf("actors: spawn %q: %w", name, err)
	}
	return ref, nil
}

// PID returns the actor's protoactor PID, for sends from inside other actors.
func (r *Ref) PID() *actor.PID { return r.pid }

func (r *Ref) mailbox() *mailbox.Mailbox {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mb
}

// Send delivers msg, waiting while the mailbox is full until ctx ends. Call
// it from application goroutines, never from inside an actor's Receive (use
// the actor.Context's Send there).
func (r *Ref) Send(ctx context.Context, msg any) error {
	if err := r.mailbox().Put(ctx, msg); err != nil {
		return fmt.Errorf("actors: send to %s: %w", r.pid.Id, err)
	}
	return nil
}

// TrySend delivers msg if the mailbox has room and returns an error wrapping
// mailbox.ErrFull otherwise.
func (r *Ref) TrySend(msg any) error {
	if err := r.mailbox().TryPut(msg); err != nil {
		return fmt.Errorf("actors: send to %s: %w", r.pid.Id, err)
	}
	return nil
}

// Request sends msg with a reply address and waits for the actor's
// ctx.Respond, until ctx ends. It waits for mailbox room like Send.
func (r *Ref) Request(ctx context.Context, msg any) (any, error) {
	reply := make(chan any, 1)
	tmp := r.sys.root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case actor.SystemMessage, actor.AutoReceiveMessage:
		default:
			select {
			case reply <- m:
			default: // a second reply is not wanted
			}
		}
	}))
	defer r.sys.root.Stop(tmp)
	env := &actor.MessageEnvelope{Message: msg, Sender: tmp}
	if err := r.mailbox().Put(ctx, env); err != nil {
		return nil, fmt.Errorf("actors: request to %s: %w", r.pid.Id, err)
	}
	select {
	case v := <-reply:
		return v, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("actors: request to %s: %w", r.pid.Id, context.Cause(ctx))
	}
}

// Stats returns the actor's mailbox statistics.
func (r *Ref) Stats() mailbox.Stats { return r.mailbox().Stats() }

// Stop stops the actor and waits until it has stopped or ctx ends.
func (r *Ref) Stop(ctx context.Context) error {
	if err := stopAndWait(ctx, r.sys.root, r.pid); err != nil {
		return err
	}
	r.sys.untrackRef(r)
	return nil
}

// stopAndWait stops pid and waits for its Terminated through a short-lived
// watcher actor, so that no goroutine outlives the call.
func stopAndWait(ctx context.Context, root *actor.RootContext, pid *actor.PID) error {
	done := make(chan struct{})
	var once sync.Once
	w := root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case *actor.Started:
			c.Watch(pid)
			c.Stop(pid)
		case *actor.Terminated:
			if m.Who.Equal(pid) {
				once.Do(func() { close(done) })
			}
		}
	}))
	defer root.Stop(w)
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("actors: stop %s: %w", pid.Id, context.Cause(ctx))
	}
}
