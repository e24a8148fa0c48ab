//go:build !linux

package jaegertest

import "syscall"

// sysProcAttr: only Linux can tie the child's life to the test binary's.
func sysProcAttr() *syscall.SysProcAttr { return nil }
