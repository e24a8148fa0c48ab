package operators

import (
	"time"

	"github.com/sluicehq/sluice/internal/graph"
)

// WithTimer replaces the timer that delays restarts, for tests.
func WithTimer(after func(d time.Duration, f func()) (stop func() bool)) TopologyOption {
	return TopologyOption{graph.WithTimer(after)}
}
