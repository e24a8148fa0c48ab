package operators_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/crashtest"
)

const crashChildEnv = "SLUICE_CRASH_CHILD_DIR"

// TestCheckpointCrashChild is the child process of TestCheckpointCrash: it
// runs the checkpointed counting topology on the store in the given folder
// to its end. It is skipped unless the parent started it.
func TestCheckpointCrashChild(t *testing.T) {
	dir, ok := crashtest.ChildEnv(crashChildEnv)
	if !ok {
		t.Skip("child of TestCheckpointCrash")
	}
	ctx := context.Background()
	sys, err := actors.NewSystem(actors.Config{Name: "crash-child", Store: filepath.Join(dir, "store.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop(ctx)
	top := countingTopology(nil, filepath.Join(dir, "out"), crashRecords, 100*time.Millisecond)
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("STARTED")
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	fmt.Println("DONE")
}

// TestCheckpointCrash runs a keyed counting topology with checkpoints every
// 100 ms in a child process, SIGKILLs it at random points (the seed is
// printed) and restarts it each time; the final output must equal the output
// of a run that was never killed: nothing lost, nothing counted twice.
func TestCheckpointCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: child processes")
	}
	rng := crashtest.Seed(t, "SLUICE_CRASH_SEED")

	reference := t.TempDir()
	if r := runChild(t, reference, -1); !r.Done {
		t.Fatal("the reference run did not finish")
	}
	want := readParts(t, filepath.Join(reference, "out"))

	dir := t.TempDir()
	kills := 0
	for runs := 0; ; runs++ {
		if runs > 200 {
			t.Fatalf("no end after %d runs and %d kills", runs, kills)
		}
		delay := time.Duration(-1)
		if kills < 20 {
			delay = time.Duration(crashKillMin+rng.IntN(crashKillSpread)) * time.Millisecond
		}
		r := runChild(t, dir, delay)
		if r.Killed {
			kills++
		}
		if r.Done {
			break
		}
	}
	if kills < 20 {
		t.Fatalf("only %d kills landed before the job finished: make the job longer", kills)
	}
	if got := readParts(t, filepath.Join(dir, "out")); got != want {
		t.Fatalf("after %d kills the output differs from the run that was never killed (%d vs %d bytes)", kills, len(got), len(want))
	}
	t.Logf("%d kills, output identical", kills)
}

// runChild runs the child on dir; with a delay of 0 or more it SIGKILLs the
// child that long after it started its job, unless the job finished first.
func runChild(t *testing.T, dir string, delay time.Duration) crashtest.Run {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "out"), 0o700); err != nil {
		t.Fatal(err)
	}
	child := crashtest.Child{Test: "TestCheckpointCrashChild", Env: []string{crashChildEnv + "=" + dir}, Timeout: 5 * time.Minute}
	return child.Run(t, delay, nil)
}
