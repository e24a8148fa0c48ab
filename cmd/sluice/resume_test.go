package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/crashtest"
)

// The resume test runs `sluice run nexmark --query q5 --store s.db
// --checkpoints 200ms --out q5.jsonl` in a child process (this test binary
// again, running the command with the arguments in runChildEnv), SIGKILLs
// it at random points and starts it again with the same flags until it
// finishes; q5.jsonl must then hold the lines of an uninterrupted run.
//
// The child's progress lines say how many checkpoints the run completed;
// the kill timer is armed by the first line that shows one, so every run
// makes progress, and the kill lands at a random point of the checkpoint
// interval that follows (between checkpoints, during one, while the file
// is written).

const (
	runChildEnv     = "SLUICE_RUN_CHILD_ARGS"
	runCrashSeedEnv = "SLUICE_RUN_CRASH_SEED"
	// runCrashKillsEnv sets the number of kills (default runCrashKills):
	// SLUICE_RUN_CRASH_KILLS=20 is the soak of issue 20.
	runCrashKillsEnv = "SLUICE_RUN_CRASH_KILLS"
	runCrashKills    = 5
	runCrashInterval = 200 * time.Millisecond
)

// runCrashArgs is the job: events at 100 a second of event
// time (300 000 events: about 30 000 results of q5's sliding windows).
func runCrashArgs(dir, out string, events int) []string {
	args := []string{"run", "nexmark", "--query", "q5", "--events", strconv.Itoa(events), "--firstEventRate", "100", "--nextEventRate", "100",
		"--out", out, "--progress", "20ms"}
	if dir != "" {
		args = append(args, "--store", filepath.Join(dir, "s.db"), "--checkpoints", runCrashInterval.String())
	}
	return args
}

// TestRunChild runs the sluice command with the arguments the parent put
// in the environment, its progress on stdout, and prints DONE when it
// succeeds; it is skipped unless a test started it.
func TestRunChild(t *testing.T) {
	args, ok := crashtest.ChildEnv(runChildEnv)
	if !ok {
		t.Skip("the child process of TestRunResumesAfterSIGKILL")
	}
	root := newRoot(os.Stdout, os.Stdout)
	root.SetArgs(strings.Split(args, "\x1f"))
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	fmt.Println("DONE")
}

var (
	progressCheckpoints = regexp.MustCompile(`\| checkpoint (\d+) \((\d+) this run`)
	resumedFrom         = regexp.MustCompile(`^resumed job nexmark-q5 from checkpoint (\d+) of (\S+) in `)
)

func TestRunResumesAfterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: child processes")
	}
	kills := runCrashKills
	if v := os.Getenv(runCrashKillsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", runCrashKillsEnv, v)
		}
		kills = n
	}
	rng := crashtest.Seed(t, runCrashSeedEnv)

	// The job's size. At full speed 60 000 events a kill end before the
	// first checkpoint, and no kill lands: a first run measures the speed
	// of this machine (race detector or not) and the job grows until an
	// uninterrupted run lasts about 15 checkpoint intervals.
	events := 60_000 * kills
	start := time.Now()
	if _, errOut, err := execute(t, runCrashArgs("", filepath.Join(t.TempDir(), "q5.jsonl"), events)...); err != nil {
		t.Fatalf("sizing run: %v\n%s", err, errOut)
	}
	if took, aim := time.Since(start), 15*runCrashInterval; took < aim {
		events = min(int(float64(events)*float64(aim)/float64(max(took, time.Millisecond))), 100*60_000*kills)
	}
	t.Logf("the job: %d events", events)

	// The uninterrupted run, without a store or checkpoints.
	ref := filepath.Join(t.TempDir(), "q5.jsonl")
	if _, errOut, err := execute(t, runCrashArgs("", ref, events)...); err != nil {
		t.Fatalf("uninterrupted run: %v\n%s", err, errOut)
	}
	want := fileLines(t, ref)
	if len(want) < 1000 {
		t.Fatalf("the uninterrupted run wrote %d lines: the job is too small", len(want))
	}

	landed, runs := 0, 0
	for round := 1; landed < kills; round++ {
		if round > max(4, kills/2) {
			t.Fatalf("only %d kills landed in %d rounds: make the job longer", landed, round-1)
		}
		dir := t.TempDir()
		out := filepath.Join(dir, "q5.jsonl")
		child := crashtest.Child{Test: "TestRunChild", Env: []string{runChildEnv + "=" + strings.Join(runCrashArgs(dir, out, events), "\x1f")}}
		var last uint64 // the newest checkpoint a run of this round showed
		for done, first := false, true; !done; runs, first = runs+1, false {
			if runs > 4*kills {
				t.Fatalf("no end after %d runs and %d kills", runs, landed)
			}
			delay := time.Duration(-1) // no kill
			if landed < kills {
				delay = time.Duration(rng.Int64N(int64(runCrashInterval)))
			}
			var resumed uint64
			var started bool
			r := child.Run(t, delay, func(line string) bool {
				if m := resumedFrom.FindStringSubmatch(line); m != nil {
					resumed, _ = strconv.ParseUint(m[1], 10, 64)
					if _, err := time.Parse(time.RFC3339Nano, m[2]); err != nil {
						t.Errorf("resumed line %q: checkpoint time: %v", line, err)
					}
				}
				if strings.HasPrefix(line, "started job nexmark-q5 afresh") {
					started = true
				}
				m := progressCheckpoints.FindStringSubmatch(line)
				if m == nil {
					return false
				}
				id, _ := strconv.ParseUint(m[1], 10, 64)
				last = max(last, id)
				n, _ := strconv.Atoi(m[2])
				return n >= 1 // a checkpoint of this run arms the kill
			})
			// A run after a kill resumes from the checkpoint the killed run
			// had completed (or a later one); the first starts afresh.
			switch {
			case first && (!started || resumed != 0):
				t.Errorf("round %d: the first run did not say it started afresh (resumed from %d)", round, resumed)
			case !first && resumed == 0:
				t.Errorf("round %d run %d: did not say it resumed", round, runs+1)
			}
			done = r.Done
			if r.Killed {
				landed++
			}
			t.Logf("round %d run %d: resumed from %d, newest checkpoint %d, killed %v (after %v)", round, runs+1, resumed, last, r.Killed, delay.Round(time.Millisecond))
		}
		got := fileLines(t, out)
		if !slices.Equal(got, want) {
			t.Errorf("round %d: q5.jsonl has %d lines, the uninterrupted run's %d; first difference: %s", round, len(got), len(want), firstDiff(got, want))
		}
	}
	if !t.Failed() {
		t.Logf("%d runs, %d kills: q5.jsonl equals the uninterrupted run's (%d lines)", runs, landed, len(want))
	}
}

// fileLines returns the lines of a file, sorted: the out sink receives
// the results of the query's parallel instances in an order that varies
// from run to run.
func fileLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	slices.Sort(lines)
	return lines
}

func firstDiff(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("line %d: %q, want %q", i, got[i], want[i])
		}
	}
	return "one is a prefix of the other"
}

// Bad --store and --checkpoints flags fail before anything runs, saying
// what is wrong.
func TestRunCheckpointFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "nexmark", "--checkpoints", "1s"}, "--checkpoints 1s needs --store FILE"},
		{[]string{"run", "wordcount", "--checkpoints", "-1s", "--store", filepath.Join(t.TempDir(), "s.db")}, "--checkpoints -1s: want a positive interval"},
		{[]string{"run", "overload", "--checkpoints", "1s", "--store", filepath.Join(t.TempDir(), "s.db")}, "the overload sample measures its pipelines"},
		{[]string{"run", "bank", "--checkpoints", "1s"}, "the bank sample runs its workload"},
		{[]string{"run", "wordcount", "--store", filepath.Join(t.TempDir(), "no", "such", "dir", "s.db")}, "no/such/dir/s.db"},
	} {
		out, _, err := execute(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", strings.Join(c.args, " "), err, c.want)
		}
		if out != "" {
			t.Errorf("%s: the job ran: %q", strings.Join(c.args, " "), out)
		}
	}
}

// The samples whose report checks their results against a direct
// computation run with checkpoints in a store; a second run on the same
// store starts afresh (a job that ran to its end forgets its checkpoints)
// and reports the same.
func TestRunSamplesWithCheckpoints(t *testing.T) {
	for _, args := range [][]string{
		{"wordcount", "--lines", "20000"},
		{"clickstream"},
		{"fraud"},
	} {
		store := filepath.Join(t.TempDir(), "s.db")
		var reports []string
		for range 2 {
			out, errOut, err := execute(t, append(append([]string{"run"}, args...), "--progress", "0", "--store", store, "--checkpoints", "20ms")...)
			if err != nil {
				t.Fatalf("run %v: %v\n%s", args, err, errOut)
			}
			if !strings.Contains(errOut, "afresh: no checkpoint of it in "+store) {
				t.Errorf("run %v: stderr does not say it started afresh:\n%s", args, errOut)
			}
			reports = append(reports, out)
		}
		if reports[0] != reports[1] || reports[0] == "" {
			t.Errorf("run %v: reports differ:\n%s\n---\n%s", args, reports[0], reports[1])
		}
	}
}
