// Package browsertest checks sluice's dashboard in a real headless Chromium,
// driven from Go with chromedp, at 1,280 px: at load, with the event stream
// blocked, the page already shows the running job (the server's first
// frame); the table fits without wrapped names or cut headers; an operator
// expands into a row per instance whose busy / back-pressured / idle shares
// sum to 100 %; there is a checkpoint history row per completed checkpoint;
// the numbers move while jobs run; an overloaded job shows its queue rising
// and its drops; a failure injected into a job shows among its exceptions;
// and the page logs no JavaScript error.
//
// It is a module of its own, so that sluice's go.mod never carries browser
// tooling. Run it from this folder:
//
//	go test -race -count=1 ./...
//
// It needs Debian's chromium at /usr/bin/chromium (or the path in
// SLUICE_CHROMIUM; `.ci/chromium` installs it) and skips without it, unless
// SLUICE_REQUIRE_CHROMIUM=1, as CI sets. The test saves screenshots of the
// page (at load, and at the end) to a temporary directory and logs their
// path; set SLUICE_SCREENSHOT_DIR to keep them.
package browsertest
