package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/clock/clocktest"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
)

func newSystem(t *testing.T) (*actors.System, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	sys, err := actors.NewSystem(actors.Config{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sys.Stop(ctx); err != nil {
			t.Errorf("system stop: %v", err)
		}
		cancel()
	})
	return sys, ctx
}

func newDashboard(t *testing.T, opts Options) *Dashboard {
	t.Helper()
	d, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// startPaced runs source -> pace (fused) -> count by key -> sink, the
// source paced to about perSecond records by a ticker, until the test ends
// (it is drained then).
func startPaced(t *testing.T, sys *actors.System, ctx context.Context, name string, perSecond int) *actors.Run {
	t.Helper()
	tick := time.NewTicker(time.Second / time.Duration(perSecond))
	top := operators.NewTopology(name, operators.BatchSize(8))
	src := operators.Source(top, "src", operators.Generate(operators.Unbounded, func(i int64) int64 { return i }))
	paced := operators.Map(src, "pace", func(v int64) int64 { <-tick.C; return v })
	by := operators.KeyBy(paced, "by-mod", func(v int64) int64 { return v % 8 }, operators.Parallelism(2))
	counts := operators.Count(by, "count")
	operators.Sink(counts, "drop", operators.SinkFunc(func(operators.KV[int64, int64]) error { return nil }))
	run, err := sys.Run(ctx, top)
	if err != nil {
		tick.Stop()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := run.Drain(dctx); err != nil {
			t.Errorf("drain %s: %v", name, err)
		}
		tick.Stop()
	})
	return run
}

// waitFor polls cond until it holds or ten seconds pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

// The handler serves the embedded page, mounted at the root or under a
// prefix, with every link relative.
func TestHandlerServesPage(t *testing.T) {
	d := newDashboard(t, Options{Title: "orders"})
	mux := http.NewServeMux()
	mux.Handle("/", d.Handler())
	mux.Handle("/sluice/", http.StripPrefix("/sluice", d.Handler()))
	mux.Handle("/other/", http.StripPrefix("/other/", d.Handler()))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, prefix := range []string{"", "/sluice", "/other"} {
		resp, body := get(t, srv.URL+prefix+"/")
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
			!strings.Contains(body, `<script src="app.js"`) || !strings.Contains(body, `href="style.css"`) {
			t.Errorf("GET %s/: %s %q\n%s", prefix, resp.Status, resp.Header.Get("Content-Type"), body)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("GET %s/: Content-Security-Policy %q", prefix, csp)
		}
		for path, ctype := range map[string]string{"/app.js": "javascript", "/style.css": "text/css", "/snapshot.json": "application/json"} {
			resp, body := get(t, srv.URL+prefix+path)
			if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), ctype) || len(body) == 0 {
				t.Errorf("GET %s%s: %s %q", prefix, path, resp.Status, resp.Header.Get("Content-Type"))
			}
		}
	}
	// Nothing on the page comes from elsewhere.
	for _, path := range []string{"/", "/app.js", "/style.css"} {
		_, body := get(t, srv.URL+path)
		if strings.Contains(body, "http://") && !strings.Contains(body, "http://www.w3.org/2000/svg") || strings.Contains(body, "https://") {
			t.Errorf("%s refers to another site:\n%s", path, body)
		}
	}
	resp, body := get(t, srv.URL+"/snapshot.json")
	var s Snapshot
	if err := json.Unmarshal([]byte(body), &s); err != nil || s.Title != "orders" || s.Jobs == nil {
		t.Errorf("snapshot.json %s: %v, %+v", resp.Status, err, s)
	}
	if resp, _ := get(t, srv.URL+"/nope"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nope: %s", resp.Status)
	}
}

func TestOptionsValidated(t *testing.T) {
	for _, o := range []Options{
		{Interval: -time.Second},
		{Interval: time.Hour},
		{JaegerURL: "127.0.0.1:16686"},
		{JaegerURL: "ftp://127.0.0.1"},
	} {
		if d, err := New(o); !errors.Is(err, ErrInvalid) {
			t.Errorf("New(%+v): %v, want ErrInvalid", o, err)
			if d != nil {
				d.Close()
			}
		}
	}
}

