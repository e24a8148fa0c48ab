package operators

import (
	"time"

	"github.com/sluicehq/sluice/internal/graph"
)

// WithTimer replaces the timer that delays restarts, for tests.
func WithTimer(after func(d time.Duration, f func()) (stop func() bool)) TopologyOption {
	return TopologyOption{graph.WithTimer(after)}
}

// FileSynced calls f after every fsync of a File sink's file with its
// size then, for tests that simulate a power loss.
func FileSynced(f func(path string, size int64)) FileOption {
	return func(o *fileOptions) { o.synced = f }
}

// FixedShed sheds at every source's outputs with rate keep from the start,
// without a controller (sampling, or dropping whole batches with drop).
func FixedShed(keep float64, drop bool) TopologyOption {
	return TopologyOption{graph.FixedShed(keep, drop)}
}
