package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/netaddr"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/internal/desired"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
)

// Errors of the Server's operations, for errors.Is.
var (
	// ErrInvalid: a bad argument (a nil run, a bad setting).
	ErrInvalid = errors.New("admin: invalid")
	// ErrNoJob: no job of that name was added.
	ErrNoJob = errors.New("admin: no such job")
	// ErrRefused: the job cannot make the change (see the message).
	ErrRefused = engine.ErrNoLiveChange
)

// Options configure a Server. The zero value serves a read-only API.
type Options struct {
	// Token is the bearer token that changes need. Empty: every change is
	// refused (the API is read only).
	Token string
	// AllowedHosts are host names (or addresses) the API answers to besides
	// loopback ones, as the Host header names them, without the port. Serve
	// adds the address it listens on when that is not loopback.
	AllowedHosts []string
	// Logger receives one line per change. Default: none.
	Logger *slog.Logger
	// TracerProvider, when set, records a span per change. Default: none.
	TracerProvider trace.TracerProvider
	// Clock stamps events and paces WatchFile. Default clock.Real().
	Clock clock.Clock
	// HistorySize is how many events each job keeps. Default 256.
	HistorySize int
	// ChangeTimeout bounds one change (every instance must answer).
	// Default 30 s.
	ChangeTimeout time.Duration
	// SavepointDir is the directory under which a savepoint request may
	// write a savepoint (it names a new subdirectory, never a path).
	// Empty: savepoint requests only take a checkpoint now.
	SavepointDir string
}

// Server is the control plane of one process's jobs: the admin API's
// Handler and the operations behind it.
type Server struct {
	opts   Options
	log    *slog.Logger
	tracer trace.Tracer

	mu   sync.Mutex
	jobs map[string]*job
	seq  int64

	ds desiredState
}

type job struct {
	run     *actors.Run
	history []Event // newest last, at most HistorySize

	// Restarts (rescale.go): the Starter, the parallelism overrides the
	// run was started with, a rescale under way, the error of one that
	// left no run, and the channel closed when the run is replaced.
	start      Starter
	par        map[string]int
	restarting bool
	restartErr error
	notify     chan struct{}
}

// Event is one change of a job (or an attempt): who asked, what, when,
// and whether it was applied.
type Event struct {
	Seq     int64     `json:"seq"`
	At      time.Time `json:"at"`
	Who     string    `json:"who"`
	Job     string    `json:"job"`
	What    string    `json:"what"` // set-input, pause, resume, savepoint, stop, rollback, desired
	Target  string    `json:"target,omitempty"`
	Detail  string    `json:"detail,omitempty"`
	Version uint64    `json:"version,omitempty"` // of the desired-state document that asked
	Result  string    `json:"result"`            // applied or rejected
	Error   string    `json:"error,omitempty"`
}

