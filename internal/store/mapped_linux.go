package store

import (
	"syscall"
	"unsafe"

	bolt "go.etcd.io/bbolt"
)

// initialMmap is the size bbolt maps a store file with at first (Linux
// maps a file's pages lazily, so the size costs address space, not
// memory): a file that grows to it is never remapped. A remap copies every
// value the writing transaction touches out of the old map: a checkpoint
// store written with 17 MB checkpoints (Nexmark q3's whole memory state)
// remapped twice in its first seconds. Four such checkpoints (each
// replacing the one before) into a new file took 160-203 ms with bbolt's
// defaults, 68-98 ms mapped at 256 MiB with allocStep (session 22, four
// runs each).
//
// allocStep is the AllocSize that goes with it: bbolt grows a file mapped
// beyond AllocSize by what it needs plus AllocSize (16 MiB by default),
// and a smaller one to the whole map. 1 MiB keeps a small store small
// (what it holds and at most 1 MiB more) and costs a growing file a grow
// (a truncate and an fsync) every MiB, not every 16.
const (
	initialMmap = 256 << 20
	allocStep   = 1 << 20
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
