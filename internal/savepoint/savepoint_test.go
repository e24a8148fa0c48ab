package savepoint

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/persistence"
)

func testPlan() Plan {
	return Plan{Version: Version, Fingerprint: "0123456789abcdef", Operators: []Operator{
		{Name: "src", Kind: "source", Parallelism: 1, Head: "src", Source: true},
		{Name: "count", Kind: "count", Parallelism: 2, Head: "count", KeyGrouped: true},
		{Name: "out", Kind: "sink", Parallelism: 2, Head: "count"},
	}}
}

func testCheckpoint() persistence.Checkpoint {
	return persistence.Checkpoint{ID: 7, Time: time.Unix(1700000000, 5), Offsets: map[string]int64{"src/0": 42},
		States: map[string][]byte{"count/0": []byte("zero"), "count/1": []byte("one"), "out/0": nil, "out/1": []byte("pos"),
			PlanKey: EncodePlan(testPlan())}}
}

func writeTest(t *testing.T) (string, *Savepoint) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "sp")
	sp, err := Write(dir, "counts", testCheckpoint())
	if err != nil {
		t.Fatal(err)
	}
	return dir, sp
}

func TestWriteOpen(t *testing.T) {
	dir, w := writeTest(t)
	sp, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := sp.Manifest
	if m.Kind != ManifestKind || m.Version != Version || m.ID != w.Manifest.ID || m.ID == "" || m.Job != "counts" || m.Checkpoint != 7 {
		t.Fatalf("manifest %+v", m)
	}
	if !sp.Taken().Equal(time.Unix(1700000000, 5)) || m.Offsets["src/0"] != 42 || len(m.Files) != 2 {
		t.Fatalf("manifest %+v", m)
	}
	cp := sp.Checkpoint()
	for _, k := range []string{"count/0", "count/1", "out/0", "out/1"} {
		if !bytes.Equal(cp.States[k], testCheckpoint().States[k]) {
			t.Errorf("state %q: %q", k, cp.States[k])
		}
	}
	p, ok, err := PlanOf(&cp, "test")
	if err != nil || !ok || p.Origin != m.ID || p.Fingerprint != testPlan().Fingerprint || len(p.Operators) != 3 {
		t.Fatalf("plan %+v %v %v", p, ok, err)
	}
	sf, err := DecodeStateFile(mustRead(t, filepath.Join(dir, m.Files[0].Name)), "x")
	if err != nil || sf.Operator != "count" || len(sf.Instances) != 2 || sf.Instances[1].KeyGroups != [2]int{64, 128} {
		t.Fatalf("state file %+v %v", sf, err)
	}
}

