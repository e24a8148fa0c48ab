package dashboard

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestWriteEventFraming(t *testing.T) {
	cases := []struct {
		event string
		id    uint64
		data  string
		want  string
	}{
		{"snapshot", 7, `{"seq":7}`, "event: snapshot\nid: 7\ndata: {\"seq\":7}\n\n"},
		// Every line of the data gets its own data: field, whatever ends it.
		{"snapshot", 8, "a\nb\r\nc\n", "event: snapshot\nid: 8\ndata: a\ndata: b\ndata: c\n\n"},
		{"", 9, "", "id: 9\ndata: \n\n"},
	}
	for _, c := range cases {
		var b bytes.Buffer
		if err := writeEvent(&b, c.event, c.id, []byte(c.data)); err != nil {
			t.Fatal(err)
		}
		if b.String() != c.want {
			t.Errorf("writeEvent(%q, %d, %q) = %q, want %q", c.event, c.id, c.data, b.String(), c.want)
		}
		ev, err := readEvent(bufio.NewReader(&b))
		if err != nil {
			t.Fatal(err)
		}
		if want := strings.ReplaceAll(strings.TrimRight(c.data, "\n"), "\r", ""); ev.data != want || ev.id != strconv.FormatUint(c.id, 10) {
			t.Errorf("read back %+v, want data %q", ev, want)
		}
	}
}

// event is one Server-Sent Event as a browser's EventSource parses it.
type event struct {
	name, id, data string
}

// readEvent reads the next event, skipping comments and retry fields.
func readEvent(r *bufio.Reader) (event, error) {
	var ev event
	var data []string
	seen := false
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			if seen {
				ev.data = strings.Join(data, "\n")
				return ev, nil
			}
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			ev.name, seen = value, true
		case "id":
			ev.id, seen = value, true
		case "data":
			data, seen = append(data, value), true
		}
	}
}

// stream opens /events and returns a reader of its events; the stream
// ends with ctx.
func stream(t *testing.T, ctx context.Context, url string) *bufio.Reader {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET /events: %s, Content-Type %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	return bufio.NewReader(resp.Body)
}

func nextSnapshot(t *testing.T, r *bufio.Reader) Snapshot {
	t.Helper()
	ev, err := readEvent(r)
	if err != nil {
		t.Fatalf("read event: %v", err)
	}
	if ev.name != "snapshot" {
		t.Fatalf("event %q, want snapshot", ev.name)
	}
	var s Snapshot
	if err := json.Unmarshal([]byte(ev.data), &s); err != nil {
		t.Fatalf("event data: %v\n%s", err, ev.data)
	}
	if ev.id != strconv.FormatUint(s.Seq, 10) {
		t.Errorf("event id %s, snapshot seq %d", ev.id, s.Seq)
	}
	return s
}

// The stream carries a snapshot at once, then one per interval, in which a
// running job's counters and rates move.
func TestEventsStreamRunningJob(t *testing.T) {
	sys, ctx := newSystem(t)
	run := startPaced(t, sys, ctx, "steady", 2000)
	d := newDashboard(t, Options{Interval: 50 * time.Millisecond})
	if err := d.Add(run); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := stream(t, sctx, srv.URL)
	first := nextSnapshot(t, r)
	if len(first.Jobs) != 1 || first.Jobs[0].Name != "steady" || len(first.Jobs[0].Graph.Tasks) != 2 {
		t.Fatalf("first snapshot: %+v", first)
	}
	var last Snapshot
	for deadline := time.Now().Add(10 * time.Second); ; {
		last = nextSnapshot(t, r)
		if last.Seq <= first.Seq {
			t.Fatalf("snapshot %d after %d", last.Seq, first.Seq)
		}
		op := opNamed(t, last.Jobs[0], "pace")
		// Until the counters move and the instances of count have two
		// readings, for their shares.
		if c := opNamed(t, last.Jobs[0], "count"); op.Out > opNamed(t, first.Jobs[0], "pace").Out && op.OutRate > 0 && c.Busy >= 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the source's counters never moved: %+v", op)
		}
	}
	// Per instance, from the running job: count runs ×2, and its instances'
	// records add up to at least its own (they are read just after); each
	// has shares of the interval that sum to 1 (busy is measured: latency
	// statistics are on by default).
	count := opNamed(t, last.Jobs[0], "count")
	var sum int64
	for _, in := range count.Instances {
		sum += in.In
		if in.Busy < 0 || in.Blocked < 0 || math.Abs(in.Busy+in.Blocked+in.Idle-1) > 1e-6 {
			t.Errorf("count instance %d: shares %v + %v + %v", in.Index, in.Busy, in.Blocked, in.Idle)
		}
	}
	if len(count.Instances) != 2 || sum < count.In || sum == 0 || count.Busy < 0 {
		t.Errorf("count ×%d: instances %+v take %d of its %d", count.Parallelism, count.Instances, sum, count.In)
	}
	if got := d.Streams(); got != 1 {
		t.Errorf("%d streams in progress, want 1", got)
	}
	// The client goes: its handler ends.
	cancel()
	waitFor(t, "the stream's handler to end", func() bool { return d.Streams() == 0 })
}

// Close ends the streams in progress, and Close waits for them.
func TestCloseEndsStreams(t *testing.T) {
	d, err := New(Options{Interval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r1, r2 := stream(t, ctx, srv.URL), stream(t, ctx, srv.URL)
	nextSnapshot(t, r1)
	nextSnapshot(t, r2)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if n := d.Streams(); n != 0 {
		t.Fatalf("%d streams after Close", n)
	}
	for _, r := range []*bufio.Reader{r1, r2} {
		for {
			if _, err := readEvent(r); err != nil {
				if !errors.Is(err, io.EOF) {
					t.Errorf("stream ended with %v, want EOF", err)
				}
				break
			}
		}
	}
	// A page that opens a stream now is told the dashboard is closed.
	resp, err := http.Get(srv.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("GET /events after Close: %s", resp.Status)
	}
	if err := d.Add(nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("Add(nil): %v", err)
	}
}
