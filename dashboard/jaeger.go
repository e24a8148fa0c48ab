package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The span attributes the trace view reads (docs/tracing.md): a span is
// named after its operator and tagged with it, its topology, and for a
// sampled record its key.
const (
	attrOperator = "sluice.operator"
	attrTopology = "sluice.topology"
	attrKey      = "sluice.key"
	attrRole     = "sluice.role"
)

// TraceOptions bound what the dashboard reads from Jaeger's query API. The
// zero value gives the defaults.
type TraceOptions struct {
	// MaxBytes bounds one reply's body; a longer one is refused
	// (ErrJaegerReply). Default 8 MiB.
	MaxBytes int64
	// MaxSpans bounds the spans of one trace kept for the page (the
	// earliest); Trace.Truncated says when more were cut. Default 2000.
	MaxSpans int
	// Timeout bounds one request to Jaeger. Default 5 s.
	Timeout time.Duration
	// Lookback is how far back a search by key looks. Default 1 h.
	Lookback time.Duration
}

func (o TraceOptions) withDefaults() TraceOptions {
	if o.MaxBytes <= 0 {
		o.MaxBytes = 8 << 20
	}
	if o.MaxSpans <= 0 {
		o.MaxSpans = 2000
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Lookback <= 0 {
		o.Lookback = time.Hour
	}
	return o
}

// Errors of the trace view.
var (
	// ErrJaegerReply: Jaeger's reply could not be used (too large, not
	// the JSON of its query API, invalid values); the message says what
	// and where.
	ErrJaegerReply = errors.New("dashboard: bad reply from Jaeger")
	// ErrJaegerDown: Jaeger could not be reached, or answered with an
	// error status.
	ErrJaegerDown = errors.New("dashboard: Jaeger query failed")
	// ErrNoTrace: no trace matched.
	ErrNoTrace = errors.New("dashboard: no trace found")
	// ErrTraceQuery: the page's question is invalid (no key, a malformed
	// trace id).
	ErrTraceQuery = errors.New("dashboard: invalid trace query")
)

// Trace is one trace as the page draws it: its spans in order of start,
// times in microseconds from the trace's first span, and the path of
// operators the record took (each operator once, from the root span down
// its CHILD_OF children; see pathOf).
type Trace struct {
	ID         string   `json:"id"`
	Start      int64    `json:"start_us"` // Unix microseconds of the first span
	DurationUS int64    `json:"duration_us"`
	Spans      []Span   `json:"spans"`
	Path       []string `json:"path"`
	// Truncated: the trace had more spans than TraceOptions.MaxSpans; the
	// earliest are kept.
	Truncated bool     `json:"truncated,omitempty"`
	Warnings  []string `json:"warnings,omitempty"`
}

// Span is one span of a Trace.
type Span struct {
	ID         string            `json:"id"`
	Parent     string            `json:"parent,omitempty"`  // its CHILD_OF reference
	Links      []string          `json:"links,omitempty"`   // FOLLOWS_FROM references, and references to other traces as TRACE/SPAN
	Name       string            `json:"name"`              // the operation
	Operator   string            `json:"operator"`          // sluice.operator, else the operation
	Service    string            `json:"service,omitempty"` // the process's service name
	Role       string            `json:"role,omitempty"`    // sluice.role: source, pass, emit, links, drop, spill, shed, overflow, job
	StartUS    int64             `json:"start_us"`          // from the trace's start
	DurationUS int64             `json:"duration_us"`
	Attrs      map[string]string `json:"attrs,omitempty"`
	Events     []SpanEvent       `json:"events,omitempty"`
}

// SpanEvent is one event (a Jaeger log) of a span: a drop, a spill, ...
type SpanEvent struct {
	AtUS int64  `json:"at_us"` // from the trace's start
	Name string `json:"name"`
}

// Limits of one span's decoded strings and collections.
const (
	maxString     = 512
	maxAttrs      = 48
	maxEvents     = 32
	maxReferences = 64
)

// The JSON of Jaeger's query API (/api/traces, /api/traces/{id}).
type jaegerReply struct {
	Data   []jaegerTrace `json:"data"`
	Errors []struct {
		Code int    `json:"code"`
		Msg  string `json:"msg"`
	} `json:"errors"`
}

type jaegerTrace struct {
	TraceID   string                   `json:"traceID"`
	Spans     []jaegerSpan             `json:"spans"`
	Processes map[string]jaegerProcess `json:"processes"`
	Warnings  []string                 `json:"warnings"`
}

type jaegerSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	StartTime int64       `json:"startTime"` // Unix µs
	Duration  int64       `json:"duration"`  // µs
	Tags      []jaegerTag `json:"tags"`
	Logs      []struct {
		Timestamp int64       `json:"timestamp"`
		Fields    []jaegerTag `json:"fields"`
	} `json:"logs"`
	ProcessID string `json:"processID"`
}

