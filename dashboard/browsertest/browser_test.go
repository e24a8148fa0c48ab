package browsertest

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
)

// defaultChromium is where Debian's chromium package puts the browser.
const defaultChromium = "/usr/bin/chromium"

// chromiumPath returns the browser to drive, or skips the test without one
// (fails it when SLUICE_REQUIRE_CHROMIUM=1, as in CI).
func chromiumPath(t *testing.T) string {
	t.Helper()
	path := cmp.Or(os.Getenv("SLUICE_CHROMIUM"), defaultChromium)
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("SLUICE_REQUIRE_CHROMIUM") == "1" {
			t.Fatalf("no Chromium (SLUICE_REQUIRE_CHROMIUM=1): %v; install it with .ci/chromium", err)
		}
		t.Skipf("no Chromium at %s: install it with .ci/chromium (SLUICE_REQUIRE_CHROMIUM=1 makes this a failure)", path)
	}
	return path
}

// lockedBuffer keeps the browser's output for the failure message.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.b.String()
	return s[max(0, len(s)-n):]
}

// startBrowser starts a headless Chromium with a fresh profile (chromedp
// makes a temporary --user-data-dir and removes it) and the flags that keep
// it off the network, and returns a chromedp context for one tab. The
// browser is stopped, and waited for, when the test ends.
func startBrowser(t *testing.T, ctx context.Context, path string) (context.Context, *lockedBuffer) {
	t.Helper()
	out := &lockedBuffer{}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.CombinedOutput(out),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	tab, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc() // waits for the browser process to exit
		if t.Failed() {
			t.Logf("browser output (tail):\n%s", out.tail(4000))
		}
	})
	return tab, out
}

// pacer lets a record through at every tick of its ticker, or at once
// after release: the tests' jobs run at a known pace, and drain quickly.
type pacer struct {
	tick *time.Ticker
	open chan struct{}
	once sync.Once
}

func newPacer(every time.Duration) *pacer {
	return &pacer{tick: time.NewTicker(every), open: make(chan struct{})}
}

func (p *pacer) wait() {
	select {
	case <-p.tick.C:
	case <-p.open:
	}
}

func (p *pacer) release() {
	p.once.Do(func() {
		close(p.open)
		p.tick.Stop()
	})
}

// start runs top, and drains it when the test ends, after releasing its
// pacers.
func start(t *testing.T, ctx context.Context, sys *actors.System, top *operators.Topology, pacers ...*pacer) *actors.Run {
	t.Helper()
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, p := range pacers {
			p.release()
		}
		dctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := run.Drain(dctx); err != nil {
			t.Errorf("drain %s: %v", run.Name(), err)
		}
	})
	return run
}

// pollNumber waits until the number in attribute attr of the element sel
// is above floor and returns it; the page updates it from the stream.
func pollNumber(ctx context.Context, sel, attr string, floor float64) (float64, error) {
	expr := fmt.Sprintf(`(() => {
		const e = document.querySelector(%q);
		if (!e || !e.hasAttribute(%q)) return null;
		const v = Number(e.getAttribute(%q));
		return v > %v ? v : null;
	})()`, sel, attr, attr, floor)
	v, err := chromedp.Run(ctx, chromedp.Poll[float64](expr,
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(15*time.Second)))
	if err != nil {
		return 0, fmt.Errorf("%s [%s] above %v: %w", sel, attr, floor, err)
	}
	return v, nil
}

