package store

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestDropMappedKeepsData: after the mapped pages are released, reads fault
// them back in from the page cache with the same contents.
func TestDropMappedKeepsData(t *testing.T) {
	f, err := Open(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	val := bytes.Repeat([]byte("sluice"), 10_000)
	if err := f.DB.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("data"))
		if err != nil {
			return err
		}
		for i := range 50 {
			if err := b.Put(fmt.Appendf(nil, "k%03d", i), val); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := f.DB.View(func(tx *bolt.Tx) error {
			if err := DropMapped(tx); err != nil {
				return err
			}
			return tx.Bucket([]byte("data")).ForEach(func(k, v []byte) error {
				if !bytes.Equal(v, val) {
					return fmt.Errorf("%s: value changed after DropMapped", k)
				}
				return nil
			})
		}); err != nil {
			t.Fatal(err)
		}
	}
}
