// Package connectortest is the conformance suite of sluice's connectors:
// the behaviour a job relies on, checked against a real source or sink
// through the interfaces of package connector only. A connector's test
// describes what it supports (features) and how to see its records, and
// the suite runs the cases that apply:
//
//	func TestConformance(t *testing.T) {
//		connectortest.TestSource(t, connectortest.SourceCase[int]{
//			New:      func(t *testing.T) (connector.Source[int], []int) { return mySource(1, 2, 3), []int{1, 2, 3} },
//			Features: connectortest.SourceFeatures{Bounded: true, Replay: true},
//		})
//	}
//
// Sources: every record once and in order; replay from an offset (the
// records after it, exactly); waiting without spinning (Wait returns only
// when Read has records, or ctx ends, or the reader closes); acknowledgement
// of what a checkpoint covers, idempotent. Sinks: what is written and closed
// is visible; for exactly-once sinks, restore after a crash before and
// after a commit (nothing lost, nothing twice), commit idempotence, and
// abort discarding what no checkpoint covers.
package connectortest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/connector"
)

// wait bounds every wait of the suite: a connector that does not answer
// within it fails.
const wait = 30 * time.Second

// SourceFeatures says what a source supports; the suite runs the cases
// that apply.
type SourceFeatures struct {
	// Bounded: a reader returns io.EOF after the last record.
	Bounded bool
	// Replay: reopening at an Offset a reader returned yields exactly the
	// records after it (a replayable source, which checkpoints need).
	Replay bool
	// Waits: a reader runs dry (Read returns 0, nil) and implements
	// connector.Waiter; SourceCase.Publish adds records.
	Waits bool
	// Acks: readers implement connector.Acker.
	Acks bool
}

// SourceCase is a source under test.
type SourceCase[T comparable] struct {
	// New returns a fresh source and the records partition 0 of 1 yields,
	// in order (an unbounded source then runs dry).
	New func(t *testing.T) (connector.Source[T], []T)
	// Publish adds records to the source New returned last (Waits only).
	Publish func(t *testing.T, more []T)
	// More returns records to Publish, distinct from New's (Waits only).
	More     []T
	Features SourceFeatures
}

