// Command testreport reads `go test -json` on stdin and prints what a
// person wants from a run of the suite: one line per package (as go test
// prints without -v), the output of every failed test, and at the end the
// tests that were skipped, each with the reason it gave, and a count of
// passed, failed and skipped tests, and where the time went: the run's
// wall time, the packages by duration and the slowest tests. It exits 1
// when a test or a package failed, or when the input ends with a package
// still running.
//
//	go test -json ./... | go run ./.ci/testreport -title "go test -race"
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
)

// event is one line of test2json's output.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
	Time    time.Time
}

type key struct{ pkg, test string }

func main() {
	title := flag.String("title", "go test", "what the run was, printed with its summary")
	show := flag.String("show", "", "also print every output line of a test that contains this text (seeds, say)")
	slowest := flag.Int("slowest", 15, "how many of the slowest tests to list")
	flag.Parse()
	t := newTimes()

	output := map[key][]string{} // every test's and package's output, until it ends
	var skipped []string
	var passed, failed int
	pkgFailed := false
	running := map[string]bool{}

	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			fmt.Println(string(line)) // build errors and the like come as plain text
			continue
		}
		k := key{e.Package, e.Test}
		t.add(e)
		switch e.Action {
		case "start":
			running[e.Package] = true
		case "output":
			output[k] = append(output[k], e.Output)
			if *show != "" && e.Test != "" && strings.Contains(e.Output, *show) {
				fmt.Printf("%s %s: %s", e.Package, e.Test, strings.TrimLeft(e.Output, " "))
			}
		case "pass", "fail", "skip":
			if e.Test == "" { // the package's end
				delete(running, e.Package)
				out := output[k]
				delete(output, k)
				switch e.Action {
				case "pass":
					fmt.Printf("ok  \t%s\t%.3fs\n", e.Package, e.Elapsed)
				case "skip":
					fmt.Printf("?   \t%s\t[no test files]\n", e.Package)
				default:
					pkgFailed = true
					// A package that fails without a failed test (a timeout,
					// a crash, os.Exit) leaves its running tests without an
					// end: print what they said, for they are the suspects.
					for tk, tout := range output {
						if tk.pkg == e.Package && tk.test != "" {
							failed++
							fmt.Printf("--- %s %s: still running when the package failed; its last output:\n", e.Package, tk.test)
							fmt.Print(strings.Join(suspect(tout), ""))
							delete(output, tk)
						}
					}
					fmt.Print(strings.Join(out, ""))
					fmt.Printf("FAIL\t%s\t%.3fs\n", e.Package, e.Elapsed)
				}
				continue
			}
			out := output[k]
			delete(output, k)
			switch e.Action {
			case "pass":
				passed++
			case "fail":
				failed++
				fmt.Print(strings.Join(out, ""))
			case "skip":
				skipped = append(skipped, fmt.Sprintf("%s %s: %s", e.Package, e.Test, reason(out)))
			}
		}
	}
	for pkg := range running {
		fmt.Printf("FAIL\t%s\t(the run ended before the package did)\n", pkg)
		pkgFailed = true
	}

	fmt.Printf("\n== %s: skipped tests\n", *title)
	if len(skipped) == 0 {
		fmt.Println("none was skipped")
	}
	sort.Strings(skipped)
	for _, s := range skipped {
		fmt.Println("  " + s)
	}
	t.print(os.Stdout, *title, *slowest)
	fmt.Printf("== %s: done at %s\n", *title, time.Now().UTC().Format(time.TimeOnly))
	fmt.Printf("tests: %d passed, %d failed, %d skipped\n", passed, failed, len(skipped))
	if failed > 0 || pkgFailed {
		os.Exit(1)
	}
}

// suspect is what an unfinished test said: its last 40 lines before a
// panic (the timeout's), then the panic and the list of running tests, not
// the goroutine dump that follows them.
func suspect(lines []string) []string {
	said, panicked := lines, []string(nil)
	for i, l := range lines {
		if strings.HasPrefix(l, "panic: ") {
			said, panicked = lines[:i], lines[i:]
			break
		}
	}
	if len(said) > 40 {
		said = said[len(said)-40:]
	}
	for i, l := range panicked {
		if strings.TrimSpace(l) == "" {
			panicked = panicked[:i]
			break
		}
	}
	return append(append([]string{}, said...), panicked...)
}

// reason is what a skipped test said: its output without the === and
// --- lines go test adds.
func reason(out []string) string {
	var said []string
	for _, l := range out {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		said = append(said, t)
	}
	if len(said) == 0 {
		return "(no reason given)"
	}
	return strings.Join(said, " / ")
}
