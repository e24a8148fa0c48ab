package jaegertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// TracesLimit is the most traces one Traces call returns.
const TracesLimit = 1000

// Reference types: a parent is CHILD_OF; an OTLP span link becomes
// FOLLOWS_FROM.
const (
	ChildOf     = "CHILD_OF"
	FollowsFrom = "FOLLOWS_FROM"
)

// Trace is one trace as Jaeger's query API returns it.
type Trace struct {
	TraceID  string   `json:"traceID"` // lower-case hex, 32 digits
	Spans    []Span   `json:"spans"`
	Warnings []string `json:"warnings"`
}

// Span is one span of a Trace. IDs are lower-case hex; times are
// microseconds (since the Unix epoch for StartTime).
type Span struct {
	TraceID       string      `json:"traceID"`
	SpanID        string      `json:"spanID"`
	OperationName string      `json:"operationName"`
	References    []Reference `json:"references"`
	StartTime     int64       `json:"startTime"`
	Duration      int64       `json:"duration"`
	Tags          []KeyValue  `json:"tags"`
	ProcessID     string      `json:"processID"`
	// Process is the span's entry of the trace's processes, filled in by
	// Traces.
	Process  Process  `json:"process"`
	Warnings []string `json:"warnings"`
}

// Reference is a span's parent (ChildOf) or a link (FollowsFrom).
type Reference struct {
	RefType string `json:"refType"`
	TraceID string `json:"traceID"`
	SpanID  string `json:"spanID"`
}

// KeyValue is a tag. Value is a string (also for Type "binary", base64), a
// bool, or a json.Number (Type "int64" or "float64", exact).
type KeyValue struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

// Process is the emitting process: OTLP's resource.
type Process struct {
	ServiceName string     `json:"serviceName"`
	Tags        []KeyValue `json:"tags"`
}

// Span returns the first span named operationName.
func (t Trace) Span(operationName string) (Span, bool) {
	for _, s := range t.Spans {
		if s.OperationName == operationName {
			return s, true
		}
	}
	return Span{}, false
}

// Tag returns the value of the span's tag key (span attributes, plus those
// Jaeger derives such as span.kind and otel.scope.name).
func (s Span) Tag(key string) (any, bool) {
	for _, kv := range s.Tags {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return nil, false
}

// wireTrace is a Trace as the API sends it, with its processes apart.
type wireTrace struct {
	Trace
	Processes map[string]Process `json:"processes"`
}

type response struct {
	Data   []wireTrace `json:"data"`
	Errors []struct {
		Code int    `json:"code"`
		Msg  string `json:"msg"`
	} `json:"errors"`
}

// Traces returns the traces of service from the last two days (Jaeger's
// default lookback), at most TracesLimit, newest first as Jaeger orders
// them. A service Jaeger has not seen yet gives no traces and no error.
func (j *Jaeger) Traces(ctx context.Context, service string) ([]Trace, error) {
	return j.TracesTagged(ctx, service, nil)
}

// TracesTagged is Traces restricted to the traces with a span carrying
// every tag of tags (Jaeger's tags parameter: a JSON object), such as
// {"sluice.key": "user-42"}.
func (j *Jaeger) TracesTagged(ctx context.Context, service string, tags map[string]string) ([]Trace, error) {
	q := url.Values{"service": {service}, "limit": {strconv.Itoa(TracesLimit)}}
	if len(tags) > 0 {
		js, err := json.Marshal(tags)
		if err != nil {
			return nil, fmt.Errorf("jaegertest: service %q: tags: %w", service, err)
		}
		q.Set("tags", string(js))
	}
	u := j.QueryURL + "/api/traces?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("jaegertest: service %q: %w", service, err)
	}
	resp, err := j.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("jaegertest: service %q: %w", service, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("jaegertest: service %q: read response: %w", service, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("jaegertest: service %q: GET /api/traces: %s: %.200s", service, resp.Status, body)
	}
	return decodeTraces(service, body)
}

func decodeTraces(service string, body []byte) ([]Trace, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var r response
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("jaegertest: service %q: decode traces: %w", service, err)
	}
	if len(r.Errors) > 0 {
		e := r.Errors[0]
		return nil, fmt.Errorf("jaegertest: service %q: query error %d: %s (%d errors)", service, e.Code, e.Msg, len(r.Errors))
	}
	out := make([]Trace, 0, len(r.Data))
	for _, w := range r.Data {
		tr := w.Trace
		for i := range tr.Spans {
			if p, ok := w.Processes[tr.Spans[i].ProcessID]; ok {
				tr.Spans[i].Process = p
			}
		}
		out = append(out, tr)
	}
	return out, nil
}

// WaitTraces polls Traces until pred holds for the traces of service, and
// returns them. When ctx ends first it returns the last traces it saw and
// an error wrapping ctx's. Give ctx a deadline: Jaeger stores spans a
// moment after they arrive, and a condition that never holds waits for as
// long as ctx lasts.
func (j *Jaeger) WaitTraces(ctx context.Context, service string, pred func([]Trace) bool) ([]Trace, error) {
	return j.WaitTracesTagged(ctx, service, nil, pred)
}

// WaitTracesTagged is WaitTraces over TracesTagged.
func (j *Jaeger) WaitTracesTagged(ctx context.Context, service string, tags map[string]string, pred func([]Trace) bool) ([]Trace, error) {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var last []Trace
	var lastErr error
	for {
		traces, err := j.TracesTagged(ctx, service, tags)
		if err == nil {
			if pred(traces) {
				return traces, nil
			}
			last, lastErr = traces, nil
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return last, fmt.Errorf("jaegertest: service %q: waiting for traces: %w (last query: %v)", service, ctx.Err(), lastErr)
			}
			return last, fmt.Errorf("jaegertest: service %q: waiting for traces: %w (%d traces, the condition does not hold)", service, ctx.Err(), len(last))
		case <-tick.C:
		}
	}
}
