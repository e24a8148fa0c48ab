package operators_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/crashtest"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
)

// crashChildLateEnv: the crash child runs lateWindows with unaligned
// checkpoints, its window's input under Block ("block") or Spill
// ("spill").
const crashChildLateEnv = "SLUICE_CRASH_CHILD_LATE"

// The late-windows crash job: records, and spin rounds per record in the
// window (slower than the source, so its input stays full).
const lateRecords, lateWork = 80_000, 6_000

// lateEventTime is record i's event time in milliseconds. Most records are
// in order (i ms); from record 1000 on, every tenth is delayed, one in
// three past the allowed lateness (250 ms) of its 100 ms window, one in
// three within it (its window fired: it fires again). The watermark a
// record meets is that of the batches before it (OutOfOrderness 4 ms,
// batches of 16): between i-23 and i-5 ms. A delayed record's window ends
// at least 48 ms (within) or 128 ms (past) before that, so whether it is
// late does not depend on where the batches fell, and every uninterrupted
// run finds the same records late. A restored run that judged the
// in-flight records it replays against an older watermark (the one of its
// checkpoint, 100-250 ms of event time before theirs under these queues)
// would find some of them on time.
func lateEventTime(i int64) int64 {
	if i < 1000 || i%10 != 3 {
		return i
	}
	switch (i / 10) % 3 {
	case 0: // past the allowed lateness: its window ended 400-500 ms before
		return (i-400)/100*100 - 1 - i%50
	case 1: // within the allowed lateness: its window ended 70-170 ms before
		return (i-70)/100*100 - 1 - i%50
	}
	return i
}

// lateWindows: one source (every window instance has one input channel,
// so the order of its records and watermarks is the source's), event
// time with out-of-order records, a slow event-time tumbling window count
// with allowed lateness on two instances, and its results and late
// records (its side output) in one file sink.
func lateWindows(dir string, n int64, work int, spill bool, interval time.Duration, opts ...operators.TopologyOption) *operators.Topology {
	opts = append([]operators.TopologyOption{operators.Checkpoints(interval), operators.BatchSize(16), operators.Capacity(256)}, opts...)
	t := operators.NewTopology("late-windows", opts...)
	src := operators.Source(t, "events", operators.Generate(n, func(i int64) int64 { return i }))
	ts := operators.Timestamps(src, "ts", func(i int64) time.Time { return time.UnixMilli(lateEventTime(i)) },
		operators.OutOfOrderness(4*time.Millisecond))
	by := operators.KeyBy(ts, "by-key", func(i int64) string { return fmt.Sprintf("k%d", i%4) }, operators.Parallelism(2))
	wopts := []operators.WindowOption{operators.AllowedLateness(250 * time.Millisecond)}
	if spill {
		wopts = append(wopts, operators.Input(mailbox.Spill(64, mailbox.SpillOptions{})))
	}
	win := operators.WindowAggregate(by, "win", operators.Tumbling(100*time.Millisecond),
		func() int64 { return 0 },
		func(a, i int64) int64 {
			if spin(i, work) { // the work, without changing the count
				a++
			}
			return a + 1
		}, nil, wopts...)
	late := operators.LateRecords(by, win, "late")
	results := operators.Map(win, "fmt-win", func(w operators.Windowed[string, int64]) string {
		return fmt.Sprintf("window %s %d %d", w.Key, w.Start.UnixMilli(), w.Value)
	})
	lates := operators.Map(late, "fmt-late", func(i int64) string { return fmt.Sprintf("late %d", i) })
	operators.Sink(operators.Merge("lines", results, lates), "out", operators.File(filepath.Join(dir, "lines"),
		func(s string) string { return s }, operators.FileOverwrite()))
	return t
}

// lateLines is every line of the sink's files in dir, sorted (the window
// instances and the late records interleave differently from run to
// run), and how many say a record was late and a window fired again.
func lateLines(t *testing.T, dir string) (lines []string, late, refired int) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "lines*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no output in %s: %v", dir, err)
	}
	fired := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if l == "" {
				continue
			}
			lines = append(lines, l)
			if strings.HasPrefix(l, "late ") {
				late++
			} else if f := strings.Fields(l); len(f) == 4 {
				fired[f[1]+" "+f[2]]++
			}
		}
	}
	for _, n := range fired {
		refired += n - 1
	}
	slices.Sort(lines)
	return lines, late, refired
}

// TestUnalignedCheckpointLateRecords is the crash test of an event-time
// job under unaligned checkpoints: the windowed count of lateWindows (out
// of order input, allowed lateness, a side output of late records), its
// input full under Block back-pressure or spilling, is SIGKILLed crashKills times (20, 8 under -race)
// at random points after a checkpoint and restarted from its last
// checkpoint each time, whose overtaken in-flight records (and the
// watermarks among them) it replays first. The output, which records were
// late and how often each window fired, must equal an uninterrupted run's:
// a restored instance must judge every replayed record against the
// watermark it met in the first run.
func TestUnalignedCheckpointLateRecords(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: child processes")
	}
	t.Run("block", func(t *testing.T) { testUnalignedLate(t, "block") })
	t.Run("spill", func(t *testing.T) { testUnalignedLate(t, "spill") })
}

func testUnalignedLate(t *testing.T, policy string) {
	rng := crashtest.Seed(t, "SLUICE_CRASH_SEED")
	env := crashChildLateEnv + "=" + policy
	reference := t.TempDir()
	ref := runChild(t, reference, -1, env)
	if !ref.Done {
		t.Fatal("the reference run did not finish")
	}
	want, late, refired := lateLines(t, filepath.Join(reference, "out"))
	// Every third delayed record is late, every third fires its window
	// again: the test proves nothing without them.
	if wantLate := int((lateRecords - 1000) / 30); late < wantLate-1 || refired < wantLate-1 {
		t.Fatalf("the uninterrupted run found %d records late and fired %d windows again, want about %d each", late, refired, wantLate)
	}
	crashInFlight, crashSpillRefs = 0, 0
	kills, newest := crashRounds(t, rng, ref.Took, func(dir string) {
		got, gotLate, gotRefired := lateLines(t, filepath.Join(dir, "out"))
		if !slices.Equal(got, want) {
			var diff []string
			for _, l := range got {
				if _, ok := slices.BinarySearch(want, l); !ok && len(diff) < 10 {
					diff = append(diff, "+ "+l)
				}
			}
			for _, l := range want {
				if _, ok := slices.BinarySearch(got, l); !ok && len(diff) < 20 {
					diff = append(diff, "- "+l)
				}
			}
			t.Fatalf("after kills the output in %s differs from the run never killed: %d lines, %d late, %d fired again (want %d, %d, %d); first differences:\n%s",
				dir, len(got), gotLate, gotRefired, len(want), late, refired, strings.Join(diff, "\n"))
		}
	}, env)
	checkUnalignedRestores(t, policy, kills, newest)
	t.Logf("%s: %d kills, restores up to checkpoint %d, %d channels of in-flight records restored (%d from a spill range); %d lines, %d records late, %d windows fired again, as in the run never killed",
		policy, kills, newest, crashInFlight, crashSpillRefs, len(want), late, refired)
}
