package operators_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/supervision"
)

var httpSeed = flag.Uint64("http.seed", 0, "seed of the failing server in TestHTTPSinkExactlyOnceThroughFailures (0: random)")

type httpOrder struct {
	ID    int64  `json:"id"`
	Label string `json:"label"`
}

// idempotentServer accepts POSTs keyed by their Idempotency-Key: it keeps
// the body of the first request with each key and answers later ones with
// success without keeping them again. Before that, it fails a share of the
// requests at random in the ways a real server does.
type idempotentServer struct {
	mu       sync.Mutex
	rng      *rand.Rand
	failRate float64
	status   int // when set, the answer to every request
	accepted map[string][]byte
	requests int
	repeats  int            // requests whose key was already accepted
	failures map[string]int // by mode
}

func newIdempotentServer(t *testing.T, seed uint64, failRate float64) (*idempotentServer, *httptest.Server) {
	t.Helper()
	s := &idempotentServer{rng: rand.New(rand.NewPCG(seed, seed)), failRate: failRate, accepted: map[string][]byte{}, failures: map[string]int{}}
	srv := httptest.NewServer(s) // loopback
	t.Cleanup(srv.Close)
	return s, srv
}

func (s *idempotentServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	case s.status != 0:
		http.Error(w, "no such queue", s.status)
		return
	case r.Method != http.MethodPost || key == "" || r.Header.Get("Content-Type") != "application/json":
		http.Error(w, "want a JSON POST with an Idempotency-Key", http.StatusBadRequest)
		return
	}
	roll := s.rng.Float64()
	mode := ""
	switch {
	case roll < s.failRate*0.3:
		mode = "503"
	case roll < s.failRate*0.5:
		mode = "429"
	case roll < s.failRate*0.75:
		mode = "accepted, then 500" // the response is lost: the client must retry with the same key
	case roll < s.failRate:
		mode = "connection dropped"
	}
	if mode != "" {
		s.failures[mode]++
	}
	switch mode {
	case "503":
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
		return
	case "429":
		http.Error(w, "slow down", http.StatusTooManyRequests)
		return
	case "connection dropped":
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	if _, dup := s.accepted[key]; dup {
		s.repeats++
	} else {
		s.accepted[key] = body
	}
	if mode != "" {
		http.Error(w, "internal error after commit", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

// TestHTTPSinkExactlyOnceThroughFailures sends 2000 records through an HTTP
// sink with 4 instances to a server that fails about 30% of the requests:
// every record ends up accepted exactly once, under its own key.
func TestHTTPSinkExactlyOnceThroughFailures(t *testing.T) {
	seed := *httpSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	// The 4 instances interleave their requests, so a seed replays the
	// server's dice, not the exact order of the requests.
	t.Logf("server seed %d (replay with -http.seed=%d)", seed, seed)
	srv, hs := newIdempotentServer(t, seed, 0.3)
	sys, ctx := newSystem(t)
	const n, parts = 2000, 4
	top := operators.NewTopology("http-exactly-once", operators.BatchSize(16))
	src := operators.Source(top, "orders", operators.Generate(n, func(i int64) httpOrder {
		return httpOrder{ID: i, Label: fmt.Sprintf("order-%d", i)}
	}))
	operators.Sink(src, "post", operators.HTTP[httpOrder](hs.URL+"/orders",
		operators.HTTPClient(hs.Client()),
		operators.HTTPKeyPrefix("http-exactly-once/post"),
		// 0.3^30: no record runs out of attempts in practice.
		operators.HTTPRetry(30, supervision.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond, Rand: supervision.SeededRand(seed)}),
	), operators.Parallelism(parts))
	run := runToEnd(t, sys, ctx, top)

	srv.mu.Lock()
	defer srv.mu.Unlock()
	t.Logf("%d requests for %d records; failures %v; repeated keys %d", srv.requests, n, srv.failures, srv.repeats)
	if len(srv.accepted) != n {
		t.Errorf("server accepted %d keys, want %d", len(srv.accepted), n)
	}
	seen := map[int64]string{}
	perPart := map[string]int{}
	for key, body := range srv.accepted {
		var o httpOrder
		if err := json.Unmarshal(body, &o); err != nil {
			t.Fatalf("key %s: body %q: %v", key, body, err)
		}
		if prev, dup := seen[o.ID]; dup {
			t.Errorf("record %d accepted twice, under keys %s and %s", o.ID, prev, key)
		}
		seen[o.ID] = key
		if o.Label != fmt.Sprintf("order-%d", o.ID) {
			t.Errorf("key %s: record %+v garbled", key, o)
		}
		f := strings.Split(key, "/")
		if len(f) != 4 || f[0]+"/"+f[1] != "http-exactly-once/post" {
			t.Errorf("key %q: want http-exactly-once/post/PART/SEQ", key)
			continue
		}
		perPart[f[2]]++
	}
	for i := int64(0); i < n; i++ {
		if _, ok := seen[i]; !ok {
			t.Errorf("record %d never accepted", i)
		}
	}
	if len(perPart) != parts {
		t.Errorf("keys name partitions %v, want %d partitions", perPart, parts)
	}
	// Each partition numbers its records 0, 1, 2, ... without a gap.
	for p, count := range perPart {
		for seq := 0; seq < count; seq++ {
			if _, ok := srv.accepted[fmt.Sprintf("http-exactly-once/post/%s/%d", p, seq)]; !ok {
				t.Errorf("partition %s: %d keys, but seq %d is missing", p, count, seq)
			}
		}
	}
	// The failures really happened, including responses lost after the
	// server had accepted (retried with the same key, so dropped).
	for _, mode := range []string{"503", "429", "accepted, then 500", "connection dropped"} {
		if srv.failures[mode] == 0 {
			t.Errorf("no %q failure in %d requests: the test did not exercise it", mode, srv.requests)
		}
	}
	if srv.repeats == 0 {
		t.Error("no key was sent again after its record was accepted: dedup was not exercised")
	}
	if s := stat(t, run, "post"); s.In != n {
		t.Errorf("sink received %d records, want %d", s.In, n)
	}
}

// TestHTTPSinkPermanentFailureFailsJob: a 400 is not retried; the job fails
// with an error naming the sink operator, the record's key and the status.
func TestHTTPSinkPermanentFailureFailsJob(t *testing.T) {
	srv, hs := newIdempotentServer(t, 1, 0)
	srv.status = http.StatusBadRequest
	sys, ctx := newSystem(t)
	top := operators.NewTopology("http-permanent")
	src := operators.Source(top, "orders", operators.FromSlice([]httpOrder{{ID: 1}, {ID: 2}, {ID: 3}}))
	operators.Sink(src, "post", operators.HTTP[httpOrder](hs.URL, operators.HTTPClient(hs.Client()), operators.HTTPKeyPrefix("p"),
		operators.HTTPRetry(5, supervision.Backoff{Initial: time.Millisecond})))
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	err = run.Wait(ctx)
	var oe *operators.OperatorError
	if !errors.As(err, &oe) || oe.Operator != "post" {
		t.Fatalf("job error %v, want an OperatorError of operator post", err)
	}
	var se *operators.HTTPStatusError
	if !errors.As(err, &se) || se.StatusCode != 400 || !errors.Is(err, supervision.ErrPermanent) {
		t.Errorf("error %v: want a permanent HTTPStatusError 400", err)
	}
	for _, want := range []string{`operator "post"`, "p/0/0", "400 Bad Request", "no such queue", hs.URL} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.requests != 1 {
		t.Errorf("%d requests, want 1: a 400 must not be retried, nor later records sent", srv.requests)
	}
}

// openHTTPWriter opens partition part of an HTTP sink outside a topology.
func openHTTPWriter(t *testing.T, sink operators.SinkConnector[httpOrder], ctx context.Context, part int) operators.Writer[httpOrder] {
	t.Helper()
	w, err := sink.Open(ctx, part, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func TestHTTPSinkRetriesTransientStatusesWithTheSameKey(t *testing.T) {
	var mu sync.Mutex
	var got []string
	answers := []int{503, 429, 408, 502, 200, 200}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r.Header.Get("Idempotency-Key")+" "+r.Header.Get("X-Tenant")+" "+r.Header.Get("Content-Type"))
		w.WriteHeader(answers[len(got)-1])
	}))
	defer hs.Close()
	sink := operators.HTTP[httpOrder](hs.URL, operators.HTTPClient(hs.Client()), operators.HTTPKeyPrefix("job/op"),
		operators.HTTPHeader("X-Tenant", "acme"),
		operators.HTTPEncoder("text/csv", func(v any) ([]byte, error) { o := v.(httpOrder); return fmt.Appendf(nil, "%d,%s", o.ID, o.Label), nil }),
		operators.HTTPRetry(5, supervision.Backoff{Initial: time.Millisecond, Jitter: supervision.NoJitter}))
	w := openHTTPWriter(t, sink, context.Background(), 1)
	if err := w.Write([]httpOrder{{ID: 1}, {ID: 2}}); err != nil {
		t.Fatal(err)
	}
	want := []string{"job/op/1/0 acme text/csv", "job/op/1/0 acme text/csv", "job/op/1/0 acme text/csv", "job/op/1/0 acme text/csv", "job/op/1/0 acme text/csv", "job/op/1/1 acme text/csv"}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("requests %q, want %q", got, want)
	}
}

