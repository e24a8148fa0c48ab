package nexmark

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/crashtest"
	"github.com/sluicehq/sluice/operators"
)

// The crash test runs the stateful queries in one checkpointed topology in
// a child process (this test binary again, started with crashDirEnv naming
// its folder), SIGKILLs it at random points and starts it again each time
// until it finishes; the output files must then hold exactly the models'
// results.
//
// The child prints a line "CHECKPOINT id" when a checkpoint completes (a
// marker sink's commit). A kill lands at a random point within the
// checkpoint interval that follows the run's first completed checkpoint:
// every run makes progress, whatever the speed of the machine, and the kill
// falls anywhere in the checkpoint cycle (between checkpoints, during one,
// while an output file is being written).

const (
	crashDirEnv  = "SLUICE_NEXMARK_CRASH_DIR"
	crashSeedEnv = "SLUICE_NEXMARK_CRASH_SEED"
	// crashKills is how many kills the test lands before it lets the job
	// finish.
	crashKills = 12
	// crashInterval is the checkpoint interval of the child's job.
	crashInterval = 50 * time.Millisecond
	// crashEvents is the length of the child's stream: long enough for
	// most of the kills in one round (each run makes progress of at least
	// one checkpoint).
	crashEvents = 300_000
	// crashRounds bounds the rounds of the test.
	crashRounds = 4
)

// crashConfig is the child's stream.
func crashConfig() Config {
	cfg := queryConfig()
	cfg.NumEvents = crashEvents
	return cfg
}

// crashQueries are the queries of the crash test: every one with state.
var crashQueries = []string{"q3", "q4", "q5", "q6", "q7", "q8", "q9", "q11"}

// crashTopology is the child's job: one live source (2 instances over 4
// generators) feeding every query of crashQueries, each written to the file
// dir/<query>.jsonl by a File sink (exactly-once with checkpoints), and the
// checkpoint marker.
func crashTopology(dir string) (*operators.Topology, error) {
	cfg := crashConfig()
	opts := []operators.TopologyOption{operators.Checkpoints(crashInterval)}
	if os.Getenv(crashDiskEnv) != "" {
		// q3's join, q4's Aggregate and the windowed queries' windows on
		// pebble, with a cache of 4 KiB.
		opts = append(opts, operators.StateBackend(operators.DiskState(filepath.Join(dir, "state"), 4<<10)))
	}
	t := operators.NewTopology("nexmark-crash", opts...)
	events := operators.Source(t, "events", Source(cfg), operators.Parallelism(2))
	for _, q := range crashQueries {
		s, err := Build(q, events, ParamsOf(cfg, 2))
		if err != nil {
			return nil, err
		}
		operators.Sink(s, q+".out", operators.File(filepath.Join(dir, q+".jsonl"), func(line string) string { return line }),
			operators.Parallelism(1))
	}
	none := operators.Filter(events, "marker.none", func(Event) bool { return false })
	operators.Sink(none, "marker", crashMarker{}, operators.Parallelism(1))
	return t, nil
}

// crashMarker is a sink that prints "CHECKPOINT id" when a checkpoint
// completes: a two-phase writer with nothing to commit.
type crashMarker struct{}

func (crashMarker) Open(context.Context, int, int) (operators.Writer[Event], error) {
	return crashMarker{}, nil
}
func (crashMarker) Write([]Event) error              { return nil }
func (crashMarker) Close() error                     { return nil }
func (crashMarker) PreCommit(uint64) ([]byte, error) { return nil, nil }

func (crashMarker) Commit(_ context.Context, checkpoint uint64) error {
	_, err := fmt.Printf("CHECKPOINT %d\n", checkpoint)
	return err
}