func TestWriteRefusesNonEmptyDir(t *testing.T) {
	dir, _ := writeTest(t)
	if _, err := Write(dir, "counts", testCheckpoint()); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("got %v", err)
	}
	cp := testCheckpoint()
	delete(cp.States, PlanKey)
	if _, err := Write(filepath.Join(t.TempDir(), "x"), "counts", cp); err == nil || !strings.Contains(err.Error(), "records no plan") {
		t.Fatalf("got %v", err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// snapshot is every file of dir: its bytes, mode and modification time.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		sum := [32]byte{}
		if !d.IsDir() {
			sum = sha256.Sum256(mustRead(t, path))
		}
		out[path] = info.Mode().String() + info.ModTime().String() + string(sum[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestOpenRefusesBadInput damages a savepoint in every way the issue names
// and checks that Open refuses it with an error that names the file and
// says what is wrong, and changes nothing on disk.
func TestOpenRefusesBadInput(t *testing.T) {
	manifest := func(m func(*Manifest)) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			path := filepath.Join(dir, ManifestName)
			mf, err := DecodeManifest(mustRead(t, path), path)
			if err != nil {
				t.Fatal(err)
			}
			m(&mf)
			b, _ := msgpack.Marshal(&mf)
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	stateFile := func(f func([]byte) []byte) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			path := filepath.Join(dir, "state", "0000.bin")
			if err := os.WriteFile(path, f(mustRead(t, path)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, dir string)
		file   string // named in the error
		is     error
		says   string
	}{
		{"no manifest", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, ManifestName)) }, "", ErrForeign, "no MANIFEST"},
		{"foreign bytes", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, ManifestName), []byte("SQLite format 3\x00 not ours"), 0o644)
		}, ManifestName, ErrForeign, "not a sluice savepoint"},
		{"foreign kind", manifest(func(m *Manifest) { m.Kind = "flink-savepoint" }), ManifestName, ErrForeign, `kind "flink-savepoint"`},
		{"newer version", manifest(func(m *Manifest) { m.Version = Version + 1 }), ManifestName, ErrNewer, "format version 2, this sluice reads up to 1"},
		{"truncated manifest", func(t *testing.T, dir string) {
			path := filepath.Join(dir, ManifestName)
			b := mustRead(t, path)
			os.WriteFile(path, b[:len(b)/2], 0o644)
		}, ManifestName, ErrCorrupt, "truncated"},
		{"path out of the directory", manifest(func(m *Manifest) { m.Files[0].Name = "../../etc/passwd" }), ManifestName, ErrCorrupt, "not a state file's name"},
		{"state file truncated", stateFile(func(b []byte) []byte { return b[:len(b)-3] }), "0000.bin", ErrCorrupt, "truncated"},
		{"state file flipped byte", stateFile(func(b []byte) []byte { b[len(b)/2] ^= 0x40; return b }), "0000.bin", ErrCorrupt, "SHA-256"},
		{"state file missing", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "state", "0001.bin")) }, "0001.bin", ErrCorrupt, "missing"},
		{"state file of another operator", func(t *testing.T, dir string) {
			a, b := filepath.Join(dir, "state", "0000.bin"), filepath.Join(dir, "state", "0001.bin")
			ab, bb := mustRead(t, a), mustRead(t, b)
			os.WriteFile(a, bb, 0o644)
			os.WriteFile(b, ab, 0o644)
			manifest(func(m *Manifest) {
				m.Files[0].Size, m.Files[1].Size = m.Files[1].Size, m.Files[0].Size
				m.Files[0].SHA256, m.Files[1].SHA256 = m.Files[1].SHA256, m.Files[0].SHA256
			})(t, dir)
		}, "0000.bin", ErrCorrupt, "holds operator"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, _ := writeTest(t)
			c.damage(t, dir)
			before := snapshot(t, dir)
			_, err := Open(dir)
			if err == nil {
				t.Fatal("a damaged savepoint was opened")
			}
			if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), dir) ||
				(c.file != "" && !strings.Contains(err.Error(), c.file)) {
				t.Fatalf("error %q: want %v, naming %s/%s and saying %q", err, c.is, dir, c.file, c.says)
			}
			after := snapshot(t, dir)
			if len(before) != len(after) {
				t.Fatalf("files before %d, after %d", len(before), len(after))
			}
			for k, v := range before {
				if after[k] != v {
					t.Errorf("%s changed", k)
				}
			}
		})
	}
}

func TestKeyGroupRangesInFile(t *testing.T) {
	cp := testCheckpoint()
	cp.States["count/5"] = []byte("beyond")
	if _, err := Write(filepath.Join(t.TempDir(), "x"), "counts", cp); err == nil || !strings.Contains(err.Error(), `"count/5"`) {
		t.Fatalf("got %v", err)
	}
}

// An unaligned checkpoint (with in-flight records) is refused as a
// savepoint, saying why, and nothing is written.
func TestWriteRefusesUnaligned(t *testing.T) {
	cp := testCheckpoint()
	cp.Channels = map[string][]byte{"count/0/in0": []byte("records")}
	dir := filepath.Join(t.TempDir(), "sp")
	if _, err := Write(dir, "counts", cp); err == nil || !strings.Contains(err.Error(), "unaligned") || !strings.Contains(err.Error(), "1 input channels") {
		t.Fatalf("Write of an unaligned checkpoint = %v, want a refusal", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the refused savepoint left %s behind (%v)", dir, err)
	}
}
