package admin_test

import (
	"slices"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/samples/nexmark"
)

// TestLivePolicySwitchNexmarkQ5 is the headline on Nexmark q5 (hot items:
// bids counted per auction in sliding windows of 10 s every 5 s, the
// maximum per window): the input edge of its window count, overloaded (a
// capacity of one batch), switched Block → DropOldest → Spill → Sample →
// Block through the API while it runs (policySwitch: no restart, exact
// accounting at every look). The output is what the policy history
// implies: every window whose bids all fell in Block or Spill stretches is
// exactly the model's (ModelQ5 over every event), and a window that lost
// bids to DropOldest or Sample counts no more than the model's maximum.
func TestLivePolicySwitchNexmarkQ5(t *testing.T) {
	sys, ctx := newSystem(t)
	cfg := nexmark.DefaultConfig()
	cfg.NumEvents = 0 // as many as the test lets it produce
	cfg.NumEventGenerators = 4
	cfg.FirstEventRate, cfg.NextEventRate = 500, 500 // 5000 events a window: several windows a stretch
	var mu sync.Mutex
	var got []nexmark.Q5
	top := operators.NewTopology("q5", operators.BatchSize(64))
	events := operators.Source(top, "events", nexmark.Source(cfg))
	q5 := nexmark.BuildQ5(events, nexmark.ParamsOf(cfg, 2))
	operators.Sink(q5, "q5.out", operators.SinkFunc(func(r nexmark.Q5) error {
		mu.Lock()
		got = append(got, r)
		mu.Unlock()
		return nil
	}))
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	a := newAPI(t, admin.Options{})
	if err := a.srv.Add(run); err != nil {
		t.Fatal(err)
	}
	p := &policySwitch{t: t, a: a, job: "q5", source: "events", edge: "q5.count", feed: "q5.bid", run: run, capacity: 64, step: 15_000}
	s := p.all(ctx)

	// The model, window by window, over the events the source produced.
	stream, err := nexmark.NewStream(cfg)
	if err != nil {
		t.Fatal(err)
	}
	type window struct {
		lo, hi int64 // the stream positions of its first and last bid
		counts map[int64]int64
	}
	windows := map[int64]*window{}
	const size, period = 10_000, 5_000 // ms
	for i := range s.Total {
		ev, ok := stream.Next()
		if !ok {
			t.Fatalf("the stream ended at %d events", i)
		}
		if ev.Person != nil || ev.Auction != nil || ev.Bid == nil {
			continue
		}
		b := ev.Bid
		first := b.DateTime - b.DateTime%period
		for start := first; start > b.DateTime-size; start -= period {
			w := windows[start]
			if w == nil {
				w = &window{lo: i, counts: map[int64]int64{}}
				windows[start] = w
			}
			w.hi = i
			w.counts[b.Auction]++
		}
	}
	byWindow := map[int64][]nexmark.Q5{}
	for _, r := range got {
		byWindow[r.WindowStart] = append(byWindow[r.WindowStart], r)
	}
	exact, lossy := 0, 0
	for start, w := range windows {
		var most int64
		for _, n := range w.counts {
			most = max(most, n)
		}
		out := nexmark.Sorted(byWindow[start])
		delete(byWindow, start)
		if !s.exactStretch(w.lo, w.hi+1) {
			lossy++
			for _, r := range out {
				if r.Count > most {
					t.Errorf("window %d (lossy, bids at [%d, %d]): %+v counts more than the model's maximum %d", start, w.lo, w.hi, r, most)
				}
			}
			continue
		}
		exact++
		var want []nexmark.Q5
		for auction, n := range w.counts {
			if n == most {
				want = append(want, nexmark.Q5{WindowStart: start, WindowEnd: start + size, Auction: auction, Count: n})
			}
		}
		want = nexmark.Sorted(want)
		if !slices.Equal(out, want) {
			t.Errorf("window %d (bids at [%d, %d], all in Block or Spill stretches): got %+v, want %+v", start, w.lo, w.hi, out, want)
		}
	}
	if len(byWindow) != 0 {
		t.Errorf("output for %d windows without bids", len(byWindow))
	}
	if exact < 5 {
		t.Errorf("only %d windows fell whole in exact stretches", exact)
	}
	t.Logf("%d results: %d windows exact as the model, %d that lost bids within the model's bound", len(got), exact, lossy)
}
