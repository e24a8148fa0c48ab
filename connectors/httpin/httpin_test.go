package httpin_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/connectors/httpin"
	"github.com/sluicehq/sluice/operators"
)

type event struct {
	ID string `json:"id"`
	N  int    `json:"n"`
}

// start returns a started ingress on a free loopback port, closed when the
// test ends.
func start(t *testing.T, cfg httpin.Config[event]) *httpin.Ingress[event] {
	t.Helper()
	cfg.Addr = "127.0.0.1:0"
	g, err := httpin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := g.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return g
}

// client is an HTTP client whose idle connections are closed when the test
// ends (no goroutine outlives it).
func client(t *testing.T) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 8}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func post(t *testing.T, c *http.Client, url, body string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Post(url, "application/x-ndjson", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func lines(ids ...string) string {
	var b strings.Builder
	for i, id := range ids {
		fmt.Fprintf(&b, "{\"id\":%q,\"n\":%d}\n", id, i)
	}
	return b.String()
}

// TestSizeLimits: a body over MaxBodyBytes, with or without a
// Content-Length, and a request over MaxRecords get 413; nothing enters.
func TestSizeLimits(t *testing.T) {
	g := start(t, httpin.Config[event]{MaxBodyBytes: 100, Capacity: 10, MaxRecords: 2})
	c := client(t)
	big := lines("a", "b", "c", "d", "e") // 5 lines of 17 bytes
	if resp, body := post(t, c, g.URL(), big); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a %d-byte body: %s %s", len(big), resp.Status, body)
	}
	// Without Content-Length (chunked): cut off while reading.
	resp, err := c.Post(g.URL(), "application/x-ndjson", io.MultiReader(strings.NewReader(big), strings.NewReader(big)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a chunked body over the limit: %s", resp.Status)
	}
	if resp, body := post(t, c, g.URL(), lines("a", "b", "c")); resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, "more than 2 records") {
		t.Fatalf("3 records of at most 2: %s %s", resp.Status, body)
	}
	st := g.Stats()
	if st.TooLarge != 3 || st.Requests != 3 || st.Queued != 0 {
		t.Fatalf("stats %+v: want 3 requests, all too large, nothing queued", st)
	}
}

// TestBadLine: a line that does not decode gets 400 naming its line, and
// none of the request's records enters.
func TestBadLine(t *testing.T) {
	g := start(t, httpin.Config[event]{})
	c := client(t)
	body := lines("a", "b") + "\n{\"id\": oops}\n" + lines("c")
	resp, msg := post(t, c, g.URL(), body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(msg, "line 4:") {
		t.Fatalf("bad line 4: %s %s", resp.Status, msg)
	}
	if resp, _ := http.NewRequest(http.MethodGet, g.URL(), nil); resp != nil {
		r, err := c.Do(resp)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusMethodNotAllowed || r.Header.Get("Allow") != "POST" {
			t.Fatalf("GET: %s", r.Status)
		}
	}
	if st := g.Stats(); st.BadRequest != 2 || st.Queued != 0 || st.Accepted != 0 {
		t.Fatalf("stats %+v: want 2 bad requests, nothing queued", st)
	}
}

// TestRetryAfter: when the records do not fit, the request gets 429 with
// Retry-After and none of its records enters; with HoldFor it waits for the
// topology to make room.
func TestRetryAfter(t *testing.T) {
	g := start(t, httpin.Config[event]{Capacity: 4, RetryAfter: 3 * time.Second})
	c := client(t)
	if resp, body := post(t, c, g.URL(), lines("a", "b", "c")); resp.StatusCode != http.StatusAccepted || body != "{\"accepted\":3}\n" {
		t.Fatalf("3 records into an empty ingress: %s %s", resp.Status, body)
	}
	resp, _ := post(t, c, g.URL(), lines("d", "e"))
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "3" {
		t.Fatalf("2 records into 1 free slot: %s, Retry-After %q; want 429 and 3", resp.Status, resp.Header.Get("Retry-After"))
	}
	if st := g.Stats(); st.Queued != 3 || st.Refused != 1 || st.AcceptedRecords != 3 {
		t.Fatalf("stats %+v: want 3 queued, 1 refused", st)
	}

	// HoldFor: a request waits until a reader takes records.
	h := start(t, httpin.Config[event]{Capacity: 2, HoldFor: 10 * time.Second})
	if resp, _ := post(t, c, h.URL(), lines("a", "b")); resp.StatusCode != http.StatusAccepted {
		t.Fatal(resp.Status)
	}
	held := make(chan int, 1)
	go func() {
		resp, err := c.Post(h.URL(), "application/x-ndjson", strings.NewReader(lines("c")))
		if err != nil {
			held <- 0
			return
		}
		resp.Body.Close()
		held <- resp.StatusCode
	}()
	r, err := h.Source().Open(context.Background(), 0, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	for h.Stats().Requests < 2 { // the held request has arrived
		<-poll.C
	}
	buf := make([]event, 1)
	if n, err := r.Read(buf); n != 1 || err != nil || buf[0].ID != "a" {
		t.Fatalf("Read = %d %v, %v", n, buf, err)
	}
	select {
	case code := <-held:
		if code != http.StatusAccepted {
			t.Fatalf("held request: %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held request was not accepted when room was made")
	}
}

// TestOverload: 4 clients send about 3 times what the topology (a paced,
// slow sink) can take. Every request is accepted or refused with 429/503;
// the sink sees every accepted record exactly once and no refused one; the
// ingress never holds more than its capacity, the sink's mailbox never more
// than its capacity, and the heap stays within a bound.
func TestOverload(t *testing.T) {
	const (
		capacity    = 500
		clients     = 4
		perRequest  = 25
		requests    = 150                   // per client
		clientEvery = 10 * time.Millisecond // 4 x 25 / 10 ms = 10 000 records/s offered
		sinkEvery   = 2 * time.Millisecond  // 8 records / 2 ms = 4 000 records/s... before overheads
		sinkPerTick = 8
	)
	g := start(t, httpin.Config[event]{Capacity: capacity, MaxRecords: perRequest})
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	sys, err := actors.NewSystem(actors.Config{Name: "overload"})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop(ctx)

	var mu sync.Mutex
	seen := map[string]int{}
	pace := time.NewTicker(sinkEvery)
	defer pace.Stop()
	top := operators.NewTopology("overload", operators.Capacity(256), operators.BatchSize(32))
	src := operators.Source(top, "http", g.Source())
	operators.Sink(src, "slow", operators.SinkFunc(func(e event) error {
		mu.Lock()
		seen[e.ID]++
		n := len(seen)
		mu.Unlock()
		if n%sinkPerTick == 0 {
			<-pace.C // simulated work: the sink's pace, not a wait for an event
		}
		return nil
	}), operators.NoFusion())
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // owned by the test: stops at stopSampling
		defer close(sampled)
		tk := time.NewTicker(25 * time.Millisecond)
		defer tk.Stop()
		var ms runtime.MemStats
		for {
			select {
			case <-stopSampling:
				return
			case <-tk.C:
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > peak.Load() {
					peak.Store(ms.HeapInuse)
				}
			}
		}
	}()

	c := client(t)
	type outcome struct {
		ids      []string
		accepted bool
		code     int
	}
	results := make(chan outcome, clients*requests)
	var wg sync.WaitGroup
	for cl := range clients {
		wg.Add(1)
		go func() { // a client: a bounded loop of paced requests
			defer wg.Done()
			tk := time.NewTicker(clientEvery)
			defer tk.Stop()
			for r := range requests {
				<-tk.C
				ids := make([]string, perRequest)
				for i := range ids {
					ids[i] = fmt.Sprintf("c%d-r%d-%d", cl, r, i)
				}
				resp, err := c.Post(g.URL(), "application/x-ndjson", strings.NewReader(lines(ids...)))
				if err != nil {
					results <- outcome{ids: ids, code: -1}
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				results <- outcome{ids: ids, accepted: resp.StatusCode == http.StatusAccepted, code: resp.StatusCode}
			}
		}()
	}
	wg.Wait()
	close(results)
	if err := g.Close(ctx); err != nil { // the end of the stream: the job drains the buffer
		t.Fatal(err)
	}
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	close(stopSampling)
	<-sampled

	accepted, refused := 0, 0
	acceptedIDs := map[string]bool{}
	for o := range results {
		switch {
		case o.accepted:
			accepted++
			for _, id := range o.ids {
				acceptedIDs[id] = true
			}
		case o.code == http.StatusTooManyRequests || o.code == http.StatusServiceUnavailable:
			refused++
		default:
			t.Errorf("a request got %d", o.code)
		}
	}
	sent := clients * requests
	if accepted+refused != sent {
		t.Fatalf("accepted %d + refused %d != sent %d", accepted, refused, sent)
	}
	if refused == 0 || accepted == 0 {
		t.Fatalf("accepted %d, refused %d: the load should be over what the sink takes, and some should get through", accepted, refused)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range seen {
		if n != 1 {
			t.Errorf("record %s processed %d times", id, n)
		}
		if !acceptedIDs[id] {
			t.Errorf("record %s of a refused request was processed", id)
		}
	}
	if len(seen) != len(acceptedIDs) {
		t.Fatalf("the sink saw %d records, %d were accepted", len(seen), len(acceptedIDs))
	}
	st := g.Stats()
	if st.Requests != int64(sent) || st.Accepted != int64(accepted) || st.Refused+st.Unavailable != int64(refused) {
		t.Fatalf("stats %+v: want %d requests, %d accepted, %d refused", st, sent, accepted, refused)
	}
	if st.QueueHighWater > capacity {
		t.Fatalf("the ingress held %d records, more than its capacity %d", st.QueueHighWater, capacity)
	}
	var sinkHigh, sinkCap int
	for _, os := range run.Stats() {
		if os.Name == "slow" {
			sinkHigh, sinkCap = os.QueueHighWater, os.Capacity
		}
	}
	if sinkHigh > sinkCap {
		t.Fatalf("the sink's mailbox held %d records, more than its capacity %d", sinkHigh, sinkCap)
	}
	const heapBound = 32 << 20
	growth := int64(peak.Load()) - int64(before.HeapInuse)
	if growth > heapBound {
		t.Fatalf("the heap grew by %d MiB under load, more than %d MiB", growth>>20, heapBound>>20)
	}
	t.Logf("%d requests: %d accepted (%d records, each processed once), %d refused (%d 429, %d 503); ingress high-water %d of %d records, sink mailbox high-water %d of %d; heap growth %.1f MiB (bound %d MiB)",
		sent, accepted, len(acceptedIDs), refused, st.Refused, st.Unavailable, st.QueueHighWater, capacity, sinkHigh, sinkCap,
		float64(growth)/(1<<20), heapBound>>20)
}

// TestCloseEndsStream: after Close, the job sees the end of its input, and
// new requests (on a handler mounted elsewhere) get 503.
func TestCloseEndsStream(t *testing.T) {
	g, err := httpin.New(httpin.Config[event]{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{h: http.Header{}}
	req, _ := http.NewRequest(http.MethodPost, "/", strings.NewReader(lines("a")))
	req.Header.Set("Content-Type", "application/x-ndjson")
	g.Handler().ServeHTTP(rec, req)
	if rec.code != http.StatusServiceUnavailable {
		t.Fatalf("after Close: %d", rec.code)
	}
	if err := g.Start(); err == nil {
		t.Fatal("Start after Close succeeded")
	}
	if _, err := httpin.New(httpin.Config[event]{Capacity: 2, MaxRecords: 3}); err == nil {
		t.Fatal("MaxRecords above Capacity accepted")
	}
	if g2, err := httpin.New(httpin.Config[event]{Addr: "256.0.0.1:1"}); err == nil {
		if err := g2.Start(); err == nil || !errors.Is(err, err) || !strings.Contains(err.Error(), "256.0.0.1:1") {
			t.Fatalf("listen on a bad address: %v", err)
		}
	}
}

type recorder struct {
	h    http.Header
	code int
}

func (r *recorder) Header() http.Header         { return r.h }
func (r *recorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *recorder) WriteHeader(code int)        { r.code = code }

// do sends a POST with the given headers and returns the status.
func do(t *testing.T, c *http.Client, url string, header map[string]string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(lines("x")))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestCrossSiteRefused: a cross-site POST with Content-Type text/plain
// (what any web page can send without a preflight) got 202 and its
// records entered the topology; now it gets 403, and a wrong content type
// 415, and nothing enters.
func TestCrossSiteRefused(t *testing.T) {
	g := start(t, httpin.Config[event]{AllowedOrigins: []string{"https://app.example.com"}})
	c := client(t)
	for _, tc := range []struct {
		name   string
		header map[string]string
		want   int
	}{
		{"cross-site text/plain", map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"}, http.StatusForbidden},
		{"foreign origin, JSON", map[string]string{"Origin": "https://evil.example", "Content-Type": "application/json"}, http.StatusForbidden},
		{"null origin", map[string]string{"Origin": "null", "Content-Type": "application/json"}, http.StatusForbidden},
		{"Sec-Fetch-Site cross-site", map[string]string{"Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"}, http.StatusForbidden},
		{"text/plain", map[string]string{"Content-Type": "text/plain"}, http.StatusUnsupportedMediaType},
		{"form", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, http.StatusUnsupportedMediaType},
		{"no content type", map[string]string{}, http.StatusUnsupportedMediaType},
	} {
		if got := do(t, c, g.URL(), tc.header); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
	if st := g.Stats(); st.Queued != 0 || st.Forbidden != 4 || st.UnsupportedType != 3 || st.Requests != 7 {
		t.Fatalf("stats %+v: want nothing queued, 4 forbidden, 3 unsupported", st)
	}
	for _, h := range []map[string]string{
		{"Origin": "https://app.example.com", "Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"},
		{"Content-Type": "application/x-ndjson; charset=utf-8", "Sec-Fetch-Site": "same-site"},
		{"Content-Type": "application/json"},
	} {
		if got := do(t, c, g.URL(), h); got != http.StatusAccepted {
			t.Errorf("%v: %d, want 202", h, got)
		}
	}
}

func TestBearerToken(t *testing.T) {
	g := start(t, httpin.Config[event]{Token: "s3cret"})
	c := client(t)
	ct := "application/x-ndjson"
	if got := do(t, c, g.URL(), map[string]string{"Content-Type": ct}); got != http.StatusUnauthorized {
		t.Fatalf("no token: %d, want 401", got)
	}
	if got := do(t, c, g.URL(), map[string]string{"Content-Type": ct, "Authorization": "Bearer wrong"}); got != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d, want 401", got)
	}
	if got := do(t, c, g.URL(), map[string]string{"Content-Type": ct, "Authorization": "Bearer s3cret"}); got != http.StatusAccepted {
		t.Fatalf("right token: %d, want 202", got)
	}
	if st := g.Stats(); st.Unauthorized != 2 || st.Accepted != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestSlowBodyHoldsNoSlot: with MaxConcurrent 1, a client that has sent
// its headers and is still sending its body does not make another
// client's request get 503.
func TestSlowBodyHoldsNoSlot(t *testing.T) {
	g := start(t, httpin.Config[event]{MaxConcurrent: 1})
	c := client(t)
	pr, pw := io.Pipe()
	slow := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, g.URL(), pr)
		req.Header.Set("Content-Type", "application/x-ndjson")
		resp, err := c.Do(req)
		if err != nil {
			slow <- 0
			return
		}
		resp.Body.Close()
		slow <- resp.StatusCode
	}()
	if _, err := pw.Write([]byte(lines("slow-1"))); err != nil { // the slow request has arrived
		t.Fatal(err)
	}
	poll := time.NewTicker(time.Millisecond)
	defer poll.Stop()
	for g.Stats().Requests < 1 {
		<-poll.C
	}
	if got := do(t, c, g.URL(), map[string]string{"Content-Type": "application/json"}); got != http.StatusAccepted {
		t.Fatalf("a request beside a slow body: %d, want 202", got)
	}
	pw.Close()
	if code := <-slow; code != http.StatusAccepted {
		t.Fatalf("the slow request: %d", code)
	}
}
