package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/dashboard"
)

// lineLog collects the lines written to the command's stderr, for the
// messages of failed checks.
type lineLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// TestRunServesTheDashboard runs `sluice run wordcount --ui 127.0.0.1:0`
// in process, reads the address it prints, loads the page, the snapshot and
// the event stream, checks that they show the sample's operators, and stops
// the command by cancelling its context, as Ctrl-C does.
func TestRunServesTheDashboard(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		// protoactor's dead-letter throttle outlives a system by its interval.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))

	pr, pw := io.Pipe()
	var out strings.Builder // written by the command only; read after it returned
	root := newRoot(&out, pw)
	root.SetArgs([]string{"run", "wordcount", "--lines", "2000", "--progress", "0", "--ui", "127.0.0.1:0", "--ui-wait"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		err := root.ExecuteContext(ctx)
		pw.Close()
		done <- err
	}()

	// Read stderr to its end (the pipe must never block the command), and
	// pick the dashboard's URL from it.
	var errLog lineLog
	urls := make(chan string, 1)
	scanned := make(chan struct{})
	printed := regexp.MustCompile(`^dashboard at (http://127\.0\.0\.1:[0-9]+/)$`)
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			errLog.mu.Lock()
			errLog.lines = append(errLog.lines, sc.Text())
			errLog.mu.Unlock()
			if m := printed.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case urls <- m[1]:
				default:
				}
			}
		}
	}()
	var url string
	select {
	case url = <-urls:
	case err := <-done:
		t.Fatalf("the command ended before printing the dashboard's address: %v\nstderr:\n%s", err, errLog.String())
	case <-time.After(10 * time.Second):
		t.Fatalf("no %q line on stderr within 10s:\n%s", printed, errLog.String())
	}

	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	get := func(ctx context.Context, path string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s%s: %v", url, path, err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			t.Fatalf("GET %s%s: %s", url, path, resp.Status)
		}
		return resp
	}
	reqCtx, reqCancel := context.WithTimeout(ctx, 10*time.Second)
	defer reqCancel()

	resp := get(reqCtx, "")
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !strings.Contains(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(string(page), "app.js") {
		t.Fatalf("the page: %v, %s, %d bytes, want HTML that loads app.js", err, resp.Header.Get("Content-Type"), len(page))
	}

	// The event stream: snapshots as JSON, until one shows the job with
	// the sample's operators (the first may come before the job was added).
	wantOps := []string{"lines", "split", "count", "collect"}
	resp = get(reqCtx, "events")
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("/events Content-Type %q, want text/event-stream", ct)
	}
	events := bufio.NewScanner(resp.Body)
	events.Buffer(nil, 1<<20)
	var snap dashboard.Snapshot
	var event string
	for found := false; !found; {
		if !events.Scan() {
			t.Fatalf("the event stream ended (%v) before a snapshot showed operators %v", events.Err(), wantOps)
		}
		line := events.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && event == "snapshot":
			data := strings.TrimPrefix(line, "data: ")
			if err := json.Unmarshal([]byte(data), &snap); err != nil {
				t.Fatalf("snapshot event: %v\n%s", err, data)
			}
			found = len(snap.Jobs) == 1 && hasOperators(snap.Jobs[0], wantOps) && graphMentions(t, snap.Jobs[0], wantOps)
		}
	}
	resp.Body.Close() // the server's handler sees the stream end
	if snap.Jobs[0].Name != "wordcount" {
		t.Errorf("the job is named %q, want wordcount", snap.Jobs[0].Name)
	}

	// /snapshot.json is the same snapshot, as a document.
	resp = get(reqCtx, "snapshot.json")
	var again dashboard.Snapshot
	err = json.NewDecoder(resp.Body).Decode(&again)
	resp.Body.Close()
	if err != nil || len(again.Jobs) != 1 || !hasOperators(again.Jobs[0], wantOps) {
		t.Fatalf("/snapshot.json: %v, %+v; want the wordcount job and its operators", err, again.Jobs)
	}

	// Stop it as Ctrl-C does: the command returns, the server goes away.
	cancel()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("the command returned %v after it was interrupted\nstderr:\n%s", err, errLog.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the command did not return within 10s of its context ending\nstderr:\n%s", errLog.String())
	}
	<-scanned
	if !strings.Contains(out.String(), "distinct; top") {
		t.Errorf("the report on stdout:\n%s", out.String())
	}
	client.CloseIdleConnections()
	after, cancelAfter := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelAfter()
	req, _ := http.NewRequestWithContext(after, http.MethodGet, url, nil)
	if resp, err := client.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the dashboard still answers at %s after the command returned", url)
	}
}

func hasOperators(j dashboard.Job, names []string) bool {
	var have []string
	for _, op := range j.Operators {
		have = append(have, op.Name)
	}
	for _, n := range names {
		if !slices.Contains(have, n) {
			return false
		}
	}
	return true
}

// graphMentions says whether the job's graph (its JSON, as the page gets
// it) names every operator.
func graphMentions(t *testing.T, j dashboard.Job, names []string) bool {
	t.Helper()
	b, err := json.Marshal(j.Graph)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !strings.Contains(string(b), `"`+n+`"`) {
			return false
		}
	}
	return true
}
