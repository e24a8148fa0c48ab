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

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/supervision"
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
// 127.0.0.1 and reads the page in a real headless Chromium at 1,280 px: at
// load (the stream blocked) it shows the job from the server's first frame;
// the graph of a job is drawn with every operator; the table fits; the
// per-instance rows and the checkpoint history are there; its numbers move;
// an overloaded job added later shows its queue rising to capacity and its
// drops; a failure injected into a third shows among its exceptions.
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
	shots := os.Getenv("SLUICE_SCREENSHOT_DIR")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}

	// At load, with the event stream blocked: what the page shows then is
	// the first frame the server put into it, and it shows the job.
	if err := chromedp.Do(tab, chromedp.EmulateViewport(1280, 1000)); err != nil {
		t.Fatalf("start the browser: %v", err)
	}
	block := func(patterns ...string) {
		t.Helper()
		var ps []*network.BlockPattern
		for _, p := range patterns {
			ps = append(ps, &network.BlockPattern{URLPattern: p, Block: true})
		}
		if _, err := chromedp.Call(tab, network.SetBlockedURLs, network.SetBlockedURLsParams{URLPatterns: ps}); err != nil {
			t.Fatalf("block %v: %v", patterns, err)
		}
	}
	block(srv.URL + "/events")
	if err := chromedp.Do(tab, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	loadShot, err := chromedp.Run(tab, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	atLoad, err := chromedp.Run(tab, chromedp.Evaluate[map[string]any](`(() => {
		const job = document.querySelector('section.job[data-job="1"]');
		return {
			empty: document.getElementById('empty').hidden,
			status: document.getElementById('status').dataset.state,
			ops: job ? job.querySelectorAll('svg g.op').length : 0,
			rows: job ? job.querySelectorAll('table.ops tbody tr:not(.instance)').length : 0,
			rendered: job ? job.getBoundingClientRect().height : 0,
		};
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	nOps := 0
	for _, task := range plan.Tasks {
		nOps += len(task.Operators)
	}
	if atLoad["empty"] != true || atLoad["status"] == "live" || atLoad["ops"] != float64(nOps) || atLoad["rows"] != float64(nOps) ||
		atLoad["rendered"].(float64) < 200 {
		t.Errorf("at load, before any event, the page shows %v: want the job (%d operators), no \"No job yet\"", atLoad, nOps)
	}
	if err := os.WriteFile(filepath.Join(shots, "dashboard-at-load.png"), loadShot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("at load (no event yet): %v; screenshot %d bytes", atLoad, len(loadShot))
	block() // the stream again
	if err := chromedp.Do(tab, chromedp.Reload()); err != nil {
		t.Fatalf("reload the page: %v", err)
	}
	if _, err := chromedp.Run(tab, chromedp.Poll[bool](`document.getElementById('status').dataset.state === 'live' || null`,
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		t.Fatalf("the stream does not connect: %v", err)
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

	// Readable at 1,280 px: the table fits, no operator name or header
	// wraps or is cut, the sparklines are tall enough, the colours have a
	// legend.
	fit, err := chromedp.Run(tab, chromedp.Evaluate[map[string]float64](`(() => {
		const job = document.querySelector('section.job[data-job="1"]');
		const wrap = job.querySelector('.table-wrap'), table = wrap.querySelector('table.ops');
		let wrapped = 0, cut = 0;
		for (const b of table.querySelectorAll('tbody td.name b')) if (b.getClientRects().length !== 1) wrapped++;
		for (const th of table.querySelectorAll('th')) if (th.scrollWidth > th.clientWidth + 1) cut++;
		return {
			overflow: table.scrollWidth - wrap.clientWidth, wrapped, cut, page: document.documentElement.scrollWidth - window.innerWidth,
			spark: job.querySelector('svg.spark').getBoundingClientRect().height,
			legend: job.querySelectorAll('.legend .item').length,
		};
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	if fit["overflow"] > 0 || fit["page"] > 0 || fit["wrapped"] != 0 || fit["cut"] != 0 || fit["spark"] < 20 || fit["legend"] < 8 {
		t.Errorf("at 1,280 px: %v (want no overflow, nothing wrapped or cut, sparklines of 20 px or more, a legend)", fit)
	}

	// Per-instance rows: count runs ×2; its row expands into one row per
	// instance, each with its records and its share of time.
	if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(job1+` button.toggle[data-op="count"]`))); err != nil {
		t.Fatal(err)
	}
	insts, err := chromedp.Run(tab, chromedp.Poll[[]map[string]any](`(() => {
		const rows = document.querySelectorAll('section.job[data-job="1"] tr.instance[data-op="count"]');
		const out = [];
		for (const r of rows) {
			if (r.hidden) return null;
			const sh = r.querySelector('.shares');
			const busy = Number(sh.dataset.busy), blocked = Number(sh.dataset.blocked), idle = Number(sh.dataset.idle);
			const in_ = Number(r.querySelector('td[data-field="in"]').dataset.value);
			if (!(in_ > 0) || !(blocked >= 0) || !(busy >= 0)) return null;
			out.push({instance: r.dataset.instance, in: in_, busy, blocked, idle, sum: busy + blocked + idle});
		}
		return out.length ? out : null;
	})()`, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(15*time.Second)))
	if err != nil {
		t.Fatalf("count's instance rows: %v", err)
	}
	if len(insts) != 2 {
		t.Errorf("count ×2 shows %d instance rows: %v", len(insts), insts)
	}
	for _, in := range insts {
		if sum := in["sum"].(float64); sum < 0.99 || sum > 1.01 {
			t.Errorf("instance %v: busy + back-pressured + idle = %v, want 100%%", in, sum)
		}
	}
	t.Logf("count's instances: %v", insts)

	// Checkpoints complete, and the page lists each: one history row per
	// completed checkpoint, newest first.
	history, err := chromedp.Run(tab, chromedp.Poll[map[string]any](`(() => {
		const job = document.querySelector('section.job[data-job="1"]');
		const completed = Number(job.querySelector('[data-field="cp-completed"]').dataset.value);
		const rows = Array.from(job.querySelectorAll('[data-panel="checkpoints"] tr[data-state="completed"]'));
		const ids = rows.map(r => Number(r.dataset.checkpoint));
		const last = Number(job.querySelector('[data-field="cp-last"]').dataset.value);
		if (completed < 3 || rows.length !== Math.min(completed, 64) || ids[0] !== last) return null;
		return {completed, rows: rows.length, ids: ids.join(','), first: rows[0].textContent};
	})()`, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(15*time.Second)))
	if err != nil {
		t.Fatalf("checkpoint history: %v", err)
	}
	ids := strings.Split(history["ids"].(string), ",")
	for i := 1; i < len(ids); i++ {
		if len(ids[i]) > len(ids[i-1]) || len(ids[i]) == len(ids[i-1]) && ids[i] >= ids[i-1] {
			t.Errorf("checkpoint history not newest first: %v", ids)
			break
		}
	}
	t.Logf("checkpoint history: %v", history)

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

	// An injected failure: a map fails once on record 200; the job restarts
	// and the exceptions view shows the cause. Another map gives up every
	// 50th record to the dead letters, which the view lists too.
	flakyPace := newPacer(time.Millisecond)
	var failed sync.Once
	dead, err := supervision.NewMemoryDeadLetters(0)
	if err != nil {
		t.Fatal(err)
	}
	flakyTop := operators.NewTopology("flaky", operators.BatchSize(16), operators.DeadLetters(dead),
		operators.RestartOnFailure(supervision.Backoff{Initial: time.Millisecond, Max: 4 * time.Millisecond, Multiplier: 2, Jitter: supervision.NoJitter}, 3, time.Minute))
	nums := operators.Source(flakyTop, "nums", operators.Generate(operators.Unbounded, func(i int64) int64 { return i }))
	checked := operators.Map(nums, "check", func(v int64) int64 {
		flakyPace.wait()
		if v == 200 {
			failed.Do(func() { panic("injected failure at record 200") })
		}
		return v
	})
	poisoned := operators.Map(checked, "poisoned", func(v int64) int64 {
		if v%50 == 7 {
			panic(fmt.Sprintf("poison record %d", v))
		}
		return v
	}, operators.OnRecordFailure(1))
	operators.Sink(poisoned, "out", operators.SinkFunc(func(int64) error { return nil }))
	flaky := start(t, ctx, sys, flakyTop, flakyPace)
	if err := d.Add(flaky); err != nil {
		t.Fatal(err)
	}
	cause, err := chromedp.Run(tab, chromedp.Poll[string](`(() => {
		const r = document.querySelector('section.job[data-job="3"] [data-panel="exceptions"] tr.exception[data-kind="restart"] td.cause');
		return r && r.textContent.includes('injected failure at record 200') ? r.textContent : null;
	})()`, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(15*time.Second)))
	if err != nil {
		t.Fatalf("the injected failure is not shown among the exceptions: %v", err)
	}
	if n, err := pollNumber(tab, `section.job[data-job="3"] [data-field="restarts"]`, "data-value", 0); err != nil || n != 1 {
		t.Errorf("restarts shown: %v, %v; want 1", n, err)
	}
	t.Logf("exception shown: %s", cause)
	letter, err := chromedp.Run(tab, chromedp.Poll[string](`(() => {
		const r = document.querySelector('section.job[data-job="3"] [data-panel="exceptions"] tr.exception[data-kind="dead-letter"]');
		return r && r.textContent.includes('poison record') ? r.textContent : null;
	})()`, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(15*time.Second)))
	if err != nil {
		t.Fatalf("no dead letter shown among the exceptions: %v", err)
	}
	t.Logf("dead letter shown: %s", letter)

	shot, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(shots, "dashboard.png")
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
