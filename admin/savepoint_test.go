package admin_test

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/persistence"
)

// TestSavepointThroughTheAPI: a savepoint request naming a directory
// writes a savepoint there, under the server's SavepointDir, which
// operators.ReadSavepoint accepts; a name that is a path, or a server
// without a savepoint directory, is refused (400) and writes nothing.
func TestSavepointThroughTheAPI(t *testing.T) {
	sys, ctx := newSystem(t)
	in, err := operators.NewDurableIngress[int64](sys, "numbers", operators.DurableIngressConfig{})
	if err != nil {
		t.Fatal(err)
	}
	top := operators.NewTopology("saved")
	src := operators.Source(top, "src", in)
	keyed := operators.KeyBy(src, "by", func(v int64) int64 { return v % 7 })
	counts := operators.Count(keyed, "count")
	operators.Sink(counts, "sink", operators.SinkFunc(func(operators.KV[int64, int64]) error { return nil }))
	job, err := operators.Start(ctx, sys, top, operators.Checkpoints(time.Hour), operators.CheckpointStore(persistence.NewMemoryCheckpointStore()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = in.Close()
		_ = job.Wait(ctx)
	}()
	for i := range int64(100) {
		if err := in.Send(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	base := t.TempDir()
	a := newAPI(t, admin.Options{SavepointDir: base})
	if err := a.srv.Add(job.Run()); err != nil {
		t.Fatal(err)
	}
	var out struct {
		Checkpoint uint64
		Dir        string
	}
	if code := a.do(http.MethodPost, "/v1/jobs/saved/savepoint", map[string]string{"dir": "sp1"}, nil, &out); code != http.StatusOK {
		t.Fatalf("savepoint: %d", code)
	}
	if out.Dir != filepath.Join(base, "sp1") || out.Checkpoint == 0 {
		t.Fatalf("savepoint answer: %+v", out)
	}
	info, err := operators.ReadSavepoint(out.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if info.Job != "saved" || info.Checkpoint != out.Checkpoint {
		t.Fatalf("savepoint read back: %+v, answered %+v", info, out)
	}
	for _, bad := range []string{"../escape", "a/b", ".."} {
		if code := a.do(http.MethodPost, "/v1/jobs/saved/savepoint", map[string]string{"dir": bad}, nil, nil); code != http.StatusBadRequest {
			t.Errorf("savepoint into %q: %d, want 400", bad, code)
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(base), "escape")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a savepoint left its directory: %v", err)
	}
	// Without a directory: a checkpoint now only, and a named savepoint refused.
	b := newAPI(t, admin.Options{})
	if err := b.srv.Add(job.Run()); err != nil {
		t.Fatal(err)
	}
	if code := b.do(http.MethodPost, "/v1/jobs/saved/savepoint", map[string]string{"dir": "sp2"}, nil, nil); code != http.StatusBadRequest {
		t.Errorf("savepoint without a SavepointDir: %d, want 400", code)
	}
	if code := b.do(http.MethodPost, "/v1/jobs/saved/savepoint", nil, nil, &out); code != http.StatusOK || out.Checkpoint == 0 || out.Dir != "" {
		t.Errorf("checkpoint now: %d %+v", code, out)
	}
}
