package operators_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/crashtest"
	"github.com/sluicehq/sluice/operators"
)

const (
	durableCrashEnv     = "SLUICE_DURABLE_CRASH_DIR"
	durableCrashRecords = 50_000
	durableCrashKills   = 10
)

// TestDurableIngressCrashChild is the child process of
// TestDurableIngressCrash: an application that sends 0..n-1 through a
// durable ingress (resuming after the last record the log acknowledged)
// into a checkpointed keyed count, on the store in the given folder.
func TestDurableIngressCrashChild(t *testing.T) {
	dir, ok := crashtest.ChildEnv(durableCrashEnv)
	if !ok {
		t.Skip("child of TestDurableIngressCrash")
	}
	ctx := context.Background()
	sys, err := actors.NewSystem(actors.Config{Name: "durable-crash-child", Store: filepath.Join(dir, "store.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop(ctx)
	in, err := operators.NewDurableIngress[int64](sys, "app", operators.DurableIngressConfig{Capacity: 2000})
	if err != nil {
		t.Fatal(err)
	}
	st := in.Stats()
	// One sender: record i is at offset i, so the records acknowledged
	// before a crash are 0..Next-1 and the application goes on from Next.
	fmt.Printf("ACKED %d\n", st.Next)
	run, err := sys.Run(ctx, ingressCounting(in, nil, filepath.Join(dir, "out"), 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	sent := make(chan error, 1)
	go func() {
		if st.Closed {
			sent <- nil
			return
		}
		sent <- sendAll(ctx, in, st.Next, durableCrashRecords)
	}()
	fmt.Println("STARTED")
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	fmt.Println("DONE")
}

// TestDurableIngressCrash SIGKILLs the application of
// TestDurableIngressCrashChild at random points and starts it again until
// it finishes: its output equals that of a run that was never killed, so
// every record the ingress acknowledged was counted exactly once.
func TestDurableIngressCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: child processes")
	}
	rng := crashtest.Seed(t, "SLUICE_CRASH_SEED")
	runOnce := func(dir string, delay time.Duration) (crashtest.Run, int64) {
		if err := os.MkdirAll(filepath.Join(dir, "out"), 0o700); err != nil {
			t.Fatal(err)
		}
		var acked int64 = -1
		child := crashtest.Child{Test: "TestDurableIngressCrashChild", Env: []string{durableCrashEnv + "=" + dir}, Timeout: 2 * time.Minute}
		r := child.Run(t, delay, func(line string) bool {
			if v, ok := strings.CutPrefix(line, "ACKED "); ok {
				acked, _ = strconv.ParseInt(v, 10, 64)
			}
			return line == "STARTED"
		})
		return r, acked
	}
	reference := t.TempDir()
	ref, _ := runOnce(reference, -1)
	if !ref.Done {
		t.Fatal("the reference run did not finish")
	}
	want := readParts(t, filepath.Join(reference, "out"))
	kills := 0
	for round := 1; kills < durableCrashKills; round++ {
		if round > crashMaxRounds {
			t.Fatalf("only %d kills landed in %d rounds: make the job longer", kills, crashMaxRounds)
		}
		dir := t.TempDir()
		var acked []int64
		for runs := 0; ; runs++ {
			if runs > 200 {
				t.Fatalf("round %d: no end after %d runs", round, runs)
			}
			delay := time.Duration(-1)
			if kills < durableCrashKills {
				delay = killDelay(rng, ref.Took, durableCrashKills)
			}
			r, a := runOnce(dir, delay)
			if n := len(acked); n > 0 && a < acked[n-1] {
				t.Fatalf("the log acknowledged %d records, then %d after a restart", acked[n-1], a)
			}
			acked = append(acked, a)
			if r.Killed {
				kills++
			}
			if r.Done {
				break
			}
		}
		if got := readParts(t, filepath.Join(dir, "out")); got != want {
			t.Fatalf("after kills the output in %s differs from the run that was never killed (%d vs %d bytes)", dir, len(got), len(want))
		}
		t.Logf("round %d: %d kills in all; records acknowledged at each start %v; output identical", round, kills, acked)
	}
}