type jaegerTag struct {
	Key   string          `json:"key"`
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value"`
}

type jaegerProcess struct {
	ServiceName string `json:"serviceName"`
}

// decodeTraces is the one decode path of Jaeger's replies: body is at most
// maxBytes (the caller read at most one byte more), JSON of the query API
// with ids in hex, times non-negative and bounded. It never panics; every
// refusal wraps ErrJaegerReply and says what and where. A reply with
// errors (Jaeger's "trace not found") gives ErrNoTrace.
func decodeTraces(body []byte, maxBytes int64, maxSpans int) ([]Trace, error) {
	if int64(len(body)) > maxBytes {
		return nil, fmt.Errorf("%w: the reply is larger than %d bytes (TraceOptions.MaxBytes)", ErrJaegerReply, maxBytes)
	}
	var r jaegerReply
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%w: not the JSON of Jaeger's query API: %v", ErrJaegerReply, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: data after the JSON value", ErrJaegerReply)
	}
	if len(r.Data) == 0 && len(r.Errors) > 0 {
		e := r.Errors[0]
		if e.Code == http.StatusNotFound {
			return nil, fmt.Errorf("%w: Jaeger: %s", ErrNoTrace, clip(e.Msg))
		}
		return nil, fmt.Errorf("%w: Jaeger: %d %s", ErrJaegerDown, e.Code, clip(e.Msg))
	}
	out := make([]Trace, 0, len(r.Data))
	for i, jt := range r.Data {
		t, err := convertTrace(jt, maxSpans)
		if err != nil {
			return nil, fmt.Errorf("%w: trace %d: %v", ErrJaegerReply, i, err)
		}
		out = append(out, t)
	}
	return out, nil
}

// maxTime bounds a span's start and duration: year 2500 in Unix µs.
const maxTime = int64(16725225600) * 1e6

func convertTrace(jt jaegerTrace, maxSpans int) (Trace, error) {
	t := Trace{ID: strings.ToLower(jt.TraceID), Spans: []Span{}, Path: []string{}}
	if !hexID(t.ID, 32) {
		return t, fmt.Errorf("traceID %q: want 1 to 32 hex digits", clip(jt.TraceID))
	}
	for _, w := range jt.Warnings {
		if len(t.Warnings) < 8 {
			t.Warnings = append(t.Warnings, clip(w))
		}
	}
	spans := slices.Clone(jt.Spans)
	for i, s := range spans {
		if !hexID(strings.ToLower(s.SpanID), 16) {
			return t, fmt.Errorf("span %d: spanID %q: want 1 to 16 hex digits", i, clip(s.SpanID))
		}
		if s.StartTime < 0 || s.StartTime > maxTime || s.Duration < 0 || s.Duration > maxTime {
			return t, fmt.Errorf("span %s: startTime %d, duration %d: want microseconds from 0 to year 2500", s.SpanID, s.StartTime, s.Duration)
		}
	}
	slices.SortStableFunc(spans, func(a, b jaegerSpan) int {
		if a.StartTime != b.StartTime {
			return int(min(max(a.StartTime-b.StartTime, -1), 1))
		}
		return strings.Compare(a.SpanID, b.SpanID)
	})
	if len(spans) > maxSpans {
		spans, t.Truncated = spans[:maxSpans], true
	}
	if len(spans) > 0 {
		t.Start = spans[0].StartTime
	}
	for _, s := range spans {
		sp := Span{ID: strings.ToLower(s.SpanID), Name: clip(s.OperationName),
			StartUS: s.StartTime - t.Start, DurationUS: s.Duration}
		if p, ok := jt.Processes[s.ProcessID]; ok {
			sp.Service = clip(p.ServiceName)
		}
		for i, ref := range s.References {
			if i >= maxReferences {
				break
			}
			id := strings.ToLower(ref.SpanID)
			if !hexID(id, 16) {
				return t, fmt.Errorf("span %s: reference %d: spanID %q: want 1 to 16 hex digits", sp.ID, i, clip(ref.SpanID))
			}
			tid := strings.ToLower(ref.TraceID)
			switch {
			case ref.RefType == "CHILD_OF" && sp.Parent == "" && (tid == "" || tid == t.ID):
				sp.Parent = id
			case tid != "" && tid != t.ID:
				if !hexID(tid, 32) {
					return t, fmt.Errorf("span %s: reference %d: traceID %q: want 1 to 32 hex digits", sp.ID, i, clip(ref.TraceID))
				}
				sp.Links = append(sp.Links, tid+"/"+id)
			default:
				sp.Links = append(sp.Links, id)
			}
		}
		for _, tag := range s.Tags {
			v, err := tagValue(tag)
			if err != nil {
				return t, fmt.Errorf("span %s: tag %q: %v", sp.ID, clip(tag.Key), err)
			}
			switch tag.Key {
			case attrOperator:
				sp.Operator = v
			case attrRole:
				sp.Role = v
			}
			if len(sp.Attrs) < maxAttrs {
				if sp.Attrs == nil {
					sp.Attrs = map[string]string{}
				}
				sp.Attrs[clip(tag.Key)] = v
			}
		}
		for _, l := range s.Logs {
			if len(sp.Events) >= maxEvents {
				break
			}
			ev := SpanEvent{AtUS: min(max(l.Timestamp-t.Start, 0), maxTime)}
			for _, f := range l.Fields {
				if f.Key == "event" {
					v, err := tagValue(f)
					if err != nil {
						return t, fmt.Errorf("span %s: log field %q: %v", sp.ID, clip(f.Key), err)
					}
					ev.Name = v
				}
			}
			sp.Events = append(sp.Events, ev)
		}
		if sp.Operator == "" {
			sp.Operator = sp.Name
		}
		t.DurationUS = max(t.DurationUS, sp.StartUS+sp.DurationUS)
		t.Spans = append(t.Spans, sp)
	}
	t.Path = pathOf(t.Spans)
	return t, nil
}

