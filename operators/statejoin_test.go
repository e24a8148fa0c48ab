package operators_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/clock/clocktest"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/operators/optest"
	"github.com/sluicehq/sluice/persistence"
)

// smallBackends are the state backends the join and Process tests run under:
// the disk backend with a cache of a few hundred entries, so that most
// keys' buffers are read from and written back to pebble.
func smallBackends(t *testing.T) map[string]operators.StateSpec {
	return map[string]operators.StateSpec{
		"memory": operators.MemoryState(),
		"disk":   operators.DiskState(t.TempDir(), 16<<10),
	}
}

func runJoinOn(t *testing.T, st operators.StateSpec, left, right []tev, build func(l, r operators.Stream[tev]) operators.Stream[pair]) []pair {
	t.Helper()
	sys, ctx := newSystem(t)
	top := operators.NewTopology(t.Name(), operators.BatchSize(8), operators.StateBackend(st))
	l := operators.Timestamps(operators.Source(top, "left", operators.FromSlice(left)), "ts-left", tevTime)
	r := operators.Timestamps(operators.Source(top, "right", operators.FromSlice(right)), "ts-right", tevTime)
	col := operators.NewCollector[pair]()
	operators.Sink(build(l, r), "out", col)
	runToEnd(t, sys, ctx, top)
	got := col.Items()
	slices.SortFunc(got, comparePairs)
	return got
}

// The interval and unbounded joins give the model's pairs on either
// backend, over 300 keys (on disk, far more than its cache holds).
func TestJoinsOnDisk(t *testing.T) {
	left, right := randomEvents(11, 4000, 300, 0), randomEvents(12, 4000, 300, 0)
	lower, upper := int64(-3000), int64(2000)
	cases := map[string]struct {
		match func(l, r tev) bool
		build func(l, r operators.Stream[tev]) operators.Stream[pair]
	}{
		"interval": {func(l, r tev) bool { return r.T >= l.T+lower && r.T <= l.T+upper }, func(l, r operators.Stream[tev]) operators.Stream[pair] {
			return operators.IntervalJoin(l, r, "join", tevKey, tevKey, time.Duration(lower)*time.Millisecond, time.Duration(upper)*time.Millisecond, mkPair,
				operators.Parallelism(2))
		}},
		"unbounded": {func(l, r tev) bool { return true }, func(l, r operators.Stream[tev]) operators.Stream[pair] {
			return operators.Join(l, r, "join", tevKey, tevKey, mkPair, operators.Parallelism(2))
		}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			var want []pair
			for _, l := range left {
				for _, r := range right {
					if l.K == r.K && c.match(l, r) {
						want = append(want, mkPair(l, r))
					}
				}
			}
			slices.SortFunc(want, comparePairs)
			if len(want) < 1000 {
				t.Fatalf("the model has %d pairs: too few to test", len(want))
			}
			for b, st := range smallBackends(t) {
				if got := runJoinOn(t, st, left, right, c.build); !slices.Equal(got, want) {
					t.Fatalf("%s: %d pairs, model %d: %s", b, len(got), len(want), firstDiff(got, want))
				}
			}
		})
	}
}