func TestHTTPSinkGivesUpAfterItsAttempts(t *testing.T) {
	var mu sync.Mutex
	requests := 0
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests++
		mu.Unlock()
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
	}))
	defer hs.Close()
	sink := operators.HTTP[httpOrder](hs.URL, operators.HTTPClient(hs.Client()), operators.HTTPKeyPrefix("k"),
		operators.HTTPRetry(3, supervision.Backoff{Initial: time.Millisecond}))
	w := openHTTPWriter(t, sink, context.Background(), 0)
	err := w.Write([]httpOrder{{ID: 1}, {ID: 2}})
	if !errors.Is(err, supervision.ErrAttemptsExhausted) || !strings.Contains(err.Error(), "k/0/0") || !strings.Contains(err.Error(), "down for maintenance") {
		t.Errorf("Write = %v, want attempts exhausted naming key k/0/0 and the body", err)
	}
	var re *supervision.RetryError
	if !errors.As(err, &re) || re.Outcome.Attempts != 3 {
		t.Errorf("Write error %v: want a RetryError of 3 attempts", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if requests != 3 {
		t.Errorf("%d requests, want 3 (the second record is not sent)", requests)
	}
}

func TestHTTPSinkHonoursContext(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	defer hs.Close()
	ctx, cancel := context.WithCancel(context.Background())
	sink := operators.HTTP[httpOrder](hs.URL, operators.HTTPClient(hs.Client()),
		operators.HTTPRetry(100, supervision.Backoff{Initial: time.Hour}))
	w := openHTTPWriter(t, sink, ctx, 0)
	done := make(chan error, 1)
	go func() { done <- w.Write([]httpOrder{{ID: 1}}) }()
	cancel() // the job stops while the sink waits an hour to retry
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Write = %v, want cancelled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Write did not return after its context was cancelled")
	}
}

