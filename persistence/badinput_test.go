package persistence_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/persistence"
)

func digest(t *testing.T, path string) [32]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(data)
}

// storeWithEvents writes a store file holding events 1..n of id, and
// closes it.
func storeWithEvents(t *testing.T, path, id string, n int) {
	t.Helper()
	s, err := persistence.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var batch []persistence.Event
	for i := 1; i <= n; i++ {
		batch = append(batch, persistence.Event{Seq: uint64(i), Type: "e", Data: bytes.Repeat([]byte{byte(i)}, 200), Time: time.Unix(int64(i), 0)})
	}
	if err := s.Journal().Append(context.Background(), id, batch); err != nil {
		t.Fatal(err)
	}
}

// TestOpenRefusesBadFiles: Open refuses a file it must not use, with an
// error naming the file and its kind, never panics, and leaves the file
// byte for byte as it was.
func TestOpenRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	t.Logf("random seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 1))

	truncated := filepath.Join(dir, "truncated.db")
	storeWithEvents(t, truncated, "a", 2000)
	used, err := store.Used(truncated) // the file runs past its pages
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(truncated, used/2); err != nil {
		t.Fatal(err)
	}

	random := filepath.Join(dir, "random.db")
	noise := make([]byte, 64<<10)
	for i := range noise {
		noise[i] = byte(rnd.Uint32())
	}
	if err := os.WriteFile(random, noise, 0o600); err != nil {
		t.Fatal(err)
	}

	foreign := filepath.Join(dir, "foreign.db")
	db, err := bolt.Open(foreign, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("users"))
		if err != nil {
			return err
		}
		return b.Put([]byte("alice"), []byte("admin"))
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()

	newer := filepath.Join(dir, "newer.db")
	storeWithEvents(t, newer, "a", 3)
	db, err = bolt.Open(newer, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("sluice")).Put([]byte("version"), []byte{99}) }); err != nil {
		t.Fatal(err)
	}
	db.Close()

	for _, c := range []struct {
		path string
		kind error
	}{
		{truncated, persistence.ErrCorruptFile},
		{random, persistence.ErrCorruptFile},
		{foreign, persistence.ErrForeignFile},
		{newer, persistence.ErrNewerFile},
	} {
		before := digest(t, c.path)
		s, err := persistence.Open(c.path)
		if err == nil {
			s.Close()
			t.Errorf("Open(%s) succeeded", filepath.Base(c.path))
			continue
		}
		if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.path) {
			t.Errorf("Open(%s) = %v, want %v naming the file", filepath.Base(c.path), err, c.kind)
		}
		if digest(t, c.path) != before {
			t.Errorf("Open(%s) changed the file", filepath.Base(c.path))
		}
	}
}

// corrupt replaces the value at bucket path keys[:len-1], key keys[len-1],
// with bbolt directly, as damage or another program would.
func corrupt(t *testing.T, path string, value []byte, keys ...[]byte) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(keys[0])
		for _, k := range keys[1 : len(keys)-1] {
			if b == nil {
				return fmt.Errorf("no bucket %q", k)
			}
			b = b.Bucket(k)
		}
		if b == nil {
			return errors.New("no bucket")
		}
		return b.Put(keys[len(keys)-1], value)
	}); err != nil {
		t.Fatal(err)
	}
}

func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// stored reads a value with bbolt directly.
func stored(t *testing.T, db *bolt.DB, keys ...[]byte) []byte {
	t.Helper()
	var v []byte
	if err := db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(keys[0])
		for _, k := range keys[1 : len(keys)-1] {
			b = b.Bucket(k)
		}
		v = bytes.Clone(b.Get(keys[len(keys)-1]))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return v
}

