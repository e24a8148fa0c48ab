//go:build !cgo

package state

// trimMalloc: without cgo pebble allocates on the Go heap, which returns
// its free pages itself.
func trimMalloc() {}

// tuneMalloc: without cgo there is no C heap to tune.
func tuneMalloc() {}

// CMalloc is the C heap as glibc's mallinfo2 sees it: zero without cgo.
type CMalloc struct {
	Arena, InUse, Free, Mapped int64
}

// CMallocStats reads the C heap's figures (zero without cgo).
func CMallocStats() CMalloc { return CMalloc{} }
