package httpin

import (
	"bufio"
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/operators"
)

// Defaults of Config's zero fields.
const (
	DefaultAddr          = "127.0.0.1:8080"
	DefaultPath          = "/ingest"
	DefaultCapacity      = 4096
	DefaultMaxBodyBytes  = 1 << 20
	DefaultMaxConcurrent = 64
	DefaultRetryAfter    = time.Second
)

// Config configures an HTTP ingress. Every field has a default.
type Config[T any] struct {
	// Addr is where Start listens. Default DefaultAddr (loopback only);
	// "127.0.0.1:0" picks a free port (see Addr).
	Addr string
	// Path is the path that takes POST requests. Default DefaultPath.
	Path string
	// Capacity is how many accepted records may wait for the topology:
	// the bound of the ingress's memory, besides the requests being read.
	// Default DefaultCapacity.
	Capacity int
	// MaxBodyBytes bounds a request's body; a larger one gets 413. Default
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxRecords bounds the records of one request (413 beyond), at most
	// Capacity. Default Capacity.
	MaxRecords int
	// MaxConcurrent bounds the requests handled at once; one more gets 503
	// with Retry-After at once. Default DefaultMaxConcurrent.
	MaxConcurrent int
	// HoldFor is how long a request may wait for room before it is
	// refused with 429. Default 0: refused at once when the records do not
	// fit.
	HoldFor time.Duration
	// RetryAfter is the delay that 429 and 503 responses suggest (in
	// whole seconds, at least 1). Default DefaultRetryAfter.
	RetryAfter time.Duration
	// Decode turns one line into a record. Default: encoding/json into a T.
	Decode func(line []byte) (T, error)
	// AllowedOrigins lists the origins ("https://app.example.com") whose
	// browser pages may POST here. A request with an Origin header not in
	// it, or marked Sec-Fetch-Site: cross-site by the browser (and no
	// allowed Origin), gets 403: a web page on another site cannot feed
	// the topology through a user's browser. Clients that are not
	// browsers send neither header and are not affected. Default: none.
	AllowedOrigins []string
	// Token, if set, is required as "Authorization: Bearer <Token>";
	// without it a request gets 401. Compared in constant time.
	Token string
}

// Stats count what the ingress did with its requests. Every request is
// counted once in Requests and once in exactly one of Accepted, Refused,
// Unavailable, TooLarge, BadRequest, Forbidden, Unauthorized and
// UnsupportedType.
type Stats struct {
	Requests        int64
	Accepted        int64 // 202: every record of the request entered the topology
	AcceptedRecords int64
	Refused         int64 // 429: the topology could not take the records (within HoldFor)
	Unavailable     int64 // 503: too many requests at once, or the stream has ended
	TooLarge        int64 // 413: body or record count over its bound
	BadRequest      int64 // 400 (a line that does not decode) or 405 (not a POST)
	Forbidden       int64 // 403: a cross-site request (Origin not allowed, Sec-Fetch-Site: cross-site)
	Unauthorized    int64 // 401: Token is set and the request lacks it
	UnsupportedType int64 // 415: a Content-Type other than JSON or NDJSON
	Queued          int   // records waiting for the topology now
	QueueHighWater  int   // the most records that ever waited
}

// Ingress is an HTTP endpoint that feeds a topology. Create it with New,
// add Source() to a topology, Start it, and Close it to end the stream.
type Ingress[T any] struct {
	cfg  Config[T]
	in   *operators.Ingress[T]
	conn *connector[T]
	sem  chan struct{} // MaxConcurrent slots
	send chan struct{} // held by the request whose records enter the ingress

	spaceMu sync.Mutex
	space   chan struct{} // closed when the topology takes records, if waiters > 0
	waiters int

	// the trace contexts of the records waiting, in the order they entered:
	// a run of records per request (runs without one merged)
	traceMu sync.Mutex
	traces  []traceRun

	mu      sync.Mutex
	srv     *http.Server
	ln      net.Listener
	served  chan struct{} // closed when Serve returned
	serveEr error
	closed  bool

	requests, accepted, acceptedRecs, refused, unavailable, tooLarge, bad atomic.Int64
	forbidden, unauthorized, unsupported                                  atomic.Int64
	highWater                                                             atomic.Int64
	origins                                                               map[string]bool
}