// TestHTTPSinkCheckpointKeepsKeys: a partition restored from a checkpoint
// numbers its records from where the checkpoint was taken, so replayed
// records get the keys they had.
func TestHTTPSinkCheckpointKeepsKeys(t *testing.T) {
	srv, hs := newIdempotentServer(t, 1, 0)
	sink := operators.HTTP[httpOrder](hs.URL, operators.HTTPClient(hs.Client()), operators.HTTPKeyPrefix("cp"))
	w := openHTTPWriter(t, sink, context.Background(), 0)
	if err := w.Write([]httpOrder{{ID: 0}, {ID: 1}}); err != nil {
		t.Fatal(err)
	}
	state, err := w.(operators.Checkpointer).Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]httpOrder{{ID: 2}, {ID: 3}}) // sent, then the job fails
	w2, err := sink.(operators.RestorableSink[httpOrder]).OpenAt(context.Background(), 0, 1, state)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	if err := w2.Write([]httpOrder{{ID: 2}, {ID: 3}, {ID: 4}}); err != nil { // the replay
		t.Fatal(err)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if len(srv.accepted) != 5 || srv.repeats != 2 {
		t.Errorf("accepted %d records with %d repeats, want 5 and 2 (the replayed records dropped)", len(srv.accepted), srv.repeats)
	}
	if b := srv.accepted["cp/0/4"]; !strings.Contains(string(b), `"id":4`) {
		t.Errorf("cp/0/4 holds %s, want record 4", b)
	}
	if _, err := sink.(operators.RestorableSink[httpOrder]).OpenAt(context.Background(), 0, 1, []byte{1}); err == nil {
		t.Error("OpenAt accepted a malformed state")
	}
}

