package admin_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/clock/clocktest"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
)

// TestWatchFile: a desired-state file is applied when the watcher starts
// and after every edit at its next look (one interval of the Server's
// clock: 200 ms of it); a version with one bad value is rejected whole,
// with a reason naming the field, and the job keeps the last good
// settings; a file that does not parse is rejected too; status shows the
// desired version against the applied one, and the history every step.
func TestWatchFile(t *testing.T) {
	sys, ctx := newSystem(t)
	feed := make(chan int64)
	top := operators.NewTopology("q")
	src := operators.Source(top, "src", operators.FromChannel(feed))
	keyed := operators.KeyBy(src, "by-key", func(v int64) int64 { return v }, operators.Parallelism(2))
	work := operators.Process(keyed, "work", func(c *operators.ProcessContext[int64, struct{}, int64], v int64) { c.Emit(v) }, nil,
		operators.Input(mailbox.Block(256)))
	operators.Sink(work, "sink", operators.SinkFunc(func(int64) error { return nil }))
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	var a *api
	defer func() {
		if err := a.srv.Pause(ctx, "test", "q", "src", false); err != nil { // v4 paused it
			t.Error(err)
		}
		close(feed)
		if err := run.Wait(ctx); err != nil {
			t.Error(err)
		}
	}()
	clk := clocktest.NewManual(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	a = newAPI(t, admin.Options{Clock: clk})
	if err := a.srv.Add(run); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "desired.json")
	write := func(doc string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	status := func() admin.JobStatus {
		t.Helper()
		var st admin.JobStatus
		if code := a.do(http.MethodGet, "/v1/jobs/q", nil, nil, &st); code != http.StatusOK {
			t.Fatalf("status: %d", code)
		}
		return st
	}
	look := func() { // the watcher's next look, one interval on
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := clk.WaitForTimers(wctx, 1); err != nil {
			t.Fatalf("the watcher armed no timer: %v", err)
		}
		clk.Advance(200 * time.Millisecond)
	}

	write(`{"version": 1, "jobs": {"q": {"operators": {"work": {"input": {"policy": "drop-oldest", "capacity": 512}}}}}}`)
	stop := a.srv.WatchFile(path, 200*time.Millisecond)
	defer stop()
	waitFor(t, "version 1 to be applied", func() bool { return a.srv.DesiredStatus().Good == 1 })
	st := status()
	if in := inputOf(t, st, "work"); in.Policy != "drop-oldest" || in.Capacity != 512 || st.Desired != 1 || st.Applied != 1 {
		t.Fatalf("after v1: input %v, desired v%d, applied v%d", in, st.Desired, st.Applied)
	}

	// One good change (pause the source) beside a bad value: nothing applied.
	write(`{"version": 2, "jobs": {"q": {"operators": {"src": {"paused": true}, "work": {"input": {"policy": "sample", "capacity": 512, "sample_every": 1}}}}}}`)
	look()
	ds := a.srv.DesiredStatus()
	if ds.Rejected != 2 || ds.Good != 1 || !strings.Contains(ds.Reason, "jobs.q.operators.work.input.sample_every") {
		t.Fatalf("after bad v2: %+v", ds)
	}
	st = status()
	if in := inputOf(t, st, "work"); in.Policy != "drop-oldest" || st.Desired != 2 || st.Applied != 1 || st.Inputs[0].Paused {
		t.Fatalf("after bad v2: input %v, desired v%d, applied v%d, source paused %t", in, st.Desired, st.Applied, st.Inputs[0].Paused)
	}

	// A file that does not parse: rejected, v1 stays.
	write(`{"version": 3, "jobs": {"q": {"operators": {"work": {"input": {"policy": "block", "capacity": "lots"}}}}}}`)
	look()
	if ds := a.srv.DesiredStatus(); ds.Good != 1 || !strings.Contains(ds.Reason, "capacity") {
		t.Fatalf("after unparsable v3: %+v", ds)
	}

	// The next good edit is applied at the next look.
	write(`{"version": 4, "jobs": {"q": {"operators": {"src": {"paused": true}, "work": {"input": {"policy": "sample", "capacity": 512, "sample_every": 3}}}}}}`)
	look()
	st = status()
	if in := inputOf(t, st, "work"); in.Policy != "sample" || in.SampleEvery != 3 || st.Applied != 4 || !st.Inputs[0].Paused {
		t.Fatalf("after v4: input %v, applied v%d, paused %t", in, st.Applied, st.Inputs[0].Paused)
	}
	// Looking again at an unchanged file changes nothing.
	look()
	hist, _ := a.srv.History("q")
	var lines []string
	for _, ev := range hist {
		lines = append(lines, ev.What+" "+ev.Target+" v"+itoa(ev.Version)+" "+ev.Result)
		if !strings.HasPrefix(ev.Who, "desired ") {
			t.Errorf("event %+v: who %q", ev, ev.Who)
		}
	}
	want := []string{
		"set-input work v1 applied", "desired  v1 applied",
		"desired  v2 rejected", // v3 did not parse: it names no job
		"pause src v4 applied", "set-input work v4 applied", "desired  v4 applied",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("history:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	var dsj admin.DesiredStatus
	if code := a.do(http.MethodGet, "/v1/desired", nil, nil, &dsj); code != http.StatusOK || dsj.Good != 4 || dsj.Applied["q"] != 4 {
		t.Fatalf("GET /v1/desired: %d %+v", code, dsj)
	}
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }
