package admin_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
)

// TestWatchFileRealClock: a desired-state file on disk, watched on the
// real clock at the default interval, edited five times (each edit
// written whole and renamed into place, as editors save): every version
// is applied to the running job, and the test prints how long after each
// edit it was in force (from the rename to the applied event's time). The
// aim is within 1 s (the default interval is 200 ms); the figures are
// printed, not asserted (no speed is asserted in a test).
func TestWatchFileRealClock(t *testing.T) {
	sys, ctx := newSystem(t)
	top := operators.NewTopology("watched")
	src := operators.Source(top, "src", operators.Generate(operators.Unbounded, func(i int64) int64 { return i }))
	keyed := operators.KeyBy(src, "by", func(v int64) int64 { return v % 4 }, operators.Parallelism(2))
	work := operators.Process(keyed, "work", func(c *operators.ProcessContext[int64, struct{}, int64], v int64) { c.Emit(v) }, nil,
		operators.Input(mailbox.Block(256)))
	operators.Sink(work, "sink", operators.SinkFunc(func(int64) error { return nil }))
	job, err := operators.Start(ctx, sys, top)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = job.Stop(ctx) }()
	srv, err := admin.New(admin.Options{Clock: clock.Real()})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Add(job.Run()); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "desired.json")
	write := func(v int, capacity int) time.Time {
		t.Helper()
		doc := fmt.Sprintf(`{"version": %d, "jobs": {"watched": {"operators": {"work": {"input": {"policy": "drop-oldest", "capacity": %d}}}}}}`, v, capacity)
		tmp := filepath.Join(dir, fmt.Sprintf(".desired-%d.json", v))
		if err := os.WriteFile(tmp, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		at := clock.Real().Now()
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
		return at
	}
	write(1, 256)
	stop := srv.WatchFile(path, 0)
	defer stop()
	waitFor(t, "version 1 applied", func() bool { return srv.DesiredStatus().Good == 1 })
	var worst time.Duration
	for v := 2; v <= 6; v++ {
		edited := write(v, 256+64*v)
		waitFor(t, fmt.Sprintf("version %d applied", v), func() bool { return srv.DesiredStatus().Good == uint64(v) })
		var applied time.Time
		hist, _ := srv.History("watched")
		for _, ev := range hist {
			if ev.What == "desired" && ev.Version == uint64(v) && ev.Result == "applied" {
				applied = ev.At
			}
		}
		if applied.IsZero() {
			t.Fatalf("no applied event of version %d: %+v", v, hist)
		}
		st, _ := srv.Status("watched")
		for _, in := range st.Inputs {
			if in.Operator == "work" && in.Input.Capacity != 256+64*v {
				t.Fatalf("version %d in force, but work's input is %s", v, in.Input)
			}
		}
		lat := applied.Sub(edited)
		worst = max(worst, lat)
		t.Logf("edit to version %d: in force %v after the rename", v, lat.Round(time.Millisecond))
	}
	t.Logf("the slowest of 5 edits was in force %v after it was written (aim: within 1 s)", worst.Round(time.Millisecond))
}
