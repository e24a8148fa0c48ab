//go:build cgo

package state

/*
#include <stdlib.h>
#ifdef __GLIBC__
#include <malloc.h>
static void sluice_trim(void) { malloc_trim(0); }
static void sluice_tune(int arenas, int mmapAt) {
	if (arenas > 0) mallopt(M_ARENA_MAX, arenas);
	if (mmapAt > 0) mallopt(M_MMAP_THRESHOLD, mmapAt);
}
static void sluice_mallinfo(size_t out[4]) {
	struct mallinfo2 m = mallinfo2();
	out[0] = m.arena;    // bytes from the system in arenas (brk and mmapped arenas)
	out[1] = m.uordblks; // of which in use
	out[2] = m.hblkhd;   // bytes in chunks mmapped on their own
	out[3] = m.fordblks; // free in arenas
}
#else
static void sluice_trim(void) {}
static void sluice_tune(int arenas, int mmapAt) {}
static void sluice_mallinfo(size_t out[4]) { out[0] = out[1] = out[2] = out[3] = 0; }
#endif
*/
import "C"

import (
	"os"
	"sync"
)

// trimMalloc returns the C heap's free pages to the system (glibc's
// malloc_trim; nothing elsewhere). pebble allocates its block cache and
// memtables with C's malloc when cgo is on: blocks of every size, freed
// in any order by the cache and memtables of several MiB, spread over
// malloc's per-thread arenas, leave free pages among the used ones that
// malloc keeps. In a table over 10 M keys they came to 110 MiB beside the
// 138 MiB in use, and grew with the run; the disk table trims after each
// write-back of its cache (every few hundred thousand records at most).
func trimMalloc() { C.sluice_trim() }

var tuneOnce sync.Once

// tuneMalloc sets, once a process and before the first disk table opens,
// two of glibc's malloc parameters that bound what pebble's C
// allocations cost beyond what they hold (each is left alone when the
// environment sets it, as MALLOC_ARENA_MAX or MALLOC_MMAP_THRESHOLD_):
//
//   - at most 2 arenas: glibc makes up to 8 a core, one per thread that
//     finds the others locked, and every arena keeps its own free chunks;
//     under a 50 M-key table six arenas held 34 MiB free beside what the
//     block cache used.
//   - a fixed mmap threshold of 256 KiB: glibc raises the threshold to
//     the size of every mmapped chunk it frees (up to 32 MiB), after which
//     the large blocks (filters and indexes of big sstables, memtables)
//     come from the arenas and their space stays there after the cache
//     drops them. Fixed, a block over 256 KiB is mapped on its own and
//     unmapped when freed.
//
// Both are process-wide: they apply to every C allocation of the
// process, which is why they are set only when a disk table is used.
func tuneMalloc() {
	tuneOnce.Do(func() {
		arenas, mmapAt := 2, 256<<10
		if os.Getenv("MALLOC_ARENA_MAX") != "" {
			arenas = 0
		}
		if os.Getenv("MALLOC_MMAP_THRESHOLD_") != "" {
			mmapAt = 0
		}
		C.sluice_tune(C.int(arenas), C.int(mmapAt))
	})
}

// CMalloc is the C heap as glibc's mallinfo2 sees it (zero elsewhere or
// without cgo): a diagnosis beside PebbleMemory.
type CMalloc struct {
	Arena  int64 // bytes the arenas took from the system
	InUse  int64 // of which allocated
	Free   int64 // of which free (kept by malloc)
	Mapped int64 // bytes in chunks mapped on their own
}

// CMallocStats reads the C heap's figures.
func CMallocStats() CMalloc {
	var out [4]C.size_t
	C.sluice_mallinfo(&out[0])
	return CMalloc{Arena: int64(out[0]), InUse: int64(out[1]), Mapped: int64(out[2]), Free: int64(out[3])}
}
