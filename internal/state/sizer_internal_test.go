package state

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"
	"unsafe"
)

// buf is a stage's state of the kind that grows in place: a pointer to a
// struct of slices (a join's buffer, a Process state).
type buf struct {
	Xs   []int64  `msgpack:"x"`
	Tags []string `msgpack:"t"`
	N    int64    `msgpack:"n"`
}

type node struct {
	Next *node
	S    string
}

type rec struct {
	Name string
	At   time.Time
	Vals [3]string
}

func heapNow() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// checkHeap fails unless the heap bytes of n values made by mk and what
// the sizer says of them are within [0.85, 1.5] of each other. The heap
// they take is what dropping them frees (after a GC), the median of
// three tries: spans short enough that pebble's compactions in the tables
// of other tests move it little.
func checkHeap[T any](t *testing.T, name string, n int, mk func(i int) T) {
	t.Helper()
	sz := newTop[T](sizers{})
	var frees [3]int64
	var sum int64
	for try := range frees {
		vs := make([]T, n)
		sum = 0
		for i := range vs {
			vs[i] = mk(i)
			sum += sz.heap(&vs[i])
		}
		h1 := heapNow()
		clear(vs)
		frees[try] = int64(h1) - int64(heapNow())
		runtime.KeepAlive(vs)
	}
	slices.Sort(frees[:])
	real, est := float64(frees[1])/float64(n), float64(sum)/float64(n)
	t.Logf("%s: %.0f bytes a value in the heap, estimated %.0f", name, real, est)
	if est < real*0.85 || est > real*1.5 {
		t.Errorf("%s: estimated %.0f bytes a value, the heap took %.0f", name, est, real)
	}
}

// TestSizerHeap: the sizer's estimate of what a value points to is the
// Go heap it takes (over 500 values, see checkHeap), within [0.85, 1.5] of
// it, for the types stages keep: pointers to structs of slices of numbers
// and strings, strings, maps, interfaces (as msgpack decodes), a
// recursive type, structs with arrays of strings.
func TestSizerHeap(t *testing.T) {
	str := func(i, n int) string { return fmt.Sprintf("%0*d", n, i) }
	const n = 500
	checkHeap(t, "*buf", n, func(i int) *buf {
		b := &buf{N: int64(i)}
		for j := range 50 + i%50 {
			b.Xs = append(b.Xs, int64(j))
			if j%5 == 0 {
				b.Tags = append(b.Tags, str(j, 20+i%30))
			}
		}
		return b
	})
	checkHeap(t, "string", n, func(i int) string { return str(i, 100+i%200) })
	checkHeap(t, "[]int64", n, func(i int) []int64 { return make([]int64, 10+i%100) })
	checkHeap(t, "map[string]int64", n, func(i int) map[string]int64 {
		m := map[string]int64{}
		for j := range 20 {
			m[str(j, 24)] = int64(j)
		}
		return m
	})
	checkHeap(t, "map[string]any", n, func(i int) map[string]any {
		return map[string]any{"name": str(i, 40), "list": []any{str(i, 30), int64(i) + 1000, float64(i)}, "n": int64(i) << 20}
	})
	checkHeap(t, "*node", n, func(i int) *node {
		var l *node
		for j := range 20 {
			l = &node{Next: l, S: str(j, 30)}
		}
		return l
	})
	checkHeap(t, "[]rec", n, func(i int) []rec {
		rs := make([]rec, 100)
		for j := range rs {
			rs[j] = rec{Name: str(j, 20+j%40), Vals: [3]string{str(j, 20), str(j, 30), str(j, 40)}}
		}
		return rs
	})
}

// TestSizerCycle: a cyclic value (which no codec writes) is measured to
// a bounded depth, not forever.
func TestSizerCycle(t *testing.T) {
	a := &node{S: "a"}
	a.Next = &node{Next: a, S: "b"}
	s := newTop[*node](sizers{})
	if got := s.heap(&a); got <= 0 || got > maxDepth*64 {
		t.Fatalf("cycle measured %d bytes", got)
	}
}

