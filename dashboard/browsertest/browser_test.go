package browsertest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
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
	"github.com/sluicehq/sluice/admin"
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
	// A fake Jaeger query API (the real one is in TestRecordTraceInChromium):
	// the trace of the record with key "k-7" through the steady job.
	fj := httptest.NewServer(fakeJaeger("steady", "k-7"))
	t.Cleanup(fj.Close)
	adm, err := admin.New(admin.Options{Token: adminToken})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dashboard.New(dashboard.Options{
		Title:          "sluice browser test",
		Interval:       200 * time.Millisecond,
		JaegerURL:      dashboard.DefaultJaegerURL,
		JaegerQueryURL: fj.URL,
		JaegerService:  "sluice-browsertest",
		Admin:          adm.Handler(),
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
	if err := adm.Add(steady); err != nil {
		t.Fatal(err)
	}
	// A few points of the charts before the page loads: the first frame
	// carries them, so the charts show at load.
	waitPoints(t, ctx, srv.URL, 3)
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
			chartPoints: job ? Number(job.querySelector('svg.chart-svg[data-chart="in"]').dataset.points || 0) : 0,
			procHeap: Number(document.querySelector('[data-field="proc-heap"]').dataset.value || 0),
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
		atLoad["rendered"].(float64) < 200 || atLoad["chartPoints"].(float64) < 3 || atLoad["procHeap"].(float64) <= 0 {
		t.Errorf("at load, before any event, the page shows %v: want the job (%d operators) with its charts' points and the process, no \"No job yet\"", atLoad, nOps)
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

	// A chart that moves: count's line in the chart of input rates, read
	// twice, differs (points are added as the snapshots come).
	line := job1 + ` svg.chart-svg[data-chart="in"] polyline[data-op="count"]`
	before, err := chromedp.Run(tab, chromedp.AttributeValue(chromedp.CSS(line), "points"))
	if err != nil || before.Value == "" {
		t.Fatalf("count's line in the rates chart: %q, %v", before.Value, err)
	}
	moved, err := chromedp.Run(tab, chromedp.Poll[string](fmt.Sprintf(`(() => {
		const p = document.querySelector(%q).getAttribute('points');
		return p !== %q ? p : null;
	})()`, line, before.Value), chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(15*time.Second)))
	if err != nil {
		t.Fatalf("the rates chart does not move: %v", err)
	}
	charts, err := chromedp.Run(tab, chromedp.Evaluate[map[string]float64](`(() => {
		const job = document.querySelector('section.job[data-job="1"]');
		const out = {};
		for (const c of job.querySelectorAll('svg.chart-svg')) out[c.dataset.chart] = Number(c.dataset.points || 0);
		out.lines = job.querySelectorAll('svg.chart-svg[data-chart="in"] polyline').length;
		out.procCharts = document.querySelectorAll('[data-panel="process"] svg.chart-svg').length;
		out.latency = Number(job.querySelector('tr[data-op="store"] td[data-field="latency"]').dataset.value);
		return out;
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	if charts["in"] < 3 || charts["q"] < 3 || charts["bp"] < 3 || charts["lines"] != float64(nOps) || charts["procCharts"] != 4 {
		t.Errorf("charts: %v (want rates, queue and back-pressure over 3 points or more, a line per operator, 4 process charts)", charts)
	}
	t.Logf("charts: %v; count's rates line moved from %d to %d bytes of points", charts, len(before.Value), len(moved))

	// The configuration: the plan, the checkpoint settings, every input.
	if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(job1+` details.config summary`))); err != nil {
		t.Fatal(err)
	}
	cfg, err := chromedp.Run(tab, chromedp.Evaluate[map[string]string](`(() => {
		const c = document.querySelector('section.job[data-job="1"] details.config');
		return {
			checkpoints: c.querySelector('[data-field="cfg-checkpoints"]').textContent,
			plan: c.querySelector('pre.plan').textContent,
			count: c.querySelector('tr[data-input="count"] td[data-field="policy"]').textContent,
		};
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cfg["checkpoints"], "every 100ms") || !strings.Contains(cfg["plan"], "count") || !strings.Contains(cfg["count"], "block") {
		t.Errorf("configuration shown: %v", cfg)
	}

	// The controls: without the token the admin API refuses (401, shown);
	// with the token pasted, the source pauses, and resumes.
	ctlResult := func(want string) string {
		t.Helper()
		got, err := chromedp.Run(tab, chromedp.Poll[string](fmt.Sprintf(`(() => {
			const r = document.querySelector('section.job[data-job="1"] .ctl-result');
			return r && r.dataset.status === %q ? r.textContent : null;
		})()`, want), chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(15*time.Second)))
		if err != nil {
			t.Fatalf("no control result with status %s: %v", want, err)
		}
		return got
	}
	pauseBtn := job1 + ` details.config button[data-ctl="pause"][data-op="numbers"]`
	if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(pauseBtn))); err != nil {
		t.Fatal(err)
	}
	refused := ctlResult("401")
	if !strings.Contains(refused, "bearer token") {
		t.Errorf("a pause without the token shows %q", refused)
	}
	if err := chromedp.Do(tab, chromedp.SendKeys(chromedp.CSS(job1+` input.token-input`), adminToken)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(pauseBtn))); err != nil {
		t.Fatal(err)
	}
	applied := ctlResult("200")
	if _, err := chromedp.Run(tab, chromedp.Poll[bool](`(() => {
		const td = document.querySelector('section.job[data-job="1"] tr[data-input="numbers"] td[data-field="policy"]');
		return td && td.textContent.includes('paused') || null;
	})()`, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		t.Errorf("the paused source is not shown paused: %v", err)
	}
	if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(job1+` details.config button[data-ctl="resume"][data-op="numbers"]`))); err != nil {
		t.Fatal(err)
	}
	t.Logf("controls: without the token %q; with it %q", refused, applied)
	page, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
	if err == nil && strings.Contains(page, adminToken) {
		t.Error("the page's HTML carries the admin token")
	}

	// The trace of a sampled record: found by its key, its path drawn on
	// the graph in order, its spans in a waterfall.
	traced := traceByKey(t, tab, job1, "k-7")
	if traced["path"] != "numbers,pace,count,store" || traced["steps"] != "1,2,3,4" || traced["rows"] != "5" || traced["edges"] == "0" {
		t.Errorf("the trace drawn: %v", traced)
	}
	t.Logf("trace drawn: %v", traced)

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

// adminToken is the admin API's token in the test: the user pastes it into
// the page.
const adminToken = "browser-test-token-0123456789"

// waitPoints waits until the dashboard's history holds n points of job 1.
func waitPoints(t *testing.T, ctx context.Context, base string, n int) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/snapshot.json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var s dashboard.Snapshot
		err = json.NewDecoder(resp.Body).Decode(&s)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Jobs) > 0 && s.Jobs[0].History != nil && len(s.Jobs[0].History.Points) >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the dashboard's history never held %d points", n)
		case <-tick.C:
		}
	}
}

