package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/extensions"
	bolt "go.etcd.io/bbolt"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/workers"
	"github.com/sluicehq/sluice/mailbox"
)

// ErrStopped is returned by operations on a System that has been stopped.
var ErrStopped = errors.New("actors: system stopped")

// Config configures a System. The zero value is valid: no logging, no-op
// telemetry, no store.
type Config struct {
	// Name identifies the system in logs and telemetry. Default "sluice".
	Name string
	// Logger receives the system's logs, protoactor's included. Default:
	// warnings and errors (an actor's failures, a supervisor's final stop)
	// as text on standard error.
	Logger *slog.Logger
	// TracerProvider and MeterProvider are used for spans and metrics.
	// Default: no-op providers; sluice never reads the global ones.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// Clock is the time of the system's timers: supervision backoffs and
	// restart budgets, jobs' checkpoints and restarts. Default clock.Real().
	Clock clock.Clock
	// Store is the path of the bbolt file that holds durable state (spilled
	// messages now; journals and snapshots with persistence). It is created
	// with mode 0600; a file written by another program, by a newer sluice or
	// damaged is refused by NewSystem. Empty means a temporary store, created
	// when first needed and removed by Stop.
	Store string
}

// System hosts actors and jobs. Create it with NewSystem and stop it with Stop.
type System struct {
	cfg  Config
	log  *slog.Logger
	sys  *actor.ActorSystem
	root *actor.RootContext

	storeMu sync.Mutex
	file    *store.File
	tempDir string // of a temporary store, removed by Stop
	spill   *mailbox.SpillStore

	pool *workers.Pool // the dispatcher of topologies' operator instances

	life    context.Context // ended by Stop: the lifetime of actors' I/O
	endLife context.CancelCauseFunc

	mu      sync.Mutex
	stopped bool
	runs    map[*Run]struct{}
	refs    map[*Ref]struct{} // embedded actors spawned with Spawn
}

// NewSystem validates cfg and starts a System.
func NewSystem(cfg Config) (*System, error) {
	if cfg.Name == "" {
		cfg.Name = "sluice"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = tracenoop.NewTracerProvider()
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = metricnoop.NewMeterProvider()
	}
	log := cfg.Logger.With("system", cfg.Name)
	sys := actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return log.With("lib", "protoactor") }),
	)
	s := &System{
		cfg:  cfg,
		log:  log,
		sys:  sys,
		root: actor.NewRootContext(sys, nil),
		pool: workers.New(300, 0), // protoactor's default throughput
		runs: make(map[*Run]struct{}),
		refs: make(map[*Ref]struct{}),
	}
	s.life, s.endLife = context.WithCancelCause(context.Background())
	sys.Extensions.Register(&lifetime{ctx: s.life})
	if cfg.Store != "" {
		f, err := store.Open(cfg.Store)
		if err != nil {
			s.endLife(err)
			sys.Shutdown()
			return nil, fmt.Errorf("actors: %w", err)
		}
		s.file = f
	}
	return s, nil
}

// Name returns the system's name.
func (s *System) Name() string { return s.cfg.Name }

// Logger returns the system's logger.
func (s *System) Logger() *slog.Logger { return s.log }

// Tracer returns a tracer from the system's provider.
func (s *System) Tracer(name string) trace.Tracer { return s.cfg.TracerProvider.Tracer(name) }

// Meter returns a meter from the system's provider.
func (s *System) Meter(name string) metric.Meter { return s.cfg.MeterProvider.Meter(name) }

// ActorSystem exposes the underlying protoactor-go system for code that
// needs protoactor directly (remote, cluster). Do not add middleware or
// headers to its shared Root context.
func (s *System) ActorSystem() *actor.ActorSystem { return s.sys }

// Root returns sluice's own root context (not the shared sys.Root).
func (s *System) Root() *actor.RootContext { return s.root }

// Dispatcher is the dispatcher a topology's operator instances run on: it
// reuses goroutines (whose stacks are already grown) where protoactor's
// default starts one for every scheduling of a mailbox. Embedded actors
// (Spawn) keep protoactor's default: one actor fed by Ref.Send measured
// slower on the pool (benchmarks/RESULTS.md, session 9). Stop ends its idle
// goroutines.
func (s *System) Dispatcher() actor.Dispatcher { return s.pool }

// Context is the system's lifetime: it ends when Stop is called, with
// ErrStopped as its cause. Actors' I/O (journals, snapshots) runs under it,
// so that Stop interrupts a write that hangs.
func (s *System) Context() context.Context { return s.life }