// checkAccounts fails unless the cache's total is its entries' sizes
// summed, within the budget, and each entry's size what measuring it
// now gives (the values were changed only before their last Put).
func checkAccounts[K comparable, V any](t *testing.T, d *Disk[K, V], when string) {
	t.Helper()
	var sum int64
	for k, e := range d.m {
		sum += int64(e.size)
		want := d.sizeOf(&k, &e.v)
		if e.gone {
			want = d.sizeOf(&k, nil)
		}
		if e.size != want {
			t.Fatalf("%s: key %v counted %d bytes, measures %d", when, k, e.size, want)
		}
	}
	if d.bytes != sum || d.CacheBytes() != sum {
		t.Fatalf("%s: CacheBytes %d, the entries sum to %d", when, d.CacheBytes(), sum)
	}
	if sum > d.wb {
		t.Fatalf("%s: the cache holds %d bytes, over its budget of %d", when, sum, d.wb)
	}
}

// TestDiskCacheGrowingValues: pointer values whose slices grow in place
// (get, append, put the same pointer), deleted now and then, expired by
// a TTL, checkpointed (the cache written back and kept) and restored,
// under a small budget: the cache's total is always its entries' sizes
// and within the budget, and every value reads back as it was put.
func TestDiskCacheGrowingValues(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenDisk[int64, *buf](Spec{Dir: dir, Budget: 256 << 10}, "grow", 0, 1, func(k int64) uint64 { return uint64(k) * 0x9E3779B97F4A7C15 }, func(err error) { t.Error(err) })
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	now := int64(0)
	expired := 0
	d.SetTTL(24*time.Hour, func() int64 { return now }, func(int64, *buf) { expired++ })
	want := map[int64]int64{} // key: its value's length
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 20_000 {
		k := r.Int64N(400)
		now += int64(time.Second)
		switch v, ok := d.Get(k); {
		case ok != (want[k] > 0):
			t.Fatalf("op %d: key %d there %v, want %v", i, k, ok, want[k] > 0)
		case ok && (int64(len(v.Xs)) != want[k] || v.N != want[k] || len(v.Tags) != int(want[k]/10)):
			t.Fatalf("op %d: key %d has %d values (%d tags, n %d), want %d", i, k, len(v.Xs), len(v.Tags), v.N, want[k])
		case i%97 == 0 && ok:
			d.Delete(k)
			delete(want, k)
		default:
			if v == nil {
				v = &buf{}
			}
			for range 1 + r.IntN(20) {
				v.Xs = append(v.Xs, int64(len(v.Xs)))
				v.N++
				if v.N%10 == 0 {
					v.Tags = append(v.Tags, fmt.Sprintf("tag %d of key %d", v.N, k))
				}
			}
			d.Put(k, v, ok)
			want[k] = v.N
		}
		if d.bytes > d.wb {
			t.Fatalf("op %d: the cache holds %d bytes, over its budget of %d", i, d.bytes, d.wb)
		}
		if i%20 == 0 {
			checkAccounts(t, d, fmt.Sprintf("op %d", i))
		}
		if i%2500 == 2499 {
			if _, err := d.Snapshot(uint64(i)); err != nil {
				t.Fatal(err)
			}
			checkAccounts(t, d, fmt.Sprintf("after checkpoint %d", i))
		}
		if i == 15_000 {
			// A day later every key has expired.
			now += int64(25 * time.Hour)
			d.Expire()
			checkAccounts(t, d, "after Expire")
			clear(want)
		}
	}
	if d.Stats.Evicted == 0 || expired == 0 {
		t.Fatalf("evicted %d, expired %d: the test did not reach eviction and expiry", d.Stats.Evicted, expired)
	}
}

// TestDiskCacheDrift: many get-change-put cycles of cached pointer
// values (the cache never full) leave the counted total equal to a
// measurement of the entries as they are: what a Put replaces is
// subtracted as it was counted, not as the changed value measures.
func TestDiskCacheDrift(t *testing.T) {
	d, err := OpenDisk[string, *buf](Spec{Dir: t.TempDir(), Budget: 64 << 20}, "drift", 0, 1, func(k string) uint64 { return uint64(len(k)) }, func(err error) { t.Error(err) })
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 50_000 {
		k := fmt.Sprintf("key %d", r.IntN(300))
		v, ok := d.Get(k)
		if !ok {
			v = &buf{}
		}
		switch {
		case len(v.Xs) > 200:
			v.Xs = v.Xs[:0:0] // shrunk in place, then put
			v.Tags = nil
		default:
			v.Xs = append(v.Xs, int64(i))
			v.Tags = append(v.Tags, k)
		}
		d.Put(k, v, ok)
	}
	if d.Stats.Evicted != 0 {
		t.Fatalf("%d evicted: the test means to keep every entry cached", d.Stats.Evicted)
	}
	checkAccounts(t, d, "after 50000 cycles")
	var measured int64
	for k, e := range d.m {
		measured += int64(d.sizeOf(&k, &e.v))
	}
	if measured != d.CacheBytes() || measured < 300*8*100 {
		t.Fatalf("CacheBytes %d, the entries measure %d", d.CacheBytes(), measured)
	}
}

