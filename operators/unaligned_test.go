package operators_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/persistence"
)

// uaCheckpoints is memCheckpoints that also counts the checkpoints stored
// with in-flight records (unaligned ones that overtook records).
type uaCheckpoints struct {
	memCheckpoints
	withChannels int
	records      int // bytes of in-flight records stored, in all
}

func (u *uaCheckpoints) Complete(ctx context.Context, job string, cp persistence.Checkpoint) error {
	if err := u.memCheckpoints.Complete(ctx, job, cp); err != nil {
		return err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(cp.Channels) > 0 {
		u.withChannels++
		for _, v := range cp.Channels {
			u.records += len(v)
		}
	}
	return nil
}

func (u *uaCheckpoints) channelCheckpoints() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.withChannels
}

func (u *uaCheckpoints) latestHasChannels(job string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.latest[job].Channels) > 0
}

// spin is deterministic CPU work per record (no sleep): it makes the
// consumer slower than the source, so that its inputs stay full.
func spin(v int64, rounds int) bool {
	x := uint64(v) | 1
	for range rounds {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x == 0 // never: xorshift does not reach 0 from a state that is not
}

// slowCounting is countingTopology with two source instances, a slow stage
// after the count (in the count's chain), small batches and a small
// capacity: the count's inputs (two channels each) are full all the time
// (Block back-pressure up to the sources). work is the rounds of spin per
// record; with spill the count's input has the Spill policy, so the
// sources run ahead and the spill holds most of the in-flight records.
func slowCounting(store persistence.CheckpointStore, dir string, n int64, work int, spill bool, interval time.Duration, opts ...operators.TopologyOption) *operators.Topology {
	opts = append([]operators.TopologyOption{operators.Checkpoints(interval), operators.BatchSize(16), operators.Capacity(64)}, opts...)
	if store != nil { // nil: the system's store
		opts = append(opts, operators.CheckpointStore(store))
	}
	t := operators.NewTopology("counting-slow", opts...)
	src := operators.Source(t, "numbers", operators.Generate(n, func(i int64) int64 { return i }), operators.Parallelism(2))
	keys := operators.Map(src, "key", func(v int64) string { return fmt.Sprintf("k%02d", v*7%23) })
	by := operators.KeyBy(keys, "by-key", func(k string) string { return k }, operators.Parallelism(3))
	var copts []operators.AggregateOption
	if spill { // the count's input spills instead of back-pressuring
		copts = append(copts, operators.Input(mailbox.Spill(64, mailbox.SpillOptions{})))
	}
	counts := operators.Count(by, "count", copts...)
	slow := operators.Map(counts, "slow", func(kv operators.KV[string, int64]) operators.KV[string, int64] {
		if spin(kv.Value, work) { // the work, without changing the count
			kv.Value++
		}
		return kv
	})
	operators.Sink(slow, "out", operators.File(filepath.Join(dir, "counts"), func(kv operators.KV[string, int64]) string {
		return fmt.Sprintf("%s=%d", kv.Key, kv.Value)
	}, operators.FileOverwrite()))
	return t
}

// TestUnalignedCheckpointsExactlyOnce runs the slow counting job under
// back-pressure with unaligned checkpoints, stops it hard (no drain) three
// times after a checkpoint that holds in-flight records completed, and
// starts it again from its last checkpoint each time; the output equals an
// uninterrupted run's (as sets of lines: the two sources interleave
// differently from run to run, and every running count of every key must
// be there exactly once). Checkpoints that overtook records are counted: if
// the barriers waited behind the records, none would hold any.
func TestUnalignedCheckpointsExactlyOnce(t *testing.T) {
	t.Run("block", func(t *testing.T) { testUnalignedExactlyOnce(t, false) })
	t.Run("spill", func(t *testing.T) { testUnalignedExactlyOnce(t, true) })
}

func testUnalignedExactlyOnce(t *testing.T, spill bool) {
	const n, work = 12_000, 6_000 // about 10 µs a record: room for three stops before the end
	sys, ctx := newSystem(t)
	cleanDir := t.TempDir()
	runToEnd(t, sys, ctx, slowCounting(&uaCheckpoints{}, cleanDir, n, work, spill, time.Hour))
	want := sortedParts(t, cleanDir)

	dir := t.TempDir()
	store := &uaCheckpoints{}
	stops, restoredChannels := 0, 0
	for attempt := 0; ; attempt++ {
		if attempt > 50 {
			t.Fatal("the job never finished")
		}
		if store.latestHasChannels("counting-slow") {
			restoredChannels++
		}
		run, err := sys.Run(ctx, slowCounting(store, dir, n, work, spill, 5*time.Millisecond, operators.UnalignedCheckpoints()))
		if err != nil {
			t.Fatal(err)
		}
		if stops < 3 {
			target := store.channelCheckpoints() + 1
			waitFor(t, "an unaligned checkpoint with in-flight records", func() bool {
				select {
				case <-run.Done():
					return true
				default:
				}
				return store.channelCheckpoints() >= target
			})
			if err := run.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			if err := run.Wait(ctx); errors.Is(err, operators.ErrAborted) {
				stops++
				continue
			}
		}
		if err := run.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		break
	}
	if stops == 0 || restoredChannels == 0 {
		t.Fatalf("%d stops, %d restores from a checkpoint with in-flight records: the test proved nothing", stops, restoredChannels)
	}
	if got := sortedParts(t, dir); got != want {
		t.Fatalf("output after %d stops differs from the uninterrupted run (%d vs %d bytes)", stops, len(got), len(want))
	}
	t.Logf("%d stops, %d restores with in-flight records; %d checkpoints held in-flight records (%d bytes)", stops, restoredChannels, store.withChannels, store.records)
}

// With AlignmentTimeout, checkpoints start aligned and those that do not
// align in time under back-pressure switch to unaligned: some hold
// in-flight records, and the output is exact.
func TestAlignmentTimeoutSwitchesToUnaligned(t *testing.T) {
	const n, work, spill = 4_000, 62_500, false // about 100 µs a record: 10 ms to drain a full input
	sys, ctx := newSystem(t)
	cleanDir := t.TempDir()
	runToEnd(t, sys, ctx, slowCounting(&uaCheckpoints{}, cleanDir, n, work, spill, time.Hour))
	want := sortedParts(t, cleanDir)

	dir := t.TempDir()
	store := &uaCheckpoints{}
	run := runToEnd(t, sys, ctx, slowCounting(store, dir, n, work, spill, 5*time.Millisecond, operators.AlignmentTimeout(time.Millisecond)))
	if store.channelCheckpoints() == 0 {
		t.Fatalf("no checkpoint switched to unaligned (%d completed)", operators.CheckpointStatsOf(run).Completed)
	}
	if got := sortedParts(t, dir); got != want {
		t.Fatalf("output differs from the uninterrupted run (%d vs %d bytes)", len(got), len(want))
	}
	t.Logf("%d checkpoints completed, %d switched to unaligned and held in-flight records", operators.CheckpointStatsOf(run).Completed, store.channelCheckpoints())
}

// What unaligned checkpoints cannot take yet is refused at the start,
// naming the operator and what to do.
func TestUnalignedCheckpointsRefused(t *testing.T) {
	sys, ctx := newSystem(t)
	drops := operators.NewTopology("ua-drops", operators.Checkpoints(time.Second), operators.UnalignedCheckpoints(), operators.CheckpointStore(&memCheckpoints{}))
	src := operators.Source(drops, "numbers", operators.Generate(10, func(i int64) int64 { return i }))
	operators.Sink(operators.Map(src, "double", func(v int64) int64 { return 2 * v }, operators.Input(mailbox.DropNewest(1024))), "out", discard[int64]())
	if _, err := sys.Run(ctx, drops); err == nil || !containsAll(err.Error(), "UnalignedCheckpoints", `"double"`, "drop-newest", "Block or Spill") {
		t.Fatalf("Run with a DropNewest input = %v, want a refusal naming the operator and the policies that work", err)
	}
	bare := operators.NewTopology("ua-bare", operators.AlignmentTimeout(time.Second))
	operators.Sink(operators.Source(bare, "numbers", operators.Generate(10, func(i int64) int64 { return i })), "out", discard[int64]())
	if _, err := sys.Run(ctx, bare); err == nil || !containsAll(err.Error(), "AlignmentTimeout needs Checkpoints") {
		t.Fatalf("Run with AlignmentTimeout and no checkpoints = %v, want a refusal", err)
	}
}

// Unaligned checkpoints with live changes of an input (engine.SetInput,
// the admin API's): twice, the slow counting job's count switches from
// Block to Spill and back while unaligned checkpoints go on (in the
// system's store, so a spilled input is recorded by its range), two
// checkpoints after each change, then the job is stopped hard and
// restored; the output equals an uninterrupted run's. A change to a
// dropping policy is refused, naming why.
func TestUnalignedCheckpointsWithLiveInputChanges(t *testing.T) {
	const work = 1_800
	sys, ctx := newSystem(t)
	// The job must outlast two rounds of changes and checkpoints: sized by
	// the machine's speed (without -race 12 000 records ended before the
	// first change), it runs for at least 2 s uninterrupted. Each size
	// after the first is scaled to about 2.5 s from the run before (by 2
	// at least): quadrupling overshot to runs of up to 8 s, and the test,
	// its reruns after the stops and the system's stop all share one
	// 30-s deadline (exceeded once, in CI's pass without -race beside the
	// cluster's tests).
	n := int64(12_000)
	var want string
	for {
		cleanDir := t.TempDir()
		start := time.Now()
		runToEnd(t, sys, ctx, slowCounting(&uaCheckpoints{}, cleanDir, n, work, false, time.Hour))
		took := time.Since(start)
		if took >= 2*time.Second || n >= 12_000*256 {
			want = sortedParts(t, cleanDir)
			break
		}
		n = int64(float64(n) * max(2, 2.5*float64(time.Second)/float64(max(took, time.Millisecond))))
	}

	dir := t.TempDir()
	changes := []mailbox.Config{mailbox.Spill(64, mailbox.SpillOptions{}), mailbox.Block(64)}
	const rounds = 2
	inFlight, refs, stops := 0, 0, 0
	for attempt := 0; ; attempt++ {
		if attempt > 50 {
			t.Fatal("the job never finished")
		}
		run, err := sys.Run(ctx, slowCounting(nil, dir, n, work, false, 5*time.Millisecond, operators.UnalignedCheckpoints()))
		if err != nil {
			t.Fatal(err)
		}
		st := operators.CheckpointStatsOf(run)
		inFlight, refs = inFlight+st.RestoredInFlight, refs+st.RestoredSpillRefs
		if attempt == 0 {
			err := engine.SetInput(ctx, run, "count", mailbox.DropNewest(64))
			if !errors.Is(err, engine.ErrNoLiveChange) || !containsAll(err.Error(), `"count"`, "unaligned", "drop-newest", "Block or Spill") {
				t.Fatalf("SetInput(DropNewest) under unaligned checkpoints = %v, want a refusal naming the operator and the policies that work", err)
			}
		}
		if stops < rounds {
			for _, c := range changes {
				if err := engine.SetInput(ctx, run, "count", c); err != nil {
					t.Fatalf("SetInput(%s): %v", c.Overflow, err)
				}
				// Two more checkpoints under the new policy.
				target := operators.CheckpointStatsOf(run).LastID + 2
				waitFor(t, "two checkpoints after the change", func() bool {
					select {
					case <-run.Done():
						return true
					default:
					}
					return operators.CheckpointStatsOf(run).LastID >= target
				})
			}
			if err := run.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			if err := run.Wait(ctx); errors.Is(err, operators.ErrAborted) {
				stops++
				continue
			}
		}
		if err := run.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		break
	}
	if stops < rounds || inFlight == 0 {
		t.Fatalf("%d stops, %d channels of in-flight records restored: the test proved nothing", stops, inFlight)
	}
	if got := sortedParts(t, dir); got != want {
		t.Fatalf("output after %d live changes and stops differs from the uninterrupted run (%d vs %d bytes)", stops, len(got), len(want))
	}
	t.Logf("%d rounds of live changes to Spill and back, each followed by a hard stop; %d channels of in-flight records restored (%d from a spill range)", stops, inFlight, refs)
}

// CheckpointStats shows unaligned checkpoints as such, in progress and
// completed: with the count's input spilling, some held in-flight records
// as a range of the spill queue (SpillRanges) rather than a copy.
func TestUnalignedCheckpointStats(t *testing.T) {
	const n, work = 12_000, 1_800
	sys, ctx := newSystem(t)
	run, err := sys.Run(ctx, slowCounting(nil, t.TempDir(), n, work, true, 5*time.Millisecond, operators.UnalignedCheckpoints()))
	if err != nil {
		t.Fatal(err)
	}
	var inProgress operators.InProgressCheckpoint
	waitFor(t, "an unaligned checkpoint in progress", func() bool {
		for _, p := range operators.CheckpointStatsOf(run).InProgress {
			if p.Unaligned {
				inProgress = p
				return true
			}
		}
		return false
	})
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	st := operators.CheckpointStatsOf(run)
	unaligned, ranges := 0, 0
	for _, h := range st.History {
		if h.Unaligned {
			unaligned++
		}
		if h.SpillRanges > 0 {
			if !h.Unaligned {
				t.Fatalf("checkpoint %+v holds spill ranges but is not unaligned", h)
			}
			ranges++
		}
	}
	if unaligned == 0 || ranges == 0 {
		t.Fatalf("of %d checkpoints in the history, %d unaligned and %d with spill ranges: want some of each", len(st.History), unaligned, ranges)
	}
	t.Logf("in progress: %+v; history: %d checkpoints, %d unaligned, %d with spill ranges", inProgress, len(st.History), unaligned, ranges)
}

// An operator whose input spills but whose output is back-pressured (a
// slower operator after it, on a Block edge) holds its mailbox instead of
// taking the input into memory of its own: the records it has taken and
// not processed stay a handful of batches while its spill grows.
func TestSpillHeldBehindBackpressuredOutput(t *testing.T) {
	const n, work = 100_000, 180
	sys, ctx := newSystem(t)
	top := operators.NewTopology("held", operators.BatchSize(16))
	src := operators.Source(top, "numbers", operators.Generate(n, func(i int64) int64 { return i }))
	by := operators.KeyBy(src, "by-key", func(v int64) string { return fmt.Sprintf("k%02d", v%23) })
	counts := operators.Count(by, "count", operators.Input(mailbox.Spill(64, mailbox.SpillOptions{})))
	slow := operators.Map(counts, "slow", func(kv operators.KV[string, int64]) operators.KV[string, int64] {
		if spin(kv.Value, work) {
			kv.Value++
		}
		return kv
	}, operators.NoFusion(), operators.Input(mailbox.Block(64)))
	operators.Sink(slow, "out", discard[operators.KV[string, int64]]())
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	maxStashed, maxSpill, samples := 0, int64(0), 0
	tick := time.NewTicker(time.Millisecond) // samples the bound while the job runs; waits on nothing
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-run.Done():
			done = true
		case <-tick.C:
			for _, s := range operators.InstanceStatsOf(run) {
				if s.Policy == "spill" {
					samples++
					maxStashed, maxSpill = max(maxStashed, s.Stashed), max(maxSpill, s.SpillPending)
				}
			}
		}
	}
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if maxSpill < n/10 {
		t.Fatalf("the count's spill held %d records at most of %d (%d samples): its records waited elsewhere", maxSpill, n, samples)
	}
	if maxStashed > 8 {
		t.Fatalf("the count took up to %d envelopes from its mailbox into memory while its output was back-pressured", maxStashed)
	}
	t.Logf("%d samples: the spill held up to %d records, the count up to %d envelopes taken and not processed", samples, maxSpill, maxStashed)
}

