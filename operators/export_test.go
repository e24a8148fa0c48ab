package operators

import (
	"time"

	"github.com/sluicehq/sluice/internal/engine"
)

// WithTimer replaces the timer that delays restarts, for tests.
func WithTimer(after func(d time.Duration, f func()) (stop func() bool)) TopologyOption {
	return TopologyOption{engine.WithTimer(after)}
}
