package state_test

import (
	"runtime"
	"testing"

	"github.com/sluicehq/sluice/internal/state"
)

func heapAlloc() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestDiskMemoryFlat: a disk table's memory does not grow with the number
// of keys it holds. Over 40 k, 120 k and 240 k distinct keys (each read
// and written, as a count does) with a budget of 4 MiB, measured after a
// flush (so that what is measured is not how far pebble's background
// flushes lag, which holds 4 MiB write-back batches in the Go heap: a CI
// run at load saw 12 and 17 MiB without it): the cache's own accounted
// bytes stay under half the budget, the Go heap does not grow from 120 k
// to 240 k keys by more than half the budget (120 k keys more at the 80
// bytes an entry of a Go map would be 9 MiB), and stays under a fixed 32
// MiB (measured after the flush: about 20 MiB at 120 k and at 240 k keys
// alike, 4.5 MiB at 40 k, nearly all of it beyond the cache: pebble's
// own), and pebble's block cache, memtables and L0 stay bounded.
func TestDiskMemoryFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 240 k keys")
	}
	const budget = 4 << 20
	h0 := heapAlloc()
	d := open(t, t.TempDir(), 0, budget)
	var k int64
	var heaps []int64
	for _, n := range []int64{40_000, 120_000, 240_000} {
		for ; k < n; k++ {
			key := int64(uint64(k) * 0x9E3779B97F4A7C15)
			v, ok := d.Get(key)
			d.Put(key, v+1, ok)
		}
		if err := d.FlushForTest(); err != nil {
			t.Fatal(err)
		}
		h := heapAlloc() - h0
		p := state.DiskMemory()
		t.Logf("%d keys: Go heap %d KiB (cache %d KiB accounted), pebble %+v", n, h>>10, d.CacheBytes()>>10, p)
		if c := d.CacheBytes(); c > budget/2 {
			t.Errorf("%d keys: the cache counts %d bytes, over half its budget of %d", n, c, budget)
		}
		if h > 32<<20 {
			t.Errorf("%d keys: the table holds %d bytes of Go heap, over 32 MiB", n, h)
		}
		if p.BlockCache > 20<<20 {
			t.Errorf("%d keys: block cache %d bytes, over its 20 MiB", n, p.BlockCache)
		}
		if p.MemTableCount > 4 || p.L0Files > 32 {
			t.Errorf("%d keys: %d memtables, %d files in L0", n, p.MemTableCount, p.L0Files)
		}
		heaps = append(heaps, h)
	}
	if grow := heaps[2] - heaps[1]; grow > budget/2 {
		t.Errorf("the Go heap grew by %d bytes from 120 k to 240 k keys: %v", grow, heaps)
	}
}
