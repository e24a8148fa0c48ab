package supervision

import (
	"errors"
	"path/filepath"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func openCapped(t *testing.T, path string, opts BoltOptions) *BoltDeadLetters {
	t.Helper()
	s, err := OpenDeadLettersWith(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func wantUsage(t *testing.T, s *BoltDeadLetters, count int, dropped uint64) Usage {
	t.Helper()
	u, err := s.Usage()
	if err != nil || u.Count != count || u.Dropped != dropped {
		t.Fatalf("Usage() = %+v, %v; want %d dead letters, %d dropped", u, err, count, dropped)
	}
	if n, _ := s.Len(); n != count {
		t.Fatalf("Len() = %d, Usage says %d", n, count)
	}
	return u
}

// At its count cap, the store fails the Add (ErrFull), or drops and
// counts, as the user chose; the count survives reopening.
func TestBoltDeadLettersCapped(t *testing.T) {
	dir := t.TempDir()
	failing := openCapped(t, filepath.Join(dir, "fail.db"), BoltOptions{MaxCount: 3})
	for i := range 3 {
		if _, err := failing.Add(letter("j", "o", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := failing.Add(letter("j", "o", 3)); !errors.Is(err, ErrFull) {
		t.Fatalf("Add beyond the cap = %v, want ErrFull", err)
	}
	wantUsage(t, failing, 3, 0)
	if err := failing.Delete(1); err != nil { // room again
		t.Fatal(err)
	}
	if _, err := failing.Add(letter("j", "o", 4)); err != nil {
		t.Fatalf("Add after a Delete: %v", err)
	}

	path := filepath.Join(dir, "drop.db")
	dropping := openCapped(t, path, BoltOptions{MaxCount: 2, WhenFull: DropWhenFull})
	for i := range 5 {
		seq, err := dropping.Add(letter("j", "o", i))
		if err != nil || (i < 2) != (seq != 0) {
			t.Fatalf("Add %d = %d, %v; want a seq for the first 2, then 0", i, seq, err)
		}
	}
	wantUsage(t, dropping, 2, 3)
	dropping.Close()
	again := openCapped(t, path, BoltOptions{MaxCount: 2, WhenFull: DropWhenFull})
	wantUsage(t, again, 2, 3)
	if n, err := again.Purge(Filter{}); n != 2 || err != nil {
		t.Fatalf("Purge = %d, %v", n, err)
	}
	wantUsage(t, again, 0, 3)
}

func TestBoltDeadLettersByteCap(t *testing.T) {
	size := int64(len(letterBytes(t)))
	s := openCapped(t, filepath.Join(t.TempDir(), "bytes.db"), BoltOptions{MaxBytes: 2*size + size/2})
	for i := range 2 {
		if _, err := s.Add(letter("job", "op", 1)); err != nil {
			t.Fatal(i, err)
		}
	}
	if _, err := s.Add(letter("job", "op", 1)); !errors.Is(err, ErrFull) {
		t.Fatalf("Add beyond the byte cap = %v, want ErrFull", err)
	}
	if u := wantUsage(t, s, 2, 0); u.Bytes != 2*size {
		t.Fatalf("Usage().Bytes = %d, want %d", u.Bytes, 2*size)
	}
	if _, err := NewBoltDeadLettersWith(s.db, BoltOptions{WhenFull: 7}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("WhenFull 7: %v", err)
	}
}

// Concurrent Adds share transactions: fewer commits than dead letters,
// each durable, each with its own seq.
func TestBoltDeadLettersGroupCommit(t *testing.T) {
	s := openCapped(t, filepath.Join(t.TempDir(), "group.db"), BoltOptions{})
	const writers, each = 16, 25
	var wg sync.WaitGroup
	seqs := make(chan uint64, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				seq, err := s.Add(letter("j", "o", w*each+i))
				if err != nil {
					t.Error(err)
					return
				}
				seqs <- seq
			}
		}()
	}
	wg.Wait()
	close(seqs)
	seen := map[uint64]bool{}
	for q := range seqs {
		if q == 0 || seen[q] {
			t.Fatalf("seq %d given twice or zero", q)
		}
		seen[q] = true
	}
	wantUsage(t, s, writers*each, 0)
	if c := s.commits.Load(); c >= writers*each {
		t.Fatalf("%d commits for %d dead letters: not batched", c, writers*each)
	} else {
		t.Logf("%d dead letters in %d commits", writers*each, c)
	}
}

// A file written before usage was recorded: the usage is counted once.
func TestBoltDeadLettersUsageOfOldFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	s := openCapped(t, path, BoltOptions{})
	for i := range 4 {
		s.Add(letter("j", "o", i))
	}
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(usageBucket) }); err != nil {
		t.Fatal(err)
	}
	wantUsage(t, s, 4, 0)
	s.Close()
	capped := openCapped(t, path, BoltOptions{MaxCount: 5})
	if _, err := capped.Add(letter("j", "o", 9)); err != nil {
		t.Fatal(err)
	}
	if _, err := capped.Add(letter("j", "o", 10)); !errors.Is(err, ErrFull) {
		t.Fatalf("the 6th Add under a cap of 5 = %v, want ErrFull", err)
	}
}
