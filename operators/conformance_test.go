package operators_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/connector"
	"github.com/sluicehq/sluice/connector/connectortest"
	"github.com/sluicehq/sluice/operators"
)

// The built-in connectors pass the connector conformance suite, each with
// the features it claims.
func TestConformanceFromSlice(t *testing.T) {
	xs := []int{3, 1, 4, 1, 5, 9, 2, 6}
	connectortest.TestSource(t, connectortest.SourceCase[int]{
		New:      func(t *testing.T) (connector.Source[int], []int) { return operators.FromSlice(xs), xs },
		Features: connectortest.SourceFeatures{Bounded: true, Replay: true},
	})
}

func TestConformanceGenerate(t *testing.T) {
	want := make([]int64, 40)
	for i := range want {
		want[i] = int64(i * i)
	}
	connectortest.TestSource(t, connectortest.SourceCase[int64]{
		New: func(t *testing.T) (connector.Source[int64], []int64) {
			return operators.Generate(40, func(i int64) int64 { return i * i }), want
		},
		Features: connectortest.SourceFeatures{Bounded: true, Replay: true},
	})
}

func TestConformanceFileLines(t *testing.T) {
	lines := []string{"to be", "or not", "", "to be", "that is the question"}
	connectortest.TestSource(t, connectortest.SourceCase[string]{
		New: func(t *testing.T) (connector.Source[string], []string) {
			path := filepath.Join(t.TempDir(), "in.txt")
			if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			return operators.FileLines(path), lines
		},
		Features: connectortest.SourceFeatures{Bounded: true, Replay: true},
	})
}

func TestConformanceFileSink(t *testing.T) {
	var path string
	records := []int{10, 20, 30, 40, 50, 60, 70}
	connectortest.TestSink(t, connectortest.SinkCase[int]{
		New: func(t *testing.T) connector.Sink[int] {
			path = filepath.Join(t.TempDir(), "out.txt")
			return operators.File(path, func(v int) string { return strconv.Itoa(v) })
		},
		Visible: func(t *testing.T) []int {
			b, err := os.ReadFile(path)
			if os.IsNotExist(err) {
				return nil
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, l := range strings.Fields(string(b)) {
				v, err := strconv.Atoi(l)
				if err != nil {
					t.Fatalf("%s: line %q", path, l)
				}
				got = append(got, v)
			}
			return got
		},
		Records:  records,
		Features: connectortest.SinkFeatures{Checkpoints: true},
	})
}

func TestConformanceCollector(t *testing.T) {
	var c *operators.Collector[string]
	connectortest.TestSink(t, connectortest.SinkCase[string]{
		New:      func(t *testing.T) connector.Sink[string] { c = operators.NewCollector[string](); return c },
		Visible:  func(t *testing.T) []string { return c.Items() },
		Records:  []string{"a", "b", "c", "d", "e", "f"},
		Features: connectortest.SinkFeatures{},
	})
}

// The in-memory ingress runs dry and waits without spinning.
func TestConformanceIngress(t *testing.T) {
	var in *operators.Ingress[int]
	connectortest.TestSource(t, connectortest.SourceCase[int]{
		New: func(t *testing.T) (connector.Source[int], []int) {
			in = operators.NewIngress[int](16)
			want := []int{1, 2, 3, 4}
			for _, v := range want {
				if err := in.TrySend(v); err != nil {
					t.Fatal(err)
				}
			}
			return in, want
		},
		Publish: func(t *testing.T, more []int) {
			for _, v := range more {
				if err := in.Send(t.Context(), v); err != nil {
					t.Fatal(err)
				}
			}
		},
		More:     []int{5, 6},
		Features: connectortest.SourceFeatures{Waits: true},
	})
}

// The HTTP sink passes the suite against a real HTTP server: each record
// POSTed once.
func TestConformanceHTTPSink(t *testing.T) {
	var mu sync.Mutex
	var got []int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var v int
		if err := json.NewDecoder(r.Body).Decode(&v); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, v)
		mu.Unlock()
	}))
	defer srv.Close()
	connectortest.TestSink(t, connectortest.SinkCase[int]{
		New: func(t *testing.T) connector.Sink[int] {
			mu.Lock()
			got = nil
			mu.Unlock()
			return operators.HTTP[int](srv.URL)
		},
		Visible: func(t *testing.T) []int {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(got)
		},
		Records: []int{1, 2, 3, 4, 5, 6},
	})
}
