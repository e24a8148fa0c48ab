package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/netaddr"
	"github.com/sluicehq/sluice/operators"
)

// DefaultInterval is how often a dashboard reads its jobs' statistics and
// pushes a snapshot to the pages, unless Options.Interval says otherwise.
const DefaultInterval = 500 * time.Millisecond

// DefaultJaegerURL is where a local Jaeger serves its UI.
const DefaultJaegerURL = "http://127.0.0.1:16686"

// Errors.
var (
	// ErrClosed is returned by Add after Close.
	ErrClosed = errors.New("dashboard: closed")
	// ErrInvalid wraps every invalid option.
	ErrInvalid = errors.New("dashboard: invalid options")
)

// Options configure a Dashboard. The zero value is valid.
type Options struct {
	// Title heads the page. Default "sluice".
	Title string
	// Interval is how often the statistics are read and pushed to every
	// page: rates are computed over it. Default DefaultInterval; at most a
	// minute.
	Interval time.Duration
	// JaegerURL is the base address of a Jaeger UI (DefaultJaegerURL for a
	// local one). When set, every operator links to a search for its spans.
	// Empty: no links, for jobs that are not traced.
	JaegerURL string
	// JaegerService is the service the traces are exported under (the
	// service.name given to telemetry.NewOTLPTracerProvider; `sluice run`
	// uses "sluice-SAMPLE"). Default "sluice".
	JaegerService string
	// AllowedHosts lists the host names (without port) the page may be
	// requested under, besides IP addresses and localhost, which are
	// always allowed: a request whose Host header names another host gets
	// 403. This defeats DNS rebinding, where a page on another site points
	// its own name at 127.0.0.1 to read the dashboard. Behind a reverse
	// proxy or under a DNS name, list that name ("ops.example.com").
	AllowedHosts []string
	// MaxStreams caps the event streams (open pages) served at once; one
	// more gets 503. Default DefaultMaxStreams.
	MaxStreams int
	// History is how far back the charts go: the dashboard keeps a ring of
	// History/Interval points per job (at most MaxPoints), sent whole in
	// the page's first frame. Default DefaultHistory.
	History time.Duration
	// Admin, when set, is the admin API's handler (admin.Server.Handler),
	// served under admin/ on the dashboard's own origin: the page then
	// shows controls (change an input, pause or resume a source, take a
	// savepoint) that call it with a bearer token the user pastes into the
	// page. The page never holds the token otherwise; the admin API's
	// own Host, Origin and token checks apply to every request.
	Admin http.Handler
	// JaegerQueryURL is the base address of Jaeger's HTTP query API
	// (DefaultJaegerURL for a local Jaeger: the API is served with its UI).
	// When set, the page can find the trace of a sampled record by its key
	// or trace id, read by the dashboard from Jaeger (see TraceOptions),
	// and draw it on the graph. Empty: no trace view.
	JaegerQueryURL string
	// Clock tells the time of every snapshot and paces the polling (every
	// Interval on it). Default clock.Real().
	Clock clock.Clock
}

// DefaultHistory is the default of Options.History.
const DefaultHistory = 5 * time.Minute

// MaxPoints bounds the points of a job's charts, whatever Options.History.
const MaxPoints = 1200

// DefaultMaxStreams is the default of Options.MaxStreams.
const DefaultMaxStreams = 64

// IdleTimeout is how long Serve's server keeps an idle connection open.
const IdleTimeout = 2 * time.Minute

func (o Options) withDefaults() (Options, error) {
	if o.Title == "" {
		o.Title = "sluice"
	}
	switch {
	case o.Interval == 0:
		o.Interval = DefaultInterval
	case o.Interval < 0 || o.Interval > time.Minute:
		return o, fmt.Errorf("%w: Interval %v: want a positive duration up to a minute", ErrInvalid, o.Interval)
	}
	if o.JaegerURL != "" {
		u, err := url.Parse(o.JaegerURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return o, fmt.Errorf("%w: JaegerURL %q: want an http(s) address such as %s", ErrInvalid, o.JaegerURL, DefaultJaegerURL)
		}
	}
	if o.JaegerService == "" {
		o.JaegerService = "sluice"
	}
	if o.Clock == nil {
		o.Clock = clock.Real()
	}
	switch {
	case o.MaxStreams == 0:
		o.MaxStreams = DefaultMaxStreams
	case o.MaxStreams < 0:
		return o, fmt.Errorf("%w: MaxStreams %d: want a positive number", ErrInvalid, o.MaxStreams)
	}
	switch {
	case o.History == 0:
		o.History = DefaultHistory
	case o.History < 0 || o.History > 24*time.Hour:
		return o, fmt.Errorf("%w: History %v: want a positive duration up to a day", ErrInvalid, o.History)
	}
	if o.JaegerQueryURL != "" {
		u, err := url.Parse(o.JaegerQueryURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return o, fmt.Errorf("%w: JaegerQueryURL %q: want an http(s) address such as %s", ErrInvalid, o.JaegerQueryURL, DefaultJaegerURL)
		}
	}
	for _, h := range o.AllowedHosts {
		if h == "" || strings.ContainsAny(h, ":/ ") {
			return o, fmt.Errorf("%w: AllowedHosts %q: want a host name without port", ErrInvalid, h)
		}
	}
	return o, nil
}