// New makes a Server.
func New(opts Options) (*Server, error) {
	if opts.HistorySize < 0 || opts.ChangeTimeout < 0 {
		return nil, fmt.Errorf("%w: HistorySize %d, ChangeTimeout %v: must not be negative", ErrInvalid, opts.HistorySize, opts.ChangeTimeout)
	}
	if opts.HistorySize == 0 {
		opts.HistorySize = 256
	}
	if opts.ChangeTimeout == 0 {
		opts.ChangeTimeout = 30 * time.Second
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real()
	}
	s := &Server{opts: opts, log: opts.Logger, jobs: map[string]*job{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	tp := opts.TracerProvider
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	s.tracer = tp.Tracer("github.com/sluicehq/sluice/admin")
	return s, nil
}

// Add puts a run under the Server's control, by its name.
func (s *Server) Add(run *actors.Run) error {
	if run == nil {
		return fmt.Errorf("%w: Add: nil run", ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.jobs[run.Name()]; dup {
		return fmt.Errorf("%w: Add: a job named %q is already here", ErrInvalid, run.Name())
	}
	s.jobs[run.Name()] = &job{run: run}
	return nil
}

// Remove forgets a run (a job of the same name that replaced it stays).
func (s *Server) Remove(run *actors.Run) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j, ok := s.jobs[run.Name()]; ok && j.run == run {
		delete(s.jobs, run.Name())
	}
}

// Replace puts run under control in the place of a job of the same name
// (a job taken over by this process), keeping its history.
func (s *Server) Replace(run *actors.Run) error {
	if run == nil {
		return fmt.Errorf("%w: Replace: nil run", ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if j, ok := s.jobs[run.Name()]; ok {
		j.run = run
		j.wake()
		return nil
	}
	s.jobs[run.Name()] = &job{run: run}
	return nil
}

func (s *Server) runOf(name string) (*actors.Run, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrNoJob, name)
	}
	return j.run, nil
}

// steadyRunOf is runOf for a change, a stop or a savepoint: refused while
// a rescale is under way (the run it would get is the one the rescale
// stops; the rescale then starts the job again with the settings it read
// before the stop, and the change would be lost though recorded).
func (s *Server) steadyRunOf(name, what string) (*actors.Run, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrNoJob, name)
	}
	if j.restarting {
		return nil, fmt.Errorf("%w: %s job %q: a rescale is under way", ErrRefused, what, name)
	}
	return j.run, nil
}

// record adds an event to its job's history, logs it and traces it.
func (s *Server) record(ctx context.Context, ev Event, err error) Event {
	ev.At = s.opts.Clock.Now()
	ev.Result = "applied"
	if err != nil {
		ev.Result, ev.Error = "rejected", err.Error()
	}
	s.mu.Lock()
	s.seq++
	ev.Seq = s.seq
	if j, ok := s.jobs[ev.Job]; ok {
		j.history = append(j.history, ev)
		if n := len(j.history) - s.opts.HistorySize; n > 0 {
			j.history = slices.Delete(j.history, 0, n)
		}
	}
	s.mu.Unlock()
	attrs := []any{"job", ev.Job, "what", ev.What, "who", ev.Who, "result", ev.Result}
	if ev.Target != "" {
		attrs = append(attrs, "operator", ev.Target)
	}
	if ev.Detail != "" {
		attrs = append(attrs, "detail", ev.Detail)
	}
	if ev.Version != 0 {
		attrs = append(attrs, "version", ev.Version)
	}
	if err != nil {
		s.log.Warn("control change rejected", append(attrs, "err", err)...)
	} else {
		s.log.Info("control change", attrs...)
	}
	_, span := s.tracer.Start(ctx, "sluice.control."+ev.What, trace.WithAttributes(
		attribute.String("sluice.topology", ev.Job), attribute.String("sluice.operator", ev.Target),
		attribute.String("sluice.control.who", ev.Who), attribute.String("sluice.control.result", ev.Result),
		attribute.String("sluice.control.detail", ev.Detail), attribute.Int64("sluice.control.version", int64(ev.Version))))
	if err != nil {
		span.RecordError(err)
	}
	span.End()
	return ev
}

// History is a job's events, oldest first.
func (s *Server) History(name string) ([]Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrNoJob, name)
	}
	return slices.Clone(j.history), nil
}

// Input is an input mailbox's settings, as the API and the desired-state
// document write them: policy (block, drop-newest, drop-oldest, sample,
// throttle, spill), capacity in records, sample_every (sample: one record
// in N is kept), rate (throttle: records per second) and high_water
// (sample, throttle: the depth above which they shed; 0: three quarters of
// the capacity).
type Input struct {
	Policy      string  `json:"policy"`
	Capacity    int     `json:"capacity"`
	SampleEvery int     `json:"sample_every,omitempty"`
	Rate        float64 `json:"rate,omitempty"`
	HighWater   int     `json:"high_water,omitempty"`
}

func (in Input) String() string { return desired.Input(in).String() }

var policies = map[string]mailbox.Overflow{
	"block": mailbox.OverflowBlock, "drop-newest": mailbox.OverflowDropNewest, "drop-oldest": mailbox.OverflowDropOldest,
	"sample": mailbox.OverflowSample, "throttle": mailbox.OverflowThrottle, "spill": mailbox.OverflowSpill,
}

func (in Input) config() mailbox.Config {
	return mailbox.Config{Capacity: in.Capacity, Overflow: policies[in.Policy], HighWater: in.HighWater, SampleEvery: in.SampleEvery, Rate: in.Rate}
}

