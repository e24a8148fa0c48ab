package operators_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/savepoint"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/persistence"
)

// rescaled is the topology of the rescaling tests at parallelism p: per
// key, a count at the end and tumbling windows of event time (the
// record's value in seconds), each written to a sink of parallelism 1.
func rescaled(in operators.SourceConnector[int64], p int, counts *operators.Collector[operators.KV[string, int64]],
	wins *operators.Collector[operators.Windowed[string, int64]], opts ...operators.TopologyOption) *operators.Topology {
	return rescaledSource(in, 1, p, counts, wins, opts...)
}

// rescaledSource is rescaled with the source at parallelism sp.
func rescaledSource(in operators.SourceConnector[int64], sp, p int, counts *operators.Collector[operators.KV[string, int64]],
	wins *operators.Collector[operators.Windowed[string, int64]], opts ...operators.TopologyOption) *operators.Topology {
	t := operators.NewTopology("rescaled", append([]operators.TopologyOption{operators.BatchSize(16)}, opts...)...)
	src := operators.Source(t, "numbers", in, operators.Parallelism(sp))
	ts := operators.Timestamps(src, "ts", func(v int64) time.Time { return time.Unix(v, 0) })
	by := operators.KeyBy(ts, "by-key", func(v int64) string { return fmt.Sprintf("k%03d", v*7%101) }, operators.Parallelism(p))
	operators.Sink(operators.Count(by, "count", operators.Emit(operators.EmitAtEnd)), "counts", counts, operators.Parallelism(1))
	operators.Sink(operators.WindowCount(by, "windows", operators.Tumbling(50*time.Second)), "wins", wins, operators.Parallelism(1))
	return t
}

func sortedStrings[T any](xs []T) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprint(x)
	}
	slices.Sort(out)
	return out
}

// TestSavepointRescale runs a keyed job at parallelism 2, takes a
// savepoint, resumes it at 4, takes another, resumes at 1 to the end: the
// output equals that of one uninterrupted run at parallelism 1.
func TestSavepointRescale(t *testing.T) {
	testRescale(t, []int{1, 1, 1}, []int{2, 4, 1})
}

// TestSavepointRescaleSource is TestSavepointRescale with the source's
// parallelism changing too (1, 2, 1: its offsets split, then merged) and
// the keyed operators' 3, 2, 4.
func TestSavepointRescaleSource(t *testing.T) {
	testRescale(t, []int{1, 2, 1}, []int{3, 2, 4})
}

func testRescale(t *testing.T, sps, ps []int) {
	sys, ctx := newSystem(t)
	const per = 1000
	refCounts, refWins := operators.NewCollector[operators.KV[string, int64]](), operators.NewCollector[operators.Windowed[string, int64]]()
	all := make([]int64, 3*per)
	for i := range all {
		all[i] = int64(i)
	}
	runToEnd(t, sys, ctx, rescaled(operators.FromSlice(all), 1, refCounts, refWins))

	in := operators.NewLog[int64]()
	store := persistence.NewMemoryCheckpointStore()
	counts, wins := operators.NewCollector[operators.KV[string, int64]](), operators.NewCollector[operators.Windowed[string, int64]]()
	dirs := []string{filepath.Join(t.TempDir(), "sp1"), filepath.Join(t.TempDir(), "sp2")}
	digests := map[string]string{}
	for phase, p := range ps {
		opts := []operators.TopologyOption{operators.Checkpoints(time.Hour), operators.CheckpointStore(store)}
		if phase > 0 {
			opts = append(opts, operators.FromSavepoint(dirs[phase-1]))
		}
		job, err := operators.Start(ctx, sys, rescaledSource(in, sps[phase], p, counts, wins), opts...)
		if err != nil {
			t.Fatalf("phase %d: %v", phase, err)
		}
		for i := phase * per; i < (phase+1)*per; i++ {
			in.Append(int64(i))
		}
		if phase == 2 {
			in.Close()
			if err := job.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			break
		}
		waitFor(t, "the phase's records", func() bool { return stat(t, job.Run(), "count").In == per })
		info, err := job.Savepoint(ctx, dirs[phase])
		if err != nil {
			t.Fatalf("phase %d: savepoint: %v", phase, err)
		}
		if info.Parallelism["count"] != p || info.Parallelism["numbers"] != sps[phase] || info.ID == "" || info.Checkpoint == 0 {
			t.Fatalf("phase %d: savepoint %+v", phase, info)
		}
		digests[dirs[phase]] = dirDigest(t, dirs[phase])
		_ = job.Stop(ctx)
		_ = job.Wait(ctx)
		if got := job.Checkpoints().RestoredFrom; phase > 0 && got == 0 {
			t.Fatalf("phase %d did not restore", phase)
		}
	}
	for _, d := range dirs {
		if got := dirDigest(t, d); got != digests[d] {
			t.Errorf("savepoint %s changed by the jobs started from it", d)
		}
	}
	if got, want := sortedStrings(counts.Items()), sortedStrings(refCounts.Items()); !slices.Equal(got, want) {
		t.Fatalf("counts after rescaling %v (sources %v): %d results, want %d\n%v\nwant %v", ps, sps, len(got), len(want), got, want)
	}
	if got, want := sortedStrings(wins.Items()), sortedStrings(refWins.Items()); !slices.Equal(got, want) {
		t.Fatalf("windows after rescaling %v (sources %v): %d results, want %d", ps, sps, len(got), len(want))
	}
	t.Logf("%d counts and %d windows equal to the uninterrupted run", len(refCounts.Items()), len(refWins.Items()))
}

