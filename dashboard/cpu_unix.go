//go:build unix

package dashboard

import (
	"syscall"
	"time"
)

// processCPU is the CPU time the process has used, user and system, from
// getrusage(2): exact, where runtime/metrics' CPU classes are estimates
// updated only at garbage collections.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
