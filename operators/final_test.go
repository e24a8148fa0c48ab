package operators_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/operators"
)

// twoPhaseLog is a two-phase sink (one partition) that records what the
// runtime asks of it: Write stages nothing, PreCommit moves what was
// written under the checkpoint's id, Commit makes the staged records of
// every checkpoint up to its id visible, and Close commits whatever is
// left, as a real two-phase sink's Close does, counting it.
type twoPhaseLog struct {
	mu        sync.Mutex
	written   []int64            // every record Write got
	pending   []int64            // written, not pre-committed
	staged    map[uint64][]int64 // pre-committed, not committed, by checkpoint
	preIDs    []uint64           // PreCommit's checkpoints, in order
	lastState []byte             // PreCommit's last answer
	committed []int64            // visible, in commit order
	commitIDs []uint64           // Commit's checkpoints, in order
	openedAt  []byte             // OpenAt's state, nil after Open
	restored  bool
	// closedUncommitted counts the records Close had to commit: those no
	// checkpoint covered.
	closedUncommitted int
	closes, aborts    int
}

func newTwoPhaseLog() *twoPhaseLog { return &twoPhaseLog{staged: map[uint64][]int64{}} }

func (l *twoPhaseLog) Open(_ context.Context, part, parts int) (operators.Writer[int64], error) {
	if parts != 1 {
		return nil, fmt.Errorf("twoPhaseLog: %d partitions, want 1", parts)
	}
	return (*twoPhaseWriter)(l), nil
}

func (l *twoPhaseLog) OpenAt(_ context.Context, _, _ int, state []byte) (operators.Writer[int64], error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.openedAt, l.restored = state, true
	return (*twoPhaseWriter)(l), nil
}

type twoPhaseWriter twoPhaseLog

func (w *twoPhaseWriter) Write(rs []int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.written = append(w.written, rs...)
	w.pending = append(w.pending, rs...)
	return nil
}

func (w *twoPhaseWriter) PreCommit(id uint64) ([]byte, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.staged[id] = append(w.staged[id], w.pending...)
	w.pending = nil
	w.preIDs = append(w.preIDs, id)
	w.lastState = []byte("written=" + strconv.Itoa(len(w.written)))
	return w.lastState, nil
}

func (w *twoPhaseWriter) Commit(_ context.Context, id uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.commitUpTo(id)
	w.commitIDs = append(w.commitIDs, id)
	return nil
}

func (w *twoPhaseWriter) commitUpTo(id uint64) {
	ids := make([]uint64, 0, len(w.staged))
	for s := range w.staged {
		if s <= id {
			ids = append(ids, s)
		}
	}
	slices.Sort(ids)
	for _, s := range ids {
		w.committed = append(w.committed, w.staged[s]...)
		delete(w.staged, s)
	}
}

func (w *twoPhaseWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, rs := range w.staged {
		w.closedUncommitted += len(rs)
	}
	w.closedUncommitted += len(w.pending)
	w.commitUpTo(^uint64(0))
	w.committed = append(w.committed, w.pending...)
	w.pending = nil
	w.closes++
	return nil
}

func (w *twoPhaseWriter) Abort() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending, w.staged = nil, map[uint64][]int64{}
	w.aborts++
	return nil
}

func (l *twoPhaseLog) writtenN() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.written)
}

// check fails the test unless every record written was committed once, in
// order, and Close found nothing uncommitted.
func (l *twoPhaseLog) checkAllCommitted(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !slices.Equal(l.committed, l.written) {
		t.Errorf("committed %d records, written %d: they differ", len(l.committed), len(l.written))
	}
	if l.closedUncommitted != 0 || l.closes != 1 || l.aborts != 0 {
		t.Errorf("Close committed %d records outside any checkpoint (closes %d, aborts %d); want 0, closed once, no abort",
			l.closedUncommitted, l.closes, l.aborts)
	}
}

func twoPhaseTopology(name string, src operators.SourceConnector[int64], sink *twoPhaseLog, opts ...operators.TopologyOption) *operators.Topology {
	t := operators.NewTopology(name, append([]operators.TopologyOption{operators.BatchSize(16)}, opts...)...)
	nums := operators.Source(t, "numbers", src)
	operators.Sink(operators.Map(nums, "same", func(v int64) int64 { return v }, operators.NoFusion()), "out", sink)
	return t
}

// A job that runs to its end takes a final checkpoint: the records after
// the last periodic checkpoint are pre-committed and committed under it,
// Close has nothing left to commit, and the job's checkpoints are cleared.
func TestFinalCheckpointCommitsTheTailAtEnd(t *testing.T) {
	for _, interval := range []time.Duration{time.Hour, time.Millisecond} {
		t.Run(interval.String(), func(t *testing.T) {
			sys, ctx := newSystem(t)
			store := &memCheckpoints{}
			sink := newTwoPhaseLog()
			const n = 20_000
			run := runToEnd(t, sys, ctx, twoPhaseTopology("final-end", operators.Generate(n, func(i int64) int64 { return i }), sink,
				operators.Checkpoints(interval), operators.CheckpointStore(store)))
			sink.checkAllCommitted(t)
			st := operators.CheckpointStatsOf(run)
			sink.mu.Lock()
			defer sink.mu.Unlock()
			if len(sink.written) != n {
				t.Fatalf("the sink got %d records, want %d", len(sink.written), n)
			}
			// The last checkpoint is the final one; it covers the tail.
			final := st.LastID
			if final == 0 || len(sink.commitIDs) == 0 || sink.commitIDs[len(sink.commitIDs)-1] != final ||
				sink.preIDs[len(sink.preIDs)-1] != final {
				t.Fatalf("final checkpoint %d; pre-commits %v, commits %v: want both to end with it", final, sink.preIDs, sink.commitIDs)
			}
			if interval == time.Hour && (st.Completed != 1 || len(sink.staged) != 0) {
				t.Errorf("with no periodic checkpoint: %d completed, want only the final one", st.Completed)
			}
			if _, ok, _ := store.Latest(ctx, "final-end"); ok || store.cleared != 1 {
				t.Errorf("after the end: checkpoint kept %v, cleared %d times; want none kept, cleared once", ok, store.cleared)
			}
		})
	}
}

