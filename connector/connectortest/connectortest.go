// Package connectortest is the conformance suite for connectors: a
// connector's tests call Source or Sink with a way to make the connector
// over given records and the features it claims, and the suite checks what
// the runtime relies on: a source reads every record once, its partitions
// split them, it replays exactly from an offset, and it waits without
// spinning; a sink writes every record, restores to a checkpointed
// position after a crash, commits idempotently, and discards what an abort
// covers. Features a connector does not claim are skipped, by name.
//
//	func TestConformance(t *testing.T) {
//		connectortest.Source(t, connectortest.SourceCase[int]{
//			Make:     func(t *testing.T, recs []int) connector.Source[int] { return operators.FromSlice(recs) },
//			Records:  []int{1, 2, 3, 4, 5},
//			Features: connectortest.Replayable | connectortest.Bounded,
//		})
//	}
package connectortest

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/connector"
)

// Features are what a connector claims; the suite checks each.
type Features uint

const (
	// Replayable: a source reopened at an Offset continues exactly there.
	Replayable Features = 1 << iota
	// Bounded: a source's Read returns io.EOF after its records.
	Bounded
	// Waits: a source's Reader implements Waiter, and Append adds records
	// to a running source.
	Waits
	// Partitioned: a source opens as several partitions, which split its
	// records between them.
	Partitioned
	// Restorable: a sink is a RestorableSink whose writers are
	// Checkpointers: reopened at a checkpointed position, it keeps exactly
	// what was written before it.
	Restorable
	// TwoPhase: a sink's writers are TwoPhaseWriters (and Aborters): what
	// a checkpoint pre-committed is visible once committed, commits are
	// idempotent, and an abort discards what no commit covers.
	TwoPhase
)

// SourceCase is a source under test.
type SourceCase[T comparable] struct {
	// Make returns a source of records (a new one each call).
	Make func(t *testing.T, records []T) connector.Source[T]
	// Records are the records to read, at least 4.
	Records []T
	// Append adds records to a source from Make (Waits).
	Append   func(records ...T)
	Features Features
}

// Source checks a source connector.
func Source[T comparable](t *testing.T, c SourceCase[T]) {
	t.Helper()
	if len(c.Records) < 4 {
		t.Fatalf("connectortest: %d records, want at least 4", len(c.Records))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t.Run("ReadsEveryRecordOnce", func(t *testing.T) {
		if c.Features&Bounded == 0 {
			t.Skip("not bounded")
		}
		got, _ := readAll(t, ctx, c.Make(t, c.Records), 0, 1, 0, -1)
		if !slices.Equal(got, c.Records) {
			t.Fatalf("read %v, want %v", got, c.Records)
		}
	})
	t.Run("PartitionsSplitTheRecords", func(t *testing.T) {
		if c.Features&(Bounded|Partitioned) != Bounded|Partitioned {
			t.Skip("not bounded and partitioned")
		}
		src := c.Make(t, c.Records)
		var all []T
		for part := range 3 {
			got, _ := readAll(t, ctx, src, part, 3, 0, -1)
			all = append(all, got...)
		}
		if !sameMultiset(all, c.Records) {
			t.Fatalf("partitions 0..2 of 3 read %v together, want each of %v once", all, c.Records)
		}
	})
	t.Run("ReplaysFromAnOffset", func(t *testing.T) {
		if c.Features&(Replayable|Bounded) != Replayable|Bounded {
			t.Skip("not replayable and bounded")
		}
		src := c.Make(t, c.Records)
		half := len(c.Records) / 2
		first, off := readAll(t, ctx, src, 0, 1, 0, half)
		rest, _ := readAll(t, ctx, src, 0, 1, off, -1)
		if got := append(first, rest...); !slices.Equal(got, c.Records) {
			t.Fatalf("read %v, then from offset %d %v; want %v", first, off, rest, c.Records)
		}
		if again, _ := readAll(t, ctx, src, 0, 1, 0, -1); !slices.Equal(again, c.Records) {
			t.Fatalf("reopened at the start: %v, want %v", again, c.Records)
		}
	})
	t.Run("WaitsWithoutSpinning", func(t *testing.T) {
		if c.Features&Waits == 0 || c.Append == nil {
			t.Skip("does not wait")
		}
		src := c.Make(t, nil)
		r, err := src.Open(ctx, 0, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		w, ok := r.(connector.Waiter)
		if !ok {
			t.Fatalf("%T claims Waits but is no Waiter", r)
		}
		buf := make([]T, 8)
		if n, err := r.Read(buf); n != 0 || err != nil {
			t.Fatalf("Read of an empty source = %d, %v; want 0, nil", n, err)
		}
		// With nothing to read, Wait does not return before its context
		// ends (it may return nil then, or the context's error).
		short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
		start := time.Now()
		err = w.Wait(short)
		stop()
		if took := time.Since(start); took < 40*time.Millisecond || err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait with nothing to read returned %v after %v; want it to block until the context's deadline (50ms)", err, took)
		}
		// A record arriving wakes it.
		done := make(chan error, 1)
		go func() { done <- w.Wait(ctx) }()
		c.Append(c.Records[0])
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Wait after a record arrived: %v", err)
			}
		case <-ctx.Done():
			t.Fatal("Wait did not return when a record arrived")
		}
		if n, err := r.Read(buf); n != 1 || err != nil || buf[0] != c.Records[0] {
			t.Fatalf("Read after Wait = %d, %v (%v); want the record", n, err, buf[:n])
		}
	})
}

