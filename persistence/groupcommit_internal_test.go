package persistence

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/internal/store"
)

func openDB(t *testing.T) *bolt.DB {
	t.Helper()
	f, err := store.Open(filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f.DB
}

func events(from, n uint64) []Event {
	var out []Event
	for s := from; s < from+n; s++ {
		out = append(out, Event{Seq: s, Type: "t", Data: []byte(fmt.Sprint(s)), Time: time.Unix(int64(s), 0)})
	}
	return out
}

func request(t *testing.T, j *BoltJournal, id string, from, n uint64) *appendReq {
	t.Helper()
	r, err := j.request(id, events(from, n))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// result waits for an append's outcome.
func result(t *testing.T, r *appendReq) error {
	t.Helper()
	select {
	case err := <-r.done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("append %q seq %d: no outcome", r.id, r.first)
		return nil
	}
}

func replaySeqs(t *testing.T, j Journal, id string) []uint64 {
	t.Helper()
	out := []uint64{}
	if err := j.Replay(context.Background(), id, 1, math.MaxUint64, -1, func(e Event) error {
		out = append(out, e.Seq)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestWriterGroupsQueuedAppends: the appends queued while the writer is
// busy share one transaction, and a conflicting one among them fails alone.
func TestWriterGroupsQueuedAppends(t *testing.T) {
	j := newBoltJournal(openDB(t))
	ctx := context.Background()
	reqs := []*appendReq{
		request(t, j, "b", 1, 2),
		request(t, j, "a", 2, 1), // a's journal is empty: a conflict
		request(t, j, "c", 1, 1),
		request(t, j, "b", 3, 1), // continues the first append of the group
		request(t, j, "c", 1, 1), // repeats seq 1 of c: a conflict
	}
	for _, r := range reqs {
		j.reqs <- r // queued before the writer starts: one group
	}
	go j.run()
	defer j.Close()
	wantErr := []bool{false, true, false, false, true}
	for i, r := range reqs {
		err := result(t, r)
		if (err != nil) != wantErr[i] {
			t.Errorf("append %d (%q seq %d) = %v, want error: %v", i, r.id, r.first, err, wantErr[i])
		}
		if err != nil && !errors.Is(err, ErrSeqConflict) {
			t.Errorf("append %d: %v, want ErrSeqConflict", i, err)
		}
	}
	if st := j.Stats(); st.Commits != 1 || st.Appends != 3 || st.Events != 4 || st.Failed != 2 {
		t.Errorf("stats %+v, want 1 commit of 3 appends (4 events) and 2 failures", st)
	}
	for id, want := range map[string][]uint64{"a": {}, "b": {1, 2, 3}, "c": {1}} {
		if got := replaySeqs(t, j, id); !slices.Equal(got, want) {
			t.Errorf("journal %q: %v, want %v", id, got, want)
		}
	}
	if h, _ := j.HighestSeq(ctx, "a"); h != 0 {
		t.Errorf("HighestSeq(a) = %d after its refused append", h)
	}
}

// TestFailingAppendDoesNotPoisonItsGroup: an append that fails half-way
// (here a bucket stands where its highest sequence number goes, after the
// group's first append wrote its own) aborts the group's transaction; each
// append is then retried alone, so the others commit and the failing one
// writes nothing.
func TestFailingAppendDoesNotPoisonItsGroup(t *testing.T) {
	db := openDB(t)
	err := db.Update(func(tx *bolt.Tx) error {
		root, err := tx.CreateBucketIfNotExists(journalBucket)
		if err != nil {
			return err
		}
		h, err := root.CreateBucketIfNotExists(highestBucket)
		if err != nil {
			return err
		}
		_, err = h.CreateBucket([]byte("x"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	j := newBoltJournal(db)
	reqs := []*appendReq{request(t, j, "p", 1, 3), request(t, j, "x", 1, 2), request(t, j, "q", 1, 1)}
	for _, r := range reqs {
		j.reqs <- r
	}
	go j.run()
	defer j.Close()
	if err := result(t, reqs[0]); err != nil {
		t.Errorf("p: %v", err)
	}
	err = result(t, reqs[1])
	if err == nil || errors.Is(err, ErrSeqConflict) || !strings.Contains(err.Error(), `journal "x"`) ||
		!strings.Contains(err.Error(), db.Path()) || !strings.Contains(err.Error(), "nothing written: highest seq: ") {
		t.Errorf("x: %v, want a write error naming the journal, the file and what failed", err)
	}
	if err := result(t, reqs[2]); err != nil {
		t.Errorf("q: %v", err)
	}
	if got := replaySeqs(t, j, "p"); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Errorf("p: %v", got)
	}
	if got := replaySeqs(t, j, "q"); !slices.Equal(got, []uint64{1}) {
		t.Errorf("q: %v", got)
	}
	if h, err := j.HighestSeq(context.Background(), "x"); h != 0 || err != nil {
		t.Errorf("x: HighestSeq = %d, %v: its failed append left something", h, err)
	}
	if st := j.Stats(); st.Commits != 2 || st.Appends != 2 || st.Failed != 1 {
		t.Errorf("stats %+v, want 2 commits (p and q retried alone) and 1 failure", st)
	}
}
