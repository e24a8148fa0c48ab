package savepoint

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/state"
)

// A savepoint of disk state holds copies of the checkpoints' directories
// (state.ExportDisk through WriteWith): it opens after the operator's state
// directory is gone and after it was moved; a damaged copy is refused,
// naming the file, with nothing changed; a handle naming a place outside
// the savepoint is refused.
func TestDiskStateCopies(t *testing.T) {
	stateDir := t.TempDir()
	cp := testCheckpoint()
	hash := func(k string) uint64 { return uint64(len(k)) * 0x9e3779b97f4a7c15 }
	for inst := range 2 {
		d, err := state.OpenDisk[string, int64](state.Spec{Dir: stateDir, Budget: 1 << 10}, "count", inst, 2, hash, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 500 {
			d.Put(strings.Repeat("k", i%37+1)+string(rune('a'+i%26)), int64(i), false)
		}
		h, err := d.Snapshot(7)
		if err != nil {
			t.Fatal(err)
		}
		if !state.IsDiskHandle(h) {
			t.Fatalf("a disk table's snapshot is not a disk handle: %q", h)
		}
		cp.States["count/"+string(rune('0'+inst))] = h
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "sp")
	_, err := WriteWith(dir, "counts", cp, func(dir string, states map[string][]byte) error {
		for _, k := range []string{"count/0", "count/1"} {
			out, err := state.ExportDisk(states[k], filepath.Join(stateDir, "count"), dir, filepath.Join("disk", strings.ReplaceAll(k, "/", "-")))
			if err != nil {
				return err
			}
			states[k] = out
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(stateDir); err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(t.TempDir(), "moved")
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	sp, err := Open(moved)
	if err != nil {
		t.Fatalf("a moved savepoint of disk state, its job's state directory gone: %v", err)
	}
	// Its states restore into a fresh table of the operator.
	d, err := state.OpenDisk[string, int64](state.Spec{Dir: t.TempDir(), Budget: 1 << 10}, "count", 0, 1, hash, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Restore([][]byte{sp.States["count/0"], sp.States["count/1"]}, 0, state.AllGroups); err != nil {
		t.Fatalf("restore from the savepoint's copies: %v", err)
	}
	n := 0
	for range d.All {
		n++
	}
	if n != 500 {
		t.Fatalf("%d keys restored from the two instances' copies, want 500", n)
	}
	d.Close()

	// A damaged copy: an sstable cut short.
	var sst string
	filepath.WalkDir(filepath.Join(moved, "disk"), func(p string, e os.DirEntry, err error) error {
		if err == nil && sst == "" && strings.HasSuffix(p, ".sst") {
			sst = p
		}
		return err
	})
	if sst == "" {
		t.Fatal("no sstable in the savepoint's copies")
	}
	b := mustRead(t, sst)
	if err := os.WriteFile(sst, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, moved)
	_, err = Open(moved)
	if err == nil || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), filepath.Base(sst)) {
		t.Fatalf("a savepoint with a truncated sstable copy: %v (want ErrCorrupt naming %s)", err, filepath.Base(sst))
	}
	if after := snapshot(t, moved); len(after) != len(before) {
		t.Fatal("Open changed the savepoint")
	}

	// A copy's handle naming a place outside the savepoint.
	if _, _, err := state.ResolveDisk(escapeHandle(t, sp.States["count/0"]), moved); err == nil {
		t.Fatal("a handle naming ../ resolved")
	}
}

// escapeHandle rewrites a savepoint's disk handle to name ../elsewhere
// (the handle's fields as the state package writes them).
func escapeHandle(t *testing.T, b []byte) []byte {
	t.Helper()
	var h map[string]any
	if err := msgpack.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	h["rel"], h["abs"] = "../elsewhere", ""
	out, err := msgpack.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
