package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/persistence"
)

// TestCtl drives a running job's admin API (served on a loopback socket)
// with `sluice ctl`: list, show, set-policy, pause and resume, history,
// and a change without the token refused.
func TestCtl(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sys, err := actors.NewSystem(actors.Config{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop(ctx)
	feed := make(chan int64)
	top := operators.NewTopology("ctl-job")
	src := operators.Source(top, "src", operators.FromChannel(feed))
	keyed := operators.KeyBy(src, "by-key", func(v int64) int64 { return v }, operators.Parallelism(2))
	work := operators.Process(keyed, "work", func(c *operators.ProcessContext[int64, struct{}, int64], v int64) { c.Emit(v) }, nil,
		operators.Input(mailbox.Block(256)))
	operators.Sink(work, "sink", operators.SinkFunc(func(int64) error { return nil }))
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("tok-123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := admin.New(admin.Options{Token: "tok-123"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Add(run); err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	url, wait, err := srv.Serve(sctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { stop(); _ = wait() }()
	ctl := func(args ...string) (string, error) {
		t.Helper()
		out, _, err := execute(t, append([]string{"ctl", "--addr", url, "--token-file", tokenFile}, args...)...)
		return out, err
	}
	out, err := ctl("list")
	if err != nil || !strings.Contains(out, "ctl-job") || !strings.Contains(out, "running") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	out, err = ctl("set-policy", "ctl-job", "work", "--policy", "sample", "--sample-every", "5")
	if err != nil || !strings.Contains(out, "ctl-job/work: input sample:256 every=5") {
		t.Fatalf("set-policy: %v\n%s", err, out)
	}
	if out, err = ctl("pause", "ctl-job", "src"); err != nil || !strings.Contains(out, "paused") {
		t.Fatalf("pause: %v\n%s", err, out)
	}
	out, err = ctl("show", "ctl-job")
	if err != nil || !strings.Contains(out, "sample:256 every=5") || !strings.Contains(out, "source, paused") || !strings.Contains(out, "work (+sink)") {
		t.Fatalf("show: %v\n%s", err, out)
	}
	if _, err = ctl("resume", "ctl-job", "src"); err != nil {
		t.Fatal(err)
	}
	_, err = ctl("set-policy", "ctl-job", "sink", "--policy", "block")
	if err == nil || !strings.Contains(err.Error(), "fused") {
		t.Fatalf("set-policy of a fused operator: %v", err)
	}
	out, _, err = execute(t, "ctl", "--addr", url, "set-policy", "ctl-job", "work", "--capacity", "64")
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("set-policy without a token: %v\n%s", err, out)
	}
	out, err = ctl("history", "ctl-job")
	if err != nil || strings.Count(out, "\n") != 4 || !strings.Contains(out, "set-input applied  work sample:256 every=5 (was block:256)") ||
		!strings.Contains(out, "rejected") || !strings.Contains(out, "@") {
		t.Fatalf("history: %v\n%s", err, out)
	}
	// Push a document: a bad one is rejected whole, a good one applied.
	bad, good := filepath.Join(t.TempDir(), "bad.json"), filepath.Join(t.TempDir(), "good.json")
	os.WriteFile(bad, []byte(`{"version": 1, "jobs": {"ctl-job": {"operators": {"work": {"input": {"policy": "drop-oldest", "capacity": 0}}}}}}`), 0o600)
	os.WriteFile(good, []byte(`{"version": 2, "jobs": {"ctl-job": {"operators": {"work": {"input": {"policy": "drop-oldest", "capacity": 100}}}}}}`), 0o600)
	if _, err := ctl("apply", bad); err == nil || !strings.Contains(err.Error(), "409") || !strings.Contains(err.Error(), "jobs.ctl-job.operators.work.input.capacity") {
		t.Fatalf("apply a bad document: %v", err)
	}
	if out, err := ctl("apply", good); err != nil || !strings.Contains(out, "applied: good v2") {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	if out, err := ctl("desired"); err != nil || !strings.Contains(out, "ctl-job: applied v2") || !strings.Contains(out, "last rejected v1") {
		t.Fatalf("desired: %v\n%s", err, out)
	}
	close(feed)
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// --admin serves the API while a sample runs; --desired needs --admin.
func TestRunAdminFlags(t *testing.T) {
	_, errOut, err := execute(t, "run", "wordcount", "--lines", "2000", "--progress", "0", "--admin", "127.0.0.1:0")
	if err != nil || !strings.Contains(errOut, "admin API at http://127.0.0.1:") || !strings.Contains(errOut, "read only") {
		t.Fatalf("run --admin: %v\n%s", err, errOut)
	}
	if _, _, err := execute(t, "run", "wordcount", "--lines", "10", "--desired", "x.json"); err == nil || !strings.Contains(err.Error(), "--desired needs --admin") {
		t.Fatalf("--desired without --admin: %v", err)
	}
}

// TestCtlRescaleAndStop: `sluice ctl rescale JOB OP=N` restarts a job
// from a savepoint at the new parallelism, and `sluice ctl stop JOB
// --savepoint NAME` stops it with a savepoint that ReadSavepoint accepts.
func TestCtlRescaleAndStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sys, err := actors.NewSystem(actors.Config{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop(ctx)
	top := operators.NewTopology("ctl-r")
	src := operators.Source(top, "src", operators.Generate(operators.Unbounded, func(i int64) int64 { return i }))
	keyed := operators.KeyBy(src, "by-key", func(v int64) int64 { return v % 8 }, operators.Parallelism(2))
	counts := operators.Count(keyed, "count")
	operators.Sink(counts, "sink", operators.SinkFunc(func(operators.KV[int64, int64]) error { return nil }))
	opts := []operators.TopologyOption{operators.Checkpoints(time.Hour), operators.CheckpointStore(persistence.NewMemoryCheckpointStore())}
	job, err := operators.Start(ctx, sys, top, opts...)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("tok-123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	srv, err := admin.New(admin.Options{Token: "tok-123", SavepointDir: base})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.AddRestartable(job.Run(), admin.TopologyStarter(sys, top, opts...)); err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	url, wait, err := srv.Serve(sctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { stop(); _ = wait() }()
	ctl := func(args ...string) (string, error) {
		t.Helper()
		out, _, err := execute(t, append([]string{"ctl", "--addr", url, "--token-file", tokenFile}, args...)...)
		return out, err
	}
	if _, err := ctl("rescale", "ctl-r", "count=zero"); err == nil || !strings.Contains(err.Error(), "OPERATOR=N") {
		t.Fatalf("rescale with a bad argument: %v", err)
	}
	out, err := ctl("rescale", "ctl-r", "count=3")
	if err != nil || !strings.Contains(out, "ctl-r: rescaled map[count:3 src:1] (was map[count:2 src:1]); paused ") {
		t.Fatalf("rescale: %v\n%s", err, out)
	}
	out, err = ctl("stop", "ctl-r", "--savepoint", "last")
	if err != nil || !strings.Contains(out, "ctl-r: stopped with savepoint "+filepath.Join(base, "last")) {
		t.Fatalf("stop --savepoint: %v\n%s", err, out)
	}
	if err := srv.Wait(ctx, "ctl-r"); err != nil {
		t.Fatal(err)
	}
	info, err := operators.ReadSavepoint(filepath.Join(base, "last"))
	if err != nil || info.Parallelism["count"] != 3 {
		t.Fatalf("the savepoint: %+v, %v", info, err)
	}
}