// traceByKey asks the page for the trace of the record with key, waits
// for it to be drawn, and returns what the graph and the waterfall show.
func traceByKey(t *testing.T, tab context.Context, job, key string) map[string]string {
	t.Helper()
	if err := chromedp.Do(tab, chromedp.SendKeys(chromedp.CSS(job+` input.trace-key`), key)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(job+` button.trace-find[data-by="key"]`))); err != nil {
		t.Fatal(err)
	}
	got, err := chromedp.Run(tab, chromedp.Poll[map[string]string](fmt.Sprintf(`(() => {
		const job = document.querySelector(%q);
		const out = job.querySelector('.trace-out');
		if (out.dataset.state === 'error') return {error: out.textContent};
		if (out.dataset.state !== 'shown') return null;
		const ops = Array.from(job.querySelectorAll('svg.topology g.op.traced')).sort((a, b) => a.dataset.step - b.dataset.step);
		return {
			path: ops.map(g => g.dataset.op).join(','),
			steps: ops.map(g => g.dataset.step).join(','),
			edges: String(job.querySelectorAll('svg.topology path.edge.traced').length),
			rows: String(job.querySelectorAll('.waterfall .wf-row').length),
			trace: job.querySelector('svg.topology').dataset.trace || '',
			head: job.querySelector('.trace-head').textContent,
		};
	})()`, job), chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second)))
	if err != nil {
		t.Fatalf("the trace of %q is not drawn: %v", key, err)
	}
	if got["error"] != "" {
		t.Fatalf("the trace of %q: the page shows the error %s", key, got["error"])
	}
	return got
}

// fakeJaeger answers Jaeger's query API with one trace, of the record
// with key through the steady job, written as the engine writes its spans
// (docs/tracing.md): numbers (source) -> pace (fused) -> count (after the
// key-by shuffle) -> store, and a drop span that is not on the path.
func fakeJaeger(topology, key string) http.Handler {
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	type tag struct {
		Key   string `json:"key"`
		Type  string `json:"type"`
		Value any    `json:"value"`
	}
	span := func(id, parent, op, role string, start int64, extra ...tag) map[string]any {
		refs := []map[string]string{}
		if parent != "" {
			refs = append(refs, map[string]string{"refType": "CHILD_OF", "traceID": traceID, "spanID": parent})
		}
		tags := append([]tag{{"sluice.operator", "string", op}, {"sluice.role", "string", role}, {"sluice.topology", "string", topology}}, extra...)
		return map[string]any{"traceID": traceID, "spanID": id, "operationName": op, "references": refs,
			"startTime": 1764600000000000 + start, "duration": 40, "tags": tags, "logs": []any{}, "processID": "p1"}
	}
	trace := map[string]any{"traceID": traceID, "processes": map[string]any{"p1": map[string]string{"serviceName": "sluice-browsertest"}},
		"spans": []any{
			span("0000000000000001", "", "numbers", "source", 0, tag{"sluice.record.id", "string", "numbers/0/7"}),
			span("0000000000000002", "0000000000000001", "pace", "pass", 50, tag{"sluice.edge", "string", "numbers->pace"}),
			span("0000000000000003", "0000000000000002", "count", "pass", 300, tag{"sluice.key", "string", key}, tag{"sluice.queue.wait_us", "int64", 180}),
			span("0000000000000005", "0000000000000003", "store drop", "drop", 380),
			span("0000000000000004", "0000000000000003", "store", "pass", 400),
		}}
	reply, _ := json.Marshal(map[string]any{"data": []any{trace}, "total": 0, "limit": 0, "offset": 0, "errors": nil})
	empty := []byte(`{"data":[],"total":0,"limit":0,"offset":0,"errors":null}`)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/traces":
			var tags map[string]string
			_ = json.Unmarshal([]byte(r.URL.Query().Get("tags")), &tags)
			if tags["sluice.key"] == key && tags["sluice.topology"] == topology {
				_, _ = w.Write(reply)
				return
			}
			_, _ = w.Write(empty)
		case "/api/traces/" + traceID:
			_, _ = w.Write(reply)
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"data":null,"errors":[{"code":404,"msg":"trace not found"}]}`))
		}
	})
}