// TestQueryCrashChild is the child process of TestQueryCrash: it runs the
// job on the store in its folder to the end, resuming from the last
// checkpoint if there is one. It is skipped unless the parent started it.
func TestQueryCrashChild(t *testing.T) {
	dir, ok := crashtest.ChildEnv(crashDirEnv)
	if !ok {
		t.Skip("child of TestQueryCrash")
	}
	ctx := context.Background()
	sys, err := actors.NewSystem(actors.Config{Name: "nexmark-crash-child", Store: filepath.Join(dir, "store.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop(ctx)
	top, err := crashTopology(dir)
	if err != nil {
		t.Fatal(err)
	}
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("STARTED")
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	queryNoLate(t, run)
	fmt.Println("DONE")
}

// TestQueryCrash kills the child at crashKills random points (the seed is
// printed; crashSeedEnv replays it), then lets it finish, and compares every
// query's output file with the query's model.
func TestQueryCrash(t *testing.T) { queryCrash(t) }

// crashDiskEnv makes the child run with the disk state backend.
const crashDiskEnv = "SLUICE_NEXMARK_CRASH_DISK"

// TestQueryCrashDisk is TestQueryCrash with the disk state backend.
// Under the race detector its last run (windows, q3's join and q4's
// aggregate on pebble with a 4 KiB cache) took over the child's 2 minutes
// in CI; it runs without -race, in .ci/test's second pass.
func TestQueryCrashDisk(t *testing.T) {
	if raceEnabled {
		t.Skip("the disk variant is too slow under the race detector: it runs in the pass without -race")
	}
	queryCrash(t, crashDiskEnv+"=1")
}

func queryCrash(t *testing.T, env ...string) {
	if testing.Short() {
		t.Skip("crash test: child processes")
	}
	rng := crashtest.Seed(t, crashSeedEnv)

	var want map[string][]string // the models' outputs, computed once
	kills, runs := 0, 0
	// A round runs the job to its end in a fresh folder, killing it until
	// crashKills kills have landed in all; on a machine fast enough to
	// finish the job before, another round lands the rest.
	for round := 1; kills < crashKills; round++ {
		if round > crashRounds {
			t.Fatalf("only %d kills landed in %d rounds: make the job longer", kills, crashRounds)
		}
		dir := t.TempDir()
		for done := false; !done; runs++ {
			if runs > 4*crashKills {
				t.Fatalf("no end after %d runs and %d kills", runs, kills)
			}
			delay := time.Duration(-1) // no kill
			if kills < crashKills {
				delay = time.Duration(rng.Int64N(int64(crashInterval)))
			}
			r := crashRunChild(t, dir, delay, env...)
			done = r.done
			if r.killed {
				kills++
				t.Logf("round %d run %d: checkpoints %d to %d completed, killed %v after the first",
					round, runs+1, r.first, r.last, delay.Round(time.Millisecond))
			} else {
				t.Logf("round %d run %d: checkpoints %d to %d completed, finished", round, runs+1, r.first, r.last)
			}
		}
		if want == nil {
			want = modelLines(queryEvents(t, crashConfig()), crashQueries...)
		}
		for _, q := range crashQueries {
			got := resultLines(t, q, sampleLines(t, filepath.Join(dir, q+".jsonl")))
			t.Run(fmt.Sprintf("round%d/%s", round, q), func(t *testing.T) { queryCompare(t, got, want[q]) })
		}
	}
	if !t.Failed() {
		t.Logf("%d runs, %d kills: every output equals its model", runs, kills)
	}
}

// crashRun is the outcome of one run of the child.
type crashRun struct {
	killed, done bool
	first, last  uint64 // the checkpoints it completed
}

// crashRunChild runs the child on dir. With a delay of 0 or more it
// SIGKILLs the child that long after the first checkpoint of the run
// completed, unless the job finished first.
func crashRunChild(t *testing.T, dir string, delay time.Duration, env ...string) (r crashRun) {
	t.Helper()
	child := crashtest.Child{Test: "TestQueryCrashChild", Env: append([]string{crashDirEnv + "=" + dir}, env...)}
	run := child.Run(t, delay, func(line string) bool {
		rest, ok := strings.CutPrefix(line, "CHECKPOINT ")
		if !ok {
			return false
		}
		var id uint64
		if _, err := fmt.Sscan(rest, &id); err != nil {
			t.Fatalf("child: %q: %v", line, err)
		}
		if r.first == 0 {
			r.first = id
		}
		r.last = id
		return true // the first completed checkpoint arms the kill
	})
	r.killed, r.done = run.Killed, run.Done
	return r
}
