package dashboard

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// A Jaeger reply as its query API writes one: a record's trace through
// source -> split -> count -> sink, with a drop event and a link.
const jaegerTraceJSON = `{"data":[{"traceID":"4bf92f3577b34da6a3ce929d0e0e4736","spans":[
 {"traceID":"4bf92f3577b34da6a3ce929d0e0e4736","spanID":"00f067aa0ba902b7","operationName":"count","references":[{"refType":"CHILD_OF","traceID":"4bf92f3577b34da6a3ce929d0e0e4736","spanID":"00f067aa0ba902b6"},{"refType":"FOLLOWS_FROM","traceID":"0af7651916cd43dd8448eb211c80319c","spanID":"b7ad6b7169203331"}],"startTime":1764600000000300,"duration":40,"tags":[{"key":"sluice.operator","type":"string","value":"count"},{"key":"sluice.key","type":"string","value":"user-42"},{"key":"sluice.queue_wait_us","type":"int64","value":12}],"logs":[{"timestamp":1764600000000310,"fields":[{"key":"event","type":"string","value":"dropped"}]}],"processID":"p1"},
 {"traceID":"4bf92f3577b34da6a3ce929d0e0e4736","spanID":"00f067aa0ba902b5","operationName":"numbers","references":[],"startTime":1764600000000000,"duration":100,"tags":[{"key":"sluice.operator","type":"string","value":"numbers"},{"key":"sluice.sampled","type":"bool","value":true}],"logs":[],"processID":"p1"},
 {"traceID":"4bf92f3577b34da6a3ce929d0e0e4736","spanID":"00f067aa0ba902b6","operationName":"split","references":[{"refType":"CHILD_OF","traceID":"4bf92f3577b34da6a3ce929d0e0e4736","spanID":"00f067aa0ba902b5"}],"startTime":1764600000000200,"duration":50,"tags":[{"key":"sluice.operator","type":"string","value":"split"}],"logs":[],"processID":"p1"},
 {"traceID":"4bf92f3577b34da6a3ce929d0e0e4736","spanID":"00f067aa0ba902b8","operationName":"store","references":[{"refType":"CHILD_OF","spanID":"00f067aa0ba902b7"}],"startTime":1764600000000400,"duration":10,"tags":[],"logs":[],"processID":"p1"}
 ],"processes":{"p1":{"serviceName":"sluice-wordcount","tags":[]}},"warnings":null}],"total":0,"limit":0,"offset":0,"errors":null}`

func TestDecodeJaegerTrace(t *testing.T) {
	traces, err := decodeTraces([]byte(jaegerTraceJSON), 1<<20, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(traces) != 1 {
		t.Fatalf("%d traces", len(traces))
	}
	tr := traces[0]
	if got := strings.Join(tr.Path, ","); got != "numbers,split,count,store" {
		t.Errorf("path %s, want the operators in order of start", got)
	}
	if tr.DurationUS != 410 || tr.Start != 1764600000000000 || len(tr.Spans) != 4 {
		t.Errorf("trace %+v", tr)
	}
	c := tr.Spans[2]
	if c.Operator != "count" || c.Parent != "00f067aa0ba902b6" || c.StartUS != 300 || c.Attrs["sluice.key"] != "user-42" ||
		c.Attrs["sluice.queue_wait_us"] != "12" || len(c.Events) != 1 || c.Events[0].Name != "dropped" || c.Events[0].AtUS != 310 ||
		len(c.Links) != 1 || c.Links[0] != "0af7651916cd43dd8448eb211c80319c/b7ad6b7169203331" || c.Service != "sluice-wordcount" {
		t.Errorf("count's span %+v", c)
	}
	if s := tr.Spans[3]; s.Operator != "store" || s.Parent != "00f067aa0ba902b7" {
		t.Errorf("a span without sluice.operator is named by its operation: %+v", s)
	}
	if tr.Spans[0].Attrs["sluice.sampled"] != "true" {
		t.Errorf("a boolean tag: %v", tr.Spans[0].Attrs)
	}

	// At most MaxSpans, the earliest.
	cut, err := decodeTraces([]byte(jaegerTraceJSON), 1<<20, 2)
	if err != nil || len(cut[0].Spans) != 2 || !cut[0].Truncated || cut[0].Spans[1].Operator != "split" {
		t.Errorf("truncated to 2: %+v, %v", cut, err)
	}
}

// TestDecodeJaegerRefuses: what is not a usable reply is refused with an
// error that says what and where.
func TestDecodeJaegerRefuses(t *testing.T) {
	for _, c := range []struct {
		name, body, want string
		is               error
	}{
		{"too large", jaegerTraceJSON, "larger than 100 bytes", ErrJaegerReply},
		{"not json", `<html>oops</html>`, "not the JSON", ErrJaegerReply},
		{"trailing data", `{"data":[]} {}`, "data after", ErrJaegerReply},
		{"bad trace id", `{"data":[{"traceID":"xyz","spans":[]}]}`, `trace 0: traceID "xyz"`, ErrJaegerReply},
		{"bad span id", `{"data":[{"traceID":"ab","spans":[{"spanID":"zz"}]}]}`, `spanID "zz"`, ErrJaegerReply},
		{"negative time", `{"data":[{"traceID":"ab","spans":[{"spanID":"01","startTime":-5}]}]}`, "startTime -5", ErrJaegerReply},
		{"object tag", `{"data":[{"traceID":"ab","spans":[{"spanID":"01","tags":[{"key":"k","value":{"a":1}}]}]}]}`, `tag "k"`, ErrJaegerReply},
		{"not found", `{"data":null,"errors":[{"code":404,"msg":"trace not found"}]}`, "trace not found", ErrNoTrace},
		{"jaeger error", `{"data":null,"errors":[{"code":500,"msg":"storage down"}]}`, "storage down", ErrJaegerDown},
	} {
		max := int64(1 << 20)
		if c.name == "too large" {
			max = 100
		}
		_, err := decodeTraces([]byte(c.body), max, 100)
		if !errors.Is(err, c.is) || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %v saying %q", c.name, err, c.is, c.want)
		}
	}
}

