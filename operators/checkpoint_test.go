package operators_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/persistence"
)

// memCheckpoints is a CheckpointStore for tests that counts what it stores.
type memCheckpoints struct {
	mu      sync.Mutex
	latest  map[string]persistence.Checkpoint
	stored  int
	cleared int
	fail    error
}

func (m *memCheckpoints) Complete(_ context.Context, job string, cp persistence.Checkpoint) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	if m.latest == nil {
		m.latest = map[string]persistence.Checkpoint{}
	}
	m.latest[job] = cp
	m.stored++
	return nil
}

func (m *memCheckpoints) Latest(_ context.Context, job string) (persistence.Checkpoint, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cp, ok := m.latest[job]
	return cp, ok, nil
}

func (m *memCheckpoints) Clear(_ context.Context, job string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.latest, job)
	m.cleared++
	return nil
}

func (m *memCheckpoints) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stored
}

// countingTopology counts n generated keys per key over 3 instances and
// writes every update to files under dir (one per instance).
// It may overwrite the files of an earlier run (a run killed before its
// first checkpoint leaves output that the next run starts afresh on).
func countingTopology(store persistence.CheckpointStore, dir string, n int64, interval time.Duration) *operators.Topology {
	return countingTopologyFile(store, dir, n, interval, operators.FileOverwrite())
}

// countingTopologyFile is countingTopology with the given options of its
// file sink.
func countingTopologyFile(store persistence.CheckpointStore, dir string, n int64, interval time.Duration, fopts ...operators.FileOption) *operators.Topology {
	return countingTopologyWith(store, dir, n, interval, nil, fopts...)
}

// countingTopologyWith is countingTopologyFile with more topology options.
func countingTopologyWith(store persistence.CheckpointStore, dir string, n int64, interval time.Duration, topts []operators.TopologyOption, fopts ...operators.FileOption) *operators.Topology {
	opts := append([]operators.TopologyOption{operators.Checkpoints(interval), operators.BatchSize(32)}, topts...)
	if store != nil { // nil: the system's store
		opts = append(opts, operators.CheckpointStore(store))
	}
	t := operators.NewTopology("counting", opts...)
	src := operators.Source(t, "numbers", operators.Generate(n, func(i int64) int64 { return i }))
	keys := operators.Map(src, "key", func(v int64) string { return fmt.Sprintf("k%02d", v*7%23) })
	by := operators.KeyBy(keys, "by-key", func(k string) string { return k }, operators.Parallelism(3))
	counts := operators.Count(by, "count")
	operators.Sink(counts, "out", operators.File(filepath.Join(dir, "counts"), func(kv operators.KV[string, int64]) string {
		return fmt.Sprintf("%s=%d", kv.Key, kv.Value)
	}, fopts...))
	return t
}