// New returns an ingress for cfg, not yet listening.
func New[T any](cfg Config[T]) (*Ingress[T], error) {
	if cfg.Capacity < 0 || cfg.MaxBodyBytes < 0 || cfg.MaxRecords < 0 || cfg.MaxConcurrent < 0 || cfg.HoldFor < 0 || cfg.RetryAfter < 0 {
		return nil, errors.New("httpin: negative Capacity, MaxBodyBytes, MaxRecords, MaxConcurrent, HoldFor or RetryAfter")
	}
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if cfg.Path == "" {
		cfg.Path = DefaultPath
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = DefaultCapacity
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxRecords == 0 {
		cfg.MaxRecords = cfg.Capacity
	}
	if cfg.MaxRecords > cfg.Capacity {
		return nil, fmt.Errorf("httpin: MaxRecords %d above Capacity %d: such a request could never be accepted", cfg.MaxRecords, cfg.Capacity)
	}
	if cfg.MaxConcurrent == 0 {
		cfg.MaxConcurrent = DefaultMaxConcurrent
	}
	if cfg.RetryAfter == 0 {
		cfg.RetryAfter = DefaultRetryAfter
	}
	if cfg.Decode == nil {
		cfg.Decode = func(b []byte) (T, error) {
			var v T
			err := json.Unmarshal(b, &v)
			return v, err
		}
	}
	g := &Ingress[T]{cfg: cfg, in: operators.NewIngress[T](cfg.Capacity),
		sem: make(chan struct{}, cfg.MaxConcurrent), send: make(chan struct{}, 1), space: make(chan struct{})}
	g.conn = &connector[T]{Ingress: g.in, g: g}
	g.origins = map[string]bool{}
	for _, o := range cfg.AllowedOrigins {
		g.origins[strings.TrimSuffix(o, "/")] = true
	}
	return g, nil
}

// Source is the source connector to add to a topology (with
// operators.Source). It runs with parallelism 1 and is not replayable: a
// topology that reads it cannot take checkpoints.
func (g *Ingress[T]) Source() operators.SourceConnector[T] { return g.conn }

// Handler is the endpoint, to mount on a server of your own instead of
// calling Start. It answers POST requests on any path.
func (g *Ingress[T]) Handler() http.Handler { return http.HandlerFunc(g.serve) }

// Start listens on Config.Addr and serves Config.Path until Close.
func (g *Ingress[T]) Start() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return errors.New("httpin: Start after Close")
	}
	if g.srv != nil {
		return errors.New("httpin: started twice")
	}
	ln, err := net.Listen("tcp", g.cfg.Addr)
	if err != nil {
		return fmt.Errorf("httpin: listen on %s: %w", g.cfg.Addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle(g.cfg.Path, g.Handler())
	g.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: time.Minute}
	g.ln, g.served = ln, make(chan struct{})
	go func() { // owned by the Ingress: ends when Close shuts the server down
		defer close(g.served)
		if err := g.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			g.mu.Lock()
			g.serveEr = err
			g.mu.Unlock()
		}
	}()
	return nil
}

// Addr is the address Start listens on ("" before Start).
func (g *Ingress[T]) Addr() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ln == nil {
		return ""
	}
	return g.ln.Addr().String()
}

// URL is the endpoint's URL once started.
func (g *Ingress[T]) URL() string {
	if a := g.Addr(); a != "" {
		return "http://" + a + g.cfg.Path
	}
	return ""
}