// Dashboard follows running jobs and serves a live page of them. Create it
// with New, give it jobs with Add, serve Handler, and Close it when done.
// Its methods are safe for concurrent use.
type Dashboard struct {
	opts    Options
	handler http.Handler

	quit    chan struct{} // closed by Close
	closing sync.Once
	poller  sync.WaitGroup // the one polling goroutine
	streams sync.WaitGroup // the /events handlers in progress

	hosts map[string]bool // Options.AllowedHosts, lower case

	mu      sync.Mutex
	closed  bool
	active  int // event streams in progress
	refused struct{ hosts, streams uint64 }
	nextID  int
	jobs    []*job
	seq     uint64
	data    []byte        // the latest Snapshot, as JSON
	snap    Snapshot      // the same, to add the histories to (fullFrame)
	changed chan struct{} // closed and replaced by every publish

	points  int // each ring's size
	proc    *procReader
	process Process
	procAt  time.Time // when process was read
	procPts *ring[ProcPoint]
	traces  *jaegerClient // nil without JaegerQueryURL
}

// job is a followed run and its last two samples.
type job struct {
	info  jobInfo
	run   *actors.Run
	links traceLinks
	prev  *sample
	cur   sample
	// points are the job's chart points, pushed once per new sample;
	// pushed is the time of the newest.
	points *ring[Point]
	pushed time.Time
	ops    []string
}

// New returns a dashboard with its polling goroutine started.
func New(opts Options) (*Dashboard, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	d := &Dashboard{opts: opts, quit: make(chan struct{}), changed: make(chan struct{}), hosts: map[string]bool{}}
	d.points = min(max(int(opts.History/opts.Interval), 2), MaxPoints)
	d.proc, d.procPts = newProcReader(), newRing[ProcPoint](d.points)
	if opts.JaegerQueryURL != "" {
		d.traces = newJaegerClient(opts.JaegerQueryURL, opts.JaegerService, TraceOptions{})
	}
	for _, h := range opts.AllowedHosts {
		d.hosts[strings.ToLower(strings.TrimSuffix(h, "."))] = true
	}
	d.handler = d.routes()
	d.publish(d.opts.Clock.Now())
	d.poller.Add(1)
	go d.poll() // owned: ends at Close, which waits for it
	return d, nil
}

// Add shows run on the page, from now until Remove or Close; a run that has
// already ended shows its final state. A run added twice shows once.
func (d *Dashboard) Add(run *actors.Run) error {
	if run == nil {
		return fmt.Errorf("%w: Add: nil run", ErrInvalid)
	}
	tasks, edges := planOf(run)
	now := d.opts.Clock.Now()
	j := &job{
		info:   jobInfo{name: run.Name(), graph: layout(tasks, edges), cfg: configOf(run)},
		run:    run,
		links:  traceLinks{base: d.opts.JaegerURL, service: d.opts.JaegerService, topology: run.Name()},
		cur:    read(run, now),
		points: newRing[Point](d.points),
	}

	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return ErrClosed
	}
	if slices.ContainsFunc(d.jobs, func(o *job) bool { return o.run == run }) {
		d.mu.Unlock()
		return nil
	}
	d.nextID++
	j.info.id = strconv.Itoa(d.nextID)
	d.jobs = append(d.jobs, j)
	d.mu.Unlock()
	d.publish(now)
	return nil
}

