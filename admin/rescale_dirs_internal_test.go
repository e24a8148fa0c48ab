package admin

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestRescaleDirs: a rescale's savepoint goes to a directory one past the
// job's highest (a process started again never reuses one an earlier
// process filled), other jobs' and other names are left alone, and a
// successful rescale keeps the job's newest two.
func TestRescaleDirs(t *testing.T) {
	dir := t.TempDir()
	if got := nextRescaleDir(dir, "q5"); got != "rescale-q5-1" {
		t.Fatalf("first: %q, want rescale-q5-1", got)
	}
	for _, d := range []string{"rescale-q5-1", "rescale-q5-2", "rescale-q5-10", "rescale-other-7", "rescale-q5-x", "mine"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if got := nextRescaleDir(dir, "q5"); got != "rescale-q5-11" {
		t.Fatalf("after 1, 2 and 10: %q, want rescale-q5-11", got)
	}
	if got := nextRescaleDir(dir, "a/b"); got != "rescale-a%2Fb-1" {
		t.Fatalf("a job name with a slash: %q, want it escaped", got)
	}
	gone, err := pruneRescaleDirs(dir, "q5", keptRescales)
	if err != nil || !slices.Equal(gone, []string{"rescale-q5-1"}) {
		t.Fatalf("pruned %v (%v), want [rescale-q5-1]", gone, err)
	}
	ents, _ := os.ReadDir(dir)
	var left []string
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if want := []string{"mine", "rescale-other-7", "rescale-q5-10", "rescale-q5-2", "rescale-q5-x"}; !slices.Equal(left, want) {
		t.Fatalf("left %v, want %v", left, want)
	}
}