// pathOf is the operators a record passed, in order (docs/tracing.md):
// from the root spans (no parent within the trace) down the CHILD_OF
// references, children in order of start, each operator once; only the
// spans of a record at an operator count (roles source, pass and emit, or
// none for spans of other tracers), not drops, link holders or episodes.
func pathOf(spans []Span) []string {
	byID := map[string]bool{}
	for _, s := range spans {
		byID[s.ID] = true
	}
	children := map[string][]int{} // parent id -> spans, in order of start
	var roots []int
	for i, s := range spans {
		if s.Parent == "" || !byID[s.Parent] || s.Parent == s.ID {
			roots = append(roots, i)
		} else {
			children[s.Parent] = append(children[s.Parent], i)
		}
	}
	path := []string{}
	seen := map[string]bool{}
	visited := make([]bool, len(spans))
	stack := slices.Clone(roots)
	slices.Reverse(stack)
	for len(stack) > 0 { // depth first, iterative: a hostile trace may be deep
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if visited[i] {
			continue
		}
		visited[i] = true
		s := spans[i]
		switch s.Role {
		case "", "source", "pass", "emit":
			if !seen[s.Operator] {
				seen[s.Operator] = true
				path = append(path, s.Operator)
			}
		}
		kids := children[s.ID]
		for k := len(kids) - 1; k >= 0; k-- {
			stack = append(stack, kids[k])
		}
	}
	return path
}

// tagValue renders a tag's value (a string, number or boolean) as a
// string of at most maxString bytes.
func tagValue(tag jaegerTag) (string, error) {
	if len(tag.Value) == 0 {
		return "", nil
	}
	var v any
	if err := json.Unmarshal(tag.Value, &v); err != nil {
		return "", err
	}
	switch x := v.(type) {
	case string:
		return clip(x), nil
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), nil
	case bool:
		return strconv.FormatBool(x), nil
	case nil:
		return "", nil
	}
	return "", fmt.Errorf("value of type %T: want a string, number or boolean", v)
}

