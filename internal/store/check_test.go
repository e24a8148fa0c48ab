package store_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/internal/store"
)

// damagedLeaf writes a store with a bucket of 2000 keys, then garbles the
// key sizes of the leaf page holding "key-01000". It returns the path.
func damagedLeaf(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "damaged.db")
	f := mustOpen(t, path)
	err := f.DB.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("data"))
		if err != nil {
			return err
		}
		for i := range 2000 {
			if err := b.Put(fmt.Appendf(nil, "key-%05d", i), bytes.Repeat([]byte{'v'}, 100)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pageSize := f.DB.Info().PageSize
	f.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	damaged := false
	for off := 2 * pageSize; off+pageSize <= len(data); off += pageSize {
		page := data[off : off+pageSize]
		// A page header: id (8 bytes), flags (2), count (2), overflow (4);
		// a leaf's elements follow: flags, pos, ksize, vsize (4 each).
		if binary.LittleEndian.Uint16(page[8:]) != 0x02 || !bytes.Contains(page, []byte("key-01000")) {
			continue
		}
		count := int(binary.LittleEndian.Uint16(page[10:]))
		for i := range count {
			binary.LittleEndian.PutUint32(page[16+16*i+8:], 0xfffffff0)
		}
		damaged = true
		break
	}
	if !damaged {
		t.Fatal("no leaf page holds key-01000")
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestOpenRefusesDamagedLeafPage: a store with a damaged leaf page passed
// Open (which read only the marker) and panicked on the first read of
// that page. Open now checks the B+tree and refuses it; so does Check.
func TestOpenRefusesDamagedLeafPage(t *testing.T) {
	path := damagedLeaf(t)

	// Without the check (as before), Open succeeds and the first read
	// panics.
	f, err := store.OpenWith(path, store.Options{CheckUpTo: -1})
	if err != nil {
		t.Fatalf("OpenWith(no check) = %v, want the damage to go unnoticed", err)
	}
	panicked := func() (p any) {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() { p = recover() }()
		_ = f.DB.View(func(tx *bolt.Tx) error {
			_ = tx.Bucket([]byte("data")).Get([]byte("key-01000"))
			return nil
		})
		return nil
	}()
	f.Close()
	if panicked == nil {
		t.Fatal("reading the damaged page did not panic: the test damages nothing")
	}
	t.Logf("unchecked read: panic: %v", panicked)
	before := digest(t, path)

	_, err = store.Open(path)
	if !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("Open = %v, want ErrCorrupt", err)
	}
	t.Logf("Open: %v", err)
	if err := store.Check(path); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("Check = %v, want ErrCorrupt", err)
	}
	if _, _, err := store.OpenReadOnly(path); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("OpenReadOnly = %v, want ErrCorrupt", err)
	}
	if got := digest(t, path); got != before {
		t.Fatal("checking changed the file")
	}
}

func TestCheckPassesAGoodStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "good.db")
	f := mustOpen(t, path)
	if err := f.DB.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("data"))
		if err != nil {
			return err
		}
		n, err := b.CreateBucket([]byte("nested"))
		if err != nil {
			return err
		}
		for i := range 500 {
			if err := n.Put(fmt.Appendf(nil, "k%d", i), []byte("v")); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := store.Check(path); err != nil {
		t.Fatalf("Check = %v", err)
	}
	mustOpen(t, path).Close()
}

// TestOpenExistingRefusesEmptyAndMissing: where a store is expected, an
// empty or missing file is refused rather than made a new store.
func TestOpenExistingRefusesEmptyAndMissing(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{empty, filepath.Join(dir, "missing.db")} {
		if _, err := store.OpenWith(path, store.Options{Existing: true}); !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("OpenWith(%s, Existing) = %v, want ErrCorrupt", path, err)
		}
	}
	if st, err := os.Stat(empty); err != nil || st.Size() != 0 {
		t.Fatalf("the empty file changed: %v, %v", st, err)
	}
	if err := store.Check(empty); err == nil {
		t.Fatal("Check of an empty file passed")
	}
}