// inputOf is a mailbox configuration as an Input (a default high-water
// mark left out).
func inputOf(c mailbox.Config) Input {
	in := Input{Policy: c.Overflow.String(), Capacity: c.Capacity}
	switch c.Overflow {
	case mailbox.OverflowSample:
		in.SampleEvery = c.SampleEvery
	case mailbox.OverflowThrottle:
		in.Rate = c.Rate
	}
	if (c.Overflow == mailbox.OverflowSample || c.Overflow == mailbox.OverflowThrottle) && c.HighWater != max(1, c.Capacity*3/4) {
		in.HighWater = c.HighWater
	}
	return in
}

// SetInput changes the input of operator op of job name while it runs, on
// behalf of who. It is recorded in the job's history either way.
func (s *Server) SetInput(ctx context.Context, who, name, op string, in Input) error {
	return s.setInput(ctx, Event{Who: who, Job: name, What: "set-input", Target: op}, in)
}

func (s *Server) setInput(ctx context.Context, ev Event, in Input) error {
	err := s.applyInput(ctx, &ev, in)
	s.record(ctx, ev, err)
	return err
}

func (s *Server) applyInput(ctx context.Context, ev *Event, in Input) error {
	ev.Detail = in.String()
	run, err := s.steadyRunOf(ev.Job, "change the input of")
	if err != nil {
		return err
	}
	infos, err := engine.Inputs(run)
	if err != nil {
		return err
	}
	var info *engine.InputInfo
	for i := range infos {
		if infos[i].Operator == ev.Target || slices.Contains(infos[i].Fused, ev.Target) {
			info = &infos[i]
		}
	}
	if info == nil || info.Operator != ev.Target { // unknown or fused: the engine says which
		return engine.SetInput(ctx, run, ev.Target, in.config())
	}
	spill := info.Spill
	if err := desired.CheckInput("input", desired.Input(in), spill); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	ev.Detail = fmt.Sprintf("%s (was %s)", in, inputOf(info.Config))
	ctx, cancel := context.WithTimeout(ctx, s.opts.ChangeTimeout)
	defer cancel()
	return engine.SetInputAt(ctx, run, ev.Target, in.config(), ev.Version)
}

// MaxLatencyTarget bounds a LatencyTarget set through the control plane.
const MaxLatencyTarget = desired.MaxLatencyTarget

// SetLatencyTarget changes the LatencyTarget of job name, which must have
// been started with one (operators.LatencyTarget): from the next latency
// window on, its controller sheds to hold the end-to-end p99 under d.
func (s *Server) SetLatencyTarget(ctx context.Context, who, name string, d time.Duration) error {
	return s.setLatencyTarget(ctx, Event{Who: who, Job: name, What: "latency-target"}, d)
}

func (s *Server) setLatencyTarget(ctx context.Context, ev Event, d time.Duration) error {
	ev.Detail = d.String()
	err := func() error {
		run, err := s.steadyRunOf(ev.Job, "change the latency target of")
		if err != nil {
			return err
		}
		if d <= 0 || d > MaxLatencyTarget {
			return fmt.Errorf("%w: latency target %v: must be positive and at most %v", ErrInvalid, d, MaxLatencyTarget)
		}
		if was := operators.ShedStatsOf(run).Target; was > 0 {
			ev.Detail = fmt.Sprintf("%v (was %v)", d, was)
		}
		ctx, cancel := context.WithTimeout(ctx, s.opts.ChangeTimeout)
		defer cancel()
		return engine.SetLatencyTarget(ctx, run, d)
	}()
	s.record(ctx, ev, err)
	return err
}

// Pause stops source op of job name reading (pause) or lets it read again.
func (s *Server) Pause(ctx context.Context, who, name, op string, pause bool) error {
	return s.pause(ctx, Event{Who: who, Job: name, Target: op}, pause)
}