// hexID: 1 to n lower-case hex digits.
func hexID(s string, n int) bool {
	if len(s) == 0 || len(s) > n {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// clip keeps at most maxString bytes of s, as valid UTF-8.
func clip(s string) string {
	if len(s) > maxString {
		s = s[:maxString]
		for len(s) > 0 && !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		return s + "…"
	}
	return strings.ToValidUTF8(s, "?")
}

// jaegerClient reads traces from Jaeger's HTTP query API.
type jaegerClient struct {
	base    string // without a trailing slash
	service string
	opts    TraceOptions
	hc      *http.Client
}

func newJaegerClient(base, service string, opts TraceOptions) *jaegerClient {
	opts = opts.withDefaults()
	return &jaegerClient{base: strings.TrimRight(base, "/"), service: service, opts: opts,
		hc: &http.Client{Timeout: opts.Timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// get fetches path?query from Jaeger and decodes it.
func (c *jaegerClient) get(ctx context.Context, path string, q url.Values) ([]Trace, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrJaegerDown, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v (is Jaeger running? tools/jaeger/start.sh starts one)", ErrJaegerDown, c.base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, c.opts.MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: reading the reply: %v", ErrJaegerDown, c.base, err)
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound {
		return nil, fmt.Errorf("%w: %s%s: status %s", ErrJaegerDown, c.base, path, resp.Status)
	}
	traces, err := decodeTraces(body, c.opts.MaxBytes, c.opts.MaxSpans)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusNotFound && len(traces) == 0 {
		return nil, fmt.Errorf("%w: %s%s: 404", ErrNoTrace, c.base, path)
	}
	return traces, nil
}

// byID reads one trace.
func (c *jaegerClient) byID(ctx context.Context, id string) (Trace, error) {
	id = strings.ToLower(strings.TrimSpace(id))
	if !hexID(id, 32) {
		return Trace{}, fmt.Errorf("%w: trace id %q: want 1 to 32 hex digits", ErrTraceQuery, clip(id))
	}
	traces, err := c.get(ctx, "/api/traces/"+id, nil)
	if err != nil {
		return Trace{}, err
	}
	if len(traces) == 0 {
		return Trace{}, fmt.Errorf("%w: trace %s", ErrNoTrace, id)
	}
	return traces[0], nil
}

// byKey searches the traces of topology whose spans carry the record key
// key, and returns the newest with the ids of up to 20 matches, newest
// first.
func (c *jaegerClient) byKey(ctx context.Context, topology, key string) (Trace, []string, error) {
	if key == "" || len(key) > maxString {
		return Trace{}, nil, fmt.Errorf("%w: key: want 1 to %d bytes", ErrTraceQuery, maxString)
	}
	tags, _ := json.Marshal(map[string]string{attrKey: key, attrTopology: topology})
	q := url.Values{"service": {c.service}, "tags": {string(tags)}, "limit": {"20"},
		"lookback": {c.opts.Lookback.String()}}
	traces, err := c.get(ctx, "/api/traces", q)
	if err != nil {
		return Trace{}, nil, err
	}
	if len(traces) == 0 {
		return Trace{}, nil, fmt.Errorf("%w: no trace of service %s with %s=%q in job %s over the last %v (is the record sampled? --trace-key %s traces it)",
			ErrNoTrace, c.service, attrKey, key, topology, c.opts.Lookback, key)
	}
	slices.SortStableFunc(traces, func(a, b Trace) int { return int(min(max(b.Start-a.Start, -1), 1)) })
	ids := make([]string, 0, len(traces))
	for _, t := range traces {
		ids = append(ids, t.ID)
	}
	// A search's traces may be partial: read the newest whole.
	t, err := c.byID(ctx, traces[0].ID)
	if err != nil {
		return Trace{}, nil, err
	}
	return t, ids, nil
}

// TraceReply is what /trace answers: the trace, and with a search by key
// the ids of the traces that matched (newest first); or the error.
type TraceReply struct {
	Trace   *Trace   `json:"trace,omitempty"`
	Matches []string `json:"matches,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// serveTrace answers /trace?job=ID&key=KEY or /trace?job=ID&id=TRACEID.
func (d *Dashboard) serveTrace(w http.ResponseWriter, r *http.Request) {
	reply := func(status int, rep TraceReply) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(rep)
	}
	q := r.URL.Query()
	d.mu.Lock()
	topology := ""
	for _, j := range d.jobs {
		if j.info.id == q.Get("job") {
			topology = j.info.name
		}
	}
	d.mu.Unlock()
	if topology == "" {
		reply(http.StatusNotFound, TraceReply{Error: fmt.Sprintf("dashboard: no job %q", clip(q.Get("job")))})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), d.traces.opts.Timeout)
	defer cancel()
	var (
		t       Trace
		matches []string
		err     error
	)
	switch {
	case q.Get("id") != "":
		t, err = d.traces.byID(ctx, q.Get("id"))
	default:
		t, matches, err = d.traces.byKey(ctx, topology, q.Get("key"))
	}
	switch {
	case err == nil:
		reply(http.StatusOK, TraceReply{Trace: &t, Matches: matches})
	case errors.Is(err, ErrTraceQuery):
		reply(http.StatusBadRequest, TraceReply{Error: err.Error()})
	case errors.Is(err, ErrNoTrace):
		reply(http.StatusNotFound, TraceReply{Error: err.Error()})
	default:
		reply(http.StatusBadGateway, TraceReply{Error: err.Error()})
	}
}
