//go:build cgo

package state

/*
#include <stdlib.h>
#ifdef __GLIBC__
#include <malloc.h>
static void sluice_trim(void) { malloc_trim(0); }
#else
static void sluice_trim(void) {}
#endif
*/
import "C"

// trimMalloc returns the C heap's free pages to the system (glibc's
// malloc_trim; nothing elsewhere). pebble allocates its block cache and
// memtables with C's malloc when cgo is on: blocks of every size, freed
// in any order by the cache and memtables of several MiB, spread over
// malloc's per-thread arenas, leave free pages among the used ones that
// malloc keeps. In a table over 10 M keys they came to 110 MiB beside the
// 138 MiB in use, and grew with the run; the disk table trims after each
// write-back of its cache (every few hundred thousand records at most).
func trimMalloc() { C.sluice_trim() }
