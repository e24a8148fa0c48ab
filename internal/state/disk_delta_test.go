package state_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/state"
)

func openSpec(t testing.TB, spec state.Spec, inst, parts int) *state.Disk[int64, int64] {
	t.Helper()
	d, err := state.OpenDisk[int64, int64](spec, "count", inst, parts, hash, nil)
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

func all(d *state.Disk[int64, int64]) map[int64]int64 {
	out := map[int64]int64{}
	for k, v := range d.All {
		out[k] = v
	}
	return out
}

// TestDiskDeltaBytes: with 1 % of the keys changed, an incremental (delta)
// checkpoint writes under 3 % of the bytes of a full one of the same state.
func TestDiskDeltaBytes(t *testing.T) {
	const keys = 200_000
	d := openSpec(t, state.Spec{Dir: t.TempDir(), Budget: 1 << 20}, 0, 1)
	for k := range int64(keys) {
		d.Put(k, k, false)
	}
	if _, err := d.Snapshot(1); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for id := uint64(2); id <= 4; id++ {
		for range keys / 100 {
			k := rng.Int64N(keys)
			v, _ := d.Get(k)
			d.Put(k, v+1, true)
		}
		if _, err := d.Snapshot(id); err != nil {
			t.Fatal(err)
		}
		if !d.Stats.LastDelta {
			t.Fatalf("checkpoint %d is a base", id)
		}
	}
	delta := d.Stats.LastNew
	if _, err := d.SnapshotCopy(5); err != nil {
		t.Fatal(err)
	}
	full := d.Stats.LastNew
	t.Logf("delta %d bytes, full %d bytes: %.4f", delta, full, float64(delta)/float64(full))
	if delta*100 > 3*full {
		t.Fatalf("a delta of 1 %% of the keys wrote %d bytes, a full checkpoint %d: over 3 %%", delta, full)
	}
}

// TestDiskDeltaChainModel: random puts and deletes through a small cache
// (most changes written back before the checkpoint), a chain of bases and
// deltas; every checkpoint restores to the model's state as of it, whole
// and by key-group range; retention keeps exactly the directories the
// retained checkpoints' chains need.
func TestDiskDeltaChainModel(t *testing.T) {
	dir := t.TempDir()
	spec := state.Spec{Dir: dir, Budget: 64 << 10, MaxChain: 4, Retain: 2}
	d := openSpec(t, spec, 0, 1)
	model := map[int64]int64{}
	rng := rand.New(rand.NewPCG(3, 4))
	type cp struct {
		h     []byte
		model map[int64]int64
		delta bool
	}
	var cps []cp
	chk := filepath.Join(dir, "count", "chk")
	for id := uint64(1); id <= 16; id++ {
		n := 300
		if id == 1 {
			n = 5000
		}
		for range n {
			k := rng.Int64N(3000)
			if rng.IntN(4) == 0 {
				d.Delete(k)
				delete(model, k)
			} else {
				v := rng.Int64()
				d.Put(k, v, false)
				model[k] = v
			}
		}
		h, err := d.Snapshot(id)
		if err != nil {
			t.Fatal(err)
		}
		cps = append(cps, cp{h, maps.Clone(model), d.Stats.LastDelta})
		d.Committed(id)
		// Expected: the chains of the newest two.
		want := map[string]bool{}
		for x := max(int(id)-1, 1); x <= int(id); x++ {
			b := x
			for cps[b-1].delta {
				b--
			}
			for i := b; i <= x; i++ {
				want[fmt.Sprintf("%d-0", i)] = true
			}
		}
		ents, _ := os.ReadDir(chk)
		got := map[string]bool{}
		for _, e := range ents {
			got[e.Name()] = true
		}
		if !maps.Equal(got, want) {
			t.Fatalf("after checkpoint %d: directories %v, want %v", id, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
		}
		// Every retained checkpoint restores to its model, whole and in two
		// halves of the key groups.
		for x := max(int(id)-1, 1); x <= int(id); x++ {
			c := cps[x-1]
			r := openSpec(t, spec, 1, 2)
			if err := r.Restore([][]byte{c.h}, 0, state.AllGroups); err != nil {
				t.Fatalf("restore %d: %v", x, err)
			}
			if got := all(r); !maps.Equal(got, c.model) {
				t.Fatalf("checkpoint %d restored %d keys, the model %d", x, len(got), len(c.model))
			}
			lo := openSpec(t, spec, 2, 3)
			hi := openSpec(t, spec, 3, 4)
			if err := lo.Restore([][]byte{c.h}, 0, 64); err != nil {
				t.Fatal(err)
			}
			if err := hi.Restore([][]byte{c.h}, 64, state.AllGroups); err != nil {
				t.Fatal(err)
			}
			a, b := all(lo), all(hi)
			for k := range a {
				if hash(k)%128 >= 64 {
					t.Fatalf("key %d of group %d restored into [0, 64)", k, hash(k)%128)
				}
			}
			maps.Copy(a, b)
			if !maps.Equal(a, c.model) {
				t.Fatalf("checkpoint %d restored by halves: %d keys, the model %d", x, len(a), len(c.model))
			}
			for _, t2 := range []*state.Disk[int64, int64]{r, lo, hi} {
				t2.Close()
			}
		}
	}
	deltas := 0
	for _, c := range cps {
		if c.delta {
			deltas++
		}
	}
	if deltas < 8 {
		t.Fatalf("only %d of %d checkpoints were deltas", deltas, len(cps))
	}
}

// deltaChain makes base 1 and delta 2 and returns checkpoint 2's handle.
func deltaChain(t testing.TB, dir string) (*state.Disk[int64, int64], []byte) {
	d := openSpec(t, state.Spec{Dir: dir, Budget: 1 << 20}, 0, 1)
	for k := range int64(5000) {
		d.Put(k, k, false)
	}
	if _, err := d.Snapshot(1); err != nil {
		t.Fatal(err)
	}
	for k := range int64(50) {
		d.Put(k, -k, true)
	}
	d.Delete(100)
	h, err := d.Snapshot(2)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Stats.LastDelta {
		t.Fatal("checkpoint 2 is a base")
	}
	return d, h
}

// rewriteDelta replaces checkpoint 2's delta file by data (its trailing
// CRC made right when fix) and its manifest to match, and returns a
// handle naming them.
func rewriteDelta(t testing.TB, dir string, h, data []byte, fix bool) []byte {
	if fix && len(data) >= 4 {
		data = binary.BigEndian.AppendUint32(data[:len(data)-4:len(data)-4], crc32.Checksum(data[:len(data)-4], crc32.MakeTable(crc32.Castagnoli)))
	}
	chk := filepath.Join(dir, "count", "chk", "2-0")
	if err := os.WriteFile(filepath.Join(chk, "SLUICE-DELTA"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	tab := crc32.MakeTable(crc32.Castagnoli)
	body, _ := msgpack.Marshal(map[string]any{"id": 2, "inst": 0, "files": []map[string]any{{"n": "SLUICE-DELTA", "s": len(data), "c": crc32.Checksum(data, tab)}}})
	crc := crc32.Checksum(body, tab)
	out := append([]byte("sluice state checkpoint v1\n"), body...)
	out = binary.BigEndian.AppendUint32(out, crc)
	if err := os.WriteFile(filepath.Join(chk, "SLUICE-STATE"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	var hm map[string]any
	if err := msgpack.Unmarshal(h, &hm); err != nil {
		t.Fatal(err)
	}
	hm["deltas"] = []map[string]any{{"dir": "2-0", "crc": crc}}
	nb, _ := msgpack.Marshal(hm)
	return nb
}

// TestDiskDeltaBad: a damaged, truncated, foreign, newer or out-of-chain
// delta is refused with an error naming its file, and the table is left
// as it was.
func TestDiskDeltaBad(t *testing.T) {
	for _, tc := range []struct {
		name string
		harm func(t *testing.T, dir string, h, data []byte) []byte // the handle to restore
		want string
	}{
		{"flipped byte", func(t *testing.T, dir string, h, data []byte) []byte {
			data[len(data)/2] ^= 0xff
			os.WriteFile(filepath.Join(dir, "count", "chk", "2-0", "SLUICE-DELTA"), data, 0o644)
			return h
		}, "checksum"},
		{"truncated", func(t *testing.T, dir string, h, data []byte) []byte {
			os.Truncate(filepath.Join(dir, "count", "chk", "2-0", "SLUICE-DELTA"), int64(len(data)/2))
			return h
		}, "truncated"},
		{"truncated, manifest made to match", func(t *testing.T, dir string, h, data []byte) []byte {
			return rewriteDelta(t, dir, h, data[:len(data)/2], false)
		}, "CRC mismatch or truncated"},
		{"record lengths past the end", func(t *testing.T, dir string, h, data []byte) []byte {
			copy(data[31:], []byte{0xff, 0xff, 0xff, 0xff, 0x0f}) // the first record's key length: 34 G
			return rewriteDelta(t, dir, h, data, true)
		}, "left"},
		{"newer version", func(t *testing.T, dir string, h, data []byte) []byte {
			data[4] = 9
			return rewriteDelta(t, dir, h, data, true)
		}, "format version 9"},
		{"foreign: a memory changelog delta", func(t *testing.T, dir string, h, data []byte) []byte {
			data[5] = 2
			return rewriteDelta(t, dir, h, data, true)
		}, "not a disk state delta"},
		{"foreign: not a changelog file", func(t *testing.T, dir string, h, data []byte) []byte {
			return rewriteDelta(t, dir, h, []byte("PK\x03\x04 a zip file, say"), true)
		}, "not a changelog file"},
		{"out of chain", func(t *testing.T, dir string, h, data []byte) []byte {
			binary.BigEndian.PutUint64(data[14:], 7) // follows checkpoint 7
			return rewriteDelta(t, dir, h, data, true)
		}, "out of chain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, h := deltaChain(t, dir)
			p := filepath.Join(dir, "count", "chk", "2-0", "SLUICE-DELTA")
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			h = tc.harm(t, dir, h, data)
			r := openSpec(t, state.Spec{Dir: dir, Budget: 1 << 20}, 1, 2)
			r.Put(1, 42, false)
			err = r.Restore([][]byte{h}, 0, state.AllGroups)
			var se *state.Error
			if !errors.As(err, &se) || se.Path != p || !errors.Is(err, state.ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("restore: %v, want a corrupt-checkpoint error naming %s and saying %q", err, p, tc.want)
			}
			t.Log(err)
			if v, ok := r.Get(1); !ok || v != 42 {
				t.Fatalf("the table changed under a refused restore: %d %v", v, ok)
			}
		})
	}
	t.Run("handle version 5", func(t *testing.T) {
		dir := t.TempDir()
		_, h := deltaChain(t, dir)
		var hm map[string]any
		msgpack.Unmarshal(h, &hm)
		hm["v"] = 5
		nb, _ := msgpack.Marshal(hm)
		r := openSpec(t, state.Spec{Dir: dir, Budget: 1 << 20}, 1, 2)
		if err := r.Restore([][]byte{nb}, 0, state.AllGroups); err == nil || !strings.Contains(err.Error(), "version 5") {
			t.Fatalf("restore: %v, want the version named", err)
		}
	})
}

// TestDiskDeltaExport: a savepoint's copy of a checkpoint with deltas
// holds them, restores after the state directory is gone, and is checked.
func TestDiskDeltaExport(t *testing.T) {
	dir, sp := t.TempDir(), t.TempDir()
	d, h := deltaChain(t, dir)
	want := all(d)
	out, err := state.ExportDisk(h, filepath.Join(dir, "count"), sp, filepath.Join("disk", "count%2F0"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(sp, "disk", "count%2F0+2-0", "SLUICE-DELTA")); err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(t.TempDir(), "sp")
	if err := os.Rename(sp, moved); err != nil {
		t.Fatal(err)
	}
	res, disk, err := state.ResolveDisk(out, moved)
	if err != nil || !disk {
		t.Fatalf("resolve: %v %v", disk, err)
	}
	if err := state.VerifyDisk(res); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	r := openSpec(t, state.Spec{Dir: other, Budget: 1 << 20}, 0, 1)
	if err := r.Restore([][]byte{res}, 0, state.AllGroups); err != nil {
		t.Fatal(err)
	}
	if got := all(r); !maps.Equal(got, want) {
		t.Fatalf("restored %d keys, want %d", len(got), len(want))
	}
	if err := os.Truncate(filepath.Join(moved, "disk", "count%2F0+2-0", "SLUICE-DELTA"), 10); err != nil {
		t.Fatal(err)
	}
	if err := state.VerifyDisk(res); err == nil || !strings.Contains(err.Error(), "SLUICE-DELTA") {
		t.Fatalf("verify of a truncated delta: %v", err)
	}
}

// FuzzDiskDelta feeds hostile bytes to a disk table's restore as the
// delta file of a chain (its CRC and manifest made right, so that the
// records are read). It must refuse them or restore, never panic, and
// leave a working table.
func FuzzDiskDelta(f *testing.F) {
	seedDir := f.TempDir()
	_, h := deltaChain(f, seedDir)
	good, err := os.ReadFile(filepath.Join(seedDir, "count", "chk", "2-0", "SLUICE-DELTA"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:40])
	f.Add([]byte("SLCL\x01\x03"))
	bad := slices.Clone(good)
	bad[26] = 0xff
	f.Add(bad)
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.CopyFS(filepath.Join(dir, "count", "chk"), os.DirFS(filepath.Join(seedDir, "count", "chk"))); err != nil {
			t.Fatal(err)
		}
		nh := rewriteDelta(t, dir, h, slices.Clone(data), true)
		r, err := state.OpenDisk[int64, int64](state.Spec{Dir: dir, Budget: 1 << 20}, "count", 1, 2, hash, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		_ = r.Restore([][]byte{nh}, 0, state.AllGroups)
		r.Put(-1, 1, false)
		if v, ok := r.Get(-1); !ok || v != 1 {
			t.Fatalf("the table does not work after a restore: %d %v", v, ok)
		}
	})
}
