//go:build !unix

package dashboard

import "time"

// processCPU is not measured here: the reader falls back to
// runtime/metrics' estimates.
func processCPU() (time.Duration, bool) { return 0, false }