// Replace shows run in the place of old, as the same job: its charts go
// on, its graph and configuration are the new run's (a rescale through
// the admin API starts a new run at another parallelism; admin.Server.Follow
// reports it). Rates start again from the new run's first sample. It
// reports whether old was shown; if it was not, run is added.
func (d *Dashboard) Replace(old, run *actors.Run) (bool, error) {
	if run == nil {
		return false, fmt.Errorf("%w: Replace: nil run", ErrInvalid)
	}
	tasks, edges := planOf(run)
	now := d.opts.Clock.Now()
	cur := read(run, now)
	d.mu.Lock()
	i := slices.IndexFunc(d.jobs, func(j *job) bool { return j.run == old })
	if i < 0 || d.closed {
		d.mu.Unlock()
		return false, d.Add(run)
	}
	j := d.jobs[i]
	j.run, j.prev, j.cur = run, nil, cur
	j.info.name, j.info.graph, j.info.cfg = run.Name(), layout(tasks, edges), configOf(run)
	d.mu.Unlock()
	d.publish(now)
	return true, nil
}

// Remove stops showing run. It reports whether run was shown.
func (d *Dashboard) Remove(run *actors.Run) bool {
	d.mu.Lock()
	n := len(d.jobs)
	d.jobs = slices.DeleteFunc(d.jobs, func(j *job) bool { return j.run == run })
	removed := len(d.jobs) != n
	d.mu.Unlock()
	if removed {
		d.publish(d.opts.Clock.Now())
	}
	return removed
}

// Snapshot returns the latest snapshot, as the pages last received it.
func (d *Dashboard) Snapshot() Snapshot {
	d.mu.Lock()
	defer d.mu.Unlock()
	// A deep copy through JSON: the caller may keep and change it.
	var s Snapshot
	_ = json.Unmarshal(d.data, &s)
	return s
}

// Close stops the polling and ends every event stream, then waits for
// them. The page keeps what it last showed. Close it before shutting down
// the http.Server that serves the Handler (or from the server's
// RegisterOnShutdown): Shutdown waits for handlers, and event streams end
// only when the client goes or the dashboard closes. Close is idempotent.
func (d *Dashboard) Close() error {
	d.closing.Do(func() {
		d.mu.Lock()
		d.closed = true
		d.mu.Unlock()
		close(d.quit)
	})
	d.poller.Wait()
	d.streams.Wait()
	return nil
}

// streamStarted registers an event stream, unless the dashboard is closed
// (503 "closed") or serves MaxStreams already (503 "too many").
func (d *Dashboard) streamStarted() (ok bool, why string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.closed:
		return false, "dashboard: closed"
	case d.active >= d.opts.MaxStreams:
		d.refused.streams++
		return false, fmt.Sprintf("dashboard: %d event streams open already (Options.MaxStreams)", d.active)
	}
	d.streams.Add(1)
	d.active++
	return true, ""
}

// Refused counts the requests refused: a Host not allowed (403), an event
// stream beyond MaxStreams (503).
type Refused struct{ Hosts, Streams uint64 }

// Refused returns the counts of refused requests.
func (d *Dashboard) Refused() Refused {
	d.mu.Lock()
	defer d.mu.Unlock()
	return Refused{Hosts: d.refused.hosts, Streams: d.refused.streams}
}

// hostAllowed says whether a request's Host header may reach the page: an
// IP address, localhost (or a name under .localhost), or an allowed host.
func (d *Dashboard) hostAllowed(hostport string) bool {
	host := netaddr.Host(hostport)
	switch {
	case host == "":
		return false
	case net.ParseIP(host) != nil, host == "localhost", strings.HasSuffix(host, ".localhost"):
		return true
	}
	return d.hosts[host]
}

// streamEnded unregisters an event stream.
func (d *Dashboard) streamEnded() {
	d.mu.Lock()
	d.active--
	d.mu.Unlock()
	d.streams.Done()
}

// Streams reports how many event streams (open pages) are in progress.
func (d *Dashboard) Streams() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.active
}

// latest returns the current snapshot as JSON, its sequence number, and a
// channel closed when a newer one is published.
func (d *Dashboard) latest() ([]byte, uint64, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.data, d.seq, d.changed
}

// poll reads every job's statistics once per interval and publishes a
// snapshot: one ticker for the dashboard, however many pages watch it.
func (d *Dashboard) poll() {
	defer d.poller.Done()
	for {
		tick, stop := clock.After(d.opts.Clock, d.opts.Interval)
		select {
		case <-d.quit:
			stop()
			return
		case now := <-tick:
			d.sampleAll(now)
			p := d.proc.read(now) // this goroutine owns the reader
			d.mu.Lock()
			d.process, d.procAt = p, now
			d.procPts.push(ProcPoint{T: now.UnixMilli(), HeapBytes: p.HeapBytes, CPU: p.CPU, Goroutines: p.Goroutines, GCPauseMS: p.GCPauseP99MS})
			d.mu.Unlock()
			d.publish(now)
		}
	}
}