// TestSource runs the source cases that c's features admit.
func TestSource[T comparable](t *testing.T, c SourceCase[T]) {
	t.Helper()
	f := c.Features
	t.Run("ReadsEveryRecordInOrder", func(t *testing.T) {
		src, want := c.New(t)
		r := open(t, src, 0)
		got := readN(t, r, len(want), 3)
		if !slices.Equal(got, want) {
			t.Fatalf("read %v, want %v", got, want)
		}
		if f.Bounded {
			expectEOF(t, r)
		}
	})
	if f.Replay {
		t.Run("ReplayFromOffset", func(t *testing.T) {
			src, want := c.New(t)
			if len(want) < 2 {
				t.Fatalf("the case yields %d records: the replay case needs 2 or more", len(want))
			}
			r := open(t, src, 0)
			k := len(want) / 2
			head := readN(t, r, k, 1) // one at a time: Offset after exactly k
			off := r.Offset()
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			again := open(t, src, off)
			rest := readN(t, again, len(want)-k, 4)
			if got := append(head, rest...); !slices.Equal(got, want) {
				t.Fatalf("read %v up to offset %d, then %v from it; want %v", head, off, rest, want)
			}
			if f.Bounded {
				expectEOF(t, again)
			}
			// Offset 0 is the beginning.
			first := open(t, src, 0)
			if got := readN(t, first, 1, 1); got[0] != want[0] {
				t.Fatalf("reopened at 0: %v, want %v first", got[0], want[0])
			}
		})
	}
	if f.Waits {
		t.Run("WaitsWithoutSpinning", func(t *testing.T) { testWait(t, c) })
	}
	if f.Acks {
		t.Run("AckIsIdempotent", func(t *testing.T) {
			src, want := c.New(t)
			r := open(t, src, 0)
			readN(t, r, len(want), 8)
			a, ok := r.(connector.Acker)
			if !ok {
				t.Fatalf("%T: Acks, but not a connector.Acker", r)
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			half, all := r.Offset()/2, r.Offset()
			for _, off := range []int64{half, all, all, half} { // again, and behind: no error
				if err := a.Ack(ctx, off); err != nil {
					t.Fatalf("Ack(%d): %v", off, err)
				}
			}
		})
	}
}

// testWait: a dry reader's Wait returns only when Read has records again
// (a spurious return must be followed by records), and it does return once
// records are published.
func testWait[T comparable](t *testing.T, c SourceCase[T]) {
	if c.Publish == nil || len(c.More) == 0 {
		t.Fatal("Waits needs Publish and More")
	}
	src, want := c.New(t)
	r := open(t, src, 0)
	readN(t, r, len(want), 8)
	w, ok := r.(connector.Waiter)
	if !ok {
		t.Fatalf("%T: Waits, but not a connector.Waiter", r)
	}
	buf := make([]T, 8)
	if n, err := r.Read(buf); n != 0 || err != nil {
		t.Fatalf("Read of a dry partition = %d, %v; want 0, nil", n, err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Wait(context.Background()) }()
	c.Publish(t, c.More)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
	case <-time.After(wait):
		t.Fatal("Wait did not return after records were published")
	}
	got := readN(t, r, len(c.More), 8)
	if !slices.Equal(got, c.More) {
		t.Fatalf("after Wait read %v, want %v", got, c.More)
	}
	// A Wait that returns on a dry partition (before anything new) is a
	// spin unless Read then has records.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- w.Wait(ctx) }()
	cancel()
	select {
	case err := <-done:
		if err == nil {
			if n, rerr := r.Read(buf); n == 0 && rerr == nil {
				t.Fatal("Wait returned nil on a dry partition with nothing to read: a spin")
			}
		}
	case <-time.After(wait):
		t.Fatal("Wait did not return when its context ended")
	}
}

// SinkFeatures says what a sink supports.
type SinkFeatures struct {
	// Checkpoints: writers implement connector.Checkpointer and the sink
	// connector.RestorableSink (cut back to a checkpointed position).
	Checkpoints bool
	// TwoPhase: writers implement connector.TwoPhaseWriter and the sink
	// connector.RestorableSink.
	TwoPhase bool
	// Abort: writers implement connector.Aborter.
	Abort bool
}

// SinkCase is a sink under test.
type SinkCase[T comparable] struct {
	// New returns a sink over a fresh, empty destination; Visible returns
	// what that destination holds now, in the order written (sorted, when
	// Unordered).
	New     func(t *testing.T) connector.Sink[T]
	Visible func(t *testing.T) []T
	// Records are at least 6 distinct records to write.
	Records   []T
	Unordered bool
	Features  SinkFeatures
}

// TestSink runs the sink cases that c's features admit.
func TestSink[T comparable](t *testing.T, c SinkCase[T]) {
	t.Helper()
	if len(c.Records) < 6 {
		t.Fatalf("%d records: the sink cases need 6 or more", len(c.Records))
	}
	a, b, rest := c.Records[:2], c.Records[2:4], c.Records[4:]
	f := c.Features
	t.Run("WrittenAndClosedIsVisible", func(t *testing.T) {
		s := c.New(t)
		w := openSink(t, s)
		write(t, w, a)
		write(t, w, b)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		c.expect(t, "after Close", cat(a, b))
	})
	if f.TwoPhase {
		t.Run("CommitMakesVisible", func(t *testing.T) {
			s := c.New(t)
			w := openSink(t, s)
			tp := twoPhase(t, w)
			write(t, w, a)
			if _, err := tp.PreCommit(1); err != nil {
				t.Fatal(err)
			}
			c.expect(t, "after PreCommit(1), before its Commit", nil)
			commit(t, tp, 1)
			c.expect(t, "after Commit(1)", a)
			commit(t, tp, 1) // again: nothing twice
			c.expect(t, "after Commit(1) twice", a)
			abort(t, w)
		})
		t.Run("RestoreBeforeCommit", func(t *testing.T) {
			// Crash after the checkpoint's barrier (PreCommit) but before
			// its Commit: the restored writer finishes that commit.
			s := c.New(t)
			w := openSink(t, s)
			tp := twoPhase(t, w)
			write(t, w, a)
			st1, err := tp.PreCommit(1)
			if err != nil {
				t.Fatal(err)
			}
			commit(t, tp, 1)
			write(t, w, b)
			st2, err := tp.PreCommit(2)
			if err != nil {
				t.Fatal(err)
			}
			write(t, w, rest) // after the barrier: no checkpoint covers it
			crash(w)
			_ = st1
			w2 := openAt(t, s, st2)
			c.expect(t, "after a restore from checkpoint 2 (pre-committed, not committed)", cat(a, b))
			abort(t, w2)
		})
		t.Run("RestoreAfterCommit", func(t *testing.T) {
			s := c.New(t)
			w := openSink(t, s)
			tp := twoPhase(t, w)
			write(t, w, a)
			st1, err := tp.PreCommit(1)
			if err != nil {
				t.Fatal(err)
			}
			commit(t, tp, 1)
			write(t, w, b) // not covered
			crash(w)
			w2 := openAt(t, s, st1)
			c.expect(t, "after a restore from committed checkpoint 1", a)
			write(t, w2, rest)
			tp2 := twoPhase(t, w2)
			if _, err := tp2.PreCommit(2); err != nil {
				t.Fatal(err)
			}
			commit(t, tp2, 2)
			c.expect(t, "after the restored writer's commit", cat(a, rest))
			abort(t, w2)
		})
	}
	if f.Checkpoints {
		t.Run("RestoreCutsBackToTheCheckpoint", func(t *testing.T) {
			s := c.New(t)
			w := openSink(t, s)
			cp, ok := w.(connector.Checkpointer)
			if !ok {
				t.Fatalf("%T: Checkpoints, but not a connector.Checkpointer", w)
			}
			write(t, w, a)
			st, err := cp.Checkpoint()
			if err != nil {
				t.Fatal(err)
			}
			write(t, w, b)
			// A later checkpoint that never completed: b reached the
			// destination, but the restore is from the first.
			if _, err := cp.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			crash(w)
			w2 := openAt(t, s, st)
			write(t, w2, rest)
			if err := w2.Close(); err != nil {
				t.Fatal(err)
			}
			c.expect(t, "after a restore from the checkpoint and more writes", cat(a, rest))
		})
	}
	if f.Abort {
		t.Run("AbortDiscardsWhatNoCheckpointCovers", func(t *testing.T) {
			s := c.New(t)
			w := openSink(t, s)
			if f.TwoPhase {
				tp := twoPhase(t, w)
				write(t, w, a)
				if _, err := tp.PreCommit(1); err != nil {
					t.Fatal(err)
				}
				commit(t, tp, 1)
			}
			write(t, w, b)
			ab, ok := w.(connector.Aborter)
			if !ok {
				t.Fatalf("%T: Abort, but not a connector.Aborter", w)
			}
			if err := ab.Abort(); err != nil {
				t.Fatal(err)
			}
			if f.TwoPhase {
				c.expect(t, "after Abort", a)
			} else {
				c.expect(t, "after Abort", nil)
			}
		})
	}
}

func (c SinkCase[T]) expect(t *testing.T, when string, want []T) {
	t.Helper()
	got := c.Visible(t)
	if c.Unordered {
		want = slices.Clone(want)
		slices.SortFunc(want, func(x, y T) int { return compare(x, y) })
	}
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s the destination holds %v, want %v", when, got, want)
	}
}

