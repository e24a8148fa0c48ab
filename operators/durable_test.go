package operators_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/persistence"
)

// ingressCounting is countingTopology reading the durable ingress in.
func ingressCounting(in *operators.DurableIngress[int64], store persistence.CheckpointStore, dir string, interval time.Duration) *operators.Topology {
	opts := []operators.TopologyOption{operators.Checkpoints(interval), operators.BatchSize(32)}
	if store != nil {
		opts = append(opts, operators.CheckpointStore(store))
	}
	t := operators.NewTopology("ingress-counting", opts...)
	src := operators.Source(t, "app", in)
	keys := operators.Map(src, "key", func(v int64) string { return fmt.Sprintf("k%02d", v*7%23) })
	by := operators.KeyBy(keys, "by-key", func(k string) string { return k }, operators.Parallelism(3))
	counts := operators.Count(by, "count")
	operators.Sink(counts, "out", operators.File(filepath.Join(dir, "counts"), func(kv operators.KV[string, int64]) string {
		return fmt.Sprintf("%s=%d", kv.Key, kv.Value)
	}))
	return t
}

// sendAll sends 0..n-1 in batches of 50 and closes the ingress.
func sendAll(ctx context.Context, in *operators.DurableIngress[int64], from, n int64) error {
	for i := from; i < n; i += 50 {
		batch := make([]int64, 0, 50)
		for j := i; j < min(i+50, n); j++ {
			batch = append(batch, j)
		}
		if err := in.SendBatch(ctx, batch); err != nil {
			return err
		}
	}
	return in.Close()
}

// An application feeds a checkpointed keyed count through a durable
// ingress while the job is stopped hard three times and started again from
// its last checkpoint: the output equals a run that was never stopped, and
// the log is trimmed behind the final checkpoint.
func TestDurableIngressExactlyOnceAcrossRestarts(t *testing.T) {
	const n = 20_000
	sys, ctx := newSystem(t)

	ref, err := operators.NewDurableIngress[int64](sys, "reference", operators.DurableIngressConfig{Capacity: 1000})
	if err != nil {
		t.Fatal(err)
	}
	refDir := t.TempDir()
	sent := make(chan error, 1)
	go func() { sent <- sendAll(ctx, ref, 0, n) }()
	runToEnd(t, sys, ctx, ingressCounting(ref, &memCheckpoints{}, refDir, time.Hour))
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	want := readParts(t, refDir)

	in, err := operators.NewDurableIngress[int64](sys, "app", operators.DurableIngressConfig{Capacity: 1000})
	if err != nil {
		t.Fatal(err)
	}
	go func() { sent <- sendAll(ctx, in, 0, n) }()
	dir := t.TempDir()
	store := &memCheckpoints{}
	stops := 0
	for attempt := 0; ; attempt++ {
		if attempt > 50 {
			t.Fatal("the job never finished")
		}
		run, err := sys.Run(ctx, ingressCounting(in, store, dir, 2*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if stops < 3 {
			target := store.count() + 1
			waitFor(t, "a checkpoint", func() bool {
				select {
				case <-run.Done():
					return true
				default:
				}
				return store.count() >= target
			})
			if err := run.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			if err := run.Wait(ctx); errors.Is(err, operators.ErrAborted) {
				stops++
				if st := operators.CheckpointStatsOf(run); attempt > 0 && st.RestoredFrom == 0 {
					t.Fatalf("run %d did not restore from a checkpoint", attempt)
				}
				continue
			}
		}
		if err := run.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		break
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if stops == 0 {
		t.Fatal("the job was never interrupted: the test proved nothing")
	}
	if got := readParts(t, dir); got != want {
		t.Fatalf("output after %d interruptions differs from the uninterrupted run (%d vs %d bytes)", stops, len(got), len(want))
	}
	if st := in.Stats(); st != (operators.DurableIngressStats{First: n, Next: n, Read: n, Closed: true}) {
		t.Fatalf("at the end the log is %+v, want everything read and trimmed behind the final checkpoint", st)
	}
}

// Send waits for room honouring its context; TrySend fails with
// mailbox.ErrFull; after Close both fail.
func TestDurableIngressBackPressure(t *testing.T) {
	sys, ctx := newSystem(t)
	in, err := operators.NewDurableIngress[string](sys, "small", operators.DurableIngressConfig{Capacity: 2, File: filepath.Join(t.TempDir(), "ingress.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Release()
	for _, v := range []string{"a", "b"} {
		if err := in.Send(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := in.TrySend("c"); !errors.Is(err, mailbox.ErrFull) {
		t.Fatalf("TrySend on a full ingress: %v, want mailbox.ErrFull", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := in.Send(cctx, "c"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Send on a full ingress with a cancelled context: %v", err)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	if err := in.Send(ctx, "d"); !errors.Is(err, operators.ErrDurableIngressClosed) {
		t.Fatalf("Send after Close: %v", err)
	}
	if st := in.Stats(); st != (operators.DurableIngressStats{Next: 2, Closed: true}) {
		t.Fatalf("stats %+v", st)
	}
}

// The refusal of a non-replayable source in a checkpointed topology says
// what to use instead.
func TestRefusalNamesDurableIngress(t *testing.T) {
	top := operators.NewTopology("unreplayable", operators.Checkpoints(time.Second), operators.CheckpointStore(&memCheckpoints{}))
	operators.Sink(operators.Source(top, "in", operators.NewIngress[int](1)), "out", discard[int]())
	if err := top.Validate(); !errors.Is(err, operators.ErrInvalid) || !containsAll(err.Error(), "replayable", "NewDurableIngress") {
		t.Fatalf("Validate() = %v, want an error naming NewDurableIngress", err)
	}
}
