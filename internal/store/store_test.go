package store_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func mustOpen(t *testing.T, path string) *store.File {
	t.Helper()
	f, err := store.Open(path)
	if err != nil {
		t.Fatalf("Open(%s) = %v", path, err)
	}
	return f
}

func TestOpenCreatesPrivateFileAndReopens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.db")
	f := mustOpen(t, path)
	if f.Path != path || f.DB.Path() != path {
		t.Errorf("Path = %q, DB.Path() = %q, want %q", f.Path, f.DB.Path(), path)
	}
	if err := f.DB.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("journal"))
		if err != nil {
			return err
		}
		return b.Put([]byte("k"), []byte("v"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o600 {
		t.Errorf("mode %v, want 0600", perm)
	}

	f = mustOpen(t, path) // a sluice store with data of its own
	defer f.Close()
	err = f.DB.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket([]byte("sluice"))
		if meta == nil {
			return errors.New("no sluice bucket")
		}
		if got := string(meta.Get([]byte("format"))); got != "sluice-store" {
			return fmt.Errorf("format %q", got)
		}
		if got := meta.Get([]byte("version")); len(got) != 1 || got[0] != store.Version {
			return fmt.Errorf("version %v, want [%d]", got, store.Version)
		}
		if got := string(tx.Bucket([]byte("journal")).Get([]byte("k"))); got != "v" {
			return fmt.Errorf("journal k = %q, want v", got)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("after reopening: %v", err)
	}
}

// TestOpenAdoptsEmptyFiles: an empty file and a bbolt file without buckets
// hold nothing to protect; Open makes them sluice stores.
func TestOpenAdoptsEmptyFiles(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	bare := filepath.Join(dir, "bare.db")
	db, err := bolt.Open(bare, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	for _, path := range []string{empty, bare} {
		mustOpen(t, path).Close()
		mustOpen(t, path).Close() // and they are sluice stores now
	}
}

func digest(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		return "unreadable: " + err.Error()
	}
	return fmt.Sprintf("%x", sha256.Sum256(data))
}

// storeWithData writes a sluice store spanning many pages and returns its
// bytes and the size its metadata says it uses.
func storeWithData(t *testing.T, dir string) ([]byte, int) {
	t.Helper()
	path := filepath.Join(dir, "full.db")
	f := mustOpen(t, path)
	err := f.DB.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("data"))
		if err != nil {
			return err
		}
		for i := range 5000 {
			if err := b.Put(fmt.Appendf(nil, "key-%06d", i), make([]byte, 100)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var used int64
	f.DB.View(func(tx *bolt.Tx) error { used = tx.Size(); return nil })
	f.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data, int(used)
}

// boltFile writes a bbolt file with fill.
func boltFile(t *testing.T, path string, fill func(tx *bolt.Tx) error) string {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fill); err != nil {
		t.Fatal(err)
	}
	return path
}

func sluiceMeta(format string, version []byte) func(tx *bolt.Tx) error {
	return func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("sluice"))
		if err != nil {
			return err
		}
		if err := b.Put([]byte("format"), []byte(format)); err != nil {
			return err
		}
		return b.Put([]byte("version"), version)
	}
}

// TestOpenRefusesFilesItCannotUse: every file Open refuses is named in the
// error, classified with the right sentinel, and left byte for byte as it
// was; nothing panics.
func TestOpenRefusesFilesItCannotUse(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rng := rand.New(rand.NewPCG(7, 11))
	random := make([]byte, 64<<10)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	full, used := storeWithData(t, dir)
	plain := write("plain-file", []byte("a regular file"))

	tests := []struct {
		name    string
		path    string
		want    error  // nil: no sentinel, only the path
		message string // a part of the message
	}{
		{"random bytes", write("random.db", random), store.ErrCorrupt, "invalid database"},
		{"a few random bytes", write("short.db", random[:100]), store.ErrCorrupt, "invalid database"},
		{"one page of a store", write("page.db", full[:4096]), store.ErrCorrupt, "too small"},
		{"the meta pages of a store", write("meta.db", full[:3*4096]), store.ErrCorrupt, ""},
		{"half a store", write("half.db", full[:used/2]), store.ErrCorrupt, "truncated"},
		{"a store short of its last page", write("short-page.db", full[:used-4096]), store.ErrCorrupt, "truncated"},
		{"a store with its meta pages zeroed", write("zeroed.db", append(make([]byte, 2*4096), full[2*4096:]...)), store.ErrCorrupt, ""},
		{"another program's bbolt file", boltFile(t, filepath.Join(dir, "orders.db"), func(tx *bolt.Tx) error {
			b, err := tx.CreateBucket([]byte("orders"))
			if err != nil {
				return err
			}
			return b.Put([]byte("1"), []byte("an order"))
		}), store.ErrForeign, `no "sluice" bucket`},
		{"a foreign format marker", boltFile(t, filepath.Join(dir, "marker.db"), sluiceMeta("other", []byte{1})), store.ErrForeign, `format marker "other"`},
		{"a newer version", boltFile(t, filepath.Join(dir, "newer.db"), sluiceMeta("sluice-store", []byte{store.Version + 1})), store.ErrNewer,
			fmt.Sprintf("version %d, this build reads up to %d", store.Version+1, store.Version)},
		{"an unreadable version", boltFile(t, filepath.Join(dir, "version.db"), sluiceMeta("sluice-store", []byte{1, 0})), store.ErrCorrupt, "unreadable format version"},
		{"a directory", dir, nil, "is a directory"},
		{"a path under a regular file", filepath.Join(plain, "sub.db"), nil, "not a directory"},
		{"a path in a missing directory", filepath.Join(dir, "missing", "sub.db"), nil, "no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := digest(t, tt.path)
			f, err := store.Open(tt.path)
			if err == nil {
				f.Close()
				t.Fatalf("Open(%s) succeeded, want an error", tt.path)
			}
			if prefix := "store " + tt.path + ":"; !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("error %q, want it to start with %q", err, prefix)
			}
			if !strings.Contains(err.Error(), tt.message) {
				t.Errorf("error %q, want it to say %q", err, tt.message)
			}
			sentinels := []error{store.ErrCorrupt, store.ErrForeign, store.ErrNewer, store.ErrLocked}
			for _, s := range sentinels {
				if errors.Is(err, s) != (s == tt.want) {
					t.Errorf("errors.Is(%q, %q) = %v, want %v", err, s, errors.Is(err, s), s == tt.want)
				}
			}
			if after := digest(t, tt.path); after != before {
				t.Errorf("the file changed: sha256 %s, was %s", after, before)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open created the missing directory: %v", err)
	}
}

// TestOpenRefusesLockedFile: a store that another handle holds is refused
// as locked (after bbolt's one-second lock timeout), not waited for.
func TestOpenRefusesLockedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locked.db")
	f := mustOpen(t, path)
	defer f.Close()
	before := digest(t, path)
	g, err := store.Open(path)
	if err == nil {
		g.Close()
		t.Fatal("a second Open of a store in use succeeded")
	}
	if !errors.Is(err, store.ErrLocked) || !strings.Contains(err.Error(), path) {
		t.Fatalf("second Open = %v, want ErrLocked naming %s", err, path)
	}
	if after := digest(t, path); after != before {
		t.Errorf("the file changed")
	}
}