// sampleAll reads the statistics of every job still running; an ended job
// is read once more after its end, then kept as it was.
func (d *Dashboard) sampleAll(now time.Time) {
	d.mu.Lock()
	jobs := slices.Clone(d.jobs)
	d.mu.Unlock()
	for _, j := range jobs {
		d.mu.Lock()
		ended, run := j.cur.done, j.run
		d.mu.Unlock()
		if ended {
			continue
		}
		s := read(run, now) // outside the lock: Stats takes the job's locks
		d.mu.Lock()
		if j.run == run { // not replaced meanwhile (Replace)
			prev := j.cur
			j.prev, j.cur = &prev, s
		}
		d.mu.Unlock()
	}
}

// read takes one sample of run.
func read(run *actors.Run, now time.Time) sample {
	s := sample{at: now}
	select {
	case <-run.Done():
		s.done = true
		s.err = run.Execution().Err()
	default:
	}
	// After the end check: a job that ended meanwhile has final counters.
	s.stats = run.Stats()
	s.insts = operators.InstanceStatsOf(run)
	s.dead = operators.RecentDeadLetters(run)
	s.cp = operators.CheckpointStatsOf(run)
	s.elapsed = run.Elapsed()
	s.ins, _ = engine.Inputs(run) // nil for another kind of job
	return s
}

// fullFrame is the latest snapshot with the charts' history: every job's
// points and the process's, for the page's first frame and /snapshot.json.
func (d *Dashboard) fullFrame() []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	snap := d.snap
	snap.Jobs = slices.Clone(snap.Jobs)
	byID := map[string]*job{}
	for _, j := range d.jobs {
		byID[j.info.id] = j
	}
	for i := range snap.Jobs {
		if j := byID[snap.Jobs[i].ID]; j != nil {
			snap.Jobs[i].History = &Series{Operators: j.ops, Points: j.points.values()}
			if snap.Jobs[i].History.Operators == nil {
				snap.Jobs[i].History.Operators = []string{}
			}
		}
	}
	snap.ProcessHistory = d.procPts.values()
	data, err := json.Marshal(snap)
	if err != nil { // plain types only: cannot happen
		return d.data
	}
	return data
}

// publish builds a snapshot of every job at now, and wakes the streams.
func (d *Dashboard) publish(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	snap := Snapshot{Seq: d.seq + 1, Title: d.opts.Title, Time: now, IntervalMS: d.opts.Interval.Milliseconds(), Jobs: []Job{},
		Process: d.process, Controls: d.opts.Admin != nil, Traces: d.traces != nil}
	if !d.procAt.IsZero() {
		snap.ProcessPoint = &ProcPoint{T: d.procAt.UnixMilli(), HeapBytes: d.process.HeapBytes, CPU: d.process.CPU,
			Goroutines: d.process.Goroutines, GCPauseMS: d.process.GCPauseP99MS}
	}
	for _, j := range d.jobs {
		job := buildJob(j.info, j.prev, j.cur, j.links)
		if j.cur.at.After(j.pushed) && j.prev != nil {
			// A new sample with rates: a new point of the charts.
			pt := pointOf(job, j.cur.at)
			j.points.push(pt)
			j.pushed = j.cur.at
			job.Point = &pt
		}
		if j.ops == nil {
			for _, op := range job.Operators {
				j.ops = append(j.ops, op.Name)
			}
		}
		snap.Jobs = append(snap.Jobs, job)
		if j.cur.done {
			// Later snapshots show the final counters, with no rates.
			j.prev = nil
		}
	}
	data, err := json.Marshal(snap)
	if err != nil { // plain types only: cannot happen
		return
	}
	d.seq, d.data, d.snap = snap.Seq, data, snap
	close(d.changed)
	d.changed = make(chan struct{})
}

//go:embed assets
var assets embed.FS

// Handler serves the page and its data:
//
//	/               the page (index.html, app.js, style.css, all embedded)
//	/events         Server-Sent Events: a "snapshot" event with a Snapshot as JSON, once per interval
//	/snapshot.json  the latest Snapshot
//
// Links within the page are relative, so the handler can be mounted under a
// prefix with http.StripPrefix.
func (d *Dashboard) Handler() http.Handler { return d.handler }

