package operators_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/crashtest"
	"github.com/sluicehq/sluice/operators"
)

// fileJob writes n numbers to path with the file sink.
func fileJob(path string, n int64, opts []operators.TopologyOption, fopts ...operators.FileOption) *operators.Topology {
	t := operators.NewTopology("file-job", opts...)
	src := operators.Source(t, "numbers", operators.Generate(n, func(i int64) int64 { return i }))
	operators.Sink(src, "out", operators.File(path, func(v int64) string { return strconv.FormatInt(v, 10) }, fopts...))
	return t
}

// TestFileSinkFreshStartKeepsOutput: a job with checkpoints that starts
// afresh on a non-empty file fails with ErrFileNotEmpty and leaves the file
// as it was, unless given FileOverwrite; an empty file, or a job without
// checkpoints, is written over.
func TestFileSinkFreshStartKeepsOutput(t *testing.T) {
	sys, ctx := newSystem(t)
	const earlier = "a previous run's output\n"
	want := ""
	for i := range 10 {
		want += strconv.Itoa(i) + "\n"
	}
	checkpointed := func() []operators.TopologyOption {
		return []operators.TopologyOption{operators.Checkpoints(time.Hour), operators.CheckpointStore(&memCheckpoints{})}
	}
	for _, c := range []struct {
		name    string
		content string // of the file before the run; "-": no file
		opts    []operators.TopologyOption
		fopts   []operators.FileOption
		refused bool
	}{
		{"checkpoints, non-empty file", earlier, checkpointed(), nil, true},
		{"checkpoints, non-empty file, FileOverwrite", earlier, checkpointed(), []operators.FileOption{operators.FileOverwrite()}, false},
		{"checkpoints, empty file", "", checkpointed(), nil, false},
		{"checkpoints, no file", "-", checkpointed(), nil, false},
		{"no checkpoints, non-empty file", earlier, nil, nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "out")
			if c.content != "-" {
				if err := os.WriteFile(path, []byte(c.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			run, err := sys.Run(ctx, fileJob(path, 10, c.opts, c.fopts...))
			if err != nil {
				t.Fatal(err)
			}
			err = run.Wait(ctx)
			got, rerr := os.ReadFile(path)
			if rerr != nil {
				t.Fatal(rerr)
			}
			if c.refused {
				if !errors.Is(err, operators.ErrFileNotEmpty) || !strings.Contains(err.Error(), path) {
					t.Fatalf("error %v: want ErrFileNotEmpty naming %s", err, path)
				}
				if string(got) != c.content {
					t.Fatalf("the refused start changed the file to %q", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != want {
				t.Fatalf("file holds %q, want %q", got, want)
			}
		})
	}
}

const fileChildEnv = "SLUICE_FILESINK_CHILD_DIR"

// TestFileSinkCrashChild is the child process of TestFileSinkCrashAndPowerLoss:
// the checkpointed counting topology, whose file sink logs the size of
// every file it fsynced to synced.log in the folder. It is skipped unless
// the parent started it.
func TestFileSinkCrashChild(t *testing.T) {
	dir, ok := crashtest.ChildEnv(fileChildEnv)
	if !ok {
		t.Skip("child of TestFileSinkCrashAndPowerLoss")
	}
	ctx := context.Background()
	log, err := os.OpenFile(filepath.Join(dir, "synced.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	var mu sync.Mutex
	synced := operators.FileSynced(func(path string, size int64) {
		mu.Lock()
		defer mu.Unlock()
		if _, err := fmt.Fprintf(log, "%s %d\n", path, size); err != nil { // one write: whole lines only
			panic(err)
		}
	})
	sys, err := actors.NewSystem(actors.Config{Name: "filesink-child", Store: filepath.Join(dir, "store.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop(ctx)
	top := paddedCounting(filepath.Join(dir, "out"), crashRecords, 50*time.Millisecond, operators.FileOverwrite(), synced)
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("STARTED")
	fmt.Printf("RESTORED %d\n", operators.CheckpointStatsOf(run).RestoredFrom)
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	fmt.Println("DONE")
}

// paddedCounting is countingTopology with lines of about 100 bytes: the
// sink's buffer (64 KiB) reaches the file between checkpoints even when
// the machine is slow, so that a power loss has bytes to lose.
func paddedCounting(dir string, n int64, interval time.Duration, fopts ...operators.FileOption) *operators.Topology {
	t := operators.NewTopology("padded-counting", operators.Checkpoints(interval), operators.BatchSize(32))
	src := operators.Source(t, "numbers", operators.Generate(n, func(i int64) int64 { return i }))
	keys := operators.Map(src, "key", func(v int64) string { return fmt.Sprintf("k%02d", v*7%23) })
	by := operators.KeyBy(keys, "by-key", func(k string) string { return k }, operators.Parallelism(3))
	counts := operators.Count(by, "count")
	pad := strings.Repeat(".", 90)
	operators.Sink(counts, "out", operators.File(filepath.Join(dir, "counts"), func(kv operators.KV[string, int64]) string {
		return fmt.Sprintf("%s=%d %s", kv.Key, kv.Value, pad)
	}, fopts...))
	return t
}

// powerLoss cuts every output file in dir back to the size it last had
// when the sink fsynced it (synced.log), as a power loss would, and removes
// a file never fsynced (its name was not durable either). A file already
// shorter (a restored run cut it and has not fsynced since) stays: that is
// one of the states a power loss may leave. It returns the bytes cut.
func powerLoss(t *testing.T, dir string) int64 {
	t.Helper()
	last := map[string]int64{}
	if f, err := os.Open(filepath.Join(dir, "synced.log")); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			path, size, ok := strings.Cut(sc.Text(), " ")
			n, err := strconv.ParseInt(size, 10, 64)
			if !ok || err != nil {
				t.Fatalf("synced.log: line %q", sc.Text())
			}
			last[path] = n
		}
		f.Close()
	}
	var cut int64
	for i := range 3 {
		path := filepath.Join(dir, "out", fmt.Sprintf("counts-%d", i))
		st, err := os.Stat(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		size, ok := last[path]
		switch {
		case !ok:
			cut += st.Size()
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		case st.Size() > size:
			cut += st.Size() - size
			if err := os.Truncate(path, size); err != nil {
				t.Fatal(err)
			}
		}
	}
	return cut
}

// TestFileSinkCrashAndPowerLoss runs the checkpointed counting job with the
// file sink in a child process and SIGKILLs it at random points (the seed
// is printed): in the first half of the kills the files stay as the kill
// left them (kill -9: the page cache survives); in the second half every
// kill is also a power loss, the files cut back to their last fsync. Each
// time the job restarts from its last checkpoint; the final output must
// equal that of a run never interrupted.
func TestFileSinkCrashAndPowerLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: child processes")
	}
	rng := crashtest.Seed(t, "SLUICE_CRASH_SEED")
	run := func(dir string, delay time.Duration) (crashtest.Run, uint64) {
		if err := os.MkdirAll(filepath.Join(dir, "out"), 0o700); err != nil {
			t.Fatal(err)
		}
		var restored uint64
		child := crashtest.Child{Test: "TestFileSinkCrashChild", Env: []string{fileChildEnv + "=" + dir}, Timeout: 5 * time.Minute}
		r := child.Run(t, delay, func(line string) bool {
			if id, ok := strings.CutPrefix(line, "RESTORED "); ok {
				restored, _ = strconv.ParseUint(id, 10, 64)
			}
			return line == "STARTED"
		})
		return r, restored
	}
	reference := t.TempDir()
	ref, _ := run(reference, -1)
	if !ref.Done {
		t.Fatal("the reference run did not finish")
	}
	want := readParts(t, filepath.Join(reference, "out"))

	const kills = 12
	dir := t.TempDir()
	var killed, restores, losses int
	var cut int64
	for runs := 0; ; runs++ {
		if runs > 100 {
			t.Fatalf("no end after %d runs and %d kills", runs, killed)
		}
		delay := time.Duration(-1)
		if killed < kills {
			delay = killDelay(rng, ref.Took, kills)
		}
		r, restored := run(dir, delay)
		if restored > 0 {
			restores++
		}
		if r.Done {
			break
		}
		if r.Killed {
			killed++
			if killed > kills/2 {
				losses++
				cut += powerLoss(t, dir)
			}
		}
	}
	if restores == 0 {
		t.Fatalf("%d kills, no run restored a checkpoint", killed)
	}
	if losses > 0 && cut == 0 {
		t.Fatalf("%d power losses cut nothing: the simulation did not lose anything", losses)
	}
	if got := readParts(t, filepath.Join(dir, "out")); got != want {
		t.Fatalf("after %d kills (%d with a power loss) the output differs from the run never interrupted (%d vs %d bytes)", killed, losses, len(got), len(want))
	}
	t.Logf("%d kills, %d of them power losses cutting %d bytes in all, %d runs restored a checkpoint: output identical", killed, losses, cut, restores)
}
