package operators_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	stdmaps "maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/persistence"
)

// TestStopWithSavepointKeepsWindows: a job of event-time windows stopped
// with a savepoint while windows are open emits none of them early (a
// plain drain would fire them, partial), and a job started from the
// savepoint, at another parallelism, completes them: the output of both
// runs together is exactly that of one run without the stop.
func TestStopWithSavepointKeepsWindows(t *testing.T) { stopWithSavepointKeepsWindows(t, false) }

// TestStopWithSavepointKeepsWindowsDiskState: as
// TestStopWithSavepointKeepsWindows, the windows on the disk state backend
// (their state a bundle of the stage's record and its table's disk
// checkpoint, copied into the savepoint), the job's state directory
// removed and the savepoint moved before the restart.
func TestStopWithSavepointKeepsWindowsDiskState(t *testing.T) { stopWithSavepointKeepsWindows(t, true) }

func stopWithSavepointKeepsWindows(t *testing.T, disk bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sys, err := actors.NewSystem(actors.Config{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop(ctx)
	const n = 200_000
	var mu sync.Mutex
	out := map[operators.Windowed[int64, int64]]int{}
	var seen int
	topts := []operators.TopologyOption{operators.BatchSize(64)}
	stateDir := t.TempDir()
	if disk {
		topts = append(topts, operators.StateBackend(operators.DiskState(stateDir, 16<<10)))
	}
	top := operators.NewTopology("windows", topts...)
	src := operators.Source(top, "src", operators.Generate(n, func(i int64) int64 { return i }))
	timed := operators.Timestamps(src, "time", func(v int64) time.Time { return time.UnixMilli(v) })
	keyed := operators.KeyBy(timed, "by", func(v int64) int64 { return v % 8 }, operators.Parallelism(2))
	counts := operators.WindowCount(keyed, "count", operators.Tumbling(time.Second))
	operators.Sink(counts, "sink", operators.SinkFunc(func(w operators.Windowed[int64, int64]) error {
		mu.Lock()
		out[w]++
		seen++
		mu.Unlock()
		return nil
	}))
	delivered := func() int {
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
	opts := []operators.TopologyOption{operators.Checkpoints(time.Hour), operators.CheckpointStore(persistence.NewMemoryCheckpointStore())}
	job, err := operators.Start(ctx, sys, top, opts...)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	for delivered() < 40 { // some windows closed, others open
		select {
		case <-deadline:
			t.Fatal("no output")
		case <-tick.C:
		}
	}
	tick.Stop()
	dir := t.TempDir()
	info, err := job.StopWithSavepoint(ctx, dir+"/sp")
	if err != nil {
		t.Fatal(err)
	}
	stopped := delivered()
	for w := range out {
		if w.End.Sub(w.Start) != time.Second || w.Value != 125 { // 1000 records a second over 8 keys
			t.Fatalf("before the restart, at checkpoint %d: a window emitted early or partial: %+v", info.Checkpoint, w)
		}
	}
	if disk {
		if err := os.RemoveAll(stateDir); err != nil {
			t.Fatal(err)
		}
		moved := t.TempDir() + "/moved"
		if err := os.Rename(info.Dir, moved); err != nil {
			t.Fatal(err)
		}
		info.Dir = moved
		if !slices.ContainsFunc(slices.Collect(stdmaps.Keys(treeSums(t, moved))), func(p string) bool { return strings.HasPrefix(p, "disk/count") }) {
			t.Fatalf("the savepoint holds no copy of the windows' disk state: %v", slices.Sorted(stdmaps.Keys(treeSums(t, moved))))
		}
	}
	job2, err := operators.Start(ctx, sys, top, append(opts[:1:1], operators.CheckpointStore(persistence.NewMemoryCheckpointStore()),
		operators.FromSavepoint(info.Dir), operators.RunParallelism("count", 3))...)
	if err != nil {
		t.Fatal(err)
	}
	if err := job2.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	both := stdmaps.Clone(out)
	clear(out)
	ref, err := operators.Start(ctx, sys, top)
	if err != nil {
		t.Fatal(err)
	}
	if err := ref.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if !stdmaps.Equal(both, out) {
		t.Fatalf("stopped and restarted: %d windows; one run: %d windows, or other counts", len(both), len(out))
	}
	t.Logf("%d windows emitted before the stop with a savepoint, %d in all, as in one run", stopped, len(out))
}

// TestStopWithSavepointDiskState: a stop with a savepoint of a keyed count
// on the disk state backend keeps its state as it is (a count that emits
// at the end emits nothing at the stop), and a job started from the
// savepoint at another parallelism ends with every key's count as one run
// gives it.
func TestStopWithSavepointDiskState(t *testing.T) {
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
	var emitted int
	stateDir := t.TempDir()
	build := func(name string, paced bool) *operators.Topology {
		top := operators.NewTopology(name, operators.BatchSize(64), operators.StateBackend(operators.DiskState(stateDir, 16<<10)))
		by := operators.KeyBy(p.stream(top, n, keys, paced), "by", func(v int64) int64 { return v }, operators.Parallelism(2))
		counts := operators.Count(by, "count", operators.Emit(operators.EmitAtEnd))
		operators.Sink(counts, "sink", operators.SinkFunc(func(kv operators.KV[int64, int64]) error {
			mu.Lock()
			out[kv.Key] += kv.Value
			emitted++
			mu.Unlock()
			return nil
		}))
		return top
	}
	opts := []operators.TopologyOption{operators.Checkpoints(time.Hour), operators.CheckpointStore(persistence.NewMemoryCheckpointStore())}
	top := build("disk-counts", true)
	job, err := operators.Start(ctx, sys, top, opts...)
	if err != nil {
		t.Fatal(err)
	}
	p.await(t, 30_000)
	info, err := job.StopWithSavepoint(ctx, t.TempDir()+"/sp")
	if err != nil {
		t.Fatal(err)
	}
	at := p.passed.Load()
	mu.Lock()
	early := emitted
	mu.Unlock()
	if early != 0 {
		t.Fatalf("the stop with a savepoint emitted %d counts: a suspension must keep the state as it is", early)
	}
	if at >= n {
		t.Fatalf("the job read all %d records before the stop; make it slower", n)
	}
	// The savepoint is self-contained: the job's state directory (whose
	// checkpoints retention would remove) is gone, and the savepoint,
	// moved elsewhere, is only read.
	if err := os.RemoveAll(stateDir); err != nil {
		t.Fatal(err)
	}
	moved := t.TempDir() + "/moved"
	if err := os.Rename(info.Dir, moved); err != nil {
		t.Fatal(err)
	}
	before := treeSums(t, moved)
	if !slices.ContainsFunc(slices.Collect(stdmaps.Keys(before)), func(p string) bool { return strings.HasPrefix(p, "disk/") && strings.HasSuffix(p, ".sst") }) {
		t.Fatalf("the savepoint holds no copy of the disk state: %v", slices.Sorted(stdmaps.Keys(before)))
	}
	job2, err := operators.Start(ctx, sys, top, operators.Checkpoints(time.Hour), operators.CheckpointStore(persistence.NewMemoryCheckpointStore()),
		operators.FromSavepoint(moved), operators.RunParallelism("count", 3))
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
	if after := treeSums(t, moved); !stdmaps.Equal(before, after) {
		t.Fatalf("the savepoint changed while a job started from it: %d files before, %d after", len(before), len(after))
	}
	t.Logf("stopped after %d of %d records at checkpoint %d, resumed at parallelism 3 from the moved savepoint without the state directory: every key counted %d times", at, n, info.Checkpoint, n/keys)
}

// treeSums is the SHA-256 of every file under dir, by its path in dir.
func treeSums(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		sum := sha256.Sum256(b)
		out[filepath.ToSlash(rel)] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// pace is the paced stream of the stop-with-savepoint tests: n records
// over keys keys, slowed (while paced) to about 100 000 a second by a
// millisecond ticker, counting in passed what went through, so that a stop
// lands mid-stream. every, if not nil, is called every 10 000 records.
type pace struct {
	passed atomic.Int64
	tick   *time.Ticker
	every  func()
}

func newPace(t *testing.T) *pace {
	p := &pace{tick: time.NewTicker(time.Millisecond)}
	t.Cleanup(p.tick.Stop)
	return p
}

// stream is the source and its pacing map.
func (p *pace) stream(top *operators.Topology, n, keys int64, paced bool) operators.Stream[int64] {
	src := operators.Source(top, "src", operators.Generate(n, func(i int64) int64 { return i % keys }))
	return operators.Map(src, "pace", func(v int64) int64 {
		if paced && p.passed.Add(1)%100 == 0 {
			<-p.tick.C
			if p.every != nil && p.passed.Load()%10_000 == 0 {
				p.every()
			}
		}
		return v
	})
}

// await waits (up to a minute) until at least k records went through.
func (p *pace) await(t *testing.T, k int64) {
	t.Helper()
	deadline := time.After(time.Minute)
	for p.passed.Load() < k {
		select {
		case <-deadline:
			t.Fatalf("the job did not reach %d records", k)
		case <-p.tick.C:
		}
	}
}