// Process with per-key state, event-time and processing-time timers on a
// fake clock, checkpointed and restarted twice, gives the same output on
// disk (a cache of a few hundred keys) as in memory.
func TestProcessOnDisk(t *testing.T) {
	type state struct {
		N    int
		Last int64
	}
	run := func(st operators.StateSpec) []string {
		clock := clocktest.NewManual(time.Unix(1000, 0))
		h := optest.New(t, func(in operators.Stream[tev]) operators.Stream[string] {
			return operators.Process(operators.KeyBy(in, "by-key", tevKey), "proc",
				func(c *operators.ProcessContext[string, state, string], e tev) {
					s := c.State()
					if s.N == 0 {
						c.ProcessingTimer(clock.Now().Add(time.Minute))
					}
					s.N++
					s.Last = e.T
					c.Timer(time.UnixMilli(e.T/1000*1000 + 999))
				},
				func(c *operators.ProcessContext[string, state, string]) {
					s := c.State()
					if c.IsProcessingTimer() {
						c.Emit(fmt.Sprintf("p %s n=%d", c.Key(), s.N))
						return
					}
					c.Emit(fmt.Sprintf("e %s n=%d last=%d at=%d", c.Key(), s.N, s.Last, c.Time().UnixMilli()))
					if s.N%3 == 0 {
						c.Clear()
					}
				})
		}, optest.WithClock(clock), optest.TopologyOptions(operators.StateBackend(st)))
		evs := randomEvents(21, 1500, 400, 0)
		var out []string
		for i, e := range evs {
			h.PushAt(e, time.UnixMilli(e.T))
			if i%500 == 499 {
				h.Watermark(time.UnixMilli(e.T - 2000))
				h.Sync()
				out = append(out, h.Output()...) // all before the checkpoint Sync took
				h = h.Restart()
				if i == 999 {
					// the processing-time timers of the keys seen so far,
					// restored from the checkpoint
					// (one per key: the clock stood still, so each key's
					// are at the same time)
					keys := map[string]bool{}
					for _, e := range evs[:1000] {
						keys[e.K] = true
					}
					h.Sync() // the restored job's timers are armed
					clock.Advance(2 * time.Minute)
					out = append(out, h.WaitOutput(len(keys))...)
					h.Sync()
					if n := len(h.Output()); n != len(keys) {
						t.Fatalf("%d outputs after the clock moved, want %d processing-time timers", n, len(keys))
					}
					h = h.Restart() // Output starts empty again
				}
			}
		}
		return append(out, h.Finish()...)
	}
	var results [][]string
	for _, b := range []string{"memory", "disk"} {
		got := run(smallBackends(t)[b])
		slices.Sort(got)
		results = append(results, got)
	}
	if len(results[0]) < 1000 {
		t.Fatalf("memory: %d results, too few", len(results[0]))
	}
	if !slices.Equal(results[0], results[1]) {
		t.Fatalf("disk: %d results, memory %d: %s", len(results[1]), len(results[0]), firstDiff(results[1], results[0]))
	}
}

// TestStopWithSavepointProcessDisk: a Process counting per key in its
// state on the disk backend (a cache of a few hundred keys), with an
// event-time timer per key that emits the count at the end, stopped with
// a savepoint mid-stream; the savepoint copies the Process's table (inside
// its state bundle) so the state directory can go, and a job started from
// it at parallelism 3 emits every key's full count once.
func TestStopWithSavepointProcessDisk(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sys, err := actors.NewSystem(actors.Config{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop(ctx)
	const n, keys = 100_000, 2_000
	p := newPace(t)
	var mu sync.Mutex
	out := map[int64]int64{}
	emits := map[int64]int{}
	stateDir := t.TempDir()
	build := func(paced bool) *operators.Topology {
		top := operators.NewTopology("disk-process", operators.BatchSize(64), operators.StateBackend(operators.DiskState(stateDir, 16<<10)))
		by := operators.KeyBy(p.stream(top, n, keys, paced), "by", func(v int64) int64 { return v }, operators.Parallelism(2))
		type st struct{ N int64 }
		counts := operators.Process(by, "count", func(c *operators.ProcessContext[int64, st, operators.KV[int64, int64]], _ int64) {
			s := c.State()
			if s.N == 0 {
				c.Timer(time.Unix(0, 0)) // fires at the end (no event times)
			}
			s.N++
		}, func(c *operators.ProcessContext[int64, st, operators.KV[int64, int64]]) {
			c.Emit(operators.KV[int64, int64]{Key: c.Key(), Value: c.State().N})
		})
		operators.Sink(counts, "sink", operators.SinkFunc(func(kv operators.KV[int64, int64]) error {
			mu.Lock()
			out[kv.Key] += kv.Value
			emits[kv.Key]++
			mu.Unlock()
			return nil
		}))
		return top
	}
	job, err := operators.Start(ctx, sys, build(true), operators.Checkpoints(time.Hour), operators.CheckpointStore(persistence.NewMemoryCheckpointStore()))
	if err != nil {
		t.Fatal(err)
	}
	p.await(t, 20_000)
	info, err := job.StopWithSavepoint(ctx, t.TempDir()+"/sp")
	if err != nil {
		t.Fatal(err)
	}
	if at := p.passed.Load(); at >= n {
		t.Fatalf("the job read all %d records before the stop; make it slower", n)
	}
	if err := os.RemoveAll(stateDir); err != nil {
		t.Fatal(err)
	}
	job2, err := operators.Start(ctx, sys, build(false), operators.Checkpoints(time.Hour), operators.CheckpointStore(persistence.NewMemoryCheckpointStore()),
		operators.FromSavepoint(info.Dir), operators.RunParallelism("count", 3))
	if err != nil {
		t.Fatal(err)
	}
	if err := job2.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if len(out) != keys {
		t.Fatalf("%d keys counted, want %d", len(out), keys)
	}
	for k, c := range out {
		if c != n/keys || emits[k] != 1 {
			t.Fatalf("key %d: count %d in %d results, want %d in one", k, c, emits[k], n/keys)
		}
	}
}