func FuzzDecodeJaegerTraces(f *testing.F) {
	f.Add([]byte(jaegerTraceJSON))
	f.Add([]byte(`{"data":null,"errors":[{"code":404,"msg":"trace not found"}]}`))
	f.Add([]byte(`{"data":[{"traceID":"ab","spans":[{"spanID":"01","startTime":1,"duration":2,"references":[{"refType":"CHILD_OF","spanID":"02"}],"logs":[{"timestamp":0,"fields":[{"key":"event","value":"spilled"}]}]}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		traces, err := decodeTraces(body, 1<<16, 50)
		if err != nil {
			if !errors.Is(err, ErrJaegerReply) && !errors.Is(err, ErrNoTrace) && !errors.Is(err, ErrJaegerDown) {
				t.Fatalf("an error of no named kind: %v", err)
			}
			return
		}
		for _, tr := range traces {
			if len(tr.Spans) > 50 || !hexID(tr.ID, 32) {
				t.Fatalf("trace %q with %d spans", tr.ID, len(tr.Spans))
			}
			for i, s := range tr.Spans {
				if s.StartUS < 0 || s.DurationUS < 0 || len(s.Attrs) > maxAttrs || len(s.Events) > maxEvents || s.Operator == "" && s.Name != "" {
					t.Fatalf("span %+v", s)
				}
				if i > 0 && s.StartUS < tr.Spans[i-1].StartUS {
					t.Fatalf("spans out of order")
				}
			}
			if _, err := json.Marshal(tr); err != nil {
				t.Fatalf("the page cannot be sent the trace: %v", err)
			}
		}
	})
}

// fakeJaeger serves Jaeger's query API from a table of traces: a search by
// the sluice.key tag, and a trace by id. It records the queries.
type fakeJaeger struct {
	mu      sync.Mutex
	queries []string
	body    string // the reply to /api/traces/{id}
}

func (f *fakeJaeger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.queries = append(f.queries, r.URL.String())
	f.mu.Unlock()
	switch {
	case r.URL.Path == "/api/traces":
		var tags map[string]string
		if err := json.Unmarshal([]byte(r.URL.Query().Get("tags")), &tags); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if tags["sluice.key"] != "user-42" {
			fmt.Fprint(w, `{"data":[],"total":0,"limit":0,"offset":0,"errors":null}`)
			return
		}
		fmt.Fprint(w, jaegerTraceJSON)
	case r.URL.Path == "/api/traces/4bf92f3577b34da6a3ce929d0e0e4736":
		fmt.Fprint(w, jaegerTraceJSON)
	case strings.HasPrefix(r.URL.Path, "/api/traces/"):
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"data":null,"total":0,"limit":0,"offset":0,"errors":[{"code":404,"msg":"trace not found"}]}`)
	case r.URL.Path == "/huge":
		fmt.Fprint(w, `{"data":[`+strings.Repeat(" ", 1<<20)+`]}`)
	default:
		http.NotFound(w, r)
	}
}

