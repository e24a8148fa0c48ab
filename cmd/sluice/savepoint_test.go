package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/savepoint"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/persistence"
	"github.com/sluicehq/sluice/samples/wordcount"
)

// TestSavepointInspectAndResume takes a savepoint of the word count at
// parallelism 4 right after it starts, inspects it, and resumes it with
// `run --from-savepoint` at parallelism 2: the report equals that of a run
// without interruption.
func TestSavepointInspectAndResume(t *testing.T) {
	const lines = "50000"
	want, _, err := execute(t, "run", "wordcount", "--lines", lines, "--top", "3", "--progress", "0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sys, err := actors.NewSystem(actors.Config{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop(ctx)
	s := wordcount.New()
	s.Configure("", 50000, 1, 3, 4)
	top, err := s.Topology()
	if err != nil {
		t.Fatal(err)
	}
	job, err := operators.Start(ctx, sys, top, operators.Checkpoints(time.Hour), operators.CheckpointStore(persistence.NewMemoryCheckpointStore()))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "sp")
	if _, err := job.Savepoint(ctx, dir); err != nil {
		t.Fatalf("savepoint (did the job end first?): %v", err)
	}
	_ = job.Stop(ctx)
	_ = job.Wait(ctx)

	out, _, err := execute(t, "savepoint", "inspect", dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"sluice-savepoint version 1", "job          wordcount", "lines", "offsets 0@", "count", "groups [96, 128)"} {
		if !strings.Contains(out, s) {
			t.Errorf("inspect: no %q in\n%s", s, out)
		}
	}
	got, errOut, err := execute(t, "run", "wordcount", "--lines", lines, "--top", "3", "--progress", "0", "--parallelism", "2", "--from-savepoint", dir)
	if err != nil {
		t.Fatalf("run from the savepoint: %v\n%s", err, errOut)
	}
	if got != want || !strings.Contains(errOut, "started from savepoint") {
		t.Fatalf("from the savepoint at parallelism 2:\n%s\nuninterrupted:\n%s\nstderr: %s", got, want, errOut)
	}
}

// TestSavepointInspectRefuses: a damaged savepoint is refused by inspect
// and by run, naming the file; a directory that is not a savepoint too.
func TestSavepointInspectRefuses(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := execute(t, "savepoint", "inspect", dir); !errors.Is(err, savepoint.ErrForeign) || !strings.Contains(err.Error(), "no MANIFEST") {
		t.Fatalf("an empty directory: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, savepoint.ManifestName), []byte("{\"kind\": \"json\"}"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := execute(t, "savepoint", "inspect", dir)
	if !errors.Is(err, savepoint.ErrForeign) || !strings.Contains(err.Error(), filepath.Join(dir, "MANIFEST")) {
		t.Fatalf("a foreign manifest: %v", err)
	}
	if _, _, err := execute(t, "run", "wordcount", "--lines", "10", "--progress", "0", "--from-savepoint", dir); !errors.Is(err, savepoint.ErrForeign) {
		t.Fatalf("run from a foreign savepoint: %v", err)
	}
}
