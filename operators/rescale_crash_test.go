package operators_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/crashtest"
	"github.com/sluicehq/sluice/operators"
)

const (
	rescaleDirEnv   = "SLUICE_RESCALE_DIR"
	rescalePhaseEnv = "SLUICE_RESCALE_PHASE" // 0, 1, 2, or "ref"
	rescalePer      = 20_000                 // records per phase
	rescaleKills    = 3                      // SIGKILLs per phase
)

// rescalePars is the parallelism of each phase.
var rescalePars = []int{2, 4, 1}

// rescaleCrashTopology: the records of a durable ingress, their event
// time their value in milliseconds; per key a count at the end and
// tumbling windows, each to an exactly-once file sink of parallelism 1.
func rescaleCrashTopology(in *operators.DurableIngress[int64], p int, dir string) *operators.Topology {
	t := operators.NewTopology("rescale-crash", operators.Checkpoints(50*time.Millisecond), operators.BatchSize(64))
	src := operators.Source(t, "app", in)
	ts := operators.Timestamps(src, "ts", func(v int64) time.Time { return time.UnixMilli(v) })
	by := operators.KeyBy(ts, "by-key", func(v int64) string { return "k" + strconv.FormatInt(v*7%211, 10) }, operators.Parallelism(p))
	operators.Sink(operators.Count(by, "count", operators.Emit(operators.EmitAtEnd)), "counts",
		operators.File(filepath.Join(dir, "counts"), func(kv operators.KV[string, int64]) string { return fmt.Sprintf("%s=%d", kv.Key, kv.Value) },
			operators.FileOverwrite()),
		operators.Parallelism(1))
	operators.Sink(operators.WindowCount(by, "windows", operators.Tumbling(500*time.Millisecond)), "wins",
		operators.File(filepath.Join(dir, "wins"), func(w operators.Windowed[string, int64]) string {
			return fmt.Sprintf("%s@%d=%d", w.Key, w.Start.UnixMilli(), w.Value)
		}, operators.FileOverwrite()), operators.Parallelism(1))
	return t
}

// TestRescaleCrashChild is the child process of TestRescaleCrash: phase k
// of an application that sends records [k·per, (k+1)·per) through a
// durable ingress (going on after the last one the log acknowledged) into
// the job at parallelism rescalePars[k], started from the savepoint of
// phase k-1; phases 0 and 1 end with a savepoint once the job has read
// their records, phase 2 closes the ingress and runs to the end. "ref"
// sends everything at parallelism 1 with no savepoint.
func TestRescaleCrashChild(t *testing.T) {
	dir, ok := crashtest.ChildEnv(rescaleDirEnv)
	if !ok {
		t.Skip("child of TestRescaleCrash")
	}
	phase, p, end := -1, 1, int64(3*rescalePer)
	if s := os.Getenv(rescalePhaseEnv); s != "ref" {
		phase, _ = strconv.Atoi(s)
		p, end = rescalePars[phase], int64(phase+1)*rescalePer
	}
	spDir := func(k int) string { return filepath.Join(dir, "sp-"+strconv.Itoa(k)) }
	if phase >= 0 && phase < 2 {
		if _, err := os.Stat(filepath.Join(spDir(phase), "MANIFEST")); err == nil {
			fmt.Println("DONE") // killed after its savepoint was complete
			return
		}
		if err := os.RemoveAll(spDir(phase)); err != nil { // killed while writing it
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sys, err := actors.NewSystem(actors.Config{Name: "rescale-crash-child", Store: filepath.Join(dir, "store.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop(ctx)
	in, err := operators.NewDurableIngress[int64](sys, "app", operators.DurableIngressConfig{Capacity: 4000})
	if err != nil {
		t.Fatal(err)
	}
	var opts []operators.TopologyOption
	if phase > 0 {
		opts = append(opts, operators.FromSavepoint(spDir(phase-1)))
	}
	job, err := operators.Start(ctx, sys, rescaleCrashTopology(in, p, filepath.Join(dir, "out")), opts...)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("STARTED")
	st := in.Stats()
	for i := st.Next; i < end; i += 500 {
		batch := make([]int64, 0, 500)
		for j := i; j < min(i+500, end); j++ {
			batch = append(batch, j)
		}
		if err := in.SendBatch(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	if phase < 0 || phase == 2 {
		if !st.Closed {
			in.Close()
		}
		if err := job.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		fmt.Println("DONE")
		return
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for in.Stats().Read < end { // the job has read the phase's records
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("the job read %d of %d records", in.Stats().Read, end)
		}
	}
	info, err := job.Savepoint(ctx, spDir(phase))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("SAVEPOINT %d\n", info.Checkpoint)
	_ = job.Stop(ctx)
	_ = job.Wait(ctx)
	fmt.Println("DONE")
}

// TestRescaleCrash runs the job at parallelism 2, savepoints it, resumes
// it at 4, savepoints it, resumes it at 1 to the end, with SIGKILLs of the
// child process at random points of every phase (its checkpoints, its
// savepoint being written, its start from the savepoint): the output
// equals that of one uninterrupted run at parallelism 1.
func TestRescaleCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: child processes")
	}
	rng := crashtest.Seed(t, "SLUICE_CRASH_SEED")
	run := func(dir, phase string, delay time.Duration) crashtest.Run {
		if err := os.MkdirAll(filepath.Join(dir, "out"), 0o700); err != nil {
			t.Fatal(err)
		}
		child := crashtest.Child{Test: "TestRescaleCrashChild", Env: []string{rescaleDirEnv + "=" + dir, rescalePhaseEnv + "=" + phase}, Timeout: 2 * time.Minute}
		return child.Run(t, delay, nil)
	}
	ref := t.TempDir()
	r := run(ref, "ref", -1)
	if !r.Done {
		t.Fatal("the reference run did not finish")
	}
	want := sortedFiles(t, filepath.Join(ref, "out"))
	perPhase := r.Took / 3

	dir := t.TempDir()
	kills := 0
	for phase := range 3 {
		landed := 0
		for runs := 0; ; runs++ {
			if runs > 50 {
				t.Fatalf("phase %d: no end after %d runs", phase, runs)
			}
			delay := time.Duration(-1)
			if landed < rescaleKills {
				delay = killDelay(rng, 2*perPhase, rescaleKills)
			}
			r := run(dir, strconv.Itoa(phase), delay)
			if r.Killed {
				landed++
			}
			if r.Done {
				break
			}
		}
		t.Logf("phase %d at parallelism %d: %d kills", phase, rescalePars[phase], landed)
		kills += landed
	}
	if got := sortedFiles(t, filepath.Join(dir, "out")); got != want {
		t.Fatalf("after rescaling 2 -> 4 -> 1 with %d kills, the output in %s differs from the uninterrupted run's at parallelism 1 (%d vs %d bytes)",
			kills, dir, len(got), len(want))
	}
	t.Logf("%d kills across the phases; output identical to the uninterrupted run (%d bytes)", kills, len(want))
}

// sortedFiles is every file of dir, by name, with its lines sorted.
func sortedFiles(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		slices.Sort(lines)
		fmt.Fprintf(&out, "== %s: %d lines\n%s\n", e.Name(), len(lines), strings.Join(lines, "\n"))
	}
	return out.String()
}
