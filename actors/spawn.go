package actors

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/supervision"
)

// DefaultCapacity is the mailbox capacity of an actor spawned without the
// Capacity option.
const DefaultCapacity = 1024

// SpawnOption configures an actor spawned with System.Spawn.
type SpawnOption func(*spawnConfig)

type spawnConfig struct {
	mailbox        mailbox.Config
	self, children *supervision.Strategy
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

// Supervise says how the actor itself is supervised when it fails (a panic
// in Receive): s's directive (restart after its backoff, resume, stop,
// escalate) within its restart budget, on the System's clock; a spent
// budget stops the actor, and Ref.Err then gives the last failure. The
// default is protoactor's: restart at once, up to 10 times in 10 s.
func Supervise(s supervision.Strategy) SpawnOption {
	return func(c *spawnConfig) { c.self = &s }
}

// SuperviseChildren says how the actor supervises the children it spawns
// itself (with its actor.Context), on the System's clock. The default is
// protoactor's: restart at once, up to 10 times in 10 s.
func SuperviseChildren(s supervision.Strategy) SpawnOption {
	return func(c *spawnConfig) { c.children = &s }
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
	ref := &Ref{sys: s, name: name, spill: cfg.mailbox.Overflow == mailbox.OverflowSpill,
		done: make(chan struct{}), requests: map[string]*actor.PID{}}
	mbProducer, err := cfg.mailbox.Producer(func(mb *mailbox.Mailbox) {
		ref.mb.Store(mb)
	})
	if err != nil {
		return nil, fmt.Errorf("actors: spawn %q: %w", name, err)
	}
	// The actor always has a guardian of ours: it sees every failure's
	// reason (for Ref.Err, and to fail the request that caused it) before
	// the strategy decides.
	own := actor.NewOneForOneStrategy(10, 10*time.Second, actor.DefaultDecider)
	if cfg.self != nil {
		own = supervision.ForActors(*cfg.self, s.cfg.Clock)
	}
	props := actor.PropsFromProducer(producer, actor.WithMailbox(mbProducer),
		actor.WithGuardian(observed{inner: own, ref: ref}))
	if cfg.children != nil {
		props.Configure(actor.WithSupervisor(supervision.ForActors(*cfg.children, s.cfg.Clock)))
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
	ref.watch()
	return ref, nil
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
