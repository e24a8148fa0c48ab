package state_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/state"
)

func hash(k int64) uint64 { return uint64(k) * 0x9E3779B97F4A7C15 }

func open(t *testing.T, dir string, inst int, budget int64) *state.Disk[int64, int64] {
	t.Helper()
	d, err := state.OpenDisk[int64, int64](state.Spec{Dir: dir, Budget: budget}, "count", inst, 2, hash, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	})
	return d
}

// TestDiskBudget: the cache stays within its budget however many keys
// there are, and every key reads back.
func TestDiskBudget(t *testing.T) {
	const budget, keys = 64 << 10, 50_000
	d := open(t, t.TempDir(), 0, budget)
	for k := range int64(keys) {
		v, ok := d.Get(k)
		d.Put(k, v+k, ok)
		if d.CacheBytes() > budget {
			t.Fatalf("after %d keys the cache holds %d bytes, budget %d", k+1, d.CacheBytes(), budget)
		}
	}
	if d.Stats.Evicted < keys/2 {
		t.Fatalf("only %d entries evicted", d.Stats.Evicted)
	}
	n := 0
	for k, v := range d.All {
		if v != k {
			t.Fatalf("key %d: %d", k, v)
		}
		n++
	}
	if n != keys {
		t.Fatalf("%d keys, want %d", n, keys)
	}
}

// TestDiskIncrementalRestore: a checkpoint after a few changes writes only
// its new files; restoring it gives the state as of it; retention removes
// the older checkpoints.
func TestDiskIncrementalRestore(t *testing.T) {
	dir := t.TempDir()
	d := open(t, dir, 0, 1<<20)
	for k := range int64(20_000) {
		d.Put(k, 1, false)
	}
	if _, err := d.Snapshot(1); err != nil {
		t.Fatal(err)
	}
	full := d.Stats.LastNew
	for k := range int64(100) {
		d.Put(k, 2, true)
	}
	d.Delete(500)
	h, err := d.Snapshot(2)
	if err != nil {
		t.Fatal(err)
	}
	if d.Stats.LastNew*5 > full {
		t.Fatalf("the incremental checkpoint wrote %d bytes, the first %d", d.Stats.LastNew, full)
	}
	d.Put(7, 99, true) // after the checkpoint: not restored
	for _, id := range []uint64{3, 4} {
		if _, err := d.Snapshot(id); err != nil {
			t.Fatal(err)
		}
	}
	d.Committed(2)
	r := open(t, dir, 1, 1<<20)
	if err := r.Restore([][]byte{h}, 0, state.AllGroups); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[int64]int64{0: 2, 7: 2, 99: 2, 100: 1, 19_999: 1} {
		if v, ok := r.Get(k); !ok || v != want {
			t.Fatalf("key %d: %d %v, want %d", k, v, ok, want)
		}
	}
	if _, ok := r.Get(500); ok {
		t.Fatal("deleted key 500 restored")
	}
	// Checkpoints 2 to 4 are deltas on base 1: keeping 3 and 4 keeps the
	// base and delta 2 they chain on (TestDiskDeltaRetention removes them
	// once no retained checkpoint needs them).
	d.Committed(4)
	for _, n := range []string{"1-0", "2-0", "3-0", "4-0"} {
		if _, err := os.Stat(filepath.Join(dir, "count", "chk", n)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDiskBadCheckpoint: a corrupt, truncated or missing file of a
// checkpoint, or a manifest of another checkpoint, is refused with an error
// naming the file.
func TestDiskBadCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name string
		harm func(t *testing.T, chk string) string // returns the file named
	}{
		{"truncated sstable", func(t *testing.T, chk string) string {
			p := sst(t, chk)
			st, _ := os.Stat(p)
			if err := os.Truncate(p, st.Size()/2); err != nil {
				t.Fatal(err)
			}
			return p
		}},
		{"flipped byte", func(t *testing.T, chk string) string {
			p := sst(t, chk)
			b, _ := os.ReadFile(p)
			b[len(b)/3] ^= 0xff
			// A new file (the checkpoint's sstables are links to the live
			// database's).
			os.Remove(p)
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}},
		{"missing sstable", func(t *testing.T, chk string) string {
			p := sst(t, chk)
			os.Remove(p)
			return p
		}},
		{"truncated manifest", func(t *testing.T, chk string) string {
			p := filepath.Join(chk, "SLUICE-STATE")
			if err := os.Truncate(p, 10); err != nil {
				t.Fatal(err)
			}
			return p
		}},
		{"another checkpoint's manifest", func(t *testing.T, chk string) string {
			p := filepath.Join(chk, "SLUICE-STATE")
			b, err := os.ReadFile(filepath.Join(filepath.Dir(chk), "2-0", "SLUICE-STATE"))
			if err != nil {
				t.Fatal(err)
			}
			os.Remove(p)
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			d := open(t, dir, 0, 1<<20)
			for k := range int64(5000) {
				d.Put(k, k, false)
			}
			h, err := d.Snapshot(1)
			if err != nil {
				t.Fatal(err)
			}
			d.Put(1, 0, true)
			if _, err := d.Snapshot(2); err != nil {
				t.Fatal(err)
			}
			named := tc.harm(t, filepath.Join(dir, "count", "chk", "1-0"))
			r := open(t, dir, 1, 1<<20)
			err = r.Restore([][]byte{h}, 0, state.AllGroups)
			var se *state.Error
			if !errors.As(err, &se) || se.Path != named || !errors.Is(err, state.ErrCorrupt) && !strings.Contains(err.Error(), "no such file") {
				t.Fatalf("restore: %v, want a corrupt-checkpoint error naming %s", err, named)
			}
			t.Log(err)
		})
	}
	t.Run("foreign handle", func(t *testing.T) {
		r := open(t, t.TempDir(), 0, 1<<20)
		for _, h := range [][]byte{[]byte("not msgpack"), {0x83, 0xa1, 'v', 0x02, 0xa3, 'd', 'i', 'r', 0xa3, '1', '-', '0', 0xa3, 'c', 'r', 'c', 0x00}} {
			if err := r.Restore([][]byte{h}, 0, state.AllGroups); err == nil {
				t.Fatalf("handle %q restored", h)
			} else {
				t.Log(err)
			}
		}
	})
}

func sst(t *testing.T, dir string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
	if len(m) == 0 {
		t.Fatalf("no sstable in %s", dir)
	}
	return m[0]
}
