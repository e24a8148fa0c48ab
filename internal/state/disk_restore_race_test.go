package state

import (
	"path/filepath"
	"sync"
	"testing"
)

// TestDiskRestoreRacesAnOpen: a table restoring from a checkpoint while
// another instance of its operator opens its own table (which removes the
// working databases no process holds) keeps its restored state. Restore
// used to close its database, remove its directory and link the
// checkpoint into it before opening it again: in that window the
// directory's LOCK was free, and the other instance's sweep removed the
// directory, links and all, under it; the restore then opened an empty
// database (every key lost, no error) or failed.
func TestDiskRestoreRacesAnOpen(t *testing.T) {
	dir := t.TempDir()
	hash := func(k int64) uint64 { return uint64(k) * 0x9E3779B97F4A7C15 }
	d, err := OpenDisk[int64, int64](Spec{Dir: dir, Budget: 1 << 20}, "count", 0, 2, hash, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const keys = 200
	for k := range int64(keys) {
		d.Put(k, k+1, false)
	}
	h, err := d.Snapshot(1)
	if err != nil {
		t.Fatal(err)
	}
	live := filepath.Join(dir, "count", "live")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the other instance's sweep, as OpenDisk runs it
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			removeUnlocked(live)
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	for i := range 100 {
		if err := d.Restore([][]byte{h}, 0, AllGroups); err != nil {
			t.Fatalf("restore %d: %v", i, err)
		}
		n := 0
		for k, v := range d.All {
			if v != k+1 {
				t.Fatalf("restore %d: key %d: %d", i, k, v)
			}
			n++
		}
		if n != keys {
			t.Fatalf("restore %d: %d keys, want %d", i, n, keys)
		}
	}
}
