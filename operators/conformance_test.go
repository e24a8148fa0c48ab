package operators_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/connector"
	"github.com/sluicehq/sluice/connector/connectortest"
	"github.com/sluicehq/sluice/operators"
)

// The built-in connectors against the connector conformance suite.

var conformanceRecords = []int{1, 2, 3, 4, 5, 6, 7}

func TestConformanceFromSlice(t *testing.T) {
	connectortest.Source(t, connectortest.SourceCase[int]{
		Make:     func(_ *testing.T, recs []int) connector.Source[int] { return operators.FromSlice(recs) },
		Records:  conformanceRecords,
		Features: connectortest.Replayable | connectortest.Bounded | connectortest.Partitioned,
	})
}

func TestConformanceGenerate(t *testing.T) {
	connectortest.Source(t, connectortest.SourceCase[int64]{
		Make: func(_ *testing.T, recs []int64) connector.Source[int64] {
			return operators.Generate(int64(len(recs)), func(i int64) int64 { return recs[i] })
		},
		Records:  []int64{10, 11, 12, 13, 14},
		Features: connectortest.Replayable | connectortest.Bounded | connectortest.Partitioned,
	})
}

func TestConformanceFileLines(t *testing.T) {
	connectortest.Source(t, connectortest.SourceCase[string]{
		Make: func(t *testing.T, recs []string) connector.Source[string] {
			path := filepath.Join(t.TempDir(), "lines.txt")
			if err := os.WriteFile(path, []byte(strings.Join(recs, "\n")+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			return operators.FileLines(path)
		},
		Records:  []string{"to", "be", "or", "not", "to be"},
		Features: connectortest.Replayable | connectortest.Bounded,
	})
}

func TestConformanceLog(t *testing.T) {
	var log *operators.Log[int]
	connectortest.Source(t, connectortest.SourceCase[int]{
		Make: func(_ *testing.T, recs []int) connector.Source[int] {
			log = operators.NewLog[int]()
			log.Append(recs...)
			if recs != nil {
				log.Close()
			}
			return log
		},
		Append:   func(vs ...int) { log.Append(vs...) },
		Records:  conformanceRecords,
		Features: connectortest.Replayable | connectortest.Bounded | connectortest.Waits | connectortest.Partitioned,
	})
}

func TestConformanceIngress(t *testing.T) {
	var in *operators.Ingress[int]
	connectortest.Source(t, connectortest.SourceCase[int]{
		Make: func(_ *testing.T, recs []int) connector.Source[int] {
			in = operators.NewIngress[int](16)
			for _, v := range recs {
				if err := in.TrySend(v); err != nil {
					t.Fatal(err)
				}
			}
			if recs != nil {
				in.Close()
			}
			return in
		},
		Append:   func(vs ...int) { _ = in.TrySend(vs[0]) },
		Records:  conformanceRecords,
		Features: connectortest.Bounded | connectortest.Waits,
	})
}

func TestConformanceFile(t *testing.T) {
	connectortest.Sink(t, connectortest.SinkCase[int]{
		Make: func(t *testing.T) (connector.Sink[int], func() []int) {
			path := filepath.Join(t.TempDir(), "out")
			read := func() []int {
				f, err := os.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				var out []int
				for sc := bufio.NewScanner(f); sc.Scan(); {
					v, err := strconv.Atoi(sc.Text())
					if err != nil {
						t.Fatalf("line %q: %v", sc.Text(), err)
					}
					out = append(out, v)
				}
				return out
			}
			return operators.File[int](path, nil), read
		},
		Records:  conformanceRecords,
		Features: connectortest.Restorable,
	})
}

func TestConformanceCollector(t *testing.T) {
	connectortest.Sink(t, connectortest.SinkCase[int]{
		Make: func(*testing.T) (connector.Sink[int], func() []int) {
			c := operators.NewCollector[int]()
			return c, c.Items
		},
		Records: conformanceRecords,
	})
}

// The HTTP sink against a server on a loopback socket that keeps the
// records it received in order, answering a repeated idempotency key with
// success and keeping the record once.
func TestConformanceHTTP(t *testing.T) {
	connectortest.Sink(t, connectortest.SinkCase[int]{
		Make: func(t *testing.T) (connector.Sink[int], func() []int) {
			var mu sync.Mutex
			var got []int
			seen := map[string]bool{}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, err := io.ReadAll(r.Body)
				var v int
				if err == nil {
					err = json.Unmarshal(body, &v)
				}
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if key := r.Header.Get("Idempotency-Key"); !seen[key] {
					seen[key] = true
					got = append(got, v)
				}
			}))
			t.Cleanup(srv.Close)
			read := func() []int {
				mu.Lock()
				defer mu.Unlock()
				return append([]int(nil), got...)
			}
			return operators.HTTP[int](srv.URL), read
		},
		Records: conformanceRecords,
	})
}