func (s *Server) pause(ctx context.Context, ev Event, pause bool) error {
	if ev.What == "" {
		ev.What = "resume"
		if pause {
			ev.What = "pause"
		}
	}
	err := func() error {
		run, err := s.steadyRunOf(ev.Job, ev.What)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, s.opts.ChangeTimeout)
		defer cancel()
		return engine.PauseSource(ctx, run, ev.Target, pause)
	}()
	s.record(ctx, ev, err)
	return err
}

// Savepoint takes a checkpoint of job name now and returns its id.
func (s *Server) Savepoint(ctx context.Context, who, name string) (uint64, error) {
	id, _, err := s.SavepointTo(ctx, who, name, "")
	return id, err
}

// SavepointTo takes a checkpoint of job name now and, when sub is not
// empty, writes it as a savepoint (operators.Job.Savepoint) into the new
// directory sub of Options.SavepointDir, returning its path. sub is one
// path element: a request cannot name a directory elsewhere.
func (s *Server) SavepointTo(ctx context.Context, who, name, sub string) (uint64, string, error) {
	var id uint64
	var dir string
	ev := Event{Who: who, Job: name, What: "savepoint"}
	err := func() error {
		run, err := s.steadyRunOf(name, "savepoint")
		if err != nil {
			return err
		}
		if sub == "" {
			id, err = operators.CheckpointNow(ctx, run)
			ev.Detail = "checkpoint " + strconv.FormatUint(id, 10)
			return err
		}
		if dir, err = s.savepointPath(sub); err != nil {
			return err
		}
		sp, err := engine.Savepoint(ctx, run, dir)
		if err != nil {
			return err
		}
		id = sp.Manifest.Checkpoint
		ev.Detail = "savepoint " + dir + " of checkpoint " + strconv.FormatUint(id, 10)
		return nil
	}()
	s.record(ctx, ev, err)
	return id, dir, err
}

// Stop drains job name (its sources stop, what is in flight finishes) and
// returns the final checkpoint it keeps to resume from (0 for a job
// without checkpoints).
func (s *Server) Stop(ctx context.Context, who, name string) (uint64, error) {
	var id uint64
	ev := Event{Who: who, Job: name, What: "stop"}
	err := func() error {
		run, err := s.steadyRunOf(name, "stop")
		if err != nil {
			return err
		}
		if err := run.Drain(ctx); err != nil {
			return err
		}
		id = operators.CheckpointStatsOf(run).LastID
		ev.Detail = "final checkpoint " + strconv.FormatUint(id, 10)
		return nil
	}()
	s.record(ctx, ev, err)
	return id, err
}

// JobSummary is a job in the list of jobs.
type JobSummary struct {
	Name    string  `json:"name"`
	State   string  `json:"state"` // running, ended, failed
	Error   string  `json:"error,omitempty"`
	Elapsed float64 `json:"elapsed_seconds"`
}

// JobStatus is a job's plan, statistics and configuration.
type JobStatus struct {
	JobSummary
	Plan        string                 `json:"plan,omitempty"`
	Operators   []actors.OperatorStats `json:"operators"`
	Inputs      []InputStatus          `json:"inputs"`
	Checkpoints CheckpointSummary      `json:"checkpoints"`
	// Desired is the newest version of the desired-state document read
	// (0: none); Applied the version whose settings the job runs.
	Desired uint64 `json:"desired_version,omitempty"`
	Applied uint64 `json:"applied_version,omitempty"`
	// Nodes is, for a distributed job (this process its coordinator), the
	// latest live change in force on each process hosting it: a change is
	// in force on all of them or on none, so they agree after each.
	Nodes []NodeStatus `json:"nodes,omitempty"`
	// Latency is the LatencyTarget's controller, for a job started with
	// one (operators.LatencyTarget).
	Latency *LatencyStatus `json:"latency,omitempty"`
}

// NodeStatus is the latest live change in force on one process of a
// distributed job: the coordinator's number of the change, the operator it
// changed and the desired-state version it applied (0: a change of the
// API's).
type NodeStatus struct {
	Address  string `json:"address"`
	Change   uint64 `json:"change"`
	Operator string `json:"operator"`
	Version  uint64 `json:"applied_version"`
}

