package dashboard

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admin"
)

// TestControlsGuarded: the admin API served under the dashboard's admin/
// keeps its own checks: a change without the token is 401, with a wrong
// one 401, from a page of another origin or under a foreign Host 403, and
// with the token it is applied (a source paused, then resumed). The page
// itself never carries the token.
func TestControlsGuarded(t *testing.T) {
	const token = "s3cret-token-for-the-test"
	adm, err := admin.New(admin.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	d := newDashboard(t, Options{Interval: 50 * time.Millisecond, Admin: adm.Handler()})
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	sys, ctx := newSystem(t)
	run := startPaced(t, sys, ctx, "controlled", 500)
	if err := d.Add(run); err != nil {
		t.Fatal(err)
	}
	if err := adm.Add(run); err != nil {
		t.Fatal(err)
	}
	do := func(method, path, host, origin, bearer string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, strings.NewReader(""))
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var body map[string]any
		if json.Unmarshal(raw, &body) != nil { // the dashboard's own refusals are plain text
			return resp.StatusCode, string(raw)
		}
		msg, _ := body["error"].(string)
		return resp.StatusCode, msg
	}
	pause := "/admin/v1/jobs/controlled/sources/src/pause"
	self := strings.Replace(srv.URL, "http://", "", 1)
	for _, c := range []struct {
		name, host, origin, bearer string
		code                       int
		want                       string
	}{
		{"no token", "", "", "", 401, "needs the bearer token"},
		{"wrong token", "", "", "guess", 401, "needs the bearer token"},
		{"foreign origin", "", "https://evil.example", token, 403, "foreign Origin"},
		{"foreign host", "evil.example", "", token, 403, "not allowed"},
		{"same origin, token", "", "http://" + self, token, 200, ""},
	} {
		if code, msg := do("POST", pause, c.host, c.origin, c.bearer); code != c.code || !strings.Contains(msg, c.want) {
			t.Errorf("%s: %d %q, want %d %q", c.name, code, msg, c.code, c.want)
		}
	}
	waitFor(t, "the page's configuration to show the source paused", func() bool {
		for _, in := range d.Snapshot().Jobs[0].Config.Inputs {
			if in.Operator == "src" {
				return in.Paused
			}
		}
		return false
	})
	if code, msg := do("POST", "/admin/v1/jobs/controlled/sources/src/resume", "", "", token); code != 200 {
		t.Errorf("resume: %d %s", code, msg)
	}
	if code, _ := do("GET", "/admin/v1/jobs", "", "", ""); code != 200 {
		t.Errorf("reading the jobs without a token: %d, want 200", code)
	}
	resp, page := get(t, srv.URL+"/")
	if resp.StatusCode != 200 || strings.Contains(page, token) || !firstFrameOf(t, page).Controls {
		t.Errorf("the page: %d, controls %v, carries the token: %v", resp.StatusCode, firstFrameOf(t, page).Controls, strings.Contains(page, token))
	}
}
