package durablelog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// A trim inside a group keeps the group whole; readers start anywhere in
// a group.
func TestTrimAndReadInsideGroups(t *testing.T) {
	db := openDB(t, filepath.Join(t.TempDir(), "log.db"))
	defer db.Close()
	l, err := Open(db, "in", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var want []string
	for b := range 5 {
		var recs [][]byte
		for i := range 10 {
			v := fmt.Sprintf("%d.%d", b, i)
			recs = append(recs, []byte(v))
			want = append(want, v)
		}
		if _, err := l.Append(ctx, recs); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Trim(13); err != nil {
		t.Fatal(err)
	}
	for _, from := range []int{13, 19, 20, 27, 49, 50} {
		r, err := l.Reader(int64(from))
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, r); !slices.Equal(got, want[from:]) {
			t.Fatalf("from %d: %v, want %v", from, got, want[from:])
		}
	}
	var keys int
	db.View(func(tx *bolt.Tx) error {
		keys = tx.Bucket(rootBucket).Bucket([]byte("in")).Bucket(recBucket).Stats().KeyN
		return nil
	})
	if keys != 4 {
		t.Fatalf("%d groups kept after trimming to 13, want 4 (the group of 10..19 stays whole)", keys)
	}
}

// Reads of every size through groups, with a trim between them, give the
// records in order: a read resumes inside a group where the last stopped
// (the reader's hint) and starts over when that group is gone.
func TestReadsResumeInsideGroups(t *testing.T) {
	db := openDB(t, filepath.Join(t.TempDir(), "log.db"))
	defer db.Close()
	l, err := Open(db, "in", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var want []string
	for b, size := range []int{40, 1, 17, 64, 3} {
		var recs [][]byte
		for i := range size {
			v := fmt.Sprintf("%d.%d", b, i)
			recs = append(recs, []byte(v))
			want = append(want, v)
		}
		if _, err := l.Append(ctx, recs); err != nil {
			t.Fatal(err)
		}
	}
	r, err := l.Reader(0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	trimmed := false
	for k := 1; len(got) < len(want); k++ {
		if !trimmed && len(got) >= 45 {
			trimmed = true
			// the reader stopped inside the third group; trim the first
			// two and the reader goes on
			if r.hint.pos == 0 {
				t.Fatalf("no hint after a read that stopped inside a group (at %d)", len(got))
			}
			if err := l.Trim(41); err != nil {
				t.Fatal(err)
			}
		}
		buf := make([][]byte, k%7+1)
		n, err := r.Read(buf)
		if err != nil {
			t.Fatalf("read at %d: %v", len(got), err)
		}
		for _, b := range buf[:n] {
			got = append(got, string(b))
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("read %v\nwant %v", got, want)
	}
	// A hint that no longer names a group (its group trimmed) is dropped.
	r2, _ := l.Reader(60)
	r2.hint = groupHint{first: 0, at: 60, pos: 5}
	buf := make([][]byte, 4)
	if n, err := r2.Read(buf); err != nil || n != 4 || string(buf[0]) != want[60] {
		t.Fatalf("read with a stale hint: %d %v %q, want %q", n, err, buf[0], want[60])
	}
}

// A log written by an earlier version (one key a record, no format key)
// is read, appended to and trimmed in its own format.
func TestFormatOneLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.db")
	db := openDB(t, path)
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		root, _ := tx.CreateBucketIfNotExists(rootBucket)
		b, _ := root.CreateBucketIfNotExists([]byte("old"))
		recs, _ := b.CreateBucketIfNotExists(recBucket)
		for i := range 5 {
			if err := recs.Put(offsetKey(int64(i)), []byte(fmt.Sprint("old", i))); err != nil {
				return err
			}
		}
		return recs.SetSequence(5)
	}); err != nil {
		t.Fatal(err)
	}
	l, err := Open(db, "old", 100)
	if err != nil {
		t.Fatal(err)
	}
	if l.grouped {
		t.Fatal("a format-1 log was opened as format 2")
	}
	if _, err := l.Append(context.Background(), [][]byte{[]byte("new5"), []byte("new6")}); err != nil {
		t.Fatal(err)
	}
	if err := l.Trim(2); err != nil {
		t.Fatal(err)
	}
	r, err := l.Reader(2)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, r); !slices.Equal(got, []string{"old2", "old3", "old4", "new5", "new6"}) {
		t.Fatalf("format 1 read after an append and a trim: %v", got)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(rootBucket).Bucket([]byte("old")).Put(formatKey, []byte{9})
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(db, "old", 100); err == nil {
		t.Fatal("a log of format 9 was opened")
	}
}

// A group that does not decode is an error naming it, never a panic.
func TestCorruptGroup(t *testing.T) {
	db := openDB(t, filepath.Join(t.TempDir(), "log.db"))
	defer db.Close()
	l, err := Open(db, "in", 100)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(context.Background(), [][]byte{[]byte("a"), []byte("b")}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{{}, {0}, {2, 1, 'a'}, {2, 9, 'a', 1, 'b'}, {1, 1, 'a', 'x'}, {0xff}} {
		if err := db.Update(func(tx *bolt.Tx) error {
			return tx.Bucket(rootBucket).Bucket([]byte("in")).Bucket(recBucket).Put(offsetKey(0), bad)
		}); err != nil {
			t.Fatal(err)
		}
		r, err := l.Reader(0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Read(make([][]byte, 2)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("group %v: %v, want ErrCorrupt", bad, err)
		}
	}
}

// FuzzGroup: any bytes as a stored group decode to records or fail with
// ErrCorrupt, never panic; encoded groups decode to what was encoded.
func FuzzGroup(f *testing.F) {
	f.Add(encodeGroup([][]byte{[]byte("a"), {}, []byte("ccc")}), []byte("x"))
	f.Add([]byte{3, 1, 'a'}, []byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, []byte{1, 2})
	f.Fuzz(func(t *testing.T, stored, rec []byte) {
		if g, err := newGroupIter(stored); err == nil {
			for g.left > 0 {
				if _, err := g.next(); err != nil {
					if !errors.Is(err, ErrCorrupt) {
						t.Fatalf("error %v is not ErrCorrupt", err)
					}
					break
				}
			}
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error %v is not ErrCorrupt", err)
		}
		recs := [][]byte{rec, stored, rec}
		g, err := newGroupIter(encodeGroup(recs))
		if err != nil {
			t.Fatal(err)
		}
		for i := range recs {
			r, err := g.next()
			if err != nil || !bytes.Equal(r, recs[i]) {
				t.Fatalf("record %d: %q, %v; want %q", i, r, err, recs[i])
			}
		}
	})
}