// LatencyStatus is a LatencyTarget's controller now: the target, where it
// sheds and the fraction kept there, and why the target cannot be held
// when it cannot.
type LatencyStatus struct {
	Target     string  `json:"target"` // a Go duration: "250ms"
	Point      string  `json:"point,omitempty"`
	Keep       float64 `json:"keep"`
	Drop       bool    `json:"drop,omitempty"`
	Infeasible string  `json:"infeasible,omitempty"`
}

// CheckpointSummary is what a job's status says of its checkpoints.
type CheckpointSummary struct {
	Completed    int64  `json:"completed"`
	Failed       int64  `json:"failed"`
	LastID       uint64 `json:"last_id"`
	RestoredFrom uint64 `json:"restored_from,omitempty"`
	Restarts     int    `json:"restarts"`
}

// InputStatus is one operator's input mailbox: its settings now and its
// accounting, summed over its instances. Posted = Delivered + Dropped +
// Queued + SpillPending.
type InputStatus struct {
	Operator     string           `json:"operator"`
	Fused        []string         `json:"fused,omitempty"`
	Parallelism  int              `json:"parallelism"`
	Source       bool             `json:"source,omitempty"`
	Paused       bool             `json:"paused,omitempty"`
	Live         bool             `json:"live"`
	Why          string           `json:"why,omitempty"`
	Input        *Input           `json:"input,omitempty"`
	Posted       int64            `json:"posted"`
	Delivered    int64            `json:"delivered"`
	Dropped      int64            `json:"dropped"`
	DroppedBy    map[string]int64 `json:"dropped_by,omitempty"`
	Queued       int64            `json:"queued"`
	SpillPending int64            `json:"spill_pending"`
	Overfilled   int64            `json:"overfilled,omitempty"`
}

func summary(run *actors.Run) JobSummary {
	js := JobSummary{Name: run.Name(), State: "running", Elapsed: run.Elapsed().Seconds()}
	select {
	case <-run.Done():
		js.State = "ended"
		if err := run.Execution().Err(); err != nil {
			js.State, js.Error = "failed", err.Error()
		}
	default:
	}
	return js
}