// readAll reads partition part of parts from offset until io.EOF, or until
// max records (max < 0: no limit), and returns them with the offset after
// them.
func readAll[T any](t *testing.T, ctx context.Context, src connector.Source[T], part, parts int, offset int64, max int) ([]T, int64) {
	t.Helper()
	r, err := src.Open(ctx, part, parts, offset)
	if err != nil {
		t.Fatalf("Open(part %d of %d, offset %d): %v", part, parts, offset, err)
	}
	defer r.Close()
	var out []T
	buf := make([]T, 2)
	for empty := 0; max < 0 || len(out) < max; {
		want := len(buf)
		if max >= 0 {
			want = min(want, max-len(out))
		}
		n, err := r.Read(buf[:want])
		out = append(out, buf[:n]...)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		if n == 0 {
			if empty++; empty > 1000 {
				t.Fatalf("Read returned nothing 1000 times in a row without io.EOF (a bounded source)")
			}
			if w, ok := r.(connector.Waiter); ok {
				if err := w.Wait(ctx); err != nil {
					t.Fatalf("Wait: %v", err)
				}
			}
		}
	}
	return out, r.Offset()
}

func sameMultiset[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	n := map[T]int{}
	for _, v := range a {
		n[v]++
	}
	for _, v := range b {
		if n[v]--; n[v] < 0 {
			return false
		}
	}
	return true
}

// SinkCase is a sink under test.
type SinkCase[T comparable] struct {
	// Make returns a new, empty sink, and Read returns what it holds
	// (committed, for a TwoPhase sink) in order.
	Make     func(t *testing.T) (sink connector.Sink[T], read func() []T)
	Records  []T // at least 4
	Features Features
}