// Jobs come and go; one that ended keeps its final counters, without rates,
// and an operator links to its traces when a Jaeger URL is set.
func TestAddRemoveAndFinalState(t *testing.T) {
	sys, ctx := newSystem(t)
	d := newDashboard(t, Options{Interval: 20 * time.Millisecond, JaegerURL: DefaultJaegerURL, JaegerService: "sluice-test"})
	top := operators.NewTopology("small", operators.BatchSize(64))
	src := operators.Source(top, "numbers", operators.Generate(1000, func(i int64) int64 { return i }))
	operators.Sink(src, "out", operators.SinkFunc(func(int64) error { return nil }), operators.Input(mailbox.DropNewest(64)))
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Add(run); err != nil {
		t.Fatal(err)
	}
	if err := d.Add(run); err != nil || len(d.Snapshot().Jobs) != 1 {
		t.Fatalf("a run added twice: %v, %d jobs", err, len(d.Snapshot().Jobs))
	}
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	var job Job
	waitFor(t, "the final state", func() bool {
		s := d.Snapshot()
		job = s.Jobs[0]
		return job.State == StateFinished && opNamed(t, job, "numbers").OutRate == 0
	})
	src2, out := opNamed(t, job, "numbers"), opNamed(t, job, "out")
	if src2.Out != 1000 || out.In+out.Dropped != 1000 || out.Policy != "drop-newest" || out.Capacity != 64 {
		t.Errorf("final counters: %+v %+v", src2, out)
	}
	if !strings.HasPrefix(out.TracesURL, DefaultJaegerURL+"/search?") || !strings.Contains(out.TracesURL, "service=sluice-test") ||
		!strings.Contains(out.TracesURL, "operation=out") {
		t.Errorf("traces link %q", out.TracesURL)
	}
	// Added after its end, a run shows its final state at once.
	d2 := newDashboard(t, Options{})
	if err := d2.Add(run); err != nil {
		t.Fatal(err)
	}
	if j := d2.Snapshot().Jobs[0]; j.State != StateFinished || opNamed(t, j, "numbers").Out != 1000 || j.ID != "1" {
		t.Errorf("late Add: %+v", j)
	}
	if !d.Remove(run) || d.Remove(run) || len(d.Snapshot().Jobs) != 0 {
		t.Error("Remove")
	}
	d.Close()
	if err := d.Add(run); !errors.Is(err, ErrClosed) {
		t.Errorf("Add after Close: %v", err)
	}
}

func TestListenAddr(t *testing.T) {
	cases := []struct {
		in, want string
		loopback bool
	}{
		{":8080", "127.0.0.1:8080", true},
		{"8080", "127.0.0.1:8080", true},
		{"127.0.0.1:0", "127.0.0.1:0", true},
		{"localhost:9000", "localhost:9000", true},
		{"[::1]:8080", "[::1]:8080", true},
		// Written out, a non-loopback host is kept: the user chose it.
		{"0.0.0.0:8080", "0.0.0.0:8080", false},
		{"192.0.2.7:80", "192.0.2.7:80", false},
	}
	for _, c := range cases {
		got, lo, err := ListenAddr(c.in)
		if err != nil || got != c.want || lo != c.loopback {
			t.Errorf("ListenAddr(%q) = %q, %v, %v; want %q, %v", c.in, got, lo, err, c.want, c.loopback)
		}
	}
	for _, bad := range []string{"", "nope", "1.2.3.4"} {
		if _, _, err := ListenAddr(bad); err == nil {
			t.Errorf("ListenAddr(%q): no error", bad)
		}
	}
}

