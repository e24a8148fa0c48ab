package stage

import "context"

// SinkStart tells a sink's Open how the job starts, through the context
// Open gets (SinkStartOf): a sink that would destroy earlier output on a
// fresh start (the file sink truncates its file) can refuse to.
type SinkStart struct {
	// Fresh: the job's first generation without a checkpoint to restore
	// (not a restart within the run, whose own output Open may replace).
	Fresh bool
	// Checkpoints: the job takes checkpoints (its sinks are exactly-once).
	Checkpoints bool
}

type sinkStartKey struct{}

// WithSinkStart returns ctx carrying s.
func WithSinkStart(ctx context.Context, s SinkStart) context.Context {
	return context.WithValue(ctx, sinkStartKey{}, s)
}

// SinkStartOf returns the SinkStart in ctx, and whether there is one (a
// sink opened by the runtime always has one).
func SinkStartOf(ctx context.Context) (SinkStart, bool) {
	s, ok := ctx.Value(sinkStartKey{}).(SinkStart)
	return s, ok
}