// Jobs lists the jobs, by name.
func (s *Server) Jobs() []JobSummary {
	s.mu.Lock()
	runs := make([]*actors.Run, 0, len(s.jobs))
	for _, j := range s.jobs {
		runs = append(runs, j.run)
	}
	s.mu.Unlock()
	out := make([]JobSummary, 0, len(runs))
	for _, r := range runs {
		out = append(out, summary(r))
	}
	slices.SortFunc(out, func(a, b JobSummary) int { return compare(a.Name, b.Name) })
	return out
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Status is a job's status.
func (s *Server) Status(name string) (JobStatus, error) {
	run, err := s.runOf(name)
	if err != nil {
		return JobStatus{}, err
	}
	st := JobStatus{JobSummary: summary(run), Operators: run.Stats()}
	if p := operators.PlanOf(run); p != nil {
		st.Plan = p.String()
	}
	cs := operators.CheckpointStatsOf(run)
	st.Checkpoints = CheckpointSummary{Completed: cs.Completed, Failed: cs.Failed, LastID: cs.LastID, RestoredFrom: cs.RestoredFrom, Restarts: cs.Restarts}
	infos, _ := engine.Inputs(run)
	for _, info := range infos {
		is := InputStatus{Operator: info.Operator, Fused: info.Fused, Parallelism: info.Parallelism, Source: info.Source,
			Paused: info.Paused, Live: info.Live, Why: info.Why}
		if !info.Source {
			in := inputOf(info.Config)
			is.Input = &in
			if ms, err := engine.InputStatsOf(run, info.Operator); err == nil {
				is.Posted, is.Delivered, is.Dropped = ms.Posted, ms.Delivered, ms.DroppedTotal()
				is.Queued, is.SpillPending, is.Overfilled = int64(ms.Depth), ms.SpillPending, ms.Overfilled
				for _, r := range mailbox.Reasons() {
					if d := ms.Dropped[r]; d > 0 {
						if is.DroppedBy == nil {
							is.DroppedBy = map[string]int64{}
						}
						is.DroppedBy[r.String()] = d
					}
				}
			}
		}
		st.Inputs = append(st.Inputs, is)
	}
	st.Desired, st.Applied = s.ds.versions(name)
	for _, na := range engine.AppliedOf(run) {
		st.Nodes = append(st.Nodes, NodeStatus{Address: na.Address, Change: na.Change, Operator: na.Operator, Version: na.Version})
	}
	if sh := operators.ShedStatsOf(run); sh.Target > 0 {
		st.Latency = &LatencyStatus{Target: sh.Target.String(), Point: sh.Point, Keep: sh.Keep, Drop: sh.Drop, Infeasible: sh.Infeasible}
	}
	return st, nil
}

// Handler is the admin API, behind its Host, Origin and token checks.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/jobs", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, s.Jobs()) })
	mux.HandleFunc("GET /v1/jobs/{job}", func(w http.ResponseWriter, r *http.Request) {
		st, err := s.Status(r.PathValue("job"))
		reply(w, st, err)
	})
	mux.HandleFunc("GET /v1/jobs/{job}/history", func(w http.ResponseWriter, r *http.Request) {
		h, err := s.History(r.PathValue("job"))
		reply(w, h, err)
	})
	mux.HandleFunc("PUT /v1/jobs/{job}/inputs/{op}", func(w http.ResponseWriter, r *http.Request) {
		var in Input
		if err := decodeBody(r, &in); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		job, op := r.PathValue("job"), r.PathValue("op")
		in = s.merge(job, op, in)
		err := s.SetInput(r.Context(), who(r), job, op, in)
		reply(w, map[string]any{"job": job, "operator": op, "input": in}, err)
	})
	for _, verb := range []string{"pause", "resume"} {
		mux.HandleFunc("POST /v1/jobs/{job}/sources/{op}/"+verb, func(w http.ResponseWriter, r *http.Request) {
			job, op := r.PathValue("job"), r.PathValue("op")
			err := s.Pause(r.Context(), who(r), job, op, verb == "pause")
			reply(w, map[string]any{"job": job, "operator": op, "paused": verb == "pause"}, err)
		})
	}
	mux.HandleFunc("POST /v1/jobs/{job}/savepoint", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Dir string `json:"dir"` // a new directory under Options.SavepointDir; empty: a checkpoint now
		}
		if r.ContentLength != 0 {
			if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&req); err != nil && !errors.Is(err, io.EOF) {
				writeError(w, http.StatusBadRequest, "admin: savepoint request: "+err.Error())
				return
			}
		}
		id, dir, err := s.SavepointTo(r.Context(), who(r), r.PathValue("job"), req.Dir)
		reply(w, map[string]any{"job": r.PathValue("job"), "checkpoint": id, "dir": dir}, err)
	})
	mux.HandleFunc("POST /v1/jobs/{job}/stop", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Savepoint string `json:"savepoint"` // a new directory under Options.SavepointDir; empty: stop keeping the final checkpoint
		}
		if r.ContentLength != 0 {
			if err := decodeBody(r, &req); err != nil && !errors.Is(err, io.EOF) {
				writeError(w, http.StatusBadRequest, "admin: stop request: "+err.Error())
				return
			}
		}
		if req.Savepoint != "" {
			id, dir, err := s.StopWithSavepoint(r.Context(), who(r), r.PathValue("job"), req.Savepoint)
			reply(w, map[string]any{"job": r.PathValue("job"), "checkpoint": id, "savepoint": dir}, err)
			return
		}
		id, err := s.Stop(r.Context(), who(r), r.PathValue("job"))
		reply(w, map[string]any{"job": r.PathValue("job"), "checkpoint": id}, err)
	})
	mux.HandleFunc("POST /v1/jobs/{job}/rescale", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Parallelism map[string]int `json:"parallelism"`
		}
		if err := decodeBody(r, &req); err != nil {
			writeError(w, http.StatusBadRequest, "admin: rescale request: "+err.Error())
			return
		}
		out, err := s.Rescale(r.Context(), who(r), r.PathValue("job"), req.Parallelism)
		reply(w, out, err)
	})
	mux.HandleFunc("PUT /v1/jobs/{job}/latency-target", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Target string `json:"target"` // a Go duration: "250ms"
		}
		if err := decodeBody(r, &req); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		d, err := time.ParseDuration(req.Target)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("admin: latency target %q: want a duration such as 250ms", req.Target))
			return
		}
		err = s.SetLatencyTarget(r.Context(), who(r), r.PathValue("job"), d)
		reply(w, map[string]any{"job": r.PathValue("job"), "target": d.String()}, err)
	})
	mux.HandleFunc("GET /v1/desired", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, s.DesiredStatus()) })
	mux.HandleFunc("PUT /v1/desired", func(w http.ResponseWriter, r *http.Request) {
		data, err := io.ReadAll(io.LimitReader(r.Body, desired.MaxDocument+1))
		if err != nil {
			writeError(w, http.StatusBadRequest, "admin: request body: "+err.Error())
			return
		}
		if err := s.ApplyDocument(r.Context(), who(r), data); err != nil {
			writeError(w, http.StatusConflict, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, s.DesiredStatus())
	})
	return s.guard(mux)
}

