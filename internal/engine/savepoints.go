package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/savepoint"
	"github.com/sluicehq/sluice/internal/state"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/persistence"
)

// Savepoint takes a checkpoint of the running job now and writes it to dir
// (which must not exist or be empty) as a self-contained savepoint
// (package internal/savepoint). The checkpoint is also the job's newest in
// its store, as any.
func Savepoint(ctx context.Context, run *actors.Run, dir string) (*savepoint.Savepoint, error) {
	x, ok := run.Execution().(*execution)
	if !ok {
		return nil, errors.New("operators: savepoint: not a topology's run")
	}
	r := checkpointNow(ctx, run)
	if r.err != nil {
		return nil, fmt.Errorf("operators: savepoint %s: %w", dir, r.err)
	}
	cp := r.cp
	if cp == nil { // stored by a checkpoint that another request asked for
		latest, ok, err := x.cpStore.Latest(ctx, x.topo.Name())
		if err != nil || !ok || latest.ID < r.id {
			return nil, fmt.Errorf("operators: savepoint %s: checkpoint %d: read it back: %v", dir, r.id, err)
		}
		cp = &latest
	}
	full, err := x.selfContained(*cp)
	if err != nil {
		return nil, fmt.Errorf("operators: savepoint %s: %w", dir, err)
	}
	sp, err := savepoint.WriteWith(dir, x.topo.Name(), full, x.exportDisk)
	if err != nil {
		return nil, fmt.Errorf("operators: %w", err)
	}
	x.sys.Logger().Info("savepoint written", "job", x.topo.Name(), "dir", dir, "checkpoint", cp.ID, "id", sp.Manifest.ID)
	return sp, nil
}

// exportDisk copies into a savepoint being written in dir the disk-state
// checkpoints its states name (state.ExportDisk) and names the copies in
// their place: a savepoint must not depend on the job's state directory,
// whose checkpoints retention removes. A disk-state checkpoint this
// process does not hold (an instance in another process of a distributed
// job) cannot be copied: the savepoint is refused, naming it.
func (x *execution) exportDisk(dir string, states map[string][]byte) error {
	st := x.topo.Config().State
	if !st.Disk() {
		return nil
	}
	base := filepath.Join(st.Dir, url.PathEscape(x.topo.Name()))
	for _, k := range slices.Sorted(maps.Keys(states)) {
		i := strings.LastIndexByte(k, '/')
		if i <= 0 {
			continue
		}
		// A bundle's (a window stage's, Process's) tables each: the
		// first at the place a lone table takes, the others beside it
		// (their files under state.TableOp's directories).
		out, err := state.MapTables(states[k], func(j int, b []byte) ([]byte, error) {
			if !state.IsDiskHandle(b) {
				return b, nil
			}
			rel := filepath.Join("disk", url.PathEscape(k))
			if j > 0 {
				rel += "." + strconv.Itoa(j)
			}
			return state.ExportDisk(b, filepath.Join(base, url.PathEscape(state.TableOp(k[:i], j))), dir, rel)
		})
		if err != nil {
			if x.dist != nil {
				return fmt.Errorf("copy the disk state of %s: %w (a savepoint of a distributed job copies only the disk state held in this process)", k, err)
			}
			return fmt.Errorf("copy the disk state of %s: %w", k, err)
		}
		states[k] = out
	}
	return nil
}

