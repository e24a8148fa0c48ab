// Package persisttest is the conformance suite of package persistence: the
// contract of Journal, SnapshotStore and CheckpointStore as tests, which
// every implementation runs.
//
//	func TestBoltJournal(t *testing.T) {
//		persisttest.TestJournal(t, func(t *testing.T) persistence.Journal {
//			s, err := persistence.Open(filepath.Join(t.TempDir(), "store.db"))
//			...
//			t.Cleanup(func() { s.Close() })
//			return s.Journal()
//		})
//	}
//
// Each subtest gets a new, empty store from the factory.
//
// Faulty stores (NewFaultyJournal, NewFaultySnapshotStore,
// NewFaultyCheckpointStore) wrap any store, the in-memory ones by default,
// and inject failed writes, a full disk (FailAfterBytes), failed reads and
// corrupt payloads, with counts of the operations:
//
//	j := persisttest.NewFaultyJournal(nil)
//	j.FailNextWrite(errors.New("disk full"))
//	// the next Append fails with that error (and persisttest.ErrInjected);
//	// an EventSourced actor over j reports it to its caller.
package persisttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/persistence"
)

// t0 is a time with nanoseconds and a zone, to check that times survive.
var t0 = time.Date(2024, 5, 1, 12, 30, 0, 123456789, time.FixedZone("x", 3600))

func ev(seq uint64) persistence.Event {
	return persistence.Event{Seq: seq, Type: "e", Data: []byte(fmt.Sprintf("event %d", seq)), Time: t0.Add(time.Duration(seq) * time.Second)}
}

func evs(from, to uint64) []persistence.Event {
	var out []persistence.Event
	for s := from; s <= to; s++ {
		out = append(out, ev(s))
	}
	return out
}

func mustAppend(t *testing.T, j persistence.Journal, id string, events []persistence.Event) {
	t.Helper()
	if err := j.Append(context.Background(), id, events); err != nil {
		t.Fatalf("Append(%q, %d events from seq %d) = %v", id, len(events), events[0].Seq, err)
	}
}

func replay(t *testing.T, j persistence.Journal, id string, from, to uint64, max int) []persistence.Event {
	t.Helper()
	var out []persistence.Event
	if err := j.Replay(context.Background(), id, from, to, max, func(e persistence.Event) error {
		out = append(out, e)
		return nil
	}); err != nil {
		t.Fatalf("Replay(%q, %d, %d, %d) = %v", id, from, to, max, err)
	}
	return out
}

func seqs(events []persistence.Event) []uint64 {
	out := []uint64{}
	for _, e := range events {
		out = append(out, e.Seq)
	}
	return out
}

