package nexmark

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
)

// sampleWith returns the sample with its flags parsed from args.
func sampleWith(t *testing.T, args ...string) *Sample {
	t.Helper()
	s := New()
	fs := flag.NewFlagSet("nexmark", flag.ContinueOnError)
	s.Flags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return s
}

// sampleRun runs the sample's topology to its end, as `sluice run` does,
// and returns its report.
func sampleRun(t *testing.T, s *Sample) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	top, err := s.Topology()
	if err != nil {
		t.Fatal(err)
	}
	sys, err := actors.NewSystem(actors.Config{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop(ctx)
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	queryNoLate(t, run)
	var out bytes.Buffer
	if err := s.Report(&out); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// sampleLines reads the sample's output file.
func sampleLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// sampleConfig is the stream of the sample tests, as flags and as a Config.
func sampleConfig() ([]string, Config) {
	cfg := queryConfig()
	cfg.NumEvents = 20_000
	return []string{"--events", "20000", "--generators", "4", "--firstEventRate", "1000", "--nextEventRate", "1000"}, cfg
}

// TestSampleQueries runs the sample for a few queries on the live generator
// with --out and compares the file with the query's model.
func TestSampleQueries(t *testing.T) {
	args, cfg := sampleConfig()
	want := modelLines(queryEvents(t, cfg))
	for _, q := range []string{"q1", "q3", "q4", "q5", "q7", "q8", "q11"} {
		t.Run(q, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), q+".jsonl")
			s := sampleWith(t, append(args, "--query", q, "--parallelism", "2", "--out", path)...)
			report := sampleRun(t, s)
			lines := sampleLines(t, path)
			queryCompare(t, resultLines(t, q, lines), want[q])
			if r := fmt.Sprintf("%s: %d events in, %d results, written to %s\n", q, cfg.NumEvents, len(lines), path); report != r {
				t.Errorf("report %q, want %q", report, r)
			}
		})
	}
}

// TestSampleEventFile runs the sample on an event file with a malformed line
// and --skip-malformed, without --out.
func TestSampleEventFile(t *testing.T) {
	_, cfg := sampleConfig()
	evs := queryEvents(t, cfg)
	path := queryWriteFile(t, evs)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	lines = append(lines[:5000], append([]string{"not json\n"}, lines[5000:]...)...)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	s := sampleWith(t, "--input", path, "--skip-malformed", "--query", "q9", "--parallelism", "3")
	report := sampleRun(t, s)
	want := fmt.Sprintf("q9: %d events in, %d results\n1 malformed lines skipped in %s\n", len(evs), len(ModelQ9(evs)), path)
	if report != want {
		t.Errorf("report %q, want %q", report, want)
	}
}

func TestSampleBadOptions(t *testing.T) {
	if _, err := sampleWith(t, "--query", "q10").Topology(); err == nil ||
		err.Error() != `nexmark: no query "q10" (valid: q0, q1, q2, q3, q4, q5, q6, q7, q8, q9, q11)` {
		t.Errorf("--query q10: error %v", err)
	}
	if _, err := sampleWith(t, "--parallelism", "0").Topology(); err == nil || !strings.Contains(err.Error(), "--parallelism 0") {
		t.Errorf("--parallelism 0: error %v", err)
	}
	if _, err := sampleWith(t, "--generators", "0").Topology(); err == nil || !strings.Contains(err.Error(), "numEventGenerators") {
		t.Errorf("--generators 0: error %v", err)
	}
	if err := New().Report(new(bytes.Buffer)); err == nil {
		t.Error("Report before a run: no error")
	}
}

// TestSampleOutOfOrderFile runs the sample on an event file of an
// out-of-order stream whose ids repeat (groups of 10, 6 generators), given
// the knobs it was generated with: q4, q5, q6, q9 and q11 equal their
// models, and q9 writes the same file three times.
func TestSampleOutOfOrderFile(t *testing.T) {
	cfg := oooCase{events: 20_000, gens: 6, group: 10, rate: 1000}.config()
	args := []string{"--events", "20000", "--generators", "6", "--outOfOrderGroupSize", "10", "--firstEventRate", "1000", "--nextEventRate", "1000"}
	evs := queryEvents(t, cfg)
	if !cfg.RepeatsIDs() {
		t.Fatal("the stream repeats no id")
	}
	input := queryWriteFile(t, evs)
	want := modelLines(evs)
	var q9 []string
	for i, q := range []string{"q4", "q5", "q6", "q9", "q11", "q9", "q9"} {
		t.Run(fmt.Sprintf("%s-%d", q, i), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), q+".jsonl")
			sampleRun(t, sampleWith(t, append(args, "--input", input, "--query", q, "--parallelism", "2", "--out", out)...))
			lines := sampleLines(t, out)
			queryCompare(t, resultLines(t, q, lines), want[q])
			if q != "q9" {
				return
			}
			sorted := resultLines(t, q, lines)
			if q9 == nil {
				q9 = sorted
			} else if !slices.Equal(sorted, q9) {
				t.Error("q9's lines differ from its first run's")
			}
		})
	}
}
