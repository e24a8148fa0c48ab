package operators_test

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/persistence"
)

// TestStopWithSavepointChangelog: a keyed count whose memory backend
// checkpoints incrementally (bases and deltas every 20 ms) is stopped with
// a savepoint; the savepoint holds its chains (the changelog directory is
// removed before the resume), and the job started from it at another
// parallelism counts every key as one run does.
func TestStopWithSavepointChangelog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sys, err := actors.NewSystem(actors.Config{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop(ctx)
	const n, keys = 200_000, 5_000
	p := newPace(t)
	var mu sync.Mutex
	out := map[int64]int64{}
	logDir := t.TempDir()
	var deltas atomic.Int64
	p.every = func() { deltas.Add(int64(countDeltas(logDir))) }
	build := func(name string, paced bool) *operators.Topology {
		top := operators.NewTopology(name, operators.BatchSize(64), operators.StateBackend(operators.MemoryState().Changelog(logDir)))
		by := operators.KeyBy(p.stream(top, n, keys, paced), "by", func(v int64) int64 { return v }, operators.Parallelism(2))
		counts := operators.Count(by, "count", operators.Emit(operators.EmitAtEnd))
		operators.Sink(counts, "sink", operators.SinkFunc(func(kv operators.KV[int64, int64]) error {
			mu.Lock()
			out[kv.Key] += kv.Value
			mu.Unlock()
			return nil
		}))
		return top
	}
	top := build("changelog-counts", true)
	job, err := operators.Start(ctx, sys, top, operators.Checkpoints(20*time.Millisecond), operators.CheckpointStore(persistence.NewMemoryCheckpointStore()))
	if err != nil {
		t.Fatal(err)
	}
	p.await(t, 60_000)
	info, err := job.StopWithSavepoint(ctx, t.TempDir()+"/sp")
	if err != nil {
		t.Fatal(err)
	}
	at := p.passed.Load()
	if at >= n {
		t.Fatalf("the job read all %d records before the stop; make it slower", n)
	}
	if deltas.Load() == 0 {
		t.Fatal("no delta written before the stop: the chains were not exercised")
	}
	// The savepoint's states are inline chains, not handles to the
	// changelog's files, which go.
	inline := 0
	err = filepath.WalkDir(info.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if bytes.Contains(b, []byte("SLCH\x01")) {
			t.Errorf("%s holds a changelog handle", p)
		}
		inline += bytes.Count(b, []byte("SLCI\x01"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if inline != 2 {
		t.Fatalf("%d inline chains in the savepoint, want one per instance (2)", inline)
	}
	if err := os.RemoveAll(logDir); err != nil {
		t.Fatal(err)
	}
	job2, err := operators.Start(ctx, sys, top, operators.Checkpoints(20*time.Millisecond), operators.CheckpointStore(persistence.NewMemoryCheckpointStore()),
		operators.FromSavepoint(info.Dir), operators.RunParallelism("count", 3))
	if err != nil {
		t.Fatal(err)
	}
	if err := job2.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if len(out) != keys {
		t.Fatalf("%d keys counted, want %d", len(out), keys)
	}
	for k, c := range out {
		if c != n/keys {
			t.Fatalf("key %d counted %d times, want %d (stopped with a savepoint after %d records, resumed at parallelism 3)", k, c, n/keys, at)
		}
	}
	t.Logf("stopped after %d of %d records at checkpoint %d, resumed at parallelism 3 without the changelog directory: every key counted %d times", at, n, info.Checkpoint, n/keys)
}

// countDeltas counts the delta files under a changelog directory.
func countDeltas(dir string) int {
	n := 0
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".delta") {
			n++
		}
		return nil
	})
	return n
}

// TestChangelogWriteFailureFailsCheckpoint: the changelog's files are
// written after the barrier went on (the acknowledgement waits for them);
// when a write fails the job fails with it, naming the file, and no
// checkpoint taken after the failure completes: the failure is not lost.
func TestChangelogWriteFailureFailsCheckpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sys, err := actors.NewSystem(actors.Config{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop(ctx)
	const n, keys = 1_000_000, 5_000
	p := newPace(t)
	logDir := t.TempDir()
	top := operators.NewTopology("changelog-fails", operators.BatchSize(64), operators.StateBackend(operators.MemoryState().Changelog(logDir)))
	by := operators.KeyBy(p.stream(top, n, keys, true), "by", func(v int64) int64 { return v }, operators.Parallelism(2))
	counts := operators.Count(by, "count", operators.Emit(operators.EmitAtEnd))
	operators.Sink(counts, "sink", operators.SinkFunc(func(operators.KV[int64, int64]) error { return nil }))
	job, err := operators.Start(ctx, sys, top, operators.Checkpoints(20*time.Millisecond), operators.CheckpointStore(persistence.NewMemoryCheckpointStore()))
	if err != nil {
		t.Fatal(err)
	}
	p.await(t, 20_000)
	if job.Checkpoints().Completed == 0 {
		p.await(t, 60_000)
	}
	inst0, _ := filepath.Glob(filepath.Join(logDir, "*", "count", "0"))
	if len(inst0) != 1 {
		t.Fatalf("instance 0's changelog directory: %v", inst0)
	}
	if err := os.RemoveAll(inst0[0]); err != nil {
		t.Fatal(err)
	}
	before := job.Checkpoints().Completed
	err = job.Wait(ctx)
	if err == nil || !strings.Contains(err.Error(), "checkpoint") || !strings.Contains(err.Error(), inst0[0]) {
		t.Fatalf("the job ended with %v, want the failed write of instance 0's changelog file", err)
	}
	if after := job.Checkpoints().Completed; after > before+1 { // one may have been written before the removal
		t.Fatalf("%d checkpoints completed after the write failed (%d before)", after-before, before)
	}
	if p.passed.Load() >= n {
		t.Fatal("the job read every record: the failure came too late to tell")
	}
}