// TestUnalignedCheckpointKeepsTraces: the in-flight records an unaligned
// checkpoint holds keep their marks (the checkpoint encodes them as the
// wire does), so a sampled record restored from it goes on in its trace:
// after the restart some count spans are children of key spans of the
// first run.
func TestUnalignedCheckpointKeepsTraces(t *testing.T) {
	const n, work = 6_000, 1_800
	sys, ctx, rec := tracedSystem(t)
	dir := t.TempDir()
	store := &uaCheckpoints{}
	// Stop the job right after an unaligned checkpoint with in-flight
	// records, until the last one before the stop holds some.
	for attempt := 0; !store.latestHasChannels("counting-slow"); attempt++ {
		if attempt == 20 {
			t.Fatal("20 stops, none right after a checkpoint with in-flight records")
		}
		run, err := sys.Run(ctx, slowCounting(store, dir, n, work, false, 5*time.Millisecond, operators.UnalignedCheckpoints(), operators.TraceRatio(1)))
		if err != nil {
			t.Fatal(err)
		}
		target := store.channelCheckpoints() + 1
		waitFor(t, "an unaligned checkpoint with in-flight records", func() bool { return store.channelCheckpoints() >= target })
		if err := run.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := run.Wait(ctx); !errors.Is(err, operators.ErrAborted) {
			t.Fatalf("the stopped run: %v, want ErrAborted", err)
		}
	}
	before := rec.Ended()
	first := map[trace.SpanID]bool{}
	for _, s := range before {
		if s.Name() == "key" {
			first[s.SpanContext().SpanID()] = true
		}
	}
	runToEnd(t, sys, ctx, slowCounting(store, dir, n, work, false, time.Hour, operators.UnalignedCheckpoints(), operators.TraceRatio(1)))
	continued := 0
	for _, s := range rec.Ended()[len(before):] { // the last run's spans
		if s.Name() == "count" && first[s.Parent().SpanID()] {
			continued++
		}
	}
	if continued == 0 {
		t.Fatal("no count span after the restart is a child of a key span of the first run: the restored in-flight records lost their traces")
	}
	t.Logf("%d restored in-flight records went on in their traces", continued)
}