// TestTraceEndpoint: /trace finds a record's trace by key (the newest
// match, read whole by id) or by id, through a fake Jaeger; a malformed
// id is 400, no match 404, Jaeger down 502, all with the reason.
func TestTraceEndpoint(t *testing.T) {
	fj := &fakeJaeger{}
	jaeger := httptest.NewServer(fj)
	defer jaeger.Close()
	d := newDashboard(t, Options{Interval: 50 * time.Millisecond, JaegerQueryURL: jaeger.URL, JaegerService: "sluice-test"})
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	sys, ctx := newSystem(t)
	if err := d.Add(startPaced(t, sys, ctx, "traced", 500)); err != nil {
		t.Fatal(err)
	}
	ask := func(q string) (int, TraceReply) {
		resp, body := get(t, srv.URL+"/trace?"+q)
		var r TraceReply
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatalf("%s: %v: %s", q, err, body)
		}
		return resp.StatusCode, r
	}
	code, r := ask("job=1&key=user-42")
	if code != 200 || r.Trace == nil || strings.Join(r.Trace.Path, ",") != "numbers,split,count,store" || len(r.Matches) != 1 {
		t.Fatalf("by key: %d %+v", code, r)
	}
	fj.mu.Lock()
	search := fj.queries[0]
	fj.mu.Unlock()
	if !strings.Contains(search, "service=sluice-test") || !strings.Contains(search, "sluice.topology") || !strings.Contains(search, "traced") {
		t.Errorf("the search asked %s: want the service, the topology and the key", search)
	}
	if code, r := ask("job=1&id=4BF92F3577B34DA6A3CE929D0E0E4736"); code != 200 || r.Trace == nil || r.Trace.ID != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("by id: %d %+v", code, r)
	}
	for _, c := range []struct {
		q    string
		code int
		want string
	}{
		{"job=1&id=not-hex", 400, "want 1 to 32 hex digits"},
		{"job=1&key=", 400, "key"},
		{"job=1&key=nobody", 404, "no trace of service sluice-test"},
		{"job=1&id=aaaa", 404, "trace not found"},
		{"job=9&key=user-42", 404, `no job "9"`},
	} {
		if code, r := ask(c.q); code != c.code || !strings.Contains(r.Error, c.want) {
			t.Errorf("%s: %d %q, want %d saying %q", c.q, code, r.Error, c.code, c.want)
		}
	}

	// A reply larger than MaxBytes is refused, not read whole.
	cl := newJaegerClient(jaeger.URL, "s", TraceOptions{MaxBytes: 1 << 10})
	if _, err := cl.get(ctx, "/huge", nil); !errors.Is(err, ErrJaegerReply) || !strings.Contains(err.Error(), "larger than 1024") {
		t.Errorf("huge reply: %v", err)
	}
	jaeger.Close()
	if code, r := ask("job=1&key=user-42"); code != 502 || !strings.Contains(r.Error, "is Jaeger running?") {
		t.Errorf("Jaeger down: %d %q", code, r.Error)
	}
}

// TestTracePathFollowsChildren: the path follows CHILD_OF from the root,
// not the order of start times, and leaves out spans that are not a
// record at an operator (a drop, an overflow episode).
func TestTracePathFollowsChildren(t *testing.T) {
	const body = `{"data":[{"traceID":"ab","spans":[
 {"spanID":"01","operationName":"read","startTime":100,"duration":5,"tags":[{"key":"sluice.role","value":"source"},{"key":"sluice.operator","value":"read"}]},
 {"spanID":"03","operationName":"sum","startTime":110,"duration":5,"references":[{"refType":"CHILD_OF","spanID":"02"}],"tags":[{"key":"sluice.role","value":"pass"},{"key":"sluice.operator","value":"sum"}]},
 {"spanID":"02","operationName":"parse","startTime":120,"duration":5,"references":[{"refType":"CHILD_OF","spanID":"01"}],"tags":[{"key":"sluice.role","value":"pass"},{"key":"sluice.operator","value":"parse"}]},
 {"spanID":"04","operationName":"out drop","startTime":130,"duration":1,"references":[{"refType":"CHILD_OF","spanID":"03"}],"tags":[{"key":"sluice.role","value":"drop"},{"key":"sluice.operator","value":"out"}],"logs":[{"timestamp":130,"fields":[{"key":"event","value":"drop"}]}]},
 {"spanID":"05","operationName":"sluice.overflow","startTime":90,"duration":60,"tags":[{"key":"sluice.role","value":"overflow"},{"key":"sluice.operator","value":"out"}]}
]}]}`
	traces, err := decodeTraces([]byte(body), 1<<20, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(traces[0].Path, ","); got != "read,parse,sum" {
		t.Errorf("path %s, want read,parse,sum", got)
	}
	// A cycle of parents does not hang or repeat.
	cyc := `{"data":[{"traceID":"ab","spans":[{"spanID":"01","references":[{"refType":"CHILD_OF","spanID":"02"}]},{"spanID":"02","references":[{"refType":"CHILD_OF","spanID":"01"}]}]}]}`
	if traces, err := decodeTraces([]byte(cyc), 1<<20, 100); err != nil || len(traces[0].Path) > 1 {
		t.Errorf("a cycle: %v, %v", traces, err)
	}
}
