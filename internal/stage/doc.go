// Package stage implements what sluice's operators do to records, apart
// from how they run: each operator of a fused chain is a stage, a Pusher of
// its input that processes a Batch (values in a column, event times in
// another) and pushes its results to the next stage. Map, Filter, FlatMap,
// the per-key aggregations, windows, joins, Process, Timestamps, sources
// and sinks are here, with their checkpointed state (SnapshotState and
// RestoreState), their record-failure policy and their tracing.
//
// A stage knows nothing of actors: internal/engine builds the chain of an
// operator instance with the constructors (NewMap, NewKeyed, ...), gives
// each its Ctx (operator name, instance, counters, clock, restored state),
// and feeds it batches and watermarks; the last stage pushes into the
// engine's emitter. A stage that fails panics with a *Failure naming its
// operator; the instance's supervisor turns it into the operator's error.
package stage
