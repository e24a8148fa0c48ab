package operators

import (
	"context"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/graph"
)

// Job is a running topology, as Start returns it.
type Job struct{ run *actors.Run }

// Start validates t and runs it on sys. The run settings opts (Checkpoints,
// CheckpointStore, RestartOnFailure, WithClock, DeadLetters, BatchSize,
// Capacity) apply to this run only, over those given to NewTopology: t is
// not changed, and may be started again with other settings.
//
//	job, err := operators.Start(ctx, sys, t, operators.Checkpoints(time.Second))
//	...
//	err = job.Wait(ctx)
func Start(ctx context.Context, sys *actors.System, t *Topology, opts ...TopologyOption) (*Job, error) {
	eo := make([]graph.TopologyOption, 0, len(opts))
	for _, o := range opts {
		if o.o != nil {
			eo = append(eo, o.o)
		}
	}
	run, err := sys.Run(ctx, engine.Job{T: t.t.With(eo...)})
	if err != nil {
		return nil, err
	}
	return &Job{run: run}, nil
}

// Name is the topology's name.
func (j *Job) Name() string { return j.run.Name() }

// Done is closed when the job has ended: by itself, drained or stopped.
func (j *Job) Done() <-chan struct{} { return j.run.Done() }

// Wait waits for the job's end and returns its outcome: nil when every
// record was processed and every sink flushed, an *OperatorError when an
// operator failed, ErrAborted (wrapped) when it was stopped.
func (j *Job) Wait(ctx context.Context) error { return j.run.Wait(ctx) }

// Drain asks the sources to stop; in-flight records finish, a job with
// checkpoints takes its final checkpoint and keeps it to resume from. It
// waits for the end; when ctx ends first the job is stopped.
func (j *Job) Drain(ctx context.Context) error { return j.run.Drain(ctx) }

// Stop stops every operator now and waits until they have stopped.
func (j *Job) Stop(ctx context.Context) error { return j.run.Stop(ctx) }

// Stats reports per-operator statistics; safe to call at any time.
func (j *Job) Stats() []actors.OperatorStats { return j.run.Stats() }

// Checkpoints reports the job's checkpoints and restarts so far.
func (j *Job) Checkpoints() CheckpointStats { return CheckpointStatsOf(j.run) }

// CheckpointNow takes a checkpoint now, outside the interval, and returns
// its id once it is durable in the job's store (see the package function
// CheckpointNow).
func (j *Job) CheckpointNow(ctx context.Context) (uint64, error) { return CheckpointNow(ctx, j.run) }

// Savepoint takes a checkpoint now and writes it to dir, which must not
// exist or be empty, as a savepoint: a self-contained, versioned copy of
// the job's state that outlives its store, from which a job of the same
// topology starts at any parallelism (FromSavepoint). It returns once the
// directory is complete and fsync'd; the job goes on.
func (j *Job) Savepoint(ctx context.Context, dir string) (SavepointInfo, error) {
	sp, err := engine.Savepoint(ctx, j.run, dir)
	if err != nil {
		return SavepointInfo{}, err
	}
	return savepointInfo(sp), nil
}

// StopWithSavepoint stops the job with a savepoint, as Flink's stop with
// savepoint does: it drains the job (the sources stop where they are, what
// is in flight finishes, the final checkpoint is taken) and writes that
// final checkpoint to dir, which must not exist or be empty. Nothing is
// processed after it, so a job started from it (FromSavepoint, at any
// parallelism: RunParallelism) repeats no output and misses none. dir is
// checked before the job stops; a job without Checkpoints is refused and
// goes on.
func (j *Job) StopWithSavepoint(ctx context.Context, dir string) (SavepointInfo, error) {
	sp, err := engine.StopWithSavepoint(ctx, j.run, dir)
	if err != nil {
		return SavepointInfo{}, err
	}
	return savepointInfo(sp), nil
}

// StopWithSavepoint stops a topology's run with a savepoint in dir (see
// Job.StopWithSavepoint), for code that holds the actors.Run.
func StopWithSavepoint(ctx context.Context, run *actors.Run, dir string) (SavepointInfo, error) {
	return (&Job{run: run}).StopWithSavepoint(ctx, dir)
}

// Placement counts the job's operator instances by the address of the
// process that runs them, for a job run across processes (package
// cluster); nil for a job in one process.
func (j *Job) Placement() map[string]int { return engine.PlacementOf(j.run) }

// Plan is the physical plan the job executes.
func (j *Job) Plan() *Plan { return PlanOf(j.run) }

// Run is the System's handle of the job (for code that manages any
// actors.Job).
func (j *Job) Run() *actors.Run { return j.run }
