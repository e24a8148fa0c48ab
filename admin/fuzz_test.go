package admin_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/admin"
)

// FuzzInputBody: any body of an input change gets an answer (400 for one
// that does not decode, 404 for the unknown job), never a panic.
func FuzzInputBody(f *testing.F) {
	f.Add([]byte(`{"policy": "sample", "capacity": 4096, "sample_every": 4, "high_water": 100}`))
	f.Add([]byte(`{"policy": "throttle", "rate": 1e308}`))
	f.Add([]byte(`{"capacity": -1, "extra": true}`))
	f.Add([]byte(`[]`))
	srv, err := admin.New(admin.Options{Token: "t"})
	if err != nil {
		f.Fatal(err)
	}
	h := srv.Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPut, "http://127.0.0.1/v1/jobs/j/inputs/op", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer t")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusBadRequest && rec.Code != http.StatusNotFound {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	})
}