// Close stops the server (no new requests; those in progress finish, or are
// cut off when ctx ends) and then ends the stream: the topology reads the
// records accepted so far, then sees the end of its input. Close waits for
// the server's goroutines.
func (g *Ingress[T]) Close(ctx context.Context) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	srv, served := g.srv, g.served
	g.mu.Unlock()
	var err error
	if srv != nil {
		if err = srv.Shutdown(ctx); err != nil {
			srv.Close()
		}
		<-served
		g.mu.Lock()
		if g.serveEr != nil && err == nil {
			err = g.serveEr
		}
		g.mu.Unlock()
	}
	g.in.Close()
	if err != nil {
		return fmt.Errorf("httpin: close: %w", err)
	}
	return nil
}

// Stats returns the ingress's counters.
func (g *Ingress[T]) Stats() Stats {
	return Stats{Requests: g.requests.Load(), Accepted: g.accepted.Load(), AcceptedRecords: g.acceptedRecs.Load(),
		Refused: g.refused.Load(), Unavailable: g.unavailable.Load(), TooLarge: g.tooLarge.Load(),
		BadRequest: g.bad.Load(), Forbidden: g.forbidden.Load(), Unauthorized: g.unauthorized.Load(),
		UnsupportedType: g.unsupported.Load(), Queued: g.in.Len(), QueueHighWater: int(g.highWater.Load())}
}

func (g *Ingress[T]) retryAfter(w http.ResponseWriter) {
	secs := int((g.cfg.RetryAfter + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.Itoa(max(1, secs)))
}

func reply(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	b, _ := json.Marshal(map[string]string{"status": http.StatusText(code), "message": body})
	w.Write(append(b, '\n'))
}

func (g *Ingress[T]) serve(w http.ResponseWriter, r *http.Request) {
	g.requests.Add(1)
	if r.Method != http.MethodPost {
		g.bad.Add(1)
		w.Header().Set("Allow", http.MethodPost)
		reply(w, http.StatusMethodNotAllowed, "POST JSON lines, one record a line")
		return
	}
	if msg := g.crossSite(r); msg != "" {
		g.forbidden.Add(1)
		reply(w, http.StatusForbidden, msg)
		return
	}
	if g.cfg.Token != "" {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(g.cfg.Token)) != 1 {
			g.unauthorized.Add(1)
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice ingress"`)
			reply(w, http.StatusUnauthorized, "a bearer token is required")
			return
		}
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" && mt != "application/x-ndjson" {
		g.unsupported.Add(1)
		reply(w, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q: send application/json or application/x-ndjson", r.Header.Get("Content-Type")))
		return
	}
	if r.ContentLength > g.cfg.MaxBodyBytes {
		g.tooLarge.Add(1)
		reply(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body of %d bytes, more than %d", r.ContentLength, g.cfg.MaxBodyBytes))
		return
	}
	// Read the bounded body first: a slow client holds its connection (up
	// to the server's ReadTimeout), not one of the MaxConcurrent slots.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			g.tooLarge.Add(1)
			reply(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", mbe.Limit))
			return
		}
		g.bad.Add(1)
		reply(w, http.StatusBadRequest, fmt.Sprintf("read the body: %v", err))
		return
	}
	select {
	case g.sem <- struct{}{}:
		defer func() { <-g.sem }()
	default:
		g.unavailable.Add(1)
		g.retryAfter(w)
		reply(w, http.StatusServiceUnavailable, fmt.Sprintf("more than %d requests at once", g.cfg.MaxConcurrent))
		return
	}
	recs, code, msg := g.decode(bytes.NewReader(body))
	if code != 0 {
		if code == http.StatusRequestEntityTooLarge {
			g.tooLarge.Add(1)
		} else {
			g.bad.Add(1)
		}
		reply(w, code, msg)
		return
	}
	switch err := g.enqueue(r.Context(), recs, traceHeaders(r.Header)); {
	case err == nil:
		g.accepted.Add(1)
		g.acceptedRecs.Add(int64(len(recs)))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, "{\"accepted\":%d}\n", len(recs))
	case errors.Is(err, operators.ErrIngressClosed):
		g.unavailable.Add(1)
		reply(w, http.StatusServiceUnavailable, "the stream has ended")
	default:
		g.refused.Add(1)
		g.retryAfter(w)
		reply(w, http.StatusTooManyRequests, fmt.Sprintf("the topology cannot take %d records now (%d of %d waiting)", len(recs), g.in.Len(), g.cfg.Capacity))
	}
}

