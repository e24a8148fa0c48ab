// Package crashtest runs crash tests with real processes: the test binary
// runs one of its own tests as a child process, which prints progress
// lines on stdout, and the parent SIGKILLs it at a chosen point and starts
// it again, until the child's job is done.
//
//	func TestCrashChild(t *testing.T) {
//		dir, ok := crashtest.ChildEnv("MY_CRASH_DIR")
//		if !ok {
//			t.Skip("child of TestCrash")
//		}
//		... start the job on dir ...
//		fmt.Println("STARTED")
//		... wait for it ...
//		fmt.Println("DONE")
//	}
//
//	func TestCrash(t *testing.T) {
//		rng := crashtest.Seed(t, "MY_CRASH_SEED")
//		child := crashtest.Child{Test: "TestCrashChild", Env: []string{"MY_CRASH_DIR=" + dir}}
//		for r := child.Run(t, delay, nil); !r.Done; r = child.Run(t, delay, nil) { ... }
//	}
package crashtest

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// ChildEnv returns the value of the variable that marks the child process
// (set by the parent through Child.Env), and whether it is set.
func ChildEnv(name string) (string, bool) {
	v := os.Getenv(name)
	return v, v != ""
}

// Seed returns a random source seeded from the clock, or from the variable
// env when set, and logs the seed and how to replay it.
func Seed(t testing.TB, env string) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(env); s != "" {
		if _, err := fmt.Sscan(s, &seed); err != nil {
			t.Fatalf("%s=%q: %v", env, s, err)
		}
	}
	t.Logf("seed %d (replay with %s=%d)", seed, env, seed)
	return rand.New(rand.NewPCG(seed, 1))
}

// Child is a test of the running test binary run as a child process.
type Child struct {
	Test    string        // the child test's name
	Env     []string      // added to the parent's environment
	Timeout time.Duration // a run that takes longer fails the test; default 2 minutes
}

// Run is the outcome of one run of the child.
type Run struct {
	Killed bool          // the parent SIGKILLed it
	Done   bool          // it printed DONE
	Took   time.Duration // from the line that armed the kill timer to DONE
}

// Run runs the child once. onLine sees every line the child prints and
// says whether the line arms the kill timer (nil: the line "STARTED" does);
// once armed, the child is SIGKILLed killAfter later unless it printed DONE
// first; a negative killAfter never kills. A line that reports a failed
// test of the child fails the parent's test.
func (c Child) Run(t testing.TB, killAfter time.Duration, onLine func(line string) (arm bool)) (r Run) {
	t.Helper()
	if onLine == nil {
		onLine = func(line string) bool { return line == "STARTED" }
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+c.Test+"$", "-test.v")
	cmd.Env = append(os.Environ(), c.Env...)
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
	var kill <-chan time.Time
	var armed time.Time
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				if err := cmd.Wait(); err != nil && !r.Killed {
					t.Fatalf("child %s failed: %v", c.Test, err)
				}
				return r
			}
			switch {
			case line == "DONE":
				r.Done = true
				if !armed.IsZero() {
					r.Took = time.Since(armed)
				}
			case strings.HasPrefix(line, "--- FAIL"):
				t.Errorf("child: %s", line)
			case onLine(line) && armed.IsZero():
				armed = time.Now()
				if killAfter >= 0 {
					kill = time.After(killAfter) // a random kill point, not a wait for an event
				}
			}
		case <-kill:
			kill = nil
			if !r.Done {
				r.Killed = cmd.Process.Kill() == nil // SIGKILL
			}
		case <-deadline.C:
			_ = cmd.Process.Kill()
			t.Fatalf("child %s did not finish in %v", c.Test, timeout)
		}
	}
}
