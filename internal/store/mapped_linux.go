package store

import (
	"syscall"
	"unsafe"

	bolt "go.etcd.io/bbolt"
)

// DropMapped tells the kernel that the process no longer needs the pages of
// the database's memory map that it has read: they stay in the page cache
// but leave the process's resident set, so that reading a large spill back
// does not grow RSS with file pages. Call it inside a read transaction,
// which keeps bbolt from remapping meanwhile. bbolt maps the file read-only
// and shared, so dropping pages loses nothing: the next access faults them
// in again from the page cache.
func DropMapped(tx *bolt.Tx) error {
	size := tx.Size()
	if size <= 0 {
		return nil
	}
	info := tx.DB().Info()
	// info.Data is the address of the memory map, outside the Go heap.
	base := *(*unsafe.Pointer)(unsafe.Pointer(&info.Data))
	mapped := unsafe.Slice((*byte)(base), size)
	return syscall.Madvise(mapped, syscall.MADV_DONTNEED)
}
