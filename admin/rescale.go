package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/operators"
)

// Restart is what a Starter is asked to start: the job again, from the
// savepoint in Savepoint, with the operators named in Parallelism at that
// parallelism (every operator rescaled through the Server so far, not only
// the latest change).
type Restart struct {
	Savepoint   string
	Parallelism map[string]int
}

// A Starter starts a job that the Server serves again, as Restart says
// (operators.FromSavepoint and operators.RunParallelism do it for a
// topology: see TopologyStarter). It must start the same topology under
// the same name; the Server serves the run it returns in the old run's
// place. ctx bounds the start only.
type Starter func(ctx context.Context, r Restart) (*actors.Run, error)

// TopologyStarter is the Starter of a topology started with
// operators.Start(ctx, sys, top, opts...): it starts top again with opts,
// from the savepoint and at the parallelism Restart names. opts must keep
// the job's checkpoints (operators.Checkpoints) and may name its store.
func TopologyStarter(sys *actors.System, top *operators.Topology, opts ...operators.TopologyOption) Starter {
	return func(ctx context.Context, r Restart) (*actors.Run, error) {
		o := append(slices.Clone(opts), operators.FromSavepoint(r.Savepoint))
		for _, op := range slices.Sorted(maps.Keys(r.Parallelism)) {
			o = append(o, operators.RunParallelism(op, r.Parallelism[op]))
		}
		job, err := operators.Start(ctx, sys, top, o...)
		if err != nil {
			return nil, err
		}
		return job.Run(), nil
	}
}

// AddRestartable puts a run under control, by its name, with the Starter
// that starts it again: the Server can then rescale it (Rescale). Without
// one (Add), a rescale is refused.
func (s *Server) AddRestartable(run *actors.Run, start Starter) error {
	if start == nil {
		return fmt.Errorf("%w: AddRestartable: nil Starter", ErrInvalid)
	}
	if err := s.Add(run); err != nil {
		return err
	}
	s.mu.Lock()
	s.jobs[run.Name()].start = start
	s.mu.Unlock()
	return nil
}

// Current is the run the Server serves as job name now: after a rescale,
// the new run.
func (s *Server) Current(name string) (*actors.Run, error) { return s.runOf(name) }