func rng(from, to uint64) []uint64 {
	out := []uint64{}
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// sameEvent compares an event with the one that was appended.
func sameEvent(t *testing.T, got, want persistence.Event) {
	t.Helper()
	if got.Seq != want.Seq || got.Type != want.Type || !bytes.Equal(got.Data, want.Data) || !got.Time.Equal(want.Time) {
		t.Errorf("event %d = {%d %q %q %v}, want {%d %q %q %v}", want.Seq, got.Seq, got.Type, got.Data, got.Time, want.Seq, want.Type, want.Data, want.Time)
	}
}

func highest(t *testing.T, j persistence.Journal, id string) uint64 {
	t.Helper()
	h, err := j.HighestSeq(context.Background(), id)
	if err != nil {
		t.Fatalf("HighestSeq(%q) = %v", id, err)
	}
	return h
}

// wantConflict checks that err is a sequence conflict that names id.
func wantConflict(t *testing.T, err error, id, what string) {
	t.Helper()
	if !errors.Is(err, persistence.ErrSeqConflict) {
		t.Errorf("%s: err = %v, want ErrSeqConflict", what, err)
	} else if !strings.Contains(err.Error(), fmt.Sprintf("%q", id)) {
		t.Errorf("%s: error %q does not name journal %q", what, err, id)
	}
}

// TestJournal runs the journal contract against journals made by
// newJournal, which must return a new, empty journal each time and close it
// with t.Cleanup.
func TestJournal(t *testing.T, newJournal func(t *testing.T) persistence.Journal) {
	ctx := context.Background()

	t.Run("AppendReplayInOrder", func(t *testing.T) {
		j := newJournal(t)
		mustAppend(t, j, "a", evs(1, 3))
		mustAppend(t, j, "a", evs(4, 4))
		mustAppend(t, j, "a", evs(5, 6))
		got := replay(t, j, "a", 1, math.MaxUint64, -1)
		if !slices.Equal(seqs(got), rng(1, 6)) {
			t.Fatalf("replayed seqs %v, want 1..6", seqs(got))
		}
		for i, e := range got {
			sameEvent(t, e, ev(uint64(i+1)))
		}
		if h := highest(t, j, "a"); h != 6 {
			t.Errorf("HighestSeq = %d, want 6", h)
		}
	})

	t.Run("ReplayRanges", func(t *testing.T) {
		j := newJournal(t)
		mustAppend(t, j, "r", evs(1, 10))
		for _, c := range []struct {
			name     string
			from, to uint64
			max      int
			want     []uint64
		}{
			{"everything", 1, math.MaxUint64, -1, rng(1, 10)},
			{"from 0", 0, math.MaxUint64, -1, rng(1, 10)},
			{"lower bound", 4, math.MaxUint64, -1, rng(4, 10)},
			{"upper bound", 1, 6, -1, rng(1, 6)},
			{"both bounds", 3, 7, -1, rng(3, 7)},
			{"limit", 3, 8, 2, rng(3, 4)},
			{"limit 1", 1, math.MaxUint64, 1, rng(1, 1)},
			{"limit beyond the end", 8, 100, 10, rng(8, 10)},
			{"lower = upper", 5, 5, -1, rng(5, 5)},
			{"lower > upper", 6, 5, -1, rng(1, 0)},
			{"limit 0", 1, 10, 0, rng(1, 0)},
			{"beyond the end", 11, 20, -1, rng(1, 0)},
			{"upper bound 0", 0, 0, -1, rng(1, 0)},
		} {
			if got := seqs(replay(t, j, "r", c.from, c.to, c.max)); !slices.Equal(got, c.want) {
				t.Errorf("%s: Replay(%d, %d, %d) = %v, want %v", c.name, c.from, c.to, c.max, got, c.want)
			}
		}
	})

	t.Run("ReplayLongJournal", func(t *testing.T) {
		// Longer than an implementation's read chunk, if it has one.
		j := newJournal(t)
		for s := uint64(1); s <= 3000; s += 500 {
			mustAppend(t, j, "long", evs(s, s+499))
		}
		if got := seqs(replay(t, j, "long", 1, math.MaxUint64, -1)); !slices.Equal(got, rng(1, 3000)) {
			t.Fatalf("replayed %d events (first %v), want 1..3000", len(got), got[:min(5, len(got))])
		}
		if got := seqs(replay(t, j, "long", 1000, math.MaxUint64, 2500)); !slices.Equal(got, rng(1000, 3499)[:2001]) {
			t.Errorf("from 1000, max 2500: %d events, want 2001 (1000..3000)", len(got))
		}
		if got := seqs(replay(t, j, "long", 10, 2060, 2048)); !slices.Equal(got, rng(10, 2057)) {
			t.Errorf("10..2060, max 2048: %d events from %v, want 10..2057", len(got), got[:min(1, len(got))])
		}
	})

	t.Run("DeleteInsideLongJournal", func(t *testing.T) {
		j := newJournal(t)
		mustAppend(t, j, "dl", evs(1, 400))
		mustAppend(t, j, "dl", evs(401, 1000))
		if err := j.DeleteTo(ctx, "dl", 333); err != nil {
			t.Fatal(err)
		}
		if got := seqs(replay(t, j, "dl", 300, math.MaxUint64, -1)); !slices.Equal(got, rng(334, 1000)) {
			t.Errorf("from 300 after DeleteTo(333): %d events from %v, want 334..1000", len(got), got[:min(1, len(got))])
		}
		if got := seqs(replay(t, j, "dl", 500, 700, 5)); !slices.Equal(got, rng(500, 504)) {
			t.Errorf("500..700, max 5: %v", got)
		}
		got := replay(t, j, "dl", 334, 334, -1)
		if len(got) != 1 {
			t.Fatalf("seq 334: %v", seqs(got))
		}
		sameEvent(t, got[0], ev(334))
		if err := j.DeleteTo(ctx, "dl", 999); err != nil {
			t.Fatal(err)
		}
		if got := seqs(replay(t, j, "dl", 1, math.MaxUint64, -1)); !slices.Equal(got, rng(1000, 1000)) {
			t.Errorf("after DeleteTo(999): %v", got)
		}
	})

	t.Run("ReplayStopsAtCallbackError", func(t *testing.T) {
		j := newJournal(t)
		mustAppend(t, j, "s", evs(1, 5))
		stop := errors.New("enough")
		var seen []uint64
		err := j.Replay(ctx, "s", 1, math.MaxUint64, -1, func(e persistence.Event) error {
			seen = append(seen, e.Seq)
			if e.Seq == 3 {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) {
			t.Errorf("Replay = %v, want the callback's error", err)
		}
		if !slices.Equal(seen, rng(1, 3)) {
			t.Errorf("callback saw %v, want 1..3", seen)
		}
	})

	t.Run("UnknownID", func(t *testing.T) {
		j := newJournal(t)
		mustAppend(t, j, "known", evs(1, 2))
		if h := highest(t, j, "unknown"); h != 0 {
			t.Errorf("HighestSeq(unknown) = %d, want 0", h)
		}
		if got := replay(t, j, "unknown", 1, math.MaxUint64, -1); len(got) != 0 {
			t.Errorf("Replay(unknown) = %v, want nothing", seqs(got))
		}
		if err := j.DeleteTo(ctx, "unknown", 10); err != nil {
			t.Errorf("DeleteTo(unknown) = %v", err)
		}
		if got := replay(t, j, "know", 1, math.MaxUint64, -1); len(got) != 0 { // a prefix is another id
			t.Errorf("Replay(know) = %v, want nothing", seqs(got))
		}
	})

	t.Run("HighestSeqAfterDeletes", func(t *testing.T) {
		j := newJournal(t)
		mustAppend(t, j, "d", evs(1, 10))
		if err := j.DeleteTo(ctx, "d", 4); err != nil {
			t.Fatal(err)
		}
		if got := seqs(replay(t, j, "d", 1, math.MaxUint64, -1)); !slices.Equal(got, rng(5, 10)) {
			t.Errorf("after DeleteTo(4): %v, want 5..10", got)
		}
		if h := highest(t, j, "d"); h != 10 {
			t.Errorf("after DeleteTo(4): HighestSeq = %d, want 10", h)
		}
		if err := j.DeleteTo(ctx, "d", 2); err != nil { // already gone: a no-op
			t.Fatal(err)
		}
		if err := j.DeleteTo(ctx, "d", 10); err != nil { // everything
			t.Fatal(err)
		}
		if got := replay(t, j, "d", 1, math.MaxUint64, -1); len(got) != 0 {
			t.Errorf("after deleting everything: %v, want nothing", seqs(got))
		}
		if h := highest(t, j, "d"); h != 10 {
			t.Errorf("after deleting everything: HighestSeq = %d, want 10", h)
		}
		wantConflict(t, j.Append(ctx, "d", evs(1, 1)), "d", "append seq 1 after deleting everything")
		mustAppend(t, j, "d", evs(11, 12))
		if got := seqs(replay(t, j, "d", 1, math.MaxUint64, -1)); !slices.Equal(got, rng(11, 12)) {
			t.Errorf("after appending 11..12: %v", got)
		}
		if err := j.DeleteTo(ctx, "d", math.MaxUint64); err != nil {
			t.Fatal(err)
		}
		if h := highest(t, j, "d"); h != 12 {
			t.Errorf("after DeleteTo(max): HighestSeq = %d, want 12", h)
		}
	})

	t.Run("AtomicBatch", func(t *testing.T) {
		j := newJournal(t)
		gap := []persistence.Event{ev(1), ev(2), ev(4)}
		wantConflict(t, j.Append(ctx, "b", gap), "b", "a batch with a gap")
		if h := highest(t, j, "b"); h != 0 {
			t.Errorf("after the refused batch: HighestSeq = %d, want 0", h)
		}
		if got := replay(t, j, "b", 1, math.MaxUint64, -1); len(got) != 0 {
			t.Errorf("the refused batch left %v", seqs(got))
		}
		mustAppend(t, j, "b", evs(1, 2))
		for _, c := range []struct {
			name  string
			batch []persistence.Event
		}{
			{"a repeated seq inside the batch", []persistence.Event{ev(3), ev(3)}},
			{"a batch overlapping the journal", evs(2, 4)},
			{"a batch after a gap", evs(4, 5)},
			{"a batch going backwards", []persistence.Event{ev(3), ev(2)}},
			{"seq 0", []persistence.Event{ev(0)}},
		} {
			wantConflict(t, j.Append(ctx, "b", c.batch), "b", c.name)
		}
		if got := seqs(replay(t, j, "b", 1, math.MaxUint64, -1)); !slices.Equal(got, rng(1, 2)) {
			t.Errorf("after refused batches: %v, want 1..2", got)
		}
		if h := highest(t, j, "b"); h != 2 {
			t.Errorf("after refused batches: HighestSeq = %d, want 2", h)
		}
	})

	t.Run("EmptyAppendAndEmptyID", func(t *testing.T) {
		j := newJournal(t)
		if err := j.Append(ctx, "e", nil); err != nil {
			t.Errorf("Append(nothing) = %v", err)
		}
		if h := highest(t, j, "e"); h != 0 {
			t.Errorf("HighestSeq after an empty append = %d", h)
		}
		if err := j.Append(ctx, "", evs(1, 1)); err == nil {
			t.Error("Append with an empty id succeeded")
		}
	})

	t.Run("DataIsCopied", func(t *testing.T) {
		j := newJournal(t)
		batch := evs(1, 1)
		mustAppend(t, j, "c", batch)
		batch[0].Data[0] = 'X' // the caller reuses its buffer
		got := replay(t, j, "c", 1, 1, -1)
		sameEvent(t, got[0], ev(1))
		got[0].Data[0] = 'Y' // the caller changes what it got
		sameEvent(t, replay(t, j, "c", 1, 1, -1)[0], ev(1))
	})

	t.Run("ConcurrentAppendersDifferentIDs", func(t *testing.T) {
		j := newJournal(t)
		const writers, perWriter = 16, 120
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("w-%d", w)
				for s := uint64(1); s <= perWriter; {
					n := uint64(1 + (int(s)+w)%3) // batches of 1 to 3
					n = min(n, perWriter-s+1)
					batch := evs(s, s+n-1)
					for i := range batch {
						batch[i].Data = []byte(fmt.Sprintf("%s/%d", id, batch[i].Seq))
					}
					if err := j.Append(ctx, id, batch); err != nil {
						errs <- err
						return
					}
					s += n
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for w := range writers {
			id := fmt.Sprintf("w-%d", w)
			got := replay(t, j, id, 1, math.MaxUint64, -1)
			if !slices.Equal(seqs(got), rng(1, perWriter)) {
				t.Fatalf("%s: replayed %v", id, seqs(got))
			}
			for _, e := range got {
				if want := fmt.Sprintf("%s/%d", id, e.Seq); string(e.Data) != want {
					t.Fatalf("%s seq %d: data %q, want %q", id, e.Seq, e.Data, want)
				}
			}
			if h := highest(t, j, id); h != perWriter {
				t.Errorf("%s: HighestSeq = %d", id, h)
			}
		}
	})

	t.Run("ConcurrentAppendersSameSeq", func(t *testing.T) {
		// Competing writers of one id: exactly one wins each sequence
		// number; the losers' appends fail whole and write nothing.
		j := newJournal(t)
		const writers = 8
		results := make(chan error, writers)
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				batch := evs(1, 2)
				batch[0].Data, batch[1].Data = []byte(fmt.Sprint(w)), []byte(fmt.Sprint(w))
				results <- j.Append(ctx, "race", batch)
			}()
		}
		wg.Wait()
		close(results)
		wins := 0
		for err := range results {
			if err == nil {
				wins++
			} else {
				wantConflict(t, err, "race", "a losing writer")
			}
		}
		if wins != 1 {
			t.Fatalf("%d writers won seq 1..2, want 1", wins)
		}
		got := replay(t, j, "race", 1, math.MaxUint64, -1)
		if !slices.Equal(seqs(got), rng(1, 2)) || !bytes.Equal(got[0].Data, got[1].Data) {
			t.Errorf("replay after the race: seqs %v, data %q and %q (both from the winner)", seqs(got), got[0].Data, got[min(1, len(got)-1)].Data)
		}
	})
}

func snap(seq uint64) persistence.Snapshot {
	return persistence.Snapshot{Seq: seq, Data: []byte(fmt.Sprintf("state at %d", seq)), Time: t0.Add(time.Duration(seq) * time.Minute)}
}

func latestSnapshot(t *testing.T, s persistence.SnapshotStore, id string) (persistence.Snapshot, bool) {
	t.Helper()
	got, ok, err := s.Latest(context.Background(), id)
	if err != nil {
		t.Fatalf("Latest(%q) = %v", id, err)
	}
	return got, ok
}

func sameSnapshot(t *testing.T, got persistence.Snapshot, ok bool, want persistence.Snapshot) {
	t.Helper()
	if !ok {
		t.Errorf("no snapshot, want seq %d", want.Seq)
		return
	}
	if got.Seq != want.Seq || !bytes.Equal(got.Data, want.Data) || !got.Time.Equal(want.Time) {
		t.Errorf("snapshot = {%d %q %v}, want {%d %q %v}", got.Seq, got.Data, got.Time, want.Seq, want.Data, want.Time)
	}
}

// TestSnapshotStore runs the snapshot store contract against stores made
// by newStore (new and empty each time, closed with t.Cleanup).
func TestSnapshotStore(t *testing.T, newStore func(t *testing.T) persistence.SnapshotStore) {
	ctx := context.Background()
	save := func(t *testing.T, s persistence.SnapshotStore, id string, sn persistence.Snapshot) {
		t.Helper()
		if err := s.Save(ctx, id, sn); err != nil {
			t.Fatalf("Save(%q, seq %d) = %v", id, sn.Seq, err)
		}
	}

	t.Run("LatestOfNone", func(t *testing.T) {
		s := newStore(t)
		save(t, s, "other", snap(3))
		if _, ok := latestSnapshot(t, s, "none"); ok {
			t.Error("Latest of an unknown id found a snapshot")
		}
	})

	t.Run("LatestIsHighestSeq", func(t *testing.T) {
		s := newStore(t)
		save(t, s, "a", snap(5))
		save(t, s, "a", snap(10))
		save(t, s, "a", snap(7)) // saved late, but older
		save(t, s, "b", snap(20))
		got, ok := latestSnapshot(t, s, "a")
		sameSnapshot(t, got, ok, snap(10))
		got, ok = latestSnapshot(t, s, "b")
		sameSnapshot(t, got, ok, snap(20))
	})

	t.Run("SaveSameSeqReplaces", func(t *testing.T) {
		s := newStore(t)
		save(t, s, "a", snap(5))
		again := snap(5)
		again.Data = []byte("replaced")
		save(t, s, "a", again)
		got, ok := latestSnapshot(t, s, "a")
		sameSnapshot(t, got, ok, again)
	})

	t.Run("DeleteTo", func(t *testing.T) {
		s := newStore(t)
		for _, seq := range []uint64{5, 10, 15} {
			save(t, s, "a", snap(seq))
		}
		if err := s.DeleteTo(ctx, "a", 14); err != nil {
			t.Fatal(err)
		}
		got, ok := latestSnapshot(t, s, "a")
		sameSnapshot(t, got, ok, snap(15))
		if err := s.DeleteTo(ctx, "a", 15); err != nil {
			t.Fatal(err)
		}
		if got, ok := latestSnapshot(t, s, "a"); ok {
			t.Errorf("after deleting every snapshot Latest found seq %d", got.Seq)
		}
		if err := s.DeleteTo(ctx, "unknown", 15); err != nil {
			t.Errorf("DeleteTo(unknown) = %v", err)
		}
		save(t, s, "a", snap(16)) // the id lives on
		got, ok = latestSnapshot(t, s, "a")
		sameSnapshot(t, got, ok, snap(16))
	})

	t.Run("SelectBySeqAndTime", func(t *testing.T) {
		s := newStore(t)
		for _, seq := range []uint64{5, 10, 15} {
			save(t, s, "a", snap(seq)) // at t0 + seq minutes
		}
		sel := func(c persistence.SnapshotCriteria) (persistence.Snapshot, bool) {
			t.Helper()
			got, ok, err := s.Select(ctx, "a", c)
			if err != nil {
				t.Fatalf("Select(%+v) = %v", c, err)
			}
			return got, ok
		}
		for _, c := range []struct {
			crit persistence.SnapshotCriteria
			want uint64 // 0: none
		}{
			{persistence.SnapshotCriteria{}, 15},
			{persistence.SnapshotCriteria{MaxSeq: 100}, 15},
			{persistence.SnapshotCriteria{MaxSeq: 15}, 15},
			{persistence.SnapshotCriteria{MaxSeq: 14}, 10},
			{persistence.SnapshotCriteria{MaxSeq: 10}, 10},
			{persistence.SnapshotCriteria{MaxSeq: 4}, 0},
			{persistence.SnapshotCriteria{MaxTime: t0.Add(12 * time.Minute)}, 10},
			{persistence.SnapshotCriteria{MaxTime: t0.Add(5 * time.Minute)}, 5},
			{persistence.SnapshotCriteria{MaxTime: t0.Add(time.Minute)}, 0},
			{persistence.SnapshotCriteria{MaxSeq: 14, MaxTime: t0.Add(7 * time.Minute)}, 5},
		} {
			got, ok := sel(c.crit)
			if c.want == 0 {
				if ok {
					t.Errorf("Select(%+v) found seq %d, want none", c.crit, got.Seq)
				}
				continue
			}
			sameSnapshot(t, got, ok, snap(c.want))
		}
		if _, ok, err := s.Select(ctx, "unknown", persistence.SnapshotCriteria{}); ok || err != nil {
			t.Errorf("Select of an unknown id = %v, %v", ok, err)
		}
	})

	t.Run("DeleteOne", func(t *testing.T) {
		s := newStore(t)
		for _, seq := range []uint64{5, 10, 15} {
			save(t, s, "a", snap(seq))
		}
		if err := s.Delete(ctx, "a", 15); err != nil {
			t.Fatal(err)
		}
		got, ok := latestSnapshot(t, s, "a")
		sameSnapshot(t, got, ok, snap(10))
		if err := s.Delete(ctx, "a", 7); err != nil { // none at 7
			t.Errorf("Delete of a missing seq = %v", err)
		}
		if err := s.Delete(ctx, "unknown", 1); err != nil {
			t.Errorf("Delete of an unknown id = %v", err)
		}
		got, ok, err := s.Select(ctx, "a", persistence.SnapshotCriteria{MaxSeq: 9})
		if err != nil {
			t.Fatal(err)
		}
		sameSnapshot(t, got, ok, snap(5))
	})

	t.Run("DataIsCopiedAndLarge", func(t *testing.T) {
		s := newStore(t)
		big := persistence.Snapshot{Seq: 1, Data: bytes.Repeat([]byte("0123456789abcdef"), 1<<16), Time: t0}
		want := persistence.Snapshot{Seq: 1, Data: bytes.Clone(big.Data), Time: t0}
		save(t, s, "big", big)
		big.Data[0] = 'X'
		got, ok := latestSnapshot(t, s, "big")
		sameSnapshot(t, got, ok, want)
		got.Data[1] = 'Y'
		got, ok = latestSnapshot(t, s, "big")
		sameSnapshot(t, got, ok, want)
	})

	t.Run("EmptyID", func(t *testing.T) {
		if err := newStore(t).Save(ctx, "", snap(1)); err == nil {
			t.Error("Save with an empty id succeeded")
		}
	})
}

func checkpoint(id uint64) persistence.Checkpoint {
	return persistence.Checkpoint{
		ID:      id,
		Time:    t0.Add(time.Duration(id) * time.Second),
		States:  map[string][]byte{"count/0": []byte(fmt.Sprintf("c0@%d", id)), "count/1": []byte(fmt.Sprintf("c1@%d", id)), "empty/0": {}},
		Offsets: map[string]int64{"lines/0": int64(id) * 100, "lines/1": -1},
	}
}

func sameCheckpoint(t *testing.T, got persistence.Checkpoint, ok bool, want persistence.Checkpoint) {
	t.Helper()
	if !ok {
		t.Errorf("no checkpoint, want %d", want.ID)
		return
	}
	if got.ID != want.ID || !got.Time.Equal(want.Time) || len(got.States) != len(want.States) || len(got.Offsets) != len(want.Offsets) {
		t.Errorf("checkpoint = %+v, want %+v", got, want)
		return
	}
	for k, v := range want.States {
		if g, ok := got.States[k]; !ok || !bytes.Equal(g, v) {
			t.Errorf("checkpoint %d: state %q = %q, want %q", want.ID, k, g, v)
		}
	}
	for k, v := range want.Offsets {
		if g, ok := got.Offsets[k]; !ok || g != v {
			t.Errorf("checkpoint %d: offset %q = %d, want %d", want.ID, k, g, v)
		}
	}
}

// TestCheckpointStore runs the checkpoint store contract against stores
// made by newStore (new and empty each time, closed with t.Cleanup).
func TestCheckpointStore(t *testing.T, newStore func(t *testing.T) persistence.CheckpointStore) {
	ctx := context.Background()
	complete := func(t *testing.T, s persistence.CheckpointStore, job string, cp persistence.Checkpoint) {
		t.Helper()
		if err := s.Complete(ctx, job, cp); err != nil {
			t.Fatalf("Complete(%q, %d) = %v", job, cp.ID, err)
		}
	}
	latest := func(t *testing.T, s persistence.CheckpointStore, job string) (persistence.Checkpoint, bool) {
		t.Helper()
		cp, ok, err := s.Latest(ctx, job)
		if err != nil {
			t.Fatalf("Latest(%q) = %v", job, err)
		}
		return cp, ok
	}

	t.Run("LatestOfNone", func(t *testing.T) {
		s := newStore(t)
		complete(t, s, "other", checkpoint(1))
		if _, ok := latest(t, s, "none"); ok {
			t.Error("Latest of an unknown job found a checkpoint")
		}
	})

	t.Run("NewestWins", func(t *testing.T) {
		s := newStore(t)
		complete(t, s, "wc", checkpoint(1))
		complete(t, s, "wc", checkpoint(2))
		complete(t, s, "other", checkpoint(7))
		cp, ok := latest(t, s, "wc")
		sameCheckpoint(t, cp, ok, checkpoint(2))
		cp, ok = latest(t, s, "other")
		sameCheckpoint(t, cp, ok, checkpoint(7))
	})

	t.Run("StaleRefused", func(t *testing.T) {
		s := newStore(t)
		complete(t, s, "wc", checkpoint(5))
		err := s.Complete(ctx, "wc", checkpoint(4))
		if !errors.Is(err, persistence.ErrStaleCheckpoint) || !strings.Contains(err.Error(), `"wc"`) {
			t.Errorf("Complete(older) = %v, want ErrStaleCheckpoint naming the job", err)
		}
		cp, ok := latest(t, s, "wc")
		sameCheckpoint(t, cp, ok, checkpoint(5))
		retry := checkpoint(5) // completing the newest again replaces it
		retry.Offsets["lines/0"] = 501
		complete(t, s, "wc", retry)
		cp, ok = latest(t, s, "wc")
		sameCheckpoint(t, cp, ok, retry)
	})

	t.Run("EmptyAndLargeCheckpoints", func(t *testing.T) {
		s := newStore(t)
		complete(t, s, "empty", persistence.Checkpoint{ID: 1, Time: t0})
		cp, ok := latest(t, s, "empty")
		sameCheckpoint(t, cp, ok, persistence.Checkpoint{ID: 1, Time: t0})
		big := persistence.Checkpoint{ID: 1 << 40, Time: t0, States: map[string][]byte{}, Offsets: map[string]int64{}}
		for i := range 300 {
			big.States[fmt.Sprintf("op/%d", i)] = bytes.Repeat([]byte{byte(i)}, 3000)
			big.Offsets[fmt.Sprintf("src/%d", i)] = int64(i) << 33
		}
		complete(t, s, "big", big)
		cp, ok = latest(t, s, "big")
		sameCheckpoint(t, cp, ok, big)
	})

	t.Run("DataIsCopied", func(t *testing.T) {
		s := newStore(t)
		cp := checkpoint(1)
		complete(t, s, "wc", cp)
		cp.States["count/0"][0] = 'X'
		cp.Offsets["lines/0"] = 999
		got, ok := latest(t, s, "wc")
		sameCheckpoint(t, got, ok, checkpoint(1))
		got.States["count/1"][0] = 'Y'
		got, ok = latest(t, s, "wc")
		sameCheckpoint(t, got, ok, checkpoint(1))
	})

	t.Run("EmptyJob", func(t *testing.T) {
		if err := newStore(t).Complete(ctx, "", checkpoint(1)); err == nil {
			t.Error("Complete with an empty job succeeded")
		}
	})
}