// Serve listens on loopback for a port alone, serves the page, and stops
// (closing the dashboard and its streams) when its context ends.
func TestServe(t *testing.T) {
	d := newDashboard(t, Options{Interval: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, wait, err := d.Serve(ctx, ":0")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.HasSuffix(url, "/") {
		t.Fatalf("url %q: want loopback", url)
	}
	if resp, body := get(t, url); resp.StatusCode != http.StatusOK || !strings.Contains(body, "app.js") {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	r := stream(t, sctx, strings.TrimSuffix(url, "/"))
	nextSnapshot(t, r)
	cancel() // with a stream open: Serve must end it, and stop
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if d.Streams() != 0 {
		t.Errorf("%d streams after Serve stopped", d.Streams())
	}
}

// firstFrameOf returns the snapshot the page carries in its data block.
func firstFrameOf(t *testing.T, body string) Snapshot {
	t.Helper()
	const open = `<script type="application/json" id="first-frame">`
	i := strings.Index(body, open)
	if i < 0 {
		t.Fatalf("no first frame in the page:\n%s", body)
	}
	rest := body[i+len(open):]
	j := strings.Index(rest, "</script>")
	if j < 0 {
		t.Fatalf("the first frame does not end:\n%s", body)
	}
	var s Snapshot
	if err := json.Unmarshal([]byte(rest[:j]), &s); err != nil {
		t.Fatalf("first frame: %v\n%s", err, rest[:j])
	}
	return s
}

// TestFirstFrameInPage: the page carries the latest snapshot, so it shows
// a running job at load, before any event; with no job it says so. A title
// that tries to end the data block stays inside it.
func TestFirstFrameInPage(t *testing.T) {
	const title = `orders</script><script>alert(1)</script>`
	d := newDashboard(t, Options{Title: title, Interval: 50 * time.Millisecond})
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()

	_, body := get(t, srv.URL+"/")
	if s := firstFrameOf(t, body); s.Title != title || len(s.Jobs) != 0 {
		t.Errorf("first frame without jobs: %+v", s)
	}
	if !strings.Contains(body, `<p id="empty" class="muted">No job yet.</p>`) {
		t.Errorf("no job, but the page does not say so:\n%s", body)
	}

	sys, ctx := newSystem(t)
	run := startPaced(t, sys, ctx, "first", 500)
	if err := d.Add(run); err != nil {
		t.Fatal(err)
	}
	_, body = get(t, srv.URL+"/")
	s := firstFrameOf(t, body)
	if len(s.Jobs) != 1 || s.Jobs[0].Name != "first" || len(s.Jobs[0].Operators) != 4 || len(s.Jobs[0].Graph.Tasks) == 0 {
		t.Errorf("first frame with a job: %+v", s)
	}
	if !strings.Contains(body, `<p id="empty" class="muted" hidden>`) {
		t.Errorf("a job runs, but the page says there is none:\n%s", body)
	}
	if strings.Count(body, "<script") != 2 { // app.js and the data block; the title's tags are escaped
		t.Errorf("the page has %d script tags:\n%s", strings.Count(body, "<script"), body)
	}
}

// TestReplaceKeepsTheJob: a run shown in the place of another (a rescale)
// is the same job of the dashboard: the same id, one job, and the
// figures, state and plan are the new run's.
func TestReplaceKeepsTheJob(t *testing.T) {
	sys, ctx := newSystem(t)
	d := newDashboard(t, Options{Interval: 20 * time.Millisecond})
	start := func(par int) *actors.Run {
		t.Helper()
		top := operators.NewTopology("scaled", operators.BatchSize(64))
		src := operators.Source(top, "numbers", operators.Generate(1000, func(i int64) int64 { return i }))
		by := operators.KeyBy(src, "by-mod", func(v int64) int64 { return v % 8 }, operators.Parallelism(par))
		operators.Sink(operators.Count(by, "count"), "out", operators.SinkFunc(func(operators.KV[int64, int64]) error { return nil }))
		run, err := sys.Run(ctx, top)
		if err != nil {
			t.Fatal(err)
		}
		if err := run.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		return run
	}
	first := start(2)
	if err := d.Add(first); err != nil {
		t.Fatal(err)
	}
	second := start(3)
	if ok, err := d.Replace(first, second); !ok || err != nil {
		t.Fatalf("Replace: %v, %v", ok, err)
	}
	s := d.Snapshot()
	if len(s.Jobs) != 1 || s.Jobs[0].ID != "1" {
		t.Fatalf("after Replace: %d jobs, id %q; want the one job, id 1", len(s.Jobs), s.Jobs[0].ID)
	}
	if c := opNamed(t, s.Jobs[0], "count"); c.Parallelism != 3 {
		t.Fatalf("count after Replace: parallelism %d, want the new run's 3", c.Parallelism)
	}
	if st := s.Jobs[0].State; st != StateFinished {
		t.Fatalf("after Replace with a finished run: state %q", st)
	}
	// Replacing a run the dashboard does not show adds it.
	other := start(1)
	if ok, err := d.Replace(first, other); ok || err != nil || len(d.Snapshot().Jobs) != 2 {
		t.Fatalf("Replace of a run not shown: %v, %v, %d jobs; want it added", ok, err, len(d.Snapshot().Jobs))
	}
}

// The dashboard's time is its clock's: snapshots carry the clock's time,
// and it polls every Interval on that clock (nothing moves until the clock
// does).
func TestDashboardClock(t *testing.T) {
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	m := clocktest.NewManual(start)
	d, err := New(Options{Clock: m, Interval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if got := d.Snapshot().Time; !got.Equal(start) {
		t.Fatalf("first snapshot at %v, want the clock's %v", got, start)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 1; i <= 3; i++ {
		if err := m.WaitForTimers(ctx, 1); err != nil {
			t.Fatalf("the poller's timer: %v", err)
		}
		seq := d.Snapshot().Seq
		m.Advance(time.Second)
		want := start.Add(time.Duration(i) * time.Second)
		waitFor(t, fmt.Sprintf("poll %d", i), func() bool { s := d.Snapshot(); return s.Seq > seq && s.Time.Equal(want) })
	}
}