// TestDiskCacheHeapBounded: 1000 keys whose values grow in place to 8
// KiB each (8 MiB in all) under a budget of 1 MiB; then the cache, emptied,
// is filled by Gets to just under its half of the budget. The Go heap it
// holds then (measured after a GC as what dropping its entries frees: a
// measurement over a short span, so that pebble's compactions, and the
// tables other tests left, move it little) is at most twice the cache's
// budget. Counting an entry's slot alone (as before) let the Gets load
// every value: 8 MiB.
func TestDiskCacheHeapBounded(t *testing.T) {
	const keys, n = 1000, 1024
	d, err := OpenDisk[int64, *buf](Spec{Dir: t.TempDir(), Budget: 1 << 20}, "heap", 0, 1, func(k int64) uint64 { return uint64(k) }, func(err error) { t.Error(err) })
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for round := range 4 {
		for k := range int64(keys) {
			v, ok := d.Get(k)
			if !ok {
				v = &buf{}
			}
			for j := range n / 4 {
				v.Xs = append(v.Xs, int64(round*n/4+j))
			}
			d.Put(k, v, ok)
			if d.CacheBytes() > d.wb {
				t.Fatalf("the cache holds %d bytes, over its budget of %d", d.CacheBytes(), d.wb)
			}
		}
	}
	d.bytes = d.wb + 1
	d.maybeEvict() // written back, emptied
	ev := d.Stats.Evicted
	var last int64
	for k := int64(0); k < keys && d.CacheBytes()+last <= d.wb; k++ {
		before := d.CacheBytes()
		if v, _ := d.Get(k); len(v.Xs) != n {
			t.Fatalf("key %d has %d values, want %d", k, len(v.Xs), n)
		}
		last = d.CacheBytes() - before
	}
	if d.Stats.Evicted != ev {
		t.Fatal("the Gets filling the cache evicted it")
	}
	h1 := heapNow()
	cached, entries := d.CacheBytes(), len(d.m)
	clear(d.m)
	d.bytes = 0
	held := int64(h1) - int64(heapNow())
	t.Logf("%d entries counted %d KiB held %d KiB of the heap (budget %d KiB)", entries, cached>>10, held>>10, d.wb>>10)
	if held > 2*d.wb {
		t.Fatalf("a cache of %d entries counted %d bytes held %d bytes of the heap, over twice its budget of %d", entries, cached, held, d.wb)
	}
}

// TestDiskAllocs: a Get and Put of a cached key allocates nothing, for
// an int64 count and for a pointer value changed in place within its
// capacity: measuring it does not move the key or value to the heap.
func TestDiskAllocs(t *testing.T) {
	c, err := OpenDisk[int64, int64](Spec{Dir: t.TempDir()}, "count", 0, 1, func(k int64) uint64 { return uint64(k) }, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Put(7, 1, false)
	if a := testing.AllocsPerRun(1000, func() {
		v, ok := c.Get(7)
		c.Put(7, v+1, ok)
	}); a != 0 {
		t.Errorf("int64 count: %v allocations a Get and Put, want 0", a)
	}
	p, err := OpenDisk[string, *buf](Spec{Dir: t.TempDir()}, "bufs", 0, 1, func(k string) uint64 { return uint64(len(k)) }, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Put("k", &buf{Xs: make([]int64, 0, 4096), Tags: []string{"a", "b"}}, false)
	if a := testing.AllocsPerRun(1000, func() {
		v, ok := p.Get("k")
		v.Xs = append(v.Xs[:min(len(v.Xs), 4000)], 1)
		p.Put("k", v, ok)
	}); a != 0 {
		t.Errorf("*buf: %v allocations a Get and Put, want 0", a)
	}
	if got, min := p.CacheBytes(), int64(unsafe.Sizeof(buf{}))+4096*8; got < min {
		t.Errorf("*buf: CacheBytes %d, under the %d it points to", got, min)
	}
}
