package admin_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
)

// TestGuard: a change without the token gets 401, with a wrong one too;
// from a foreign Host or Origin, 403, with the token or without, and reads
// too; a read needs no token; the job is unchanged by every refusal.
func TestGuard(t *testing.T) {
	sys, ctx := newSystem(t)
	feed := make(chan int64) // the job runs until it is closed
	top := operators.NewTopology("guarded")
	src := operators.Source(top, "src", operators.FromChannel(feed))
	operators.Sink(src, "sink", operators.SinkFunc(func(int64) error { return nil }),
		operators.Input(mailbox.Block(64)))
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		close(feed)
		if err := run.Wait(ctx); err != nil {
			t.Error(err)
		}
	}()
	a := newAPI(t, admin.Options{})
	if err := a.srv.Add(run); err != nil {
		t.Fatal(err)
	}
	change := admin.Input{Policy: "drop-oldest", Capacity: 64}
	path := "/v1/jobs/guarded/inputs/sink"
	cases := []struct {
		name   string
		method string
		hdr    map[string]string
		want   int
	}{
		{"no token", http.MethodPut, map[string]string{"Authorization": ""}, http.StatusUnauthorized},
		{"wrong token", http.MethodPut, map[string]string{"Authorization": "Bearer s3cret-tokeN"}, http.StatusUnauthorized},
		{"not bearer", http.MethodPut, map[string]string{"Authorization": "Basic " + testToken}, http.StatusUnauthorized},
		{"foreign host", http.MethodPut, map[string]string{"Host": "evil.example:8080"}, http.StatusForbidden},
		{"rebinding host", http.MethodGet, map[string]string{"Host": "attacker.example"}, http.StatusForbidden},
		{"foreign origin", http.MethodPut, map[string]string{"Origin": "http://evil.example"}, http.StatusForbidden},
		{"other local origin", http.MethodPut, map[string]string{"Origin": "http://127.0.0.1:1"}, http.StatusForbidden},
		{"foreign origin without token", http.MethodPut, map[string]string{"Origin": "https://evil.example", "Authorization": ""}, http.StatusForbidden},
		{"foreign origin read", http.MethodGet, map[string]string{"Origin": "null"}, http.StatusForbidden},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := path
			var body any = change
			if c.method == http.MethodGet {
				p, body = "/v1/jobs/guarded", nil
			}
			if got := a.do(c.method, p, body, c.hdr, nil); got != c.want {
				t.Fatalf("%s %s: status %d, want %d", c.method, p, got, c.want)
			}
		})
	}
	var st admin.JobStatus
	if code := a.do(http.MethodGet, "/v1/jobs/guarded", nil, map[string]string{"Authorization": "", "Host": "localhost"}, &st); code != http.StatusOK {
		t.Fatalf("read without token: %d", code)
	}
	if in := inputOf(t, st, "sink"); in.Policy != "block" {
		t.Fatalf("after refusals the input is %+v", in)
	}
	hist, _ := a.srv.History("guarded")
	if len(hist) != 0 {
		t.Fatalf("refused requests reached the job: %+v", hist)
	}
	own := map[string]string{"Origin": a.hs.URL}
	if code := a.do(http.MethodPut, path, change, own, nil); code != http.StatusOK {
		t.Fatalf("with the token from its own origin: %d", code)
	}
	a.do(http.MethodGet, "/v1/jobs/guarded", nil, nil, &st)
	if in := inputOf(t, st, "sink"); in.Policy != "drop-oldest" {
		t.Fatalf("after the change the input is %+v", in)
	}
	// A server without a token refuses every change, even one that sends
	// an empty bearer token.
	ro, err := admin.New(admin.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ro.Add(run); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(ro.Handler())
	defer hs.Close()
	req, _ := http.NewRequest(http.MethodPost, hs.URL+"/v1/jobs/guarded/savepoint", nil)
	req.Header.Set("Authorization", "Bearer ")
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a server without a token: %d, want 401", resp.StatusCode)
	}
}

func inputOf(t *testing.T, st admin.JobStatus, op string) admin.Input {
	t.Helper()
	for _, in := range st.Inputs {
		if in.Operator == op && in.Input != nil {
			return *in.Input
		}
	}
	t.Fatalf("no input %q in %+v", op, st.Inputs)
	return admin.Input{}
}
