package dashboard

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"
)

// TestHistoryInFirstFrame: the dashboard keeps a bounded ring of chart
// points per job, the page's first frame and /snapshot.json carry it whole
// (so a chart shows at load), the stream's snapshots carry the newest
// point only; the process's memory, goroutines and CPU are read too; the
// job's configuration is in every snapshot.
func TestHistoryInFirstFrame(t *testing.T) {
	// 4 points at most: History / Interval.
	d := newDashboard(t, Options{Interval: 20 * time.Millisecond, History: 80 * time.Millisecond})
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	sys, ctx := newSystem(t)
	run := startPaced(t, sys, ctx, "charted", 2000)
	if err := d.Add(run); err != nil {
		t.Fatal(err)
	}
	var s Snapshot
	waitFor(t, "a full ring of points with rates", func() bool {
		_, body := get(t, srv.URL+"/snapshot.json")
		s = Snapshot{}
		if err := json.Unmarshal([]byte(body), &s); err != nil {
			t.Fatal(err)
		}
		if len(s.Jobs) != 1 || s.Jobs[0].History == nil || len(s.Jobs[0].History.Points) < 4 {
			return false
		}
		last := s.Jobs[0].History.Points[3]
		return last.Ops[0].OutRate > 0
	})
	h := s.Jobs[0].History
	if len(h.Points) != 4 {
		t.Fatalf("a ring of 4 holds %d points", len(h.Points))
	}
	if len(h.Operators) != 4 || h.Operators[0] != "src" {
		t.Errorf("history operators %v", h.Operators)
	}
	for i, p := range h.Points {
		if len(p.Ops) != len(h.Operators) {
			t.Errorf("point %d has %d operators, want %d", i, len(p.Ops), len(h.Operators))
		}
		if i > 0 && p.T <= h.Points[i-1].T {
			t.Errorf("points not in order of time: %d then %d", h.Points[i-1].T, p.T)
		}
	}
	if len(s.ProcessHistory) == 0 || s.Process.HeapBytes == 0 || s.Process.Goroutines == 0 || s.Process.GOMAXPROCS < 1 {
		t.Errorf("process: %+v, %d points", s.Process, len(s.ProcessHistory))
	}
	cfg := s.Jobs[0].Config
	if cfg.Plan == "" || cfg.BatchSize != 8 || len(cfg.Inputs) == 0 || cfg.CheckpointInterval != "" {
		t.Errorf("config: %+v", cfg)
	}
	var count *InputConfig
	for i, in := range cfg.Inputs {
		if in.Operator == "count" {
			count = &cfg.Inputs[i]
		}
	}
	if count == nil || count.Policy != "block" || count.Capacity <= 0 || count.Parallelism != 2 || !count.Live {
		t.Errorf("count's input: %+v", count)
	}

	// The stream's snapshots: the newest point, no history.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel() // before srv.Close, which waits for the stream
	r := stream(t, sctx, srv.URL)
	for range 3 {
		ev := nextSnapshot(t, r)
		if len(ev.Jobs) == 1 && ev.Jobs[0].History != nil {
			t.Fatalf("a streamed snapshot carries the history")
		}
		if len(ev.Jobs) == 1 && ev.Jobs[0].Point != nil && len(ev.Jobs[0].Point.Ops) == 4 {
			return
		}
	}
	t.Error("three streamed snapshots without a point")
}
