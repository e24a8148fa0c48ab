package dashboard

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func getHost(t *testing.T, url, host string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestForeignHostRefused: DNS rebinding makes a browser send the
// attacker's name as Host to 127.0.0.1; such a request gets 403. IP
// addresses, localhost and AllowedHosts are served.
func TestForeignHostRefused(t *testing.T) {
	d := newDashboard(t, Options{AllowedHosts: []string{"ops.example.com"}})
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	for host, want := range map[string]int{
		"evil.example":           http.StatusForbidden,
		"evil.example:8080":      http.StatusForbidden,
		"127.0.0.1.evil.example": http.StatusForbidden,
		"":                       http.StatusOK, // the URL's, 127.0.0.1:PORT
		"localhost:8080":         http.StatusOK,
		"[::1]:8080":             http.StatusOK,
		"10.0.0.5":               http.StatusOK,
		"OPS.example.com:443":    http.StatusOK,
	} {
		for _, path := range []string{"/", "/snapshot.json"} {
			if got := getHost(t, srv.URL+path, host); got != want {
				t.Errorf("GET %s with Host %q: %d, want %d", path, host, got, want)
			}
		}
	}
	if got := d.Refused().Hosts; got != 6 {
		t.Errorf("Refused().Hosts = %d, want 6", got)
	}
	if _, err := New(Options{AllowedHosts: []string{"a.example:80"}}); err == nil {
		t.Error("a host with a port accepted")
	}
}

// TestStreamsCapped: beyond MaxStreams, /events gets 503.
func TestStreamsCapped(t *testing.T) {
	d := newDashboard(t, Options{MaxStreams: 2, Interval: 20 * time.Millisecond})
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r1, r2 := stream(t, ctx, srv.URL), stream(t, ctx, srv.URL)
	nextSnapshot(t, r1)
	nextSnapshot(t, r2)
	if got := getHost(t, srv.URL+"/events", ""); got != http.StatusServiceUnavailable {
		t.Fatalf("a third stream: %d, want 503", got)
	}
	if got := d.Refused().Streams; got != 1 {
		t.Fatalf("Refused().Streams = %d, want 1", got)
	}
	cancel()
	waitFor(t, "the streams to end", func() bool { return d.Streams() == 0 })
}