// TestFromSavepointRefuses: a job does not start from a savepoint of
// another topology, from a damaged one, or with a source whose connector
// cannot redistribute its offsets; the errors say why and where.
func TestFromSavepointRefuses(t *testing.T) {
	sys, ctx := newSystem(t)
	in := operators.NewLog[int64]()
	counts, wins := operators.NewCollector[operators.KV[string, int64]](), operators.NewCollector[operators.Windowed[string, int64]]()
	dir := filepath.Join(t.TempDir(), "sp")
	job, err := operators.Start(ctx, sys, rescaled(in, 2, counts, wins), operators.Checkpoints(time.Hour),
		operators.CheckpointStore(persistence.NewMemoryCheckpointStore()))
	if err != nil {
		t.Fatal(err)
	}
	in.Append(1, 2, 3)
	waitFor(t, "the records", func() bool { return stat(t, job.Run(), "count").In == 3 })
	if _, err := job.Savepoint(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := job.Savepoint(ctx, dir); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("a second savepoint into the same directory: %v", err)
	}
	_ = job.Stop(ctx)
	_ = job.Wait(ctx)
	info, err := operators.ReadSavepoint(dir)
	if err != nil || info.Job != "rescaled" || info.Parallelism["windows"] != 2 {
		t.Fatalf("read: %+v %v", info, err)
	}

	start := func(top *operators.Topology) error {
		j, err := operators.Start(ctx, sys, top, operators.Checkpoints(time.Hour),
			operators.CheckpointStore(persistence.NewMemoryCheckpointStore()), operators.FromSavepoint(dir))
		if err == nil {
			_ = j.Stop(ctx)
			_ = j.Wait(ctx)
		}
		return err
	}
	if _, err := operators.Start(ctx, sys, rescaled(in, 2, counts, wins), operators.FromSavepoint(dir)); err == nil || !strings.Contains(err.Error(), "needs Checkpoints") {
		t.Fatalf("FromSavepoint without checkpoints: %v", err)
	}
	other := operators.NewTopology("rescaled")
	operators.Sink(operators.Source(other, "numbers", operators.SourceConnector[int64](in)), "counts", operators.NewCollector[int64]())
	if err := start(other); err == nil || !strings.Contains(err.Error(), "another topology") || !strings.Contains(err.Error(), "only in the savepoint: [ts (timestamps)") {
		t.Fatalf("another topology: %v", err)
	}

	// The source at parallelism 2, through a connector that cannot
	// redistribute its offsets.
	par := operators.NewTopology("rescaled")
	src := operators.Source(par, "numbers", fixedParts[int64]{in}, operators.Parallelism(2))
	ts := operators.Timestamps(src, "ts", func(v int64) time.Time { return time.Unix(v, 0) })
	by := operators.KeyBy(ts, "by-key", func(v int64) string { return fmt.Sprintf("k%03d", v*7%101) }, operators.Parallelism(2))
	operators.Sink(operators.Count(by, "count", operators.Emit(operators.EmitAtEnd)), "counts", counts, operators.Parallelism(1))
	operators.Sink(operators.WindowCount(by, "windows", operators.Tumbling(50*time.Second)), "wins", wins, operators.Parallelism(1))
	if err := start(par); err == nil || !strings.Contains(err.Error(), `source "numbers" ran at parallelism 1, now 2`) {
		t.Fatalf("a source that cannot rescale: %v", err)
	}

	path := filepath.Join(dir, "state", "0000.bin")
	b, _ := os.ReadFile(path)
	b[len(b)-1] ^= 1
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	before := dirDigest(t, dir)
	if err := start(rescaled(in, 2, counts, wins)); !errors.Is(err, savepoint.ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Fatalf("a damaged savepoint: %v", err)
	}
	if dirDigest(t, dir) != before {
		t.Fatal("a refused savepoint was changed")
	}
	if _, err := operators.ReadSavepoint(dir); !errors.Is(err, savepoint.ErrCorrupt) {
		t.Fatalf("read a damaged savepoint: %v", err)
	}
}

// dirDigest is every file under dir: name, mode, time and SHA-256.
func dirDigest(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %v %v", path, info.Mode(), info.ModTime())
		if !d.IsDir() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %x", sha256.Sum256(data))
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// fixedParts is a source connector without connector.OffsetRescaler.
type fixedParts[T any] struct{ operators.SourceConnector[T] }

// TestStridedSourceRescales: FromSlice and Generate redistribute their
// offsets when their partitions read a prefix of the sequence together,
// and refuse otherwise.
func TestStridedSourceRescales(t *testing.T) {
	re := operators.FromSlice([]int{}).(interface {
		RescaleOffsets([]int64, int) ([]int64, error)
	})
	for _, c := range []struct {
		old   []int64
		parts int
		want  []int64
	}{
		{[]int64{10}, 4, []int64{3, 3, 2, 2}},
		{[]int64{3, 3, 2, 2}, 1, []int64{10}},
		{[]int64{5, 5}, 3, []int64{4, 3, 3}},
		{[]int64{0, 0}, 1, []int64{0}},
	} {
		got, err := re.RescaleOffsets(c.old, c.parts)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%v to %d: %v, %v; want %v", c.old, c.parts, got, err, c.want)
		}
	}
	if _, err := re.RescaleOffsets([]int64{5, 3}, 1); err == nil || !strings.Contains(err.Error(), "not together the first 8") {
		t.Fatalf("partitions at 5 and 3: %v", err)
	}
}
