package state_test

import (
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/state"
)

// BenchmarkDiskCountLarge is the keyed count of the state-large benchmark
// on one table: b.N records over SLUICE_BENCH_KEYS distinct keys (default
// 1 M; record i counts key i mod keys, scrambled), with a cache budget of
// SLUICE_BENCH_BUDGET bytes (default 2 MiB, a few per cent of the keys):
// most records miss the cache. Run it with -benchtime=1200000x for the
// benchmark's shape (every key once, a fifth of them twice). Besides
// ns/op it reports the process's CPU time per record (pebble's
// compactions included), steadier than wall time on a loaded machine.
func BenchmarkDiskCountLarge(b *testing.B) {
	keys, budget := int64(1_000_000), int64(2<<20)
	if s := os.Getenv("SLUICE_BENCH_KEYS"); s != "" {
		keys, _ = strconv.ParseInt(s, 10, 64)
	}
	if s := os.Getenv("SLUICE_BENCH_BUDGET"); s != "" {
		budget, _ = strconv.ParseInt(s, 10, 64)
	}
	d, err := state.OpenDisk[int64, int64](state.Spec{Dir: b.TempDir(), Budget: budget}, "count", 0, 1, hash, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	keyOf := func(i int64) int64 { return int64(uint64(i%keys) * 0x9E3779B97F4A7C15) }
	cpu0 := cpuTime()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range int64(b.N) {
		k := keyOf(i)
		v, ok := d.Get(k)
		d.Put(k, v+1, ok)
	}
	var sum, n int64
	for _, v := range d.All {
		sum += v
		n++
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	if want := min(int64(b.N), keys); sum != int64(b.N) || n != want {
		b.Fatalf("%d keys summing to %d, want %d summing to %d", n, sum, want, b.N)
	}
	b.ReportMetric(float64(d.Stats.Loaded)/float64(b.N), "loaded/op")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
