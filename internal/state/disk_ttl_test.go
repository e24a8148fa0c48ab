package state_test

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/state"
)

// ttlTable is a disk table with a TTL of a minute on a fake clock (the
// returned pointer, Unix nanoseconds) whose expired entries are counted
// by key.
func ttlTable(t *testing.T, dir string, budget int64) (*state.Disk[int64, int64], *int64, map[int64]int) {
	t.Helper()
	d := open(t, dir, 0, budget)
	now := new(int64)
	gone := map[int64]int{}
	d.SetTTL(time.Minute, func() int64 { return *now }, func(k, v int64) {
		if v != k {
			t.Errorf("expired key %d had %d, want %d", k, v, k)
		}
		gone[k]++
	})
	return d, now, gone
}

// TestDiskTTL: an entry not put for a TTL is not returned by Get or All,
// whether it is in the cache or only on disk; the hook hears of each
// once; Expire removes the rest from the database (they do not come back
// when the clock is put back); the others stay.
func TestDiskTTL(t *testing.T) {
	const keys = 20_000
	d, now, gone := ttlTable(t, t.TempDir(), 64<<10) // most entries on disk only
	for k := range int64(keys) {
		d.Put(k, k, false)
	}
	*now = int64(30 * time.Second)
	for k := int64(0); k < keys; k += 2 { // the even keys put again
		d.Put(k, k, true)
	}
	*now = int64(time.Minute) // the odd keys' TTL is over, not the even ones'
	for _, k := range []int64{1, 3, keys - 1} {
		if v, ok := d.Get(k); ok {
			t.Fatalf("expired key %d: Get returned %d", k, v)
		}
	}
	for _, k := range []int64{0, 2, keys - 2} {
		if v, ok := d.Get(k); !ok || v != k {
			t.Fatalf("key %d: Get returned %d, %v", k, v, ok)
		}
	}
	n := 0
	for k := range d.All {
		if k%2 != 0 {
			t.Fatalf("All returned the expired key %d", k)
		}
		n++
	}
	if n != keys/2 {
		t.Fatalf("All returned %d keys, want %d", n, keys/2)
	}
	if left := d.Expire(); left != keys/2 {
		t.Fatalf("Expire left %d entries, want %d", left, keys/2)
	}
	if len(gone) != keys/2 {
		t.Fatalf("%d keys expired, want %d", len(gone), keys/2)
	}
	for k, c := range gone {
		if k%2 == 0 || c != 1 {
			t.Fatalf("key %d expired %d times", k, c)
		}
	}
	if d.Expire() != keys/2 || len(gone) != keys/2 {
		t.Fatal("a second Expire found more")
	}
	// Back to the start: an expired entry still on disk would be alive
	// again.
	*now = 0
	n = 0
	for k := range d.All {
		if k%2 != 0 {
			t.Fatalf("key %d is still in the database after Expire", k)
		}
		n++
	}
	if n != keys/2 {
		t.Fatalf("%d keys left, want %d", n, keys/2)
	}
	*now = int64(90 * time.Second) // the even keys' TTL is over too
	if left := d.Expire(); left != 0 || len(gone) != keys {
		t.Fatalf("Expire left %d, %d keys expired in all, want 0 and %d", left, len(gone), keys)
	}
	if d.Stats.Expired != keys {
		t.Fatalf("Stats.Expired %d, want %d", d.Stats.Expired, keys)
	}
}

// TestDiskTTLCheckpoint: the times are checkpointed with the values (a
// restored entry expires when it would have); a checkpoint taken without
// a TTL is refused by a table with one, and the other way round, naming
// the checkpoint.
func TestDiskTTLCheckpoint(t *testing.T) {
	dir := t.TempDir()
	d, now, _ := ttlTable(t, dir, 1<<20)
	d.Put(1, 1, false)
	*now = int64(30 * time.Second)
	d.Put(2, 2, false)
	h, err := d.Snapshot(1)
	if err != nil {
		t.Fatal(err)
	}
	r, rnow, rgone := ttlTable(t, dir, 1<<20)
	if err := r.Restore([][]byte{h}, 0, state.AllGroups); err != nil {
		t.Fatal(err)
	}
	*rnow = int64(70 * time.Second)
	if _, ok := r.Get(1); ok {
		t.Fatal("restored key 1 outlived its TTL")
	}
	if v, ok := r.Get(2); !ok || v != 2 {
		t.Fatalf("restored key 2: %d, %v", v, ok)
	}
	if !slices.Equal(slices.Collect(maps.Keys(rgone)), []int64{1}) {
		t.Fatalf("expired %v, want [1]", rgone)
	}
	// A rescale's restore copies the times too.
	s := open(t, dir, 1, 1<<20)
	snow := int64(70 * time.Second)
	s.SetTTL(time.Minute, func() int64 { return snow }, nil)
	if err := s.Restore([][]byte{h}, 0, 128); err != nil {
		t.Fatal(err)
	}
	if got := slices.Collect(maps.Keys(maps.Collect(s.All))); !slices.Equal(got, []int64{2}) {
		t.Fatalf("after a rescale's restore: %v, want [2]", got)
	}

	plain := open(t, dir, 0, 1<<20)
	if err := plain.Restore([][]byte{h}, 0, state.AllGroups); err == nil || !strings.Contains(err.Error(), "with a StateTTL") || !strings.Contains(err.Error(), "1-0") {
		t.Fatalf("a table without a TTL restored a checkpoint with one: %v", err)
	}
	plain.Put(5, 5, false)
	hp, err := plain.Snapshot(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Restore([][]byte{hp}, 0, state.AllGroups); err == nil || !strings.Contains(err.Error(), "without a StateTTL") {
		t.Fatalf("a table with a TTL restored a checkpoint without one: %v", err)
	}
}