// A drained job takes a final checkpoint and keeps it: it records the
// sink's state after the last record and the source's offset there, so the
// next run resumes exactly where the drain stopped.
func TestDrainTakesAFinalCheckpointToResumeFrom(t *testing.T) {
	sys, ctx := newSystem(t)
	store := &memCheckpoints{}
	gen := operators.Generate(operators.Unbounded, func(i int64) int64 { return i })

	first := newTwoPhaseLog()
	run, err := sys.Run(ctx, twoPhaseTopology("final-drain", gen, first, operators.Checkpoints(time.Hour), operators.CheckpointStore(store)))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "records at the sink", func() bool { return first.writtenN() >= 500 })
	if err := run.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	first.checkAllCommitted(t)
	cp, ok, _ := store.Latest(ctx, "final-drain")
	if !ok || store.cleared != 0 {
		t.Fatalf("after a drain: checkpoint kept %v, cleared %d times; want the final one kept", ok, store.cleared)
	}
	first.mu.Lock()
	written, last := int64(len(first.written)), first.lastState
	if cp.ID != operators.CheckpointStatsOf(run).LastID || !slices.Equal(first.commitIDs, []uint64{cp.ID}) {
		t.Errorf("kept checkpoint %d; commits %v: want the final checkpoint committed and kept", cp.ID, first.commitIDs)
	}
	first.mu.Unlock()
	if got := cp.Offsets["numbers/0"]; got != written {
		t.Errorf("the final checkpoint's source offset is %d, want %d (every record the sink got)", got, written)
	}
	if got := string(cp.States["out/0"]); got != string(last) {
		t.Errorf("the final checkpoint's sink state is %q, want PreCommit's last answer %q", got, last)
	}

	second := newTwoPhaseLog()
	run, err = sys.Run(ctx, twoPhaseTopology("final-drain", gen, second, operators.Checkpoints(time.Hour), operators.CheckpointStore(store)))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "records at the sink", func() bool { return second.writtenN() > 0 })
	if err := run.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	second.checkAllCommitted(t)
	second.mu.Lock()
	defer second.mu.Unlock()
	if from := operators.CheckpointStatsOf(run).RestoredFrom; from != cp.ID || !second.restored || string(second.openedAt) != string(last) {
		t.Errorf("the second run restored checkpoint %d, opened the sink at %q; want %d, %q", from, second.openedAt, cp.ID, last)
	}
	if second.written[0] != written {
		t.Errorf("the second run starts at record %d, want %d: the drained run's records again or a gap", second.written[0], written)
	}
}

// Without checkpoints there is no final checkpoint: Close commits
// everything, as before.
func TestWithoutCheckpointsCloseCommits(t *testing.T) {
	sys, ctx := newSystem(t)
	sink := newTwoPhaseLog()
	runToEnd(t, sys, ctx, twoPhaseTopology("final-none", operators.Generate(1000, func(i int64) int64 { return i }), sink))
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.preIDs) != 0 || sink.closes != 1 || sink.closedUncommitted != 1000 || len(sink.committed) != 1000 {
		t.Fatalf("pre-commits %v, closes %d committing %d, committed %d; want none, one close committing all 1000",
			sink.preIDs, sink.closes, sink.closedUncommitted, len(sink.committed))
	}
}

// When the final checkpoint cannot be stored the tail is not committed
// outside it: the sink is aborted and the job fails, saying so.
func TestFailedFinalCheckpointAbortsTheSinks(t *testing.T) {
	sys, ctx := newSystem(t)
	store := &memCheckpoints{fail: errors.New("disk on fire")}
	sink := newTwoPhaseLog()
	run, err := sys.Run(ctx, twoPhaseTopology("final-fails", operators.Generate(1000, func(i int64) int64 { return i }), sink,
		operators.Checkpoints(time.Hour), operators.CheckpointStore(store)))
	if err != nil {
		t.Fatal(err)
	}
	err = run.Wait(ctx)
	if err == nil || !containsAll(err.Error(), `"final-fails"`, "final checkpoint 1", "disk on fire", "not committed") {
		t.Fatalf("Wait() = %v, want an error naming the job, the final checkpoint and the store's error", err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sink.aborts != 1 || sink.closes != 0 || len(sink.committed) != 0 {
		t.Fatalf("aborts %d, closes %d, committed %d; want the sink aborted with nothing committed", sink.aborts, sink.closes, len(sink.committed))
	}
}