func TestHTTPSinkInvalidConfig(t *testing.T) {
	cases := []struct {
		url  string
		opts []operators.HTTPOption
		want string
	}{
		{"ftp://example.com/x", nil, "want http:// or https://"},
		{"http://", nil, "want http:// or https://"},
		{"http://x\x7f", nil, "invalid control character"},
		{"http://127.0.0.1:1", []operators.HTTPOption{operators.HTTPClient(nil)}, "nil HTTP client"},
		{"http://127.0.0.1:1", []operators.HTTPOption{operators.HTTPEncoder("x", nil)}, "nil encoder"},
		{"http://127.0.0.1:1", []operators.HTTPOption{operators.HTTPKeyPrefix("")}, "empty idempotency key prefix"},
		{"http://127.0.0.1:1", []operators.HTTPOption{operators.HTTPRetry(0, supervision.Backoff{})}, "0 attempts"},
		{"http://127.0.0.1:1", []operators.HTTPOption{operators.HTTPRetry(3, supervision.Backoff{Multiplier: 0.5})}, "multiplier"},
		{"http://127.0.0.1:1", []operators.HTTPOption{nil}, "nil option"},
	}
	for _, c := range cases {
		_, err := operators.HTTP[httpOrder](c.url, c.opts...).Open(context.Background(), 0, 1)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("HTTP(%q): Open error %v, want one containing %q", c.url, err, c.want)
		}
	}
}

func TestHTTPSinkEncodeErrorFailsTheRecord(t *testing.T) {
	sink := operators.HTTP[httpOrder]("http://127.0.0.1:1/", operators.HTTPKeyPrefix("e"),
		operators.HTTPEncoder("application/json", func(any) ([]byte, error) { return nil, errors.New("unsupported value") }))
	w, err := sink.Open(context.Background(), 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Write([]httpOrder{{ID: 1}}); err == nil || !strings.Contains(err.Error(), "e/0/0: encode") {
		t.Errorf("Write = %v, want an encode error naming the record", err)
	}
}

func ExampleHTTP() {
	// An idempotent endpoint: it counts each Idempotency-Key once.
	var mu sync.Mutex
	keys := map[string]bool{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		keys[r.Header.Get("Idempotency-Key")] = true
	}))
	defer hs.Close()

	sink := operators.HTTP[string](hs.URL, operators.HTTPKeyPrefix("greetings/post"))
	w, _ := sink.Open(context.Background(), 0, 1)
	err := w.Write([]string{"hello", "world"})
	w.Close()
	fmt.Println(err, len(keys), keys["greetings/post/0/1"])
	// Output: <nil> 2 true
}