// Wait waits for the end of job name, following it across the restarts of
// rescales: it returns the outcome of the run that ended without being
// replaced, or the error of a restart that left no run in its place.
func (s *Server) Wait(ctx context.Context, name string) error {
	for {
		s.mu.Lock()
		j, ok := s.jobs[name]
		if !ok {
			s.mu.Unlock()
			return fmt.Errorf("%w %q", ErrNoJob, name)
		}
		run, changed := j.run, j.changed()
		s.mu.Unlock()
		select {
		case <-run.Done():
		case <-changed:
			continue
		case <-ctx.Done():
			return ctx.Err()
		}
		s.mu.Lock()
		restarting, replaced, failed := j.restarting, j.run != run, j.restartErr
		s.mu.Unlock()
		switch {
		case replaced:
			continue
		case restarting:
			select {
			case <-changed:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		case failed != nil:
			return failed
		}
		return run.Wait(ctx)
	}
}

// Follow calls fn with every run that replaces job name's run (a rescale
// starts a new one), in order, on the caller's goroutine, until the job
// ends for good (Wait's outcome is returned) or ctx ends. A dashboard
// shows the job's new run with it (dashboard.Dashboard.Replace).
func (s *Server) Follow(ctx context.Context, name string, fn func(*actors.Run)) error {
	s.mu.Lock()
	j, ok := s.jobs[name]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("%w %q", ErrNoJob, name)
	}
	shown := j.run
	s.mu.Unlock()
	waited := make(chan error, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { waited <- s.Wait(wctx, name) }() // owned: ends with wctx
	for {
		s.mu.Lock()
		run, changed := j.run, j.changed()
		s.mu.Unlock()
		if run != shown {
			shown = run
			fn(run)
			continue
		}
		select {
		case <-changed:
		case err := <-waited:
			s.mu.Lock()
			last := j.run
			s.mu.Unlock()
			if last != shown {
				fn(last)
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// changed is closed when the job's run is replaced or a restart ends
// (with s.mu held).
func (j *job) changed() <-chan struct{} {
	if j.notify == nil {
		j.notify = make(chan struct{})
	}
	return j.notify
}

// wake closes the job's changed channel (with s.mu held).
func (j *job) wake() {
	if j.notify != nil {
		close(j.notify)
		j.notify = nil
	}
}

// StopWithSavepoint stops job name with a savepoint written into the new
// directory sub of Options.SavepointDir (operators.StopWithSavepoint: the
// job drains and its final checkpoint becomes the savepoint, so a job
// started from it repeats no output). It returns the savepoint's path and
// checkpoint.
func (s *Server) StopWithSavepoint(ctx context.Context, who, name, sub string) (uint64, string, error) {
	var id uint64
	var dir string
	ev := Event{Who: who, Job: name, What: "stop", Detail: "with savepoint " + sub}
	err := func() error {
		run, err := s.steadyRunOf(name, "stop")
		if err != nil {
			return err
		}
		if dir, err = s.savepointPath(sub); err != nil {
			return err
		}
		if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
			return fmt.Errorf("%w: stop with savepoint %q: the directory exists and is not empty", ErrInvalid, sub)
		}
		info, err := operators.StopWithSavepoint(ctx, run, dir)
		if err != nil {
			return err
		}
		id = info.Checkpoint
		ev.Detail = "with savepoint " + dir + " of final checkpoint " + strconv.FormatUint(id, 10)
		return nil
	}()
	s.record(ctx, ev, err)
	return id, dir, err
}

// savepointPath is the directory sub under Options.SavepointDir: sub is one
// path element.
func (s *Server) savepointPath(sub string) (string, error) {
	if s.opts.SavepointDir == "" {
		return "", fmt.Errorf("%w: savepoint %q: this process has no savepoint directory (admin.Options.SavepointDir, --admin-savepoints)", ErrInvalid, sub)
	}
	if sub == "" || sub != filepath.Base(sub) || sub == "." || sub == ".." || strings.ContainsAny(sub, `/\`) {
		return "", fmt.Errorf("%w: savepoint %q: want a directory name, not a path", ErrInvalid, sub)
	}
	return filepath.Join(s.opts.SavepointDir, sub), nil
}

// Rescaled is what a rescale did.
type Rescaled struct {
	Job string `json:"job"`
	// Savepoint is the directory the job stopped into and restarted from,
	// at its final checkpoint Checkpoint.
	Savepoint  string `json:"savepoint"`
	Checkpoint uint64 `json:"checkpoint"`
	// Parallelism is every task's parallelism now, by its first operator;
	// Was before.
	Parallelism map[string]int `json:"parallelism"`
	Was         map[string]int `json:"was"`
	// Pause is from the stop request to the new run started (on the
	// Server's clock); Stopping the part until the old run had stopped
	// and its savepoint was written.
	Pause    time.Duration `json:"pause_ns"`
	Stopping time.Duration `json:"stopping_ns"`
}

// Rescale changes the parallelism of operators of job name (par: by
// operator, as the plan names them) as Flink does with a savepoint: it
// stops the job with a savepoint (StopWithSavepoint) into a new directory
// under Options.SavepointDir, and starts it again from it at the new
// parallelism with the job's Starter (AddRestartable), which the Server
// then serves in its place: per-key state is redistributed by key group,
// and the output is that of a run without the rescale. The live input
// settings and paused sources of the old run are set on the new one. If
// the new run cannot start (an operator whose state cannot be
// redistributed), the job is started again from the same savepoint at its
// old parallelism, and the error says why; if even that fails the job is
// left stopped, its savepoint kept, and Wait returns the error.
func (s *Server) Rescale(ctx context.Context, who, name string, par map[string]int) (Rescaled, error) {
	out := Rescaled{Job: name}
	ev := Event{Who: who, Job: name, What: "rescale", Detail: parString(par)}
	err := s.rescale(ctx, &ev, par, &out)
	s.record(ctx, ev, err)
	return out, err
}

func parString(par map[string]int) string {
	var b strings.Builder
	for i, op := range slices.Sorted(maps.Keys(par)) {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%d", op, par[op])
	}
	return b.String()
}

func taskPar(run *actors.Run) map[string]int {
	m := map[string]int{}
	if p := operators.PlanOf(run); p != nil {
		for _, t := range p.Tasks {
			m[t.Operators[0]] = t.Parallelism
		}
	}
	return m
}

func (s *Server) rescale(ctx context.Context, ev *Event, par map[string]int, out *Rescaled) error {
	if len(par) == 0 {
		return fmt.Errorf("%w: rescale: no operator named", ErrInvalid)
	}
	s.mu.Lock()
	j, ok := s.jobs[ev.Job]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("%w %q", ErrNoJob, ev.Job)
	}
	run, start := j.run, j.start
	switch {
	case start == nil:
		s.mu.Unlock()
		return fmt.Errorf("%w: rescale job %q: this process cannot start it again (it was added without a Starter: admin.Server.AddRestartable)", ErrRefused, ev.Job)
	case j.restarting:
		s.mu.Unlock()
		return fmt.Errorf("%w: rescale job %q: a rescale is under way", ErrRefused, ev.Job)
	}
	j.restarting = true
	j.restartErr = nil
	overrides := maps.Clone(j.par)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		j.restarting = false
		j.wake()
		s.mu.Unlock()
	}()

	// Check what can be checked before the job stops.
	plan := operators.PlanOf(run)
	if plan == nil {
		return fmt.Errorf("%w: rescale job %q: not a topology's run", ErrRefused, ev.Job)
	}
	var ops []string
	for _, t := range plan.Tasks {
		ops = append(ops, t.Operators...)
	}
	for _, op := range slices.Sorted(maps.Keys(par)) {
		switch n := par[op]; {
		case !slices.Contains(ops, op):
			return fmt.Errorf("%w: rescale job %q: no operator %q in its plan (%s)", ErrInvalid, ev.Job, op, strings.Join(ops, ", "))
		case n < 1 || n > maxParallelism:
			return fmt.Errorf("%w: rescale job %q: operator %q to parallelism %d: want 1 to %d", ErrInvalid, ev.Job, op, n, maxParallelism)
		}
	}
	if s.opts.SavepointDir == "" {
		_, err := s.savepointPath("rescale")
		return err
	}
	dir := filepath.Join(s.opts.SavepointDir, nextRescaleDir(s.opts.SavepointDir, ev.Job))
	infos, _ := engine.Inputs(run)
	out.Was = taskPar(run)

	t0 := s.opts.Clock.Now()
	info, err := operators.StopWithSavepoint(ctx, run, dir)
	if err != nil {
		return err
	}
	out.Savepoint, out.Checkpoint = dir, info.Checkpoint
	out.Stopping = clock.Since(s.opts.Clock, t0)
	ev.Detail = fmt.Sprintf("%s from savepoint %s of checkpoint %d", parString(par), dir, info.Checkpoint)

	next := maps.Clone(overrides)
	if next == nil {
		next = map[string]int{}
	}
	maps.Copy(next, par)
	sctx := context.WithoutCancel(ctx)
	nrun, err := start(sctx, Restart{Savepoint: dir, Parallelism: next})
	if err != nil {
		// Back to where it was, from the same savepoint.
		back, berr := start(sctx, Restart{Savepoint: dir, Parallelism: overrides})
		if berr != nil {
			err = fmt.Errorf("rescale job %q: %w; starting it again at its old parallelism failed too, the job is stopped (savepoint %s): %w", ev.Job, err, dir, berr)
			s.mu.Lock()
			j.restartErr = err
			s.mu.Unlock()
			return err
		}
		s.adopt(ctx, j, back, infos, overrides)
		out.Parallelism = taskPar(back)
		out.Pause = clock.Since(s.opts.Clock, t0)
		return fmt.Errorf("%w: rescale job %q: %w (it runs again at its old parallelism, from savepoint %s)", ErrRefused, ev.Job, err, dir)
	}
	s.adopt(ctx, j, nrun, infos, next)
	out.Parallelism = taskPar(nrun)
	out.Pause = clock.Since(s.opts.Clock, t0)
	ev.Detail += fmt.Sprintf(": paused %v", out.Pause.Round(time.Millisecond))
	gone, perr := pruneRescaleDirs(s.opts.SavepointDir, ev.Job, keptRescales)
	if len(gone) > 0 {
		ev.Detail += fmt.Sprintf("; removed older rescale savepoints %s", strings.Join(gone, ", "))
	}
	if perr != nil {
		s.log.Warn("rescale: an older rescale savepoint could not be removed", "job", ev.Job, "err", perr)
	}
	return nil
}

// keptRescales is how many of a job's rescale savepoints a successful
// rescale keeps (the newest, from which the job now runs, and the one
// before it).
const keptRescales = 2

// rescaleDirs lists the rescale savepoints of job under dir, named
// rescale-<job>-<n>, by n (oldest first).
func rescaleDirs(dir, job string) []string {
	prefix := "rescale-" + url.PathEscape(job) + "-"
	ents, _ := os.ReadDir(dir)
	type numbered struct {
		n    uint64
		name string
	}
	var found []numbered
	for _, e := range ents {
		if rest, ok := strings.CutPrefix(e.Name(), prefix); ok && e.IsDir() {
			if n, err := strconv.ParseUint(rest, 10, 64); err == nil {
				found = append(found, numbered{n, e.Name()})
			}
		}
	}
	slices.SortFunc(found, func(a, b numbered) int { return cmp.Compare(a.n, b.n) })
	out := make([]string, len(found))
	for i, f := range found {
		out[i] = f.name
	}
	return out
}

// nextRescaleDir is the name of job's next rescale savepoint under dir:
// one past the highest there, so that a process started again never
// reuses a directory an earlier one filled.
func nextRescaleDir(dir, job string) string {
	n := uint64(1)
	if ds := rescaleDirs(dir, job); len(ds) > 0 {
		last := ds[len(ds)-1]
		v, _ := strconv.ParseUint(last[strings.LastIndexByte(last, '-')+1:], 10, 64)
		n = v + 1
	}
	return "rescale-" + url.PathEscape(job) + "-" + strconv.FormatUint(n, 10)
}

// pruneRescaleDirs removes all but the newest keep rescale savepoints of
// job under dir and returns the names it removed, and what it could not.
func pruneRescaleDirs(dir, job string, keep int) ([]string, error) {
	ds := rescaleDirs(dir, job)
	var gone []string
	var errs []error
	for ; len(ds) > keep; ds = ds[1:] {
		if err := os.RemoveAll(filepath.Join(dir, ds[0])); err != nil {
			errs = append(errs, err)
			continue
		}
		gone = append(gone, ds[0])
	}
	return gone, errors.Join(errs...)
}

// maxParallelism bounds a rescale's parallelism.
const maxParallelism = 1024

// adopt serves nrun as job j, with the old run's live input settings and
// paused sources (infos).
func (s *Server) adopt(ctx context.Context, j *job, nrun *actors.Run, infos []engine.InputInfo, par map[string]int) {
	now, _ := engine.Inputs(nrun)
	for _, old := range infos {
		for _, n := range now {
			if n.Operator != old.Operator {
				continue
			}
			var err error
			switch {
			case old.Source && old.Paused:
				err = engine.PauseSource(ctx, nrun, old.Operator, true)
			case !old.Source && n.Live && inputOf(n.Config) != inputOf(old.Config):
				err = engine.SetInput(ctx, nrun, old.Operator, inputOf(old.Config).config())
			}
			if err != nil && !errors.Is(err, context.Canceled) {
				s.log.Warn("rescale: a live setting of the old run did not carry over", "job", nrun.Name(), "operator", old.Operator, "err", err)
			}
		}
	}
	s.mu.Lock()
	j.run, j.par = nrun, par
	j.wake()
	s.mu.Unlock()
}