// Lifetime returns the lifetime (System.Context) of the System that owns
// the protoactor actor system as, for code that runs inside an actor
// (ctx.ActorSystem()); context.Background() for an actor system that no
// System owns.
func Lifetime(as *actor.ActorSystem) context.Context {
	if as != nil {
		if l, ok := as.Extensions.Get(lifetimeID).(*lifetime); ok {
			return l.ctx
		}
	}
	return context.Background()
}

// lifetime is the protoactor extension that carries a System's Context.
type lifetime struct{ ctx context.Context }

// lifetimeID is the extension's slot in protoactor's Extensions, allocated
// once as protoactor's extensions are.
var lifetimeID = extensions.NextExtensionID()

func (*lifetime) ExtensionID() extensions.ExtensionID { return lifetimeID }

// Config returns the configuration the system runs with, defaults filled in.
func (s *System) Config() Config { return s.cfg }

// Stop drains every running job, stops every actor and shuts the actor
// system down. When ctx ends first, running jobs are stopped at once and the
// context's error is returned. Jobs' own outcomes are reported by their Run
// handles, not by Stop. Stop is idempotent.
func (s *System) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil
	}
	s.stopped = true
	runs := make([]*Run, 0, len(s.runs))
	for r := range s.runs {
		runs = append(runs, r)
	}
	refs := make([]*Ref, 0, len(s.refs))
	for r := range s.refs {
		refs = append(refs, r)
	}
	s.mu.Unlock()

	// A job's own outcome is reported through its Run; Stop reports only
	// whether everything stopped in time.
	for _, r := range runs {
		_ = r.Drain(ctx)
	}
	for _, r := range runs {
		r.exec.Abort()
		select {
		case <-r.exec.Done():
		case <-ctx.Done(): // a job stuck in user code: give up at the deadline
		}
	}
	// Embedded actors stop too; their mailboxes close, so that a producer
	// waiting in Ref.Send gets mailbox.ErrClosed.
	s.endLife(ErrStopped)
	for _, r := range refs {
		r.stopWith(ErrStopped)
		_ = r.Stop(ctx)
	}
	s.sys.Shutdown()
	s.pool.Stop()
	var errs []error
	if err := ctx.Err(); err != nil {
		errs = append(errs, fmt.Errorf("actors: stop: %w", err))
	}
	s.storeMu.Lock()
	if s.file != nil {
		if err := s.file.Close(); err != nil {
			errs = append(errs, fmt.Errorf("actors: stop: close store: %w", err))
		}
		s.file = nil
	}
	if s.tempDir != "" {
		if err := os.RemoveAll(s.tempDir); err != nil {
			errs = append(errs, fmt.Errorf("actors: stop: remove temporary store: %w", err))
		}
		s.tempDir = ""
	}
	s.storeMu.Unlock()
	return errors.Join(errs...)
}

// DB returns the system's store (bbolt), opening a temporary one when
// Config.Store is empty.
func (s *System) DB() (*bolt.DB, error) {
	s.storeMu.Lock()
	defer s.storeMu.Unlock()
	if s.file == nil {
		if s.isStopped() {
			return nil, ErrStopped
		}
		dir, err := os.MkdirTemp("", "sluice-store-")
		if err != nil {
			return nil, fmt.Errorf("actors: temporary store: %w", err)
		}
		f, err := store.Open(filepath.Join(dir, "store.db"))
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("actors: temporary store: %w", err)
		}
		// A temporary store is removed at Stop and never read after a
		// crash: syncing it to disk would buy nothing.
		f.DB.NoSync = true
		s.file, s.tempDir = f, dir
		s.log.Debug("temporary store", "path", f.Path)
	}
	return s.file.DB, nil
}

// SpillStore returns the spill queues in the system's store, for
// mailbox.Spill.
func (s *System) SpillStore() (*mailbox.SpillStore, error) {
	db, err := s.DB()
	if err != nil {
		return nil, err
	}
	s.storeMu.Lock()
	defer s.storeMu.Unlock()
	if s.spill == nil {
		s.spill = mailbox.NewSpillStore(db)
	}
	return s.spill, nil
}

func (s *System) track(r *Run) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return ErrStopped
	}
	s.runs[r] = struct{}{}
	return nil
}

func (s *System) isStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

func (s *System) trackRef(r *Ref) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return ErrStopped
	}
	s.refs[r] = struct{}{}
	return nil
}

func (s *System) untrackRef(r *Ref) {
	s.mu.Lock()
	delete(s.refs, r)
	s.mu.Unlock()
}

func (s *System) untrack(r *Run) {
	s.mu.Lock()
	delete(s.runs, r)
	s.mu.Unlock()
}
