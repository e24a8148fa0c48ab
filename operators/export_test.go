package operators

import "time"

// WithTimer replaces the timer that delays restarts, for tests.
func WithTimer(after func(d time.Duration, f func()) (stop func() bool)) TopologyOption {
	return func(c *runConfig) { c.after = after }
}