func (d *Dashboard) routes() http.Handler {
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(static)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /events", d.serveEvents)
	mux.HandleFunc("GET /snapshot.json", func(w http.ResponseWriter, r *http.Request) {
		data := d.fullFrame()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(data)
	})
	page, err := assets.ReadFile("assets/index.html")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		data := d.fullFrame()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(firstFrame(page, data))
	})
	if d.traces != nil {
		mux.HandleFunc("GET /trace", d.serveTrace)
	}
	if d.opts.Admin != nil {
		mux.Handle("/admin/", http.StripPrefix("/admin", d.opts.Admin))
	}
	mux.Handle("GET /app.js", files)
	mux.Handle("GET /style.css", files)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Everything the page loads comes from here; nothing runs inline.
		w.Header().Set("Content-Security-Policy",
			"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'self'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if !d.hostAllowed(r.Host) {
			d.mu.Lock()
			d.refused.hosts++
			d.mu.Unlock()
			http.Error(w, fmt.Sprintf("dashboard: host %q is not allowed (Options.AllowedHosts)", r.Host), http.StatusForbidden)
			return
		}
		if r.URL.Path == "" { // mounted with StripPrefix("/prefix/", ...)
			r2 := *r
			u := *r.URL
			u.Path = "/"
			r2.URL = &u
			r = &r2
		}
		mux.ServeHTTP(w, r)
	})
}

// firstFrame puts the latest snapshot into the page, so that it shows the
// jobs as soon as it loads, before the first event of the stream: the JSON
// goes into a data block (<script type="application/json">, which the
// browser does not run, so the Content Security Policy allows it), and the
// "No job yet" line is hidden when there are jobs. encoding/json escapes
// <, > and & in strings, so no value can end the block early.
func firstFrame(page, data []byte) []byte {
	var s Snapshot
	hidden := ""
	if json.Unmarshal(data, &s) == nil && len(s.Jobs) > 0 {
		hidden = " hidden"
	}
	block := `<script type="application/json" id="first-frame">` + string(data) + `</script>`
	out := strings.Replace(string(page), "<!--empty-hidden-->", hidden, 1)
	return []byte(strings.Replace(out, "<!--first-frame-->", block, 1))
}

// ListenAddr returns the address to listen on for addr as a user wrote it:
// a port alone (":8080" or "8080") means loopback, 127.0.0.1:PORT, never
// every interface. A host written out is kept as written, loopback or not:
// serving to the network is the user's explicit choice (the dashboard has
// no authentication). Loopback reports whether the result is loopback only.
func ListenAddr(addr string) (listen string, loopback bool, err error) {
	listen, loopback, err = netaddr.Listen(addr)
	if err != nil {
		return "", false, fmt.Errorf("dashboard: %w", err)
	}
	return listen, loopback, nil
}

// Serve serves the dashboard's Handler at the root of addr (see ListenAddr)
// until ctx ends, then closes the dashboard and shuts the server down. It
// returns once the listener is open, with the page's URL on this machine
// (127.0.0.1 when it listens on every interface) and a function that waits
// for the server to stop.
func (d *Dashboard) Serve(ctx context.Context, addr string) (string, func() error, error) {
	listen, _, err := ListenAddr(addr)
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return "", nil, fmt.Errorf("dashboard: listen on %s: %w", listen, err)
	}
	// No ReadTimeout or WriteTimeout: event streams are long responses
	// (each write has its own deadline, see serveEvents).
	srv := &http.Server{Handler: d.Handler(), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: IdleTimeout}
	served := make(chan struct{})   // closed when srv.Serve has returned
	shutdown := make(chan struct{}) // closed when the server is shut down, or failed
	var serveErr error
	go func() { // owned: Serve returns when the server shuts down; wait waits for it
		defer close(served)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			serveErr = err
		}
	}()
	go func() { // owned: shuts the server down when ctx ends; wait waits for it
		defer close(shutdown)
		select {
		case <-ctx.Done():
			_ = d.Close() // ends the event streams, which Shutdown waits for
			shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(shut)
		case <-served:
		}
	}()
	wait := func() error {
		<-served
		<-shutdown
		return serveErr
	}
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1" // every interface: this machine's URL
	}
	return "http://" + net.JoinHostPort(host, port) + "/", wait, nil
}
