package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/persistence"
)

func fileDigest(t *testing.T, path string) [32]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(data)
}

// sampleStore writes a store file with journals, a snapshot, a checkpoint
// and a spill queue, and closes it.
func sampleStore(t *testing.T, path string) {
	t.Helper()
	ctx := context.Background()
	s, err := persistence.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	j := s.Journal()
	var batch []persistence.Event
	for seq := uint64(1); seq <= 11; seq++ {
		batch = append(batch, persistence.Event{Seq: seq, Type: "deposited", Data: []byte{0x81, 0xa1, 'a', 0x01}})
	}
	for _, err := range []error{
		j.Append(ctx, "acct-1", batch),
		j.DeleteTo(ctx, "acct-1", 3),
		j.Append(ctx, "acct-2", batch[:2]),
		j.DeleteTo(ctx, "acct-2", 2), // everything: no events, highest 2
		s.Snapshots().Save(ctx, "acct-1", persistence.Snapshot{Seq: 8, Data: []byte("0123456789"), Time: time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)}),
		s.Checkpoints().Complete(ctx, "wordcount", persistence.Checkpoint{ID: 17, Time: time.Date(2025, 3, 4, 5, 6, 8, 0, time.UTC),
			States:  map[string][]byte{"count/0": {1}, "count/1": {2}, "count/2": {3}},
			Offsets: map[string]int64{"lines/0": 4096}}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Append(ctx, "acct-3", batch[:1]); err != nil { // left in the journal's log: the file is closed first
		t.Fatal(err)
	}
	// A spill queue of one group holding one message (flags 0, 1 record,
	// 3 bytes), as package mailbox writes it.
	if err := s.DB().Update(func(tx *bolt.Tx) error {
		root, err := tx.CreateBucketIfNotExists([]byte("spill"))
		if err != nil {
			return err
		}
		q, err := root.CreateBucket([]byte("count/0.in"))
		if err != nil {
			return err
		}
		return q.Put([]byte{0, 0, 0, 0, 0, 0, 0, 1}, []byte{0, 1, 3, 'a', 'b', 'c'})
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.DB().Close(); err != nil {
		t.Fatal(err)
	}
	s.Close()
}

func TestStoreInspect(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.db")
	sampleStore(t, path)
	before := fileDigest(t, path)
	out, _, err := execute(t, "store", "inspect", path)
	if err != nil {
		t.Fatalf("store inspect: %v", err)
	}
	t.Logf("\n%s", out)
	for _, want := range []string{
		`store .*sluice\.db: .*, format version 1`,
		`journals \(3\):`,
		`acct-1 +8 +4 +11 `, // events 4..11 kept, highest 11
		`acct-2 +0 +- +2 `,  // everything deleted, highest kept
		`acct-3 +1 +1 +1 `,  // in the log
		`log: 1 group commits not compacted yet \(1 events`,
		`snapshots \(1\):\n.*\n  acct-1 +8 +10 +2025-03-04T05:06:07Z`,
		`checkpoints \(1\):\n.*\n  wordcount +17 +2025-03-04T05:06:08Z +3 +1 `,
		`spill queues \(1\):\n.*\n  count/0\.in +1 +1 +6`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("output lacks %q", want)
		}
	}
	if fileDigest(t, path) != before {
		t.Error("inspect changed the file")
	}
}

func TestStoreInspectRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	foreign := filepath.Join(dir, "foreign.db")
	db, err := bolt.Open(foreign, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("users")); return err }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	random := filepath.Join(dir, "random.db")
	if err := os.WriteFile(random, []byte(strings.Repeat("not a database ", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(dir, "truncated.db")
	sampleStore(t, truncated)
	used, err := store.Used(truncated) // the file runs past its pages
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(truncated, used/2); err != nil {
		t.Fatal(err)
	}
	newer := filepath.Join(dir, "newer.db")
	sampleStore(t, newer)
	db, err = bolt.Open(newer, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("sluice")).Put([]byte("version"), []byte{9}) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		path string
		kind error
		text string
	}{
		{foreign, store.ErrForeign, "not a sluice store"},
		{random, store.ErrCorrupt, "corrupt"},
		{truncated, store.ErrCorrupt, "truncated"},
		{newer, store.ErrNewer, "version 9"},
		{empty, nil, "empty file"},
		{filepath.Join(dir, "missing.db"), os.ErrNotExist, "no such file"},
	} {
		var before [32]byte
		if c.kind != os.ErrNotExist {
			before = fileDigest(t, c.path)
		}
		_, _, err := execute(t, "store", "inspect", c.path)
		if err == nil || (c.kind != nil && !errors.Is(err, c.kind)) || !strings.Contains(err.Error(), c.text) || !strings.Contains(err.Error(), c.path) {
			t.Errorf("inspect %s = %v, want an error (%v) naming the file and saying %q", filepath.Base(c.path), err, c.kind, c.text)
		}
		if c.kind != os.ErrNotExist && fileDigest(t, c.path) != before {
			t.Errorf("inspect %s changed the file", filepath.Base(c.path))
		}
	}
}

// TestStoreInspectLocked: a store held by a running sluice is reported as
// locked, after bbolt's one-second wait, rather than read while written.
func TestStoreInspectLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.db")
	s, err := persistence.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, _, err = execute(t, "store", "inspect", path)
	if !errors.Is(err, store.ErrLocked) {
		t.Errorf("inspect of an open store = %v, want ErrLocked", err)
	}
}

func TestStoreCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.db")
	sampleStore(t, path)
	before := fileDigest(t, path)
	out, _, err := execute(t, "store", "check", path)
	if err != nil || !strings.Contains(out, "sluice.db: ok (") {
		t.Fatalf("store check = %q, %v", out, err)
	}
	if fileDigest(t, path) != before {
		t.Error("check changed the file")
	}
	// Garble the key sizes of a leaf page of the journal.
	data, _ := os.ReadFile(path)
	const pageSize = 4096
	damaged := false
	for off := 2 * pageSize; off+pageSize <= len(data) && !damaged; off += pageSize {
		page := data[off : off+pageSize]
		if page[8] != 0x02 || page[9] != 0 || page[10] == 0 { // a leaf with elements
			continue
		}
		for i := range int(page[10]) {
			copy(page[16+16*i+8:], []byte{0xf0, 0xff, 0xff, 0xff})
		}
		damaged = true
	}
	if !damaged {
		t.Fatal("no leaf page to damage")
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	before = fileDigest(t, path)
	_, _, err = execute(t, "store", "check", path)
	if !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("store check of a damaged file = %v, want ErrCorrupt", err)
	}
	t.Logf("store check: %v", err)
	if fileDigest(t, path) != before {
		t.Error("check changed the file")
	}
	empty := filepath.Join(t.TempDir(), "empty.db")
	os.WriteFile(empty, nil, 0o600)
	if _, _, err := execute(t, "store", "check", empty); err == nil {
		t.Fatal("store check of an empty file passed")
	}
}
