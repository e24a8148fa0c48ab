package wordcount_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/samples/wordcount"
)

// directCount is the independent check: a plain loop over the same text.
func directCount(lines []string) map[string]int64 {
	m := map[string]int64{}
	for _, l := range lines {
		for _, f := range strings.Fields(l) {
			f = strings.ToLower(strings.Trim(f, ".,;:!?\"'()-"))
			if f != "" {
				m[f]++
			}
		}
	}
	return m
}

func run(t *testing.T, s *wordcount.Sample) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop(ctx)
	top, err := s.Topology()
	if err != nil {
		t.Fatal(err)
	}
	r, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

func check(t *testing.T, s *wordcount.Sample, want map[string]int64) {
	t.Helper()
	got := s.Counts()
	if len(got) != len(want) {
		t.Fatalf("%d distinct words, want %d", len(got), len(want))
	}
	for i, kv := range got {
		if want[kv.Key] != kv.Value {
			t.Errorf("count[%q] = %d, want %d", kv.Key, kv.Value, want[kv.Key])
		}
		if i > 0 && got[i-1].Value < kv.Value {
			t.Fatalf("result not sorted by count at %d", i)
		}
	}
}

func TestGeneratedTextMatchesDirectCount(t *testing.T) {
	const lines, seed = 20_000, 7
	s := wordcount.New()
	s.Configure("", lines, seed, 5, 3)
	run(t, s)
	text := make([]string, lines)
	for i := range text {
		text[i] = wordcount.Line(seed, int64(i))
	}
	check(t, s, directCount(text))
	var out strings.Builder
	if err := s.Report(&out); err != nil {
		t.Fatal(err)
	}
	if top := s.Counts()[0]; !strings.Contains(out.String(), top.Key) || strings.Count(out.String(), "\n") != 6 {
		t.Errorf("report does not list the top 5 words:\n%s", out.String())
	}
}

func TestFileInputMatchesDirectCount(t *testing.T) {
	text := []string{
		"It was the best of times, it was the worst of times,",
		"it was the age of wisdom, it was the age of foolishness...",
		"",
		"  (Charles Dickens)  ",
	}
	path := filepath.Join(t.TempDir(), "book.txt")
	if err := os.WriteFile(path, []byte(strings.Join(text, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	s := wordcount.New()
	s.Configure(path, 0, 0, 3, 2)
	run(t, s)
	check(t, s, directCount(text))
}

func TestLineIsDeterministic(t *testing.T) {
	if wordcount.Line(3, 42) != wordcount.Line(3, 42) {
		t.Fatal("Line is not deterministic")
	}
	if wordcount.Line(3, 42) == wordcount.Line(4, 42) {
		t.Fatal("Line ignores its seed")
	}
}