// compare orders records by their printed form (Unordered sinks).
func compare[T any](x, y T) int {
	a, b := fmt.Sprint(x), fmt.Sprint(y)
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cat[T any](parts ...[]T) []T {
	var out []T
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func open[T any](t *testing.T, src connector.Source[T], offset int64) connector.Reader[T] {
	t.Helper()
	// The context of Open is the reader's lifetime (the runtime's instance
	// context): the test's.
	r, err := src.Open(t.Context(), 0, 1, offset)
	if err != nil {
		t.Fatalf("Open(0, 1, %d): %v", offset, err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// readN reads exactly n records in reads of at most size, waiting when
// the reader is dry (with its Waiter, if any).
func readN[T any](t *testing.T, r connector.Reader[T], n, size int) []T {
	t.Helper()
	got := make([]T, 0, n)
	buf := make([]T, size)
	deadline := time.Now().Add(wait)
	for len(got) < n {
		k, err := r.Read(buf[:min(size, n-len(got))])
		got = append(got, buf[:k]...)
		switch {
		case errors.Is(err, io.EOF):
			t.Fatalf("io.EOF after %d of %d records", len(got), n)
		case err != nil:
			t.Fatalf("Read after %d records: %v", len(got), err)
		case k > 0:
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d records within %v", len(got), n, wait)
		}
		if w, ok := r.(connector.Waiter); ok {
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			err := w.Wait(ctx)
			cancel()
			if err != nil {
				t.Fatalf("Wait after %d of %d records: %v", len(got), n, err)
			}
		}
	}
	return got
}

func expectEOF[T any](t *testing.T, r connector.Reader[T]) {
	t.Helper()
	buf := make([]T, 4)
	if n, err := r.Read(buf); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("Read after the last record = %d, %v; want 0, io.EOF", n, err)
	}
}

func openSink[T any](t *testing.T, s connector.Sink[T]) connector.Writer[T] {
	t.Helper()
	w, err := s.Open(t.Context(), 0, 1) // the writer's lifetime: the test's
	if err != nil {
		t.Fatalf("Open(0, 1): %v", err)
	}
	return w
}

func openAt[T any](t *testing.T, s connector.Sink[T], state []byte) connector.Writer[T] {
	t.Helper()
	rs, ok := s.(connector.RestorableSink[T])
	if !ok {
		t.Fatalf("%T is not a connector.RestorableSink", s)
	}
	w, err := rs.OpenAt(t.Context(), 0, 1, state) // the writer's lifetime: the test's
	if err != nil {
		t.Fatalf("OpenAt(0, 1, %d bytes): %v", len(state), err)
	}
	return w
}

func twoPhase[T any](t *testing.T, w connector.Writer[T]) connector.TwoPhaseWriter {
	t.Helper()
	tp, ok := w.(connector.TwoPhaseWriter)
	if !ok {
		t.Fatalf("%T: TwoPhase, but not a connector.TwoPhaseWriter", w)
	}
	return tp
}

func write[T any](t *testing.T, w connector.Writer[T], records []T) {
	t.Helper()
	if err := w.Write(records); err != nil {
		t.Fatalf("Write(%v): %v", records, err)
	}
}

func commit(t *testing.T, tp connector.TwoPhaseWriter, id uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := tp.Commit(ctx, id); err != nil {
		t.Fatalf("Commit(%d): %v", id, err)
	}
}

// abort ends a writer without committing what it holds (Abort if it has
// one, else as a crash).
func abort[T any](t *testing.T, w connector.Writer[T]) {
	t.Helper()
	if ab, ok := w.(connector.Aborter); ok {
		if err := ab.Abort(); err != nil {
			t.Fatalf("Abort: %v", err)
		}
		return
	}
	crash(w)
}

// crash abandons a writer as a killed process would: no Close, no Abort.
// Writers that hold an external resource (a connection, a file) may keep
// it until the test ends; a Crasher releases it without committing.
func crash[T any](w connector.Writer[T]) {
	if c, ok := w.(Crasher); ok {
		c.Crash()
	}
}

// Crasher is implemented by test wrappers of writers that can release
// what they hold as a killed process would (dropping a connection, closing
// a file descriptor) without flushing or committing.
type Crasher interface{ Crash() }