func readParts(t *testing.T, dir string) string {
	t.Helper()
	var all string
	for i := range 3 {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("counts-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		all += fmt.Sprintf("== part %d\n%s", i, b)
	}
	return all
}

// TestCheckpointRestoreIsExactlyOnce stops a checkpointed job mid-stream
// (without draining), starts it again from its last checkpoint, and checks
// that the output files equal those of an uninterrupted run.
func TestCheckpointRestoreIsExactlyOnce(t *testing.T) {
	const n = 200_000
	sys, ctx := newSystem(t)

	cleanDir := t.TempDir()
	clean := &memCheckpoints{}
	run := runToEnd(t, sys, ctx, countingTopology(clean, cleanDir, n, time.Hour))
	want := readParts(t, cleanDir)
	if st := operators.CheckpointStatsOf(run); st.Completed != 1 {
		t.Fatalf("a one-hour interval completed %d checkpoints, want only the final one", st.Completed)
	}

	dir := t.TempDir()
	store := &memCheckpoints{}
	stops := 0
	for attempt := 0; ; attempt++ {
		if attempt > 50 {
			t.Fatal("the job never finished")
		}
		run, err := sys.Run(ctx, countingTopology(store, dir, n, 2*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if stops < 3 {
			// Stop hard once a checkpoint completed in this run, mid-stream.
			target := store.count() + 1
			waitFor(t, "a checkpoint", func() bool {
				select {
				case <-run.Done():
					return true
				default:
				}
				return store.count() >= target
			})
			if err := run.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			if err := run.Wait(ctx); errors.Is(err, operators.ErrAborted) {
				stops++
				if st := operators.CheckpointStatsOf(run); attempt > 0 && st.RestoredFrom == 0 {
					t.Fatalf("run %d did not restore from a checkpoint", attempt)
				}
				continue
			}
		}
		if err := run.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		break
	}
	if stops == 0 {
		t.Fatal("the job was never interrupted: the test proved nothing")
	}
	if got := readParts(t, dir); got != want {
		t.Fatalf("output after %d interruptions differs from the uninterrupted run (%d vs %d bytes)", stops, len(got), len(want))
	}
}

func TestCheckpointsNeedReplayableSources(t *testing.T) {
	top := operators.NewTopology("unreplayable", operators.Checkpoints(time.Second), operators.CheckpointStore(&memCheckpoints{}))
	in := operators.NewIngress[int](1)
	operators.Sink(operators.Source(top, "in", in), "out", discard[int]())
	if err := top.Validate(); !errors.Is(err, operators.ErrInvalid) || !containsAll(err.Error(), `"in"`, "replayable") {
		t.Fatalf("Validate() = %v, want an error naming the source", err)
	}
}

// A failing checkpoint store does not stop the job while it runs: it
// reads everything; only the final checkpoint, which would commit the
// sinks' tail, fails it at the end, saying so.
func TestFailedCheckpointStoreKeepsRunning(t *testing.T) {
	sys, ctx := newSystem(t)
	store := &memCheckpoints{fail: errors.New("disk on fire")}
	const n = 50_000
	top := countingTopology(store, t.TempDir(), n, time.Millisecond)
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	err = run.Wait(ctx)
	if err == nil || !containsAll(err.Error(), "final checkpoint", "disk on fire") {
		t.Fatalf("Wait() = %v, want the final checkpoint's failure", err)
	}
	if in := stat(t, run, "count").In; in != n {
		t.Fatalf("the job counted %d records before its end, want all %d: a failed checkpoint stopped it", in, n)
	}
	if st := operators.CheckpointStatsOf(run); st.Failed < 1 || st.Completed != 0 {
		t.Fatalf("checkpoints: %d failed, %d completed; want failures counted, none completed", st.Failed, st.Completed)
	}
}

// TestFinishedJobStartsAfresh: a job that ran to its end clears its
// checkpoints (a rerun must not resume from them); a drained one keeps them.
func TestFinishedJobStartsAfresh(t *testing.T) {
	sys, ctx := newSystem(t)
	store := &memCheckpoints{}
	top := countingTopology(store, t.TempDir(), 100_000, time.Millisecond)
	runToEnd(t, sys, ctx, top)
	if _, ok, _ := store.Latest(ctx, "counting"); ok || store.cleared != 1 {
		t.Fatalf("after the job ended: checkpoint kept %v, cleared %d times; want none kept, cleared once", ok, store.cleared)
	}

	drained := &memCheckpoints{}
	endless := operators.NewTopology("endless-cp", operators.Checkpoints(time.Millisecond), operators.CheckpointStore(drained))
	src := operators.Source(endless, "ticks", operators.Generate(operators.Unbounded, func(i int64) int64 { return i }))
	operators.Sink(src, "out", discard[int64]())
	run, err := sys.Run(ctx, endless)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a checkpoint", func() bool { return drained.count() > 0 })
	if err := run.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := drained.Latest(ctx, "endless-cp"); !ok || drained.cleared != 0 {
		t.Fatalf("a drained job: checkpoint kept %v, cleared %d times; want it kept", ok, drained.cleared)
	}
}

// A savepoint covers every record read before it: a job aborted right after
// it and started again resumes with exactly that state.
func TestSavepointResumes(t *testing.T) {
	sys, ctx := newSystem(t)
	store := persistence.NewMemoryCheckpointStore()
	in := operators.NewLog[int]()
	build := func(out *operators.Collector[operators.KV[int, int64]]) *operators.Topology {
		top := operators.NewTopology("savepoint", operators.Checkpoints(time.Hour), operators.CheckpointStore(store), operators.BatchSize(1))
		src := operators.Source(top, "numbers", in)
		counts := operators.Count(operators.KeyBy(src, "by-parity", func(v int) int { return v % 2 }), "count", operators.Emit(operators.EmitAtEnd))
		operators.Sink(counts, "out", out)
		return top
	}
	first := operators.NewCollector[operators.KV[int, int64]]()
	run, err := sys.Run(ctx, build(first))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		in.Append(i)
	}
	waitFor(t, "the records to be counted", func() bool { return stat(t, run, "count").In == 10 })
	id, err := operators.CheckpointNow(ctx, run)
	if err != nil || id == 0 {
		t.Fatalf("savepoint: %d, %v", id, err)
	}
	run.Stop(ctx)
	_ = run.Wait(ctx)
	if n := first.Len(); n != 0 {
		t.Fatalf("the aborted job emitted %d results", n)
	}
	second := operators.NewCollector[operators.KV[int, int64]]()
	run, err = sys.Run(ctx, build(second))
	if err != nil {
		t.Fatal(err)
	}
	in.Append(10)
	in.Close()
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	got := second.Items()
	slices.SortFunc(got, func(a, b operators.KV[int, int64]) int { return a.Key - b.Key })
	if want := []operators.KV[int, int64]{{0, 6}, {1, 5}}; !slices.Equal(got, want) {
		t.Fatalf("after the savepoint: %v, want %v", got, want)
	}
}