// crossSite returns why r is refused as a cross-site request from a
// browser, or "".
func (g *Ingress[T]) crossSite(r *http.Request) string {
	origin := r.Header.Get("Origin")
	if origin != "" {
		if !g.origins[strings.TrimSuffix(origin, "/")] {
			return fmt.Sprintf("origin %q is not allowed (AllowedOrigins)", origin)
		}
		return ""
	}
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return "a cross-site request (Sec-Fetch-Site: cross-site)"
	}
	return ""
}

// decode reads the body's lines into records; on failure it returns the
// status and a message that names the line.
func (g *Ingress[T]) decode(body io.Reader) ([]T, int, string) {
	br := bufio.NewReaderSize(body, 64<<10)
	var recs []T
	for line := 1; ; line++ {
		b, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) { // a long line: gather it
			full := append([]byte(nil), b...)
			for errors.Is(err, bufio.ErrBufferFull) {
				b, err = br.ReadSlice('\n')
				full = append(full, b...)
			}
			b = full
		}
		if err != nil && !errors.Is(err, io.EOF) {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return nil, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", mbe.Limit)
			}
			return nil, http.StatusBadRequest, fmt.Sprintf("line %d: read: %v", line, err)
		}
		if t := bytes.TrimSpace(b); len(t) > 0 {
			if len(recs) == g.cfg.MaxRecords {
				return nil, http.StatusRequestEntityTooLarge, fmt.Sprintf("more than %d records", g.cfg.MaxRecords)
			}
			v, derr := g.cfg.Decode(t)
			if derr != nil {
				return nil, http.StatusBadRequest, fmt.Sprintf("line %d: %v", line, derr)
			}
			recs = append(recs, v)
		}
		if errors.Is(err, io.EOF) {
			return recs, 0, ""
		}
	}
}

var errNoRoom = errors.New("no room")

// enqueue hands all of recs to the topology, or none: only the request
// holding send puts records into the ingress, and the topology only takes
// them out, so room seen under send stays room. Without room it waits up to
// HoldFor for the topology to take records.
func (g *Ingress[T]) enqueue(ctx context.Context, recs []T, tc traceRun) error {
	var deadline <-chan time.Time
	if g.cfg.HoldFor > 0 {
		t := time.NewTimer(g.cfg.HoldFor)
		defer t.Stop()
		deadline = t.C
	}
	select {
	case g.send <- struct{}{}:
	default:
		if deadline == nil {
			// Another request is putting records in: wait only for that,
			// which takes no longer than TrySends.
			g.send <- struct{}{}
		} else {
			select {
			case g.send <- struct{}{}:
			case <-deadline:
				return errNoRoom
			case <-ctx.Done():
				return errNoRoom
			}
		}
	}
	defer func() { <-g.send }()
	for {
		space := g.watchSpace()
		if g.cfg.Capacity-g.in.Len() >= len(recs) {
			g.unwatchSpace()
			break
		}
		if deadline == nil {
			g.unwatchSpace()
			return errNoRoom
		}
		select {
		case <-space:
			g.unwatchSpace()
		case <-deadline:
			g.unwatchSpace()
			return errNoRoom
		case <-ctx.Done():
			g.unwatchSpace()
			return errNoRoom
		}
	}
	tc.n = len(recs)
	g.addTraces(tc) // before the records: the reader may take them at once
	for _, v := range recs {
		if err := g.in.TrySend(v); err != nil {
			return err // closed (the job ended); full cannot happen
		}
	}
	if n := int64(g.in.Len()); n > g.highWater.Load() {
		g.highWater.Store(n) // only the holder of send stores
	}
	return nil
}

// traceRun is the trace context of n records that entered together (one
// request's).
type traceRun struct {
	n             int
	parent, state string
}