// StopWithSavepoint suspends the running job, as Flink's stop with a
// savepoint does without --drain: its sources stop where they are, what is
// in flight is processed, but no operator finishes its input (no
// aggregation emits at the end, no timer fires, state stays as it is);
// sinks flush; the job takes its final checkpoint, which marks no
// instance finished, so a job started from it reads on. It writes that
// final checkpoint to dir (which must not exist or be empty)
// as a savepoint. Nothing is processed after the checkpoint, so a job
// started from the savepoint repeats no output. dir is checked before the
// job is stopped; a job without checkpoints, or run across processes, is
// refused and goes on.
func StopWithSavepoint(ctx context.Context, run *actors.Run, dir string) (*savepoint.Savepoint, error) {
	x, ok := run.Execution().(*execution)
	if !ok {
		return nil, errors.New("operators: stop with savepoint: not a topology's run")
	}
	if x.dist != nil {
		return nil, fmt.Errorf("%w: stop with savepoint %s: job %q runs across processes: a stop with a savepoint is for jobs in one process (take a savepoint, then drain)", ErrNoLiveChange, dir, x.topo.Name())
	}
	if x.topo.Config().CheckpointInterval <= 0 || x.cpStore == nil {
		return nil, fmt.Errorf("operators: stop with savepoint %s: job %q takes no checkpoints (operators.Checkpoints)", dir, x.topo.Name())
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return nil, fmt.Errorf("operators: stop with savepoint %s: the directory is not empty", dir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("operators: stop with savepoint %s: %w", dir, err)
	}
	select {
	case <-run.Done():
		return nil, fmt.Errorf("operators: stop with savepoint %s: job %q has ended", dir, x.topo.Name())
	default:
	}
	x.tell(&wire.Drain{Suspend: true})
	select {
	case <-run.Done():
		if err := run.Execution().Err(); err != nil {
			return nil, fmt.Errorf("operators: stop with savepoint %s: %w", dir, err)
		}
	case <-ctx.Done():
		// As Run.Drain: stopped, not awaited, once the caller's deadline passed.
		run.Execution().Abort()
		return nil, fmt.Errorf("operators: stop with savepoint %s: %w", dir, actors.ErrDrainTimeout)
	}
	final := CheckpointStatsOf(run).LastID
	cp, ok, err := x.cpStore.Latest(ctx, x.topo.Name())
	switch {
	case err != nil:
		return nil, fmt.Errorf("operators: stop with savepoint %s: read the final checkpoint: %w", dir, err)
	case !ok || cp.ID != final || final == 0:
		return nil, fmt.Errorf("operators: stop with savepoint %s: job %q stopped, but its store holds no final checkpoint %d (found %d)", dir, x.topo.Name(), final, cp.ID)
	}
	full, err := x.selfContained(cp)
	if err != nil {
		return nil, fmt.Errorf("operators: stop with savepoint %s: %w", dir, err)
	}
	sp, err := savepoint.WriteWith(dir, x.topo.Name(), full, x.exportDisk)
	if err != nil {
		return nil, fmt.Errorf("operators: stop with savepoint: %w", err)
	}
	x.sys.Logger().Info("stopped with a savepoint", "job", x.topo.Name(), "dir", dir, "checkpoint", cp.ID, "id", sp.Manifest.ID)
	return sp, nil
}

// changelogDir is the job's directory of the memory backend's changelog
// ("" without one).
func (x *execution) changelogDir() string {
	st := x.topo.Config().State
	if st.Changelog == "" || st.Disk() {
		return ""
	}
	return filepath.Join(st.Changelog, url.PathEscape(x.topo.Name()))
}

// selfContained is cp with every memory-backend changelog handle replaced
// by its chain's files (state.Inline), so that a savepoint of it needs
// nothing outside its directory; cp itself is not changed.
func (x *execution) selfContained(cp persistence.Checkpoint) (persistence.Checkpoint, error) {
	var states map[string][]byte
	for k, b := range cp.States {
		if !state.IsChangelog(b) && !state.IsBundle(b) {
			continue
		}
		in, err := state.MapTables(b, func(_ int, t []byte) ([]byte, error) {
			if !state.IsChangelog(t) {
				return t, nil
			}
			return state.Inline(t, x.changelogDir())
		})
		if err != nil {
			return cp, fmt.Errorf("state of %s: %w", k, err)
		}
		if states == nil {
			states = maps.Clone(cp.States)
		}
		states[k] = in
	}
	if states != nil {
		cp.States = states
	}
	return cp, nil
}

// fromSavepoint is the checkpoint a job started FromSavepoint(dir)
// restores: the savepoint, imported into the job's store (replacing its
// checkpoints) unless the newest checkpoint there already descends from it
// (the job was started from it before and has checkpointed since: a
// restart after a crash resumes from there).
func (x *execution) fromSavepoint(ctx context.Context, dir string, latest persistence.Checkpoint, haveLatest bool) (persistence.Checkpoint, bool, error) {
	sp, err := savepoint.Open(dir)
	if err != nil {
		return persistence.Checkpoint{}, false, fmt.Errorf("from savepoint: %w", err)
	}
	if fp := x.topo.Fingerprint(); sp.Manifest.Plan.Fingerprint != fp {
		return persistence.Checkpoint{}, false, fmt.Errorf("from savepoint %s: taken of another topology (fingerprint %s, this job's %s)%s",
			dir, sp.Manifest.Plan.Fingerprint, fp, planDiff(sp.Manifest.Plan, x.planRecord()))
	}
	if haveLatest {
		if p, ok, _ := savepoint.PlanOf(&latest, "the job's newest checkpoint"); ok && p.Origin == sp.Manifest.ID {
			x.sys.Logger().Info("resuming from a checkpoint taken since the savepoint", "job", x.topo.Name(), "savepoint", dir, "checkpoint", latest.ID)
			return latest, true, nil
		}
	}
	cp := sp.Checkpoint()
	if err := x.cpStore.Clear(ctx, x.topo.Name()); err != nil {
		return persistence.Checkpoint{}, false, fmt.Errorf("from savepoint %s: clear the job's checkpoints: %w", dir, err)
	}
	if err := x.cpStore.Complete(ctx, x.topo.Name(), cp); err != nil {
		return persistence.Checkpoint{}, false, fmt.Errorf("from savepoint %s: record it as the job's checkpoint: %w", dir, err)
	}
	x.sys.Logger().Info("starting from a savepoint", "job", x.topo.Name(), "savepoint", dir, "id", sp.Manifest.ID,
		"checkpoint", cp.ID, "taken_by", sp.Manifest.Job)
	return cp, true, nil
}

// planDiff says which operators differ between two plans.
func planDiff(a, b savepoint.Plan) string {
	names := func(p savepoint.Plan) []string {
		var out []string
		for _, o := range p.Operators {
			out = append(out, o.Name+" ("+o.Kind+")")
		}
		return out
	}
	an, bn := names(a), names(b)
	var onlyA, onlyB []string
	for _, n := range an {
		if !slices.Contains(bn, n) {
			onlyA = append(onlyA, n)
		}
	}
	for _, n := range bn {
		if !slices.Contains(an, n) {
			onlyB = append(onlyB, n)
		}
	}
	if len(onlyA)+len(onlyB) == 0 {
		return ": the same operators, with other types or wiring"
	}
	return fmt.Sprintf(": operators only in the savepoint: [%s]; only in the job: [%s]", strings.Join(onlyA, ", "), strings.Join(onlyB, ", "))
}