// merge fills the fields of a partial input change from the input now:
// a change of capacity alone keeps the policy and its rates, a change of
// policy alone keeps the capacity.
func (s *Server) merge(name, op string, in Input) Input {
	run, err := s.runOf(name)
	if err != nil {
		return in
	}
	infos, _ := engine.Inputs(run)
	for _, info := range infos {
		if info.Operator != op || info.Source {
			continue
		}
		cur := inputOf(info.Config)
		if in.Capacity == 0 {
			in.Capacity = cur.Capacity
		}
		if in.Policy == "" || in.Policy == cur.Policy {
			in.Policy = cur.Policy
			if in.SampleEvery == 0 {
				in.SampleEvery = cur.SampleEvery
			}
			if in.Rate == 0 {
				in.Rate = cur.Rate
			}
		}
	}
	return in
}

// who names the requester: the X-Sluice-Who header (sluice ctl sends the
// user and host) and the remote address.
func who(r *http.Request) string {
	w := "api " + r.RemoteAddr
	if name := r.Header.Get("X-Sluice-Who"); name != "" {
		if len(name) > 64 {
			name = name[:64]
		}
		w = "api " + quote(name) + " from " + r.RemoteAddr
	}
	return w
}

// maxBody bounds a request's body.
const maxBody = 64 << 10

func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("admin: request body: %w", err)
	}
	return nil
}

func reply(w http.ResponseWriter, v any, err error) {
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, v)
	case errors.Is(err, ErrNoJob):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, ErrInvalid):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, ErrRefused):
		writeError(w, http.StatusConflict, err.Error())
	default:
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// ListenAddr resolves an address for Serve: a port alone means
// 127.0.0.1:PORT. It reports whether the address is loopback.
func ListenAddr(addr string) (listen string, loopback bool, err error) {
	listen, loopback, err = netaddr.Listen(addr)
	if err != nil {
		return "", false, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return listen, loopback, nil
}

// Serve serves the Handler at addr (see ListenAddr) until ctx ends. It
// returns once the listener is open, with the API's base URL and a
// function that waits for the server to stop.
func (s *Server) Serve(ctx context.Context, addr string) (string, func() error, error) {
	listen, loopback, err := ListenAddr(addr)
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return "", nil, fmt.Errorf("admin: listen on %s: %w", listen, err)
	}
	if host, _, _ := net.SplitHostPort(listen); !loopback {
		s.mu.Lock()
		s.opts.AllowedHosts = append(slices.Clone(s.opts.AllowedHosts), host)
		s.mu.Unlock()
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 60 * time.Second}
	served := make(chan struct{})
	var serveErr error
	go func() { // owned: ends when the server shuts down; wait waits for it
		defer close(served)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			serveErr = err
		}
	}()
	shut := make(chan struct{})
	go func() { // owned: shuts the server down when ctx ends; wait waits for it
		defer close(shut)
		select {
		case <-ctx.Done():
			c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(c)
		case <-served:
		}
	}()
	wait := func() error {
		<-served
		<-shut
		return serveErr
	}
	return "http://" + ln.Addr().String(), wait, nil
}
