package state_test

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/state"
)

// FuzzDiskRestore feeds hostile bytes to a disk table's restore: as the
// checkpoint's handle, and as its manifest. It must refuse them with an
// error, never panic, and leave a working table.
func FuzzDiskRestore(f *testing.F) {
	good, _ := msgpack.Marshal(map[string]any{"v": 1, "dir": "1-0", "crc": uint32(0)})
	f.Add(good, []byte("sluice state checkpoint v1\n\x83\xa2id\x01\xa4inst\x00\xa5files\x90\x00\x00\x00\x00"))
	f.Add([]byte{0x80}, []byte("junk"))
	f.Add([]byte("\x83\xa1v\x01\xa3dir\xa5../..\xa3crc\x00"), []byte{})
	f.Fuzz(func(t *testing.T, handle, manifest []byte) {
		dir := t.TempDir()
		d, err := state.OpenDisk[string, int64](state.Spec{Dir: dir, Budget: 1 << 16}, "count", 0, 1, func(k string) uint64 { return uint64(len(k)) }, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		chk := filepath.Join(dir, "count", "chk", "1-0")
		if err := os.MkdirAll(chk, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(chk, "SLUICE-STATE"), manifest, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := d.Restore([][]byte{handle}, 0, state.AllGroups); err == nil {
			return // a manifest listing no files is a valid empty checkpoint only with its own checksum
		}
		d.Put("k", 1, false)
		if v, ok := d.Get("k"); !ok || v != 1 {
			t.Fatalf("the table does not work after a refused restore: %d %v", v, ok)
		}
	})
}

// FuzzChangelogRestore feeds hostile bytes to a memory table's restore: as
// a changelog file (its CRC made right, so that the records are read) after
// a good base and alone, inside a savepoint's inline chain, and as the
// checkpoint's state itself (handle, inline chain or whole map). It must
// refuse them with an error, never panic, and leave the table as it was.
func FuzzChangelogRestore(f *testing.F) {
	dir := f.TempDir()
	m, err := state.OpenChangelog[string, int64](state.Spec{Changelog: dir}, "count", 0, 8, func(string, int, int) bool { return true })
	if err != nil {
		f.Fatal(err)
	}
	for _, w := range []string{"a", "b", "c", "d"} {
		m.Put(w, 1, false)
	}
	h1, _ := m.Snapshot(1)
	m.Put("a", 2, true)
	m.Delete("b")
	m.Put("b", 3, false)
	m.Put("e", 4, false)
	h2, _ := m.Snapshot(2)
	base, _ := state.Inline(h1, dir)
	chain, _ := state.Inline(h2, dir)
	baseFile := base[7:] // magic, version, one file, its length (one byte here)
	deltaFile := chain[len(base)+1:]
	r, _ := state.OpenChangelog[string, int64](state.Spec{Changelog: f.TempDir()}, "count", 0, 8, func(string, int, int) bool { return true })
	if err := r.Restore([][]byte{chain}, 0, state.AllGroups); err != nil || len(r.M) != 5 {
		f.Fatalf("the seed chain: %v, %d keys", err, len(r.M))
	}
	f.Add(baseFile[:len(baseFile)-4])
	f.Add(deltaFile[:len(deltaFile)-4])
	// a base of 8-byte keys and values (read by its own loop)
	ints, _ := state.OpenChangelog[int64, int64](state.Spec{Changelog: dir}, "ints", 0, 8, func(int64, int, int) bool { return true })
	ints.Put(1, 10, false)
	ints.Put(2, 20, false)
	hi, _ := ints.Snapshot(1)
	intsInline, _ := state.Inline(hi, dir)
	f.Add(intsInline[7 : len(intsInline)-4])
	f.Add(h2)
	f.Add([]byte("SLCI\x01\x01\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		file := binary.BigEndian.AppendUint32(slices.Clone(b), crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
		inline := func(files ...[]byte) []byte {
			out := []byte("SLCI\x01")
			out = binary.AppendUvarint(out, uint64(len(files)))
			for _, f := range files {
				out = binary.AppendUvarint(out, uint64(len(f)))
				out = append(out, f...)
			}
			return out
		}
		r, err := state.OpenChangelog[string, int64](state.Spec{Changelog: t.TempDir()}, "count", 0, 8, func(string, int, int) bool { return true })
		if err != nil {
			t.Fatal(err)
		}
		ri, err := state.OpenChangelog[int64, int64](state.Spec{Changelog: t.TempDir()}, "ints", 0, 8, func(int64, int, int) bool { return true })
		if err != nil {
			t.Fatal(err)
		}
		ri.Put(7, 7, false)
		if err := ri.Restore([][]byte{inline(file)}, 0, state.AllGroups); err != nil {
			if v, ok := ri.Get(7); !ok || v != 7 || len(ri.M) != 1 || len(ri.Order) != 1 {
				t.Fatalf("the table of ints changed after a refused restore")
			}
		}
		r.Put("keep", 7, false)
		for _, snap := range [][]byte{inline(baseFile, file), inline(file), b} {
			for _, rg := range [][2]int{{0, state.AllGroups}, {0, 64}} {
				if err := r.Restore([][]byte{snap}, rg[0], rg[1]); err == nil {
					return // a valid chain (the fuzzer may write one)
				}
				if v, ok := r.Get("keep"); !ok || v != 7 || len(r.M) != 1 || len(r.Order) != 1 {
					t.Fatalf("the table changed after a refused restore")
				}
			}
		}
	})
}

// FuzzResolveDisk: a savepoint's state bytes, resolved against its
// directory, never panic, are returned unchanged unless they are a disk
// handle of version 2, and never resolve to a place outside the savepoint.
func FuzzResolveDisk(f *testing.F) {
	v2, _ := msgpack.Marshal(map[string]any{"v": 2, "dir": "7-1", "crc": uint32(9), "rel": "disk/count%2F1"})
	out, _ := msgpack.Marshal(map[string]any{"v": 2, "dir": "7-1", "crc": uint32(9), "rel": "../../etc"})
	f.Add(v2)
	f.Add(out)
	f.Add([]byte{0x80})
	f.Add([]byte("plain state"))
	f.Fuzz(func(t *testing.T, b []byte) {
		sp := t.TempDir()
		got, disk, err := state.ResolveDisk(b, sp)
		if err != nil {
			return
		}
		if !disk {
			if !bytes.Equal(got, b) {
				t.Fatalf("non-disk state changed: %q -> %q", b, got)
			}
			return
		}
		var h struct {
			Abs string `msgpack:"abs"`
		}
		if err := msgpack.Unmarshal(got, &h); err != nil {
			t.Fatal(err)
		}
		if rel, err := filepath.Rel(sp, h.Abs); err != nil || !filepath.IsLocal(rel) {
			t.Fatalf("resolved to %q, outside the savepoint %q", h.Abs, sp)
		}
	})
}
