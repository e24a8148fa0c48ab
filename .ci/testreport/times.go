package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// times gathers where a run's time went from test2json's events: the
// elapsed time of each package and of each top-level test (a test run
// several times, by -count, adds up its runs), and the first and last
// event's times for the run's wall time.
type times struct {
	first, last time.Time
	pkgs        map[string]float64
	tests       map[key]*testTime
}

// testTime is a top-level test's elapsed seconds over its runs.
type testTime struct {
	secs float64
	runs int
}

func newTimes() *times {
	return &times{pkgs: map[string]float64{}, tests: map[key]*testTime{}}
}

// add takes one event; only the ends of packages and of top-level tests
// count (a subtest's time is in its parent's).
func (t *times) add(e event) {
	if !e.Time.IsZero() {
		if t.first.IsZero() || e.Time.Before(t.first) {
			t.first = e.Time
		}
		if e.Time.After(t.last) {
			t.last = e.Time
		}
	}
	if e.Action != "pass" && e.Action != "fail" {
		return
	}
	if e.Test == "" {
		if e.Package != "" {
			t.pkgs[e.Package] += e.Elapsed
		}
		return
	}
	if strings.Contains(e.Test, "/") {
		return
	}
	k := key{e.Package, e.Test}
	tt := t.tests[k]
	if tt == nil {
		tt = &testTime{}
		t.tests[k] = tt
	}
	tt.secs += e.Elapsed
	tt.runs++
}

// print writes the run's wall time, every package that took a second or
// more, longest first (go test runs packages side by side, so they add up
// to more than the wall time), and the slowest top-level tests.
func (t *times) print(w io.Writer, title string, slowest int) {
	if len(t.pkgs) == 0 {
		return
	}
	var sum float64
	pkgs := make([]string, 0, len(t.pkgs))
	for p, s := range t.pkgs {
		sum += s
		pkgs = append(pkgs, p)
	}
	sort.Slice(pkgs, func(i, j int) bool {
		if t.pkgs[pkgs[i]] != t.pkgs[pkgs[j]] {
			return t.pkgs[pkgs[i]] > t.pkgs[pkgs[j]]
		}
		return pkgs[i] < pkgs[j]
	})
	fmt.Fprintf(w, "\n== %s: packages by duration (wall time %.0fs; the packages add up to %.0fs)\n",
		title, t.last.Sub(t.first).Seconds(), sum)
	shown := 0
	for _, p := range pkgs {
		if t.pkgs[p] < 1 {
			break
		}
		fmt.Fprintf(w, "  %8.1fs  %s\n", t.pkgs[p], p)
		shown++
	}
	if rest := len(pkgs) - shown; rest > 0 {
		fmt.Fprintf(w, "  (%d more under 1s)\n", rest)
	}

	tests := make([]key, 0, len(t.tests))
	for k := range t.tests {
		tests = append(tests, k)
	}
	sort.Slice(tests, func(i, j int) bool {
		a, b := t.tests[tests[i]], t.tests[tests[j]]
		if a.secs != b.secs {
			return a.secs > b.secs
		}
		if tests[i].pkg != tests[j].pkg {
			return tests[i].pkg < tests[j].pkg
		}
		return tests[i].test < tests[j].test
	})
	if len(tests) > slowest {
		tests = tests[:slowest]
	}
	fmt.Fprintf(w, "== %s: the %d slowest tests\n", title, len(tests))
	for _, k := range tests {
		tt := t.tests[k]
		runs := ""
		if tt.runs > 1 {
			runs = fmt.Sprintf(" (%d runs)", tt.runs)
		}
		fmt.Fprintf(w, "  %8.1fs  %s %s%s\n", tt.secs, k.pkg, k.test, runs)
	}
}