// Sink checks a sink connector.
func Sink[T comparable](t *testing.T, c SinkCase[T]) {
	t.Helper()
	if len(c.Records) < 4 {
		t.Fatalf("connectortest: %d records, want at least 4", len(c.Records))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	half := len(c.Records) / 2
	a, b := c.Records[:half], c.Records[half:]
	t.Run("WritesEveryRecord", func(t *testing.T) {
		sink, read := c.Make(t)
		w := open(t, ctx, sink)
		write(t, w, a)
		write(t, w, b)
		if c.Features&TwoPhase != 0 {
			commit(t, ctx, w, 1)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if got := read(); !slices.Equal(got, c.Records) {
			t.Fatalf("sink holds %v, want %v", got, c.Records)
		}
	})
	t.Run("RestoresAfterACrash", func(t *testing.T) {
		if c.Features&Restorable == 0 {
			t.Skip("not restorable")
		}
		sink, read := c.Make(t)
		w := open(t, ctx, sink)
		write(t, w, a)
		cp, ok := w.(connector.Checkpointer)
		if !ok {
			t.Fatalf("%T claims Restorable but is no Checkpointer", w)
		}
		state, err := cp.Checkpoint()
		if err != nil {
			t.Fatal(err)
		}
		write(t, w, b) // written after the checkpoint, then the process dies: no Close
		w2 := openAt(t, ctx, sink, state)
		write(t, w2, b)
		if err := w2.Close(); err != nil {
			t.Fatal(err)
		}
		if got := read(); !slices.Equal(got, c.Records) {
			t.Fatalf("after a crash and a restore to the checkpoint: %v, want %v", got, c.Records)
		}
	})
	t.Run("CommitsIdempotently", func(t *testing.T) {
		if c.Features&TwoPhase == 0 {
			t.Skip("not two-phase")
		}
		sink, read := c.Make(t)
		w := open(t, ctx, sink)
		write(t, w, a)
		state := commit(t, ctx, w, 1)
		if got := read(); !slices.Equal(got, a) {
			t.Fatalf("after commit 1: %v, want %v", got, a)
		}
		if err := w.(connector.TwoPhaseWriter).Commit(ctx, 1); err != nil {
			t.Fatalf("second Commit(1): %v", err)
		}
		// A crash after the commit: restored with checkpoint 1's state, the
		// sink must not commit it again.
		w2 := openAt(t, ctx, sink, state)
		write(t, w2, b)
		commit(t, ctx, w2, 2)
		if err := w2.Close(); err != nil {
			t.Fatal(err)
		}
		if got := read(); !slices.Equal(got, c.Records) {
			t.Fatalf("after commits 1, 1 again and 2 (restored between): %v, want %v", got, c.Records)
		}
	})
	t.Run("RestoreFinishesAPreCommit", func(t *testing.T) {
		if c.Features&TwoPhase == 0 {
			t.Skip("not two-phase")
		}
		sink, read := c.Make(t)
		w := open(t, ctx, sink)
		write(t, w, a)
		state, err := w.(connector.TwoPhaseWriter).PreCommit(1)
		if err != nil {
			t.Fatal(err)
		}
		// The checkpoint completed, the process died before Commit: the
		// restore finishes the commit.
		w2 := openAt(t, ctx, sink, state)
		if got := read(); !slices.Equal(got, a) {
			t.Fatalf("restored from a checkpoint whose commit did not happen: %v, want %v", got, a)
		}
		_ = w2.Close()
	})
	t.Run("AbortDiscards", func(t *testing.T) {
		if c.Features&TwoPhase == 0 {
			t.Skip("not two-phase")
		}
		sink, read := c.Make(t)
		w := open(t, ctx, sink)
		write(t, w, a)
		commit(t, ctx, w, 1)
		write(t, w, b)
		ab, ok := w.(connector.Aborter)
		if !ok {
			t.Fatalf("%T claims TwoPhase but is no Aborter", w)
		}
		if err := ab.Abort(); err != nil {
			t.Fatal(err)
		}
		if got := read(); !slices.Equal(got, a) {
			t.Fatalf("after an abort: %v, want only the committed %v", got, a)
		}
	})
}

func open[T any](t *testing.T, ctx context.Context, sink connector.Sink[T]) connector.Writer[T] {
	t.Helper()
	w, err := sink.Open(ctx, 0, 1)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return w
}

func openAt[T any](t *testing.T, ctx context.Context, sink connector.Sink[T], state []byte) connector.Writer[T] {
	t.Helper()
	rs, ok := sink.(connector.RestorableSink[T])
	if !ok {
		t.Fatalf("%T is no RestorableSink", sink)
	}
	w, err := rs.OpenAt(ctx, 0, 1, state)
	if err != nil {
		t.Fatalf("OpenAt: %v", err)
	}
	return w
}

func write[T any](t *testing.T, w connector.Writer[T], recs []T) {
	t.Helper()
	if err := w.Write(slices.Clone(recs)); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

// commit pre-commits and commits checkpoint id and returns its state.
func commit[T any](t *testing.T, ctx context.Context, w connector.Writer[T], id uint64) []byte {
	t.Helper()
	tp, ok := w.(connector.TwoPhaseWriter)
	if !ok {
		t.Fatalf("%T is no TwoPhaseWriter", w)
	}
	state, err := tp.PreCommit(id)
	if err != nil {
		t.Fatalf("PreCommit(%d): %v", id, err)
	}
	if err := tp.Commit(ctx, id); err != nil {
		t.Fatalf("Commit(%d): %v", id, err)
	}
	return state
}