// storeWithRunsOfOne writes a store file holding events 1..n of id, each
// compacted on its own into a run of one event (a replay compacts the log),
// and closes it.
func storeWithRunsOfOne(t *testing.T, path, id string, n int) {
	t.Helper()
	s, err := persistence.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := 1; i <= n; i++ {
		if err := s.Journal().Append(context.Background(), id, []persistence.Event{{Seq: uint64(i), Type: "e", Data: []byte{byte(i)}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := replayAll(t, s.Journal(), id); err != nil {
			t.Fatal(err)
		}
	}
}

// withRecord returns the run run (as the journal stores it) with its i-th
// event record replaced by rec.
func withRecord(t *testing.T, run []byte, i int, rec []byte) []byte {
	t.Helper()
	var fields []any
	if err := msgpack.Unmarshal(run, &fields); err != nil || len(fields) != 2 {
		t.Fatalf("not a run: %v", err)
	}
	recs, ok := fields[1].([]any)
	if !ok || i >= len(recs) {
		t.Fatalf("a run of %d records", len(recs))
	}
	recs[i] = rec
	out, err := msgpack.Marshal([]any{1, recs})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestUndecodableEvent: an event whose stored bytes no longer decode stops
// a replay with an error naming the file, the journal and the seq, after
// the events before it; nothing panics and nothing is overwritten. The
// journal keeps its events in runs: the damage is a whole run (of one
// event here), or one event's record inside a run.
func TestUndecodableEvent(t *testing.T) {
	for _, c := range []struct {
		name  string
		value []byte
	}{
		{"random bytes", []byte{0x13, 0x37, 0xfe, 0xed, 0xbe, 0xef}},
		{"truncated record", []byte{0x95, 0x01, 0xa1}},
		{"a newer record version", []byte{0x95, 0x07, 0xa1, 'e', 0xc4, 0x00, 0x00, 0x00}},
		{"an array header of 4G elements", []byte{0xdd, 0xff, 0xff, 0xff, 0xff, 0x01}},
		{"trailing bytes", append([]byte{0x95, 0x01, 0xa1, 'e', 0xc4, 0x00, 0x00, 0x00}, 0xc0)},
		{"a nil", []byte{0xc0}},
	} {
		for _, inRun := range []bool{false, true} {
			name := c.name + " as a run"
			if inRun {
				name = c.name + " as an event in a run"
			}
			t.Run(name, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "store.db")
				key := seqKey(3)
				damaged := c.value
				if inRun {
					storeWithEvents(t, path, "orders-3", 5) // one run, 1..5
					db, err := bolt.Open(path, 0o600, nil)
					if err != nil {
						t.Fatal(err)
					}
					key = seqKey(1)
					damaged = withRecord(t, stored(t, db, []byte("journal"), []byte("events"), []byte("orders-3"), key), 2, c.value)
					db.Close()
				} else {
					storeWithRunsOfOne(t, path, "orders-3", 5)
				}
				corrupt(t, path, damaged, []byte("journal"), []byte("events"), []byte("orders-3"), key)

				s, err := persistence.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				seen, err := replayAll(t, s.Journal(), "orders-3")
				t.Log(err)
				var de *persistence.DecodeError
				if !errors.Is(err, persistence.ErrDecode) || !errors.As(err, &de) {
					t.Fatalf("Replay = %v, want a *DecodeError", err)
				}
				want := fmt.Sprintf(`persistence: journal "orders-3" seq 3 in %s: decode event: `, path)
				if de.Seq != 3 || de.ID != "orders-3" || de.File != path || !strings.HasPrefix(err.Error(), want) {
					t.Errorf("error %q (%+v), want it to start %q", err, de, want)
				}
				if len(seen) != 2 || seen[0] != 1 || seen[1] != 2 {
					t.Errorf("replayed %v before the error, want 1 and 2", seen)
				}
				// Reading from seq 4 on skips the damage.
				var tail []uint64
				if err := s.Journal().Replay(context.Background(), "orders-3", 4, math.MaxUint64, -1, func(e persistence.Event) error {
					tail = append(tail, e.Seq)
					return nil
				}); err != nil || len(tail) != 2 {
					t.Errorf("Replay from 4: %v, %v", tail, err)
				}
				if h, err := s.Journal().HighestSeq(context.Background(), "orders-3"); h != 5 || err != nil {
					t.Errorf("HighestSeq = %d, %v, want 5", h, err)
				}
				// The damaged record is still there, as it was: nothing repaired it away.
				if got := stored(t, s.DB(), []byte("journal"), []byte("events"), []byte("orders-3"), key); !bytes.Equal(got, damaged) {
					t.Errorf("the damaged record is now %x, was %x", got, damaged)
				}
			})
		}
	}
}

func TestUndecodableSnapshotAndCheckpoint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	ctx := context.Background()
	s, err := persistence.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Snapshots().Save(ctx, "acct-1", persistence.Snapshot{Seq: 40, Data: []byte("state")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Checkpoints().Complete(ctx, "wordcount", persistence.Checkpoint{ID: 9, States: map[string][]byte{"count/0": {1}}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	corrupt(t, path, []byte{0x94, 0x01, 0xc4, 0xff, 0x00}, []byte("snapshots"), []byte("acct-1"), seqKey(40))
	corrupt(t, path, []byte{0x96, 0x01, 0x09, 0x00, 0x00, 0xdf, 0x7f, 0xff, 0xff, 0xff}, []byte("checkpoints"), []byte("wordcount"), seqKey(9))

	s, err = persistence.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, ok, err := s.Snapshots().Latest(ctx, "acct-1")
	want := fmt.Sprintf(`persistence: snapshot "acct-1" seq 40 in %s: decode snapshot: `, path)
	if ok || !errors.Is(err, persistence.ErrDecode) || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("snapshot Latest = %v, %v; want an error starting %q", ok, err, want)
	}
	_, ok, err = s.Checkpoints().Latest(ctx, "wordcount")
	want = fmt.Sprintf(`persistence: job "wordcount" checkpoint 9 in %s: decode checkpoint: `, path)
	if ok || !errors.Is(err, persistence.ErrDecode) || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("checkpoint Latest = %v, %v; want an error starting %q", ok, err, want)
	}
	// Inspect reports the damage per entry rather than failing.
	inv, err := persistence.Inspect(s.DB())
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Snapshots) != 1 || inv.Snapshots[0].Err == nil || len(inv.Checkpoints) != 1 || inv.Checkpoints[0].Err == nil {
		t.Errorf("Inspect = %+v, want the damaged snapshot and checkpoint with errors", inv)
	}
}

// TestReopenKeepsEverything: what was appended, saved and completed is
// there after the file is closed and opened again.
func TestReopenKeepsEverything(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	ctx := context.Background()
	s, err := persistence.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	when := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	if err := s.Journal().Append(ctx, "a", []persistence.Event{{Seq: 1, Type: "x", Data: []byte("one"), Time: when}, {Seq: 2, Type: "y", Data: nil, Time: when}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Journal().DeleteTo(ctx, "a", 2); err != nil {
		t.Fatal(err)
	}
	if err := s.Journal().Append(ctx, "b", []persistence.Event{{Seq: 1, Type: "x", Data: []byte("b1"), Time: when}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Snapshots().Save(ctx, "a", persistence.Snapshot{Seq: 2, Data: []byte("snap"), Time: when}); err != nil {
		t.Fatal(err)
	}
	if err := s.Checkpoints().Complete(ctx, "job", persistence.Checkpoint{ID: 3, Time: when, Offsets: map[string]int64{"src/0": 42}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = persistence.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if h, _ := s.Journal().HighestSeq(ctx, "a"); h != 2 {
		t.Errorf("a: HighestSeq = %d after deleting everything and reopening, want 2", h)
	}
	var got []persistence.Event
	_ = s.Journal().Replay(ctx, "b", 1, math.MaxUint64, -1, func(e persistence.Event) error { got = append(got, e); return nil })
	if len(got) != 1 || string(got[0].Data) != "b1" || !got[0].Time.Equal(when) {
		t.Errorf("b: %+v", got)
	}
	if sn, ok, err := s.Snapshots().Latest(ctx, "a"); !ok || err != nil || sn.Seq != 2 || string(sn.Data) != "snap" || !sn.Time.Equal(when) {
		t.Errorf("snapshot: %+v %v %v", sn, ok, err)
	}
	if cp, ok, err := s.Checkpoints().Latest(ctx, "job"); !ok || err != nil || cp.ID != 3 || cp.Offsets["src/0"] != 42 {
		t.Errorf("checkpoint: %+v %v %v", cp, ok, err)
	}
	inv, err := persistence.Inspect(s.DB())
	if err != nil {
		t.Fatal(err)
	}
	want := []persistence.JournalInfo{{ID: "a", Highest: 2}, {ID: "b", Lowest: 1, Highest: 1, Events: 1}}
	if len(inv.Journals) != 2 {
		t.Fatalf("Inspect journals = %+v", inv.Journals)
	}
	for i, w := range want {
		g := inv.Journals[i]
		if g.ID != w.ID || g.Lowest != w.Lowest || g.Highest != w.Highest || g.Events != w.Events {
			t.Errorf("Inspect journal %d = %+v, want %+v", i, g, w)
		}
	}
}

// TestCloseCommitsQueuedAppends: appends racing with Close either commit
// (and are in the file afterwards) or fail with ErrClosed; none is lost
// or left waiting, and the writer goroutine is gone (TestMain checks).
func TestCloseCommitsQueuedAppends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	s, err := persistence.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	j := s.Journal()
	const writers = 32
	results := make(chan error, writers)
	start := make(chan struct{})
	for w := range writers {
		go func() {
			<-start
			results <- j.Append(context.Background(), fmt.Sprint("w", w), []persistence.Event{{Seq: 1, Type: "e"}})
		}()
	}
	close(start)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	succeeded := 0
	for range writers {
		select {
		case err := <-results:
			if err != nil && !errors.Is(err, persistence.ErrClosed) {
				t.Errorf("Append racing Close = %v, want nil or ErrClosed", err)
			}
			if err == nil {
				succeeded++
			}
		case <-time.After(10 * time.Second):
			t.Fatal("an Append racing Close never returned")
		}
	}
	if committed := j.Stats().Appends; committed != uint64(succeeded) {
		t.Errorf("Stats().Appends = %d, %d appends succeeded", committed, succeeded)
	}
	if err := j.Close(); err != nil { // twice is fine
		t.Fatal(err)
	}
	if err := j.Append(context.Background(), "late", []persistence.Event{{Seq: 1}}); !errors.Is(err, persistence.ErrClosed) {
		t.Errorf("Append after Close = %v, want ErrClosed", err)
	}
	if _, err := j.HighestSeq(context.Background(), "w0"); !errors.Is(err, persistence.ErrClosed) {
		t.Errorf("HighestSeq after Close = %v, want ErrClosed", err)
	}
	s.Close()
	s, err = persistence.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	inv, err := persistence.Inspect(s.DB())
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Journals) != succeeded {
		t.Errorf("%d journals in the file, but %d appends reported success", len(inv.Journals), succeeded)
	}
}

// TestCanceledAppendWritesNothing: an Append whose context is already done
// is refused before it reaches the writer.
func TestCanceledAppendWritesNothing(t *testing.T) {
	j := openStore(t).Journal()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := j.Append(ctx, "c", []persistence.Event{{Seq: 1}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Append(canceled) = %v", err)
	}
	if h, _ := j.HighestSeq(context.Background(), "c"); h != 0 {
		t.Errorf("HighestSeq = %d after a canceled append", h)
	}
}

func replayAll(t *testing.T, j persistence.Journal, id string) ([]uint64, error) {
	t.Helper()
	var seqs []uint64
	err := j.Replay(context.Background(), id, 1, math.MaxUint64, -1, func(e persistence.Event) error {
		seqs = append(seqs, e.Seq)
		return nil
	})
	return seqs, err
}

// TestLogSurvivesAStopBeforeCompaction: group commits go to the log first;
// when the file is closed before the journal could compact it (a crash, or
// the system closing the file first), nothing is lost: the next journal on
// the file finds the events in the log and compacts them.
func TestLogSurvivesAStopBeforeCompaction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	s, err := persistence.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := uint64(1); i <= 3; i++ {
		if err := s.Journal().Append(ctx, "a", []persistence.Event{{Seq: i, Type: "e", Data: []byte{byte(i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Journal().Append(ctx, "b", []persistence.Event{{Seq: 1, Type: "e"}}); err != nil {
		t.Fatal(err)
	}
	inv, err := persistence.Inspect(s.DB())
	if err != nil {
		t.Fatal(err)
	}
	if inv.Log.Entries != 4 || inv.Log.Events != 4 || len(inv.Journals) != 2 || inv.Journals[0].Events != 3 {
		t.Fatalf("before compaction: log %+v, journals %+v", inv.Log, inv.Journals)
	}
	if err := s.DB().Close(); err != nil { // the file goes first
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // the journal cannot compact: no error, nothing lost
		t.Fatalf("Close after the file closed = %v", err)
	}

	s, err = persistence.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	seqs, err := replayAll(t, s.Journal(), "a")
	if err != nil || len(seqs) != 3 {
		t.Fatalf("replay a = %v, %v, want 1..3", seqs, err)
	}
	if s.Journal().Stats().Compactions != 1 {
		t.Errorf("stats %+v, want the replay to have compacted the log", s.Journal().Stats())
	}
	inv, err = persistence.Inspect(s.DB())
	if err != nil {
		t.Fatal(err)
	}
	if inv.Log.Entries != 0 || len(inv.Journals) != 2 || inv.Journals[0].Events != 3 || inv.Journals[1].Events != 1 {
		t.Errorf("after compaction: log %+v, journals %+v", inv.Log, inv.Journals)
	}
}

// TestDamagedLog: a log entry that does not decode stops every replay (any
// journal may have events in it) with an error naming the entry and the
// file; a log entry that cannot be moved into its journal stops the
// replays of that journal only. Nothing is deleted.
func TestDamagedLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	s, err := persistence.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// A bucket where y's run of events 1 and 2 goes: a damaged file.
	if err := s.DB().Update(func(tx *bolt.Tx) error {
		j, err := tx.CreateBucketIfNotExists([]byte("journal"))
		if err != nil {
			return err
		}
		ev, err := j.CreateBucketIfNotExists([]byte("events"))
		if err != nil {
			return err
		}
		y, err := ev.CreateBucket([]byte("y"))
		if err != nil {
			return err
		}
		_, err = y.CreateBucket(seqKey(1))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"p", "y"} {
		if err := s.Journal().Append(ctx, id, []persistence.Event{{Seq: 1, Type: "e"}, {Seq: 2, Type: "e"}}); err != nil {
			t.Fatal(err)
		}
	}
	if seqs, err := replayAll(t, s.Journal(), "p"); err != nil || len(seqs) != 2 {
		t.Errorf("replay p = %v, %v, want 1 and 2", seqs, err)
	}
	_, err = replayAll(t, s.Journal(), "y")
	var de *persistence.DecodeError
	if !errors.As(err, &de) || de.ID != "y" || de.Seq != 1 || !strings.Contains(err.Error(), "log entry 2") || !strings.Contains(err.Error(), path) {
		t.Errorf("replay y = %v, want an error naming journal y, seq 1, log entry 2 and the file", err)
	}
	s.Close()

	// Now damage the remaining log entry itself.
	corrupt(t, path, []byte{0x92, 0x01, 0xdd, 0xff, 0xff, 0xff, 0xff}, []byte("journal"), []byte("log"), seqKey(2))
	s, err = persistence.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range []string{"p", "y"} {
		_, err := replayAll(t, s.Journal(), id)
		if !errors.Is(err, persistence.ErrDecode) || !strings.HasPrefix(err.Error(), fmt.Sprintf("persistence: journal log entry 2 in %s: decode: ", path)) {
			t.Errorf("replay %s with a damaged log entry = %v", id, err)
		}
	}
	inv, err := persistence.Inspect(s.DB())
	if err != nil {
		t.Fatal(err)
	}
	if inv.Log.Entries != 1 || inv.Log.Damaged != 1 {
		t.Errorf("Inspect log %+v, want the damaged entry", inv.Log)
	}
}

// TestTwoJournalsOnOneDatabase: a second BoltJournal on the same database
// sees the first one's appends, even those not compacted yet, and neither
// takes a sequence number the other wrote.
func TestTwoJournalsOnOneDatabase(t *testing.T) {
	s := openStore(t)
	a := s.Journal()
	b, err := persistence.NewBoltJournal(s.DB())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	ev := func(seq uint64) []persistence.Event { return []persistence.Event{{Seq: seq, Type: "e"}} }
	for seq := uint64(1); seq <= 2; seq++ {
		if err := a.Append(ctx, "x", ev(seq)); err != nil {
			t.Fatal(err)
		}
	}
	if seqs, err := replayAll(t, b, "x"); err != nil || len(seqs) != 2 {
		t.Fatalf("b replays a's events: %v, %v", seqs, err)
	}
	if err := b.Append(ctx, "x", ev(3)); err != nil {
		t.Fatal(err)
	}
	if err := a.Append(ctx, "x", ev(3)); !errors.Is(err, persistence.ErrSeqConflict) {
		t.Fatalf("a appends seq 3 after b did: %v, want ErrSeqConflict", err)
	}
	if err := a.Append(ctx, "x", ev(4)); err != nil {
		t.Fatal(err)
	}
	if seqs, err := replayAll(t, a, "x"); err != nil || len(seqs) != 4 || seqs[3] != 4 {
		t.Fatalf("a replays: %v, %v, want 1..4", seqs, err)
	}
}
