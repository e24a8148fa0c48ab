package main

import (
	"strings"
	"testing"
	"time"
)

func TestTimesPrint(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 17, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	tm := newTimes()
	for _, e := range []event{
		{Action: "start", Package: "a", Time: at(0)},
		{Action: "run", Package: "a", Test: "TestSlow", Time: at(0)},
		{Action: "pass", Package: "a", Test: "TestSlow/sub", Elapsed: 30, Time: at(30)},
		{Action: "pass", Package: "a", Test: "TestSlow", Elapsed: 40, Time: at(40)},
		{Action: "fail", Package: "a", Test: "TestFailed", Elapsed: 2.5, Time: at(43)},
		{Action: "skip", Package: "a", Test: "TestSkipped", Elapsed: 50, Time: at(43)},
		{Action: "pass", Package: "a", Test: "TestTwice", Elapsed: 3, Time: at(46)},
		{Action: "pass", Package: "a", Test: "TestTwice", Elapsed: 4, Time: at(50)},
		{Action: "pass", Package: "a", Test: "TestQuick", Elapsed: 0.1, Time: at(50)},
		{Action: "fail", Package: "a", Elapsed: 50.2, Time: at(50.2)},
		{Action: "pass", Package: "b", Elapsed: 5, Time: at(20)},
		{Action: "pass", Package: "c", Elapsed: 0.2, Time: at(1)},
		{Action: "skip", Package: "d", Time: at(60)},
	} {
		tm.add(e)
	}
	var out strings.Builder
	tm.print(&out, "run", 3)
	want := `
== run: packages by duration (wall time 60s; the packages add up to 55s)
      50.2s  a
       5.0s  b
  (1 more under 1s)
== run: the 3 slowest tests
      40.0s  a TestSlow
       7.0s  a TestTwice (2 runs)
       2.5s  a TestFailed
`
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
}

func TestTimesPrintNothing(t *testing.T) {
	var out strings.Builder
	newTimes().print(&out, "run", 15)
	if out.Len() != 0 {
		t.Errorf("a run without packages printed %q", out.String())
	}
}