// TestDashboardInChromium serves the dashboard over running jobs on
// 127.0.0.1 and reads the page in a real headless Chromium: the graph of a
// job is drawn with every operator, its numbers move, and an overloaded job
// added later shows its queue rising to capacity and its drops.
func TestDashboardInChromium(t *testing.T) {
	chromium := chromiumPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()

	sys, err := actors.NewSystem(actors.Config{Name: "browsertest"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := sys.Stop(sctx); err != nil {
			t.Errorf("system stop: %v", err)
		}
	})
	d, err := dashboard.New(dashboard.Options{
		Title:         "sluice browser test",
		Interval:      200 * time.Millisecond,
		JaegerURL:     dashboard.DefaultJaegerURL,
		JaegerService: "sluice-browsertest",
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler()) // 127.0.0.1, a free port
	// Cleanups run last first: the browser goes, then the dashboard closes
	// its streams, then the server stops, then the jobs drain.
	t.Cleanup(srv.Close)
	t.Cleanup(func() { d.Close() })

	// A steady job: about 1000 records a second through a keyed count,
	// checkpointed ten times a second.
	steadyPace := newPacer(time.Millisecond)
	steadyTop := operators.NewTopology("steady", operators.BatchSize(16), operators.Checkpoints(100*time.Millisecond))
	src := operators.Source(steadyTop, "numbers", operators.Generate(operators.Unbounded, func(i int64) int64 { return i }))
	paced := operators.Map(src, "pace", func(v int64) int64 { steadyPace.wait(); return v })
	byKey := operators.KeyBy(paced, "by-key", func(v int64) int64 { return v % 16 }, operators.Parallelism(2))
	counts := operators.Count(byKey, "count")
	operators.Sink(counts, "store", operators.SinkFunc(func(operators.KV[int64, int64]) error { return nil }))
	steady := start(t, ctx, sys, steadyTop, steadyPace)
	if err := d.Add(steady); err != nil {
		t.Fatal(err)
	}
	plan, err := steadyTop.Plan()
	if err != nil {
		t.Fatal(err)
	}

	tab, _ := startBrowser(t, ctx, chromium)
	console := watchConsole(t, tab)
	if err := chromedp.Do(tab, chromedp.EmulateViewport(1400, 1000), chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatalf("open the page: %v", err)
	}

	// The graph: a box per task, a row per operator with its name, an edge
	// per plan edge with its partitioning.
	const job1 = `section.job[data-job="1"]`
	if err := chromedp.Do(tab, chromedp.WaitVisible(chromedp.CSS(job1+` svg g.op[data-op="count"]`))); err != nil {
		t.Fatalf("the graph is not drawn: %v", err)
	}
	drawn, err := chromedp.Run(tab, chromedp.Evaluate[map[string]string](`(() => {
		const s = document.querySelector('section.job[data-job="1"] svg');
		const ops = {};
		for (const g of s.querySelectorAll('g.op')) ops[g.dataset.op] = g.querySelector('text.op-name').textContent;
		ops['#tasks'] = String(s.querySelectorAll('g.task').length);
		ops['#edges'] = String(s.querySelectorAll('path.edge').length);
		ops['#labels'] = Array.from(s.querySelectorAll('text.edge-label[data-label]')).map(e => e.dataset.label).join(',');
		ops['#title'] = document.title;
		return ops;
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range plan.Tasks {
		for i, op := range task.Operators {
			// The row shows the name, then the kind.
			if got := drawn[op]; got != op+task.Kinds[i] {
				t.Errorf("operator %q drawn as %q, want its name and kind %q", op, got, task.Kinds[i])
			}
		}
	}
	if drawn["#tasks"] != fmt.Sprint(len(plan.Tasks)) || drawn["#edges"] != fmt.Sprint(len(plan.Edges)) ||
		!strings.Contains(drawn["#labels"], "hash (by-key)") || drawn["#title"] != "sluice browser test" {
		t.Errorf("graph: %d tasks and %d edges planned, page shows %v", len(plan.Tasks), len(plan.Edges), drawn)
	}
	link, err := chromedp.Run(tab, chromedp.AttributeValue(chromedp.CSS(job1+` tr[data-op="count"] a.traces`), "href"))
	if err != nil || !strings.HasPrefix(link.Value, dashboard.DefaultJaegerURL+"/search?") ||
		!strings.Contains(link.Value, "service=sluice-browsertest") || !strings.Contains(link.Value, "operation=count") {
		t.Errorf("traces link of count: %q, %v", link.Value, err)
	}

	// Checkpoints complete, and the page says so.
	if cps, err := pollNumber(tab, job1+` [data-field="cp-completed"]`, "data-value", 0); err != nil {
		t.Errorf("no checkpoint shown: %v", err)
	} else {
		t.Logf("checkpoints completed: %v", cps)
	}

	// The numbers move: two reads of count's "in", some time apart, differ.
	inCell := job1 + ` tr[data-op="count"] td[data-field="in"]`
	first, err := pollNumber(tab, inCell, "data-value", 0)
	if err != nil {
		t.Fatal(err)
	}
	second, err := pollNumber(tab, inCell, "data-value", first)
	if err != nil {
		t.Fatalf("count's input stayed at %v: %v", first, err)
	}
	t.Logf("count in: %v, then %v", first, second)
	if rate, err := pollNumber(tab, inCell+` + td[data-field="in_rate"]`, "data-value", 0); err != nil {
		t.Errorf("count's input rate: %v", err)
	} else {
		t.Logf("count in rate: %.0f/s", rate)
	}

	// Overload: a source paced at about 2000 records a second into a sink
	// that takes 100 a second, through a DropOldest mailbox of 2048.
	const capacity = 2048
	fastPace, slowPace := newPacer(500*time.Microsecond), newPacer(10*time.Millisecond)
	overTop := operators.NewTopology("overload", operators.BatchSize(16))
	feed := operators.Source(overTop, "feed", operators.Generate(operators.Unbounded, func(i int64) int64 { return i }))
	fast := operators.Map(feed, "fast", func(v int64) int64 { fastPace.wait(); return v })
	operators.Sink(fast, "slow", operators.SinkFunc(func(int64) error { slowPace.wait(); return nil }),
		operators.Input(mailbox.DropOldest(capacity)))
	over := start(t, ctx, sys, overTop, fastPace, slowPace)
	if err := d.Add(over); err != nil {
		t.Fatal(err)
	}
	const job2 = `section.job[data-job="2"]`
	bar := job2 + ` tr[data-op="slow"] .bar`
	q1, err := pollNumber(tab, bar, "data-value", 0)
	if err != nil {
		t.Fatalf("the overloaded job's queue never shows: %v", err)
	}
	q2, err := pollNumber(tab, bar, "data-value", q1+100)
	if err != nil {
		t.Fatalf("the queue does not rise from %v: %v", q1, err)
	}
	dropped := job2 + ` tr[data-op="slow"] td[data-field="dropped"]`
	d1, err := pollNumber(tab, dropped, "data-value", 0)
	if err != nil {
		t.Fatalf("no drops shown: %v", err)
	}
	d2, err := pollNumber(tab, dropped, "data-value", d1)
	if err != nil {
		t.Fatalf("drops stay at %v: %v", d1, err)
	}
	q3, err := pollNumber(tab, bar, "data-value", capacity*0.9)
	if err != nil {
		t.Fatalf("the queue never nears its capacity %d: %v", capacity, err)
	}
	t.Logf("overload: queue %v, %v, %v of %d; dropped %v, then %v", q1, q2, q3, capacity, d1, d2)
	shown, err := chromedp.Run(tab, chromedp.Evaluate[map[string]string](`(() => {
		const job = document.querySelector('section.job[data-job="2"]');
		const row = job.querySelector('tr[data-op="slow"]');
		const task = job.querySelector('svg g.op[data-op="slow"]').closest('g.task');
		return {
			bar: row.querySelector('.bar').className,
			reasons: row.querySelector('td[data-field="dropped"]').textContent,
			box: task.getAttribute('class'),
			alert: task.querySelector('text.alert').textContent,
			queue: task.querySelector('text.q-text').textContent,
		};
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(shown["bar"], "full") || !strings.Contains(shown["reasons"], "evicted") ||
		!strings.Contains(shown["box"], "drops") || !strings.Contains(shown["alert"], "drop") ||
		!strings.Contains(shown["queue"], "drop-oldest") {
		t.Errorf("the overload is not shown as such: %v", shown)
	}

	shot, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("SLUICE_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "dashboard.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(shot))

	for _, m := range console() {
		t.Errorf("the page logged: %s", m)
	}
}

// watchConsole collects the page's errors and uncaught exceptions until the
// returned function is called, which stops the collection and returns them.
func watchConsole(t *testing.T, tab context.Context) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(tab)
	messages := chromedp.Console(ctx)
	var (
		mu   sync.Mutex
		errs []string
		done = make(chan struct{})
	)
	go func() { // owned: ends when ctx does; stop waits for it
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == chromedp.ConsoleError {
				mu.Lock()
				errs = append(errs, m.String())
				mu.Unlock()
			}
		}
	}()
	var once sync.Once
	stop := func() []string {
		once.Do(func() { cancel(); <-done })
		mu.Lock()
		defer mu.Unlock()
		return errs
	}
	t.Cleanup(func() { stop() })
	return stop
}
