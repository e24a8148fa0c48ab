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
// and written, as a count does) with a budget of 4 MiB: the Go heap the
// table holds (its cache of decoded entries, at most half the budget,
// and pebble's Go allocations, about 2.5 MiB) stays under twice the
// budget and does not grow from one step to the next, and pebble's block
// cache (its floor of 8 MiB and three memtables of 4 MiB), memtables and
// L0 stay bounded. A cache whose entries cost more than it counts (a Go
// map emptied one entry at a time holds about 180 bytes an int64 entry)
// fails the first bound.
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
		h := heapAlloc() - h0
		p := state.DiskMemory()
		t.Logf("%d keys: Go heap %d KiB (cache %d KiB accounted), pebble %+v", n, h>>10, d.CacheBytes()>>10, p)
		if h > 2*budget {
			t.Errorf("%d keys: the table holds %d bytes of Go heap, over twice its budget of %d", n, h, budget)
		}
		if p.BlockCache > 20<<20 {
			t.Errorf("%d keys: block cache %d bytes, over its 20 MiB", n, p.BlockCache)
		}
		if p.MemTableCount > 4 || p.L0Files > 32 {
			t.Errorf("%d keys: %d memtables, %d files in L0", n, p.MemTableCount, p.L0Files)
		}
		heaps = append(heaps, h)
	}
	// Each step is past the cache's first write-back (about 28 k
	// entries), so its map has its full size in each; pebble's Go heap
	// varies by a few MiB with what it holds at the moment (a large batch
	// being flushed), so the steps compare within the budget.
	if grow := heaps[2] - heaps[0]; grow > budget {
		t.Errorf("the Go heap grew by %d bytes from 40 k to 240 k keys: %v", grow, heaps)
	}
}
