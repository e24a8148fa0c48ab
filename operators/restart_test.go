package operators_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/supervision"
)

// failingTopology is countingTopology with a map that panics on record
// failAt whenever fail() says so.
func failingTopology(dir string, n, failAt int64, fail func() bool, opts ...operators.TopologyOption) *operators.Topology {
	t := operators.NewTopology("restarting", append([]operators.TopologyOption{operators.BatchSize(32)}, opts...)...)
	src := operators.Source(t, "numbers", operators.Generate(n, func(i int64) int64 { return i }))
	checked := operators.Map(src, "check", func(v int64) int64 {
		if v == failAt && fail() {
			panic(fmt.Sprintf("record %d", v))
		}
		return v
	})
	keys := operators.Map(checked, "key", func(v int64) string { return fmt.Sprintf("k%02d", v*7%23) })
	by := operators.KeyBy(keys, "by-key", func(k string) string { return k }, operators.Parallelism(3))
	counts := operators.Count(by, "count")
	operators.Sink(counts, "out", operators.File(filepath.Join(dir, "counts"), func(kv operators.KV[string, int64]) string {
		return fmt.Sprintf("%s=%d", kv.Key, kv.Value)
	}))
	return t
}

var quickBackoff = supervision.Backoff{Initial: time.Millisecond, Max: 4 * time.Millisecond, Multiplier: 2, Jitter: supervision.NoJitter}

// TestRestartFromCheckpointIsExactlyOnce: an operator fails once in the
// middle of the stream; the job restarts from its last checkpoint and its
// output equals that of a run without the failure.
func TestRestartFromCheckpointIsExactlyOnce(t *testing.T) {
	const n = 200_000
	sys, ctx := newSystem(t)
	cleanDir := t.TempDir()
	runToEnd(t, sys, ctx, failingTopology(cleanDir, n, -1, func() bool { return false }, operators.Checkpoints(time.Hour), operators.CheckpointStore(&memCheckpoints{})))
	want := readParts(t, cleanDir)

	dir := t.TempDir()
	store := &memCheckpoints{}
	var failed atomic.Bool
	top := failingTopology(dir, n, n*3/4, func() bool { return store.count() > 0 && failed.CompareAndSwap(false, true) },
		operators.Checkpoints(2*time.Millisecond), operators.CheckpointStore(store),
		operators.RestartOnFailure(quickBackoff, 3, time.Minute))
	run := runToEnd(t, sys, ctx, top)
	st := operators.CheckpointStatsOf(run)
	if !failed.Load() || st.Restarts != 1 {
		t.Fatalf("failed %v, restarts %d: the failure did not happen once", failed.Load(), st.Restarts)
	}
	if st.RestoredFrom == 0 {
		t.Fatalf("the restart did not restore a checkpoint (stats %+v)", st)
	}
	if len(st.RestartCauses) != 1 || !strings.Contains(st.RestartCauses[0].Err, fmt.Sprintf("record %d", n*3/4)) {
		t.Errorf("restart causes %+v, want the one failure", st.RestartCauses)
	}
	// The history: the newest completed checkpoints, in order, the last
	// being LastID, each with the state it stored.
	h := st.History
	if len(h) != int(min(st.Completed, 64)) || len(h) == 0 || h[len(h)-1].ID != st.LastID {
		t.Fatalf("history of %d checkpoints for %d completed, last %d: %+v", len(h), st.Completed, st.LastID, h)
	}
	for i, c := range h {
		if c.Size <= 0 || c.Instances == 0 || c.Duration < 0 || c.Time.IsZero() || i > 0 && c.ID <= h[i-1].ID {
			t.Errorf("history[%d] = %+v (before it %+v)", i, c, h[max(i-1, 0)])
		}
	}
	if got := readParts(t, dir); got != want {
		t.Fatalf("output after a restart from checkpoint %d differs from the run without failure (%d vs %d bytes)", st.RestoredFrom, len(got), len(want))
	}
}

// TestFlappingOperatorBacksOffAndGivesUp: an operator that fails every time
// is restarted on the backoff's schedule until its budget is spent; then the
// job fails with the reason. The restart timer is injected, so the test
// checks the delays asked for without waiting for them.
func TestFlappingOperatorBacksOffAndGivesUp(t *testing.T) {
	sys, ctx := newSystem(t)
	var mu sync.Mutex
	var asked []time.Duration
	timer := operators.WithTimer(func(d time.Duration, f func()) func() bool {
		mu.Lock()
		asked = append(asked, d)
		mu.Unlock()
		f() // the backoff elapses at once
		return func() bool { return false }
	})
	backoff := supervision.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 3, Jitter: supervision.NoJitter}
	top := failingTopology(t.TempDir(), 10_000, 500, func() bool { return true },
		operators.RestartOnFailure(backoff, 3, time.Hour), timer)
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	err = run.Wait(ctx)
	var oe *operators.OperatorError
	if !errors.As(err, &oe) || oe.Operator != "check" || !strings.Contains(err.Error(), "3 restarts") || !strings.Contains(err.Error(), "record 500") {
		t.Fatalf("Wait() = %v, want the operator's failure after the budget of 3 restarts", err)
	}
	want := []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, 900 * time.Millisecond}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(asked, want) {
		t.Fatalf("restart delays %v, want %v", asked, want)
	}
	st := operators.CheckpointStatsOf(run)
	if st.Restarts != 3 || !slices.Equal(st.RestartDelays, want) {
		t.Fatalf("stats: %d restarts %v, want 3 %v", st.Restarts, st.RestartDelays, want)
	}
	if len(st.RestartCauses) != 3 {
		t.Fatalf("restart causes %+v, want 3", st.RestartCauses)
	}
	for i, c := range st.RestartCauses {
		if !strings.Contains(c.Err, "record 500") || c.Delay != want[i] || c.Time.IsZero() {
			t.Errorf("restart cause %d: %+v, want the failure of record 500 after %v", i, c, want[i])
		}
	}
}
