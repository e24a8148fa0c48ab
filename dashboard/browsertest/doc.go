// Package browsertest checks sluice's dashboard in a real headless Chromium,
// driven from Go with chromedp: the page draws the topology, its numbers
// move while jobs run, and an overloaded job shows its queue rising and its
// drops.
//
// It is a module of its own, so that sluice's go.mod never carries browser
// tooling. Run it from this folder:
//
//	go test -race -count=1 ./...
//
// It needs Debian's chromium at /usr/bin/chromium (or the path in
// SLUICE_CHROMIUM; `.ci/chromium` installs it) and skips without it, unless
// SLUICE_REQUIRE_CHROMIUM=1, as CI sets. The test saves a screenshot of the
// page to a temporary directory and logs its path; set
// SLUICE_SCREENSHOT_DIR to keep it.
package browsertest
