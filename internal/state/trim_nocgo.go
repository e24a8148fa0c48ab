//go:build !cgo

package state

// trimMalloc: without cgo pebble allocates on the Go heap, which returns
// its free pages itself.
func trimMalloc() {}