// Bounds of the trace context headers kept per request. A longer value is
// kept cut to one byte over the runtime's bound, so that the runtime still
// refuses it (a cut traceparent must not become a valid one).
const (
	maxTraceParent = 256 + 1
	maxTraceState  = 512 + 1
)

// traceHeaders reads a request's W3C trace context, as received: several
// traceparent headers are joined with commas, which the runtime refuses as
// the W3C specification asks.
func traceHeaders(h http.Header) traceRun {
	cut := func(vs []string, n int) string {
		s := strings.Join(vs, ",")
		if len(s) > n {
			s = s[:n]
		}
		return s
	}
	tp := h.Values("Traceparent")
	if len(tp) == 0 {
		return traceRun{}
	}
	return traceRun{parent: cut(tp, maxTraceParent), state: cut(h.Values("Tracestate"), maxTraceState)}
}

func (g *Ingress[T]) addTraces(tc traceRun) {
	g.traceMu.Lock()
	defer g.traceMu.Unlock()
	if k := len(g.traces) - 1; k >= 0 && tc.parent == "" && g.traces[k].parent == "" {
		g.traces[k].n += tc.n
		return
	}
	g.traces = append(g.traces, tc)
}

// takeTraces appends to dst the trace contexts of the next n records the
// topology took, indexed from 0.
func (g *Ingress[T]) takeTraces(dst []operators.TraceContext, n int) []operators.TraceContext {
	g.traceMu.Lock()
	defer g.traceMu.Unlock()
	i := 0
	for n > i && len(g.traces) > 0 {
		run := &g.traces[0]
		k := min(run.n, n-i)
		if run.parent != "" {
			for j := range k {
				dst = append(dst, operators.TraceContext{Index: i + j, TraceParent: run.parent, TraceState: run.state})
			}
		}
		i += k
		if run.n -= k; run.n == 0 {
			g.traces[0] = traceRun{}
			g.traces = g.traces[1:]
		}
	}
	return dst
}

// watchSpace returns a channel that is closed when the topology next takes
// records; unwatchSpace ends the watch.
func (g *Ingress[T]) watchSpace() <-chan struct{} {
	g.spaceMu.Lock()
	defer g.spaceMu.Unlock()
	g.waiters++
	return g.space
}

func (g *Ingress[T]) unwatchSpace() {
	g.spaceMu.Lock()
	g.waiters--
	g.spaceMu.Unlock()
}

// took is called by the reader after it took records.
func (g *Ingress[T]) took() {
	g.spaceMu.Lock()
	if g.waiters > 0 {
		close(g.space)
		g.space = make(chan struct{})
	}
	g.spaceMu.Unlock()
}

// connector is the ingress as a source: it embeds the operators.Ingress so
// that the runtime knows it as one (not replayable), and wraps its reader
// to learn when records leave.
type connector[T any] struct {
	*operators.Ingress[T]
	g *Ingress[T]
}

func (c *connector[T]) Open(ctx context.Context, part, parts int, offset int64) (operators.Reader[T], error) {
	r, err := c.Ingress.Open(ctx, part, parts, offset)
	if err != nil {
		return nil, fmt.Errorf("httpin: %w", err)
	}
	return &reader[T]{Reader: r, g: c.g}, nil
}

type reader[T any] struct {
	operators.Reader[T]
	g   *Ingress[T]
	tcs []operators.TraceContext // of the last Read
}

func (r *reader[T]) Read(buf []T) (int, error) {
	n, err := r.Reader.Read(buf)
	r.tcs = r.tcs[:0]
	if n > 0 {
		r.tcs = r.g.takeTraces(r.tcs, n)
		r.g.took()
	}
	return n, err
}

// TraceContexts implements operators.TraceCarrier: the traceparent and
// tracestate headers of the requests the records of the last Read came in.
func (r *reader[T]) TraceContexts() []operators.TraceContext { return r.tcs }

func (r *reader[T]) Wait(ctx context.Context) error {
	w, ok := r.Reader.(operators.Waiter)
	if !ok {
		return nil
	}
	err := w.Wait(ctx)
	r.g.took() // Wait may have taken a record from the ingress
	return err
}
