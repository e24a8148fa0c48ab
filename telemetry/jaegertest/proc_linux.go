package jaegertest

import "syscall"

// sysProcAttr has the kernel kill Jaeger when the test binary dies without
// running its cleanups (a panic, a -timeout), so no Jaeger outlives its test.
// The signal follows the OS thread that started the child: a goroutine that
// locks that thread (runtime.LockOSThread) and exits without unlocking it
// ends the thread and Jaeger with it. Nothing in sluice's tests does that.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
