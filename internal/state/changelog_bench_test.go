package state_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/state"
)

// BenchmarkChangelogBase is the snapshot of a memory table of 500 000
// int64 keys that all changed since the last one (a base): what a keyed
// count over 1 M keys on two instances pays at each checkpoint when its
// records reach every key in a second.
func BenchmarkChangelogBase(b *testing.B) {
	const keys = 500_000
	m, err := state.OpenChangelog[int64, int64](state.Spec{Changelog: b.TempDir()}, "count", 0, 8, owns)
	if err != nil {
		b.Fatal(err)
	}
	for k := range int64(keys) {
		m.Put(k*7919, k, false)
	}
	b.ResetTimer()
	b.StopTimer()
	for i := range b.N {
		for k := range int64(keys) {
			m.Put(k*7919, k+int64(i), true)
		}
		b.StartTimer()
		if _, err := m.Snapshot(uint64(i + 1)); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		m.Committed(uint64(i + 1))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*keys), "ns/key")
}

// BenchmarkChangelogRestore is a recovery of a memory table of 2 M int64
// keys from its base (in map order, as every base is written since session
// 12) into a fresh table: the recovery's part that grows with the state.
func BenchmarkChangelogRestore(b *testing.B) {
	const keys = 2_000_000
	dir := b.TempDir()
	m, err := state.OpenChangelog[int64, int64](state.Spec{Changelog: dir}, "count", 0, 8, owns)
	if err != nil {
		b.Fatal(err)
	}
	for k := range int64(keys) {
		m.Put(k*7919, k, false)
	}
	h, err := m.Snapshot(1)
	if err != nil {
		b.Fatal(err)
	}
	m = nil
	b.ResetTimer()
	for i := range b.N {
		r, err := state.OpenChangelog[int64, int64](state.Spec{Changelog: dir}, "count", i+1, 8, owns)
		if err != nil {
			b.Fatal(err)
		}
		if err := r.Restore([][]byte{h}, 0, state.AllGroups); err != nil {
			b.Fatal(err)
		}
		if len(r.M) != keys {
			b.Fatalf("restored %d keys of %d", len(r.M), keys)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*keys), "ns/key")
}
