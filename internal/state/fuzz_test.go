package state_test

import (
	"bytes"
	"os"
	"path/filepath"
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
