package operators_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
)

const crashChildEnv = "SLUICE_CRASH_CHILD_DIR"

// TestCheckpointCrashChild is the child process of TestCheckpointCrash: it
// runs the checkpointed counting topology on the store in the given folder
// to its end. It is skipped unless the parent started it.
func TestCheckpointCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
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
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SLUICE_CRASH_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	t.Logf("seed %d (replay with SLUICE_CRASH_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	reference := t.TempDir()
	if _, done := runChild(t, reference, 0); !done {
		t.Fatal("the reference run did not finish")
	}
	want := readParts(t, filepath.Join(reference, "out"))

	dir := t.TempDir()
	kills := 0
	for runs := 0; ; runs++ {
		if runs > 200 {
			t.Fatalf("no end after %d runs and %d kills", runs, kills)
		}
		delay := time.Duration(0)
		if kills < 20 {
			delay = time.Duration(crashKillMin+rng.IntN(crashKillSpread)) * time.Millisecond
		}
		killed, done := runChild(t, dir, delay)
		if killed {
			kills++
		}
		if done {
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

// runChild runs the child on dir; with a delay it SIGKILLs the child that
// long after it started its job, unless the job finished first.
func runChild(t *testing.T, dir string, delay time.Duration) (killed, done bool) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "out"), 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCheckpointCrashChild$", "-test.v")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() { // ends when the child's stdout closes
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var timer <-chan time.Time
	deadline := time.After(5 * time.Minute)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				if err := cmd.Wait(); err != nil && !killed {
					t.Fatalf("child failed: %v", err)
				}
				return killed, done
			}
			switch {
			case line == "STARTED" && delay > 0:
				timer = time.After(delay) // a random kill point, not a wait for an event
			case line == "DONE":
				done = true
			case strings.HasPrefix(line, "--- FAIL"):
				t.Errorf("child: %s", line)
			}
		case <-timer:
			timer = nil
			if !done {
				killed = cmd.Process.Kill() == nil // SIGKILL
			}
		case <-deadline:
			cmd.Process.Kill()
			t.Fatal("child did not finish in 5 minutes")
		}
	}
}
