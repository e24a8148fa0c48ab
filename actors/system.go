package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// ErrStopped is returned by operations on a System that has been stopped.
var ErrStopped = errors.New("actors: system stopped")

// Config configures a System. The zero value is valid: no logging, no-op
// telemetry, no store.
type Config struct {
	// Name identifies the system in logs and telemetry. Default "sluice".
	Name string
	// Logger receives the system's logs, protoactor's included. Default: a
	// logger that discards everything.
	Logger *slog.Logger
	// TracerProvider and MeterProvider are used for spans and metrics.
	// Default: no-op providers; sluice never reads the global ones.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// Store is the path of the bbolt file that holds durable state (journals,
	// snapshots, spilled messages). Empty means no durable state: jobs that
	// need it are refused. Persistence is not implemented yet; the path is
	// validated and kept for it.
	Store string
}

// System hosts actors and jobs. Create it with NewSystem and stop it with Stop.
type System struct {
	cfg  Config
	log  *slog.Logger
	sys  *actor.ActorSystem
	root *actor.RootContext

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
		cfg.Logger = slog.New(slog.DiscardHandler)
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
		runs: make(map[*Run]struct{}),
		refs: make(map[*Ref]struct{}),
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
		<-r.exec.Done()
	}
	// Embedded actors stop too; their mailboxes close, so that a producer
	// waiting in Ref.Send gets mailbox.ErrClosed.
	for _, r := range refs {
		_ = r.Stop(ctx)
	}
	s.sys.Shutdown()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("actors: stop: %w", err)
	}
	return nil
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
