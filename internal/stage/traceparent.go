package stage

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Bounds of the W3C trace context a connector hands over with a record:
// a version-00 traceparent is 55 bytes; a tracestate of 32 members fits in
// 512 bytes as the W3C asks vendors to propagate.
const (
	MaxTraceParentBytes = 256
	MaxTraceStateBytes  = 512
)

// ErrBadTraceParent is the error of a traceparent that is not a valid W3C
// trace context: DecodeTraceParent's errors wrap it.
var ErrBadTraceParent = errors.New("malformed traceparent")

// w3c is the W3C trace context propagator: the one parser of traceparent
// and tracestate values.
var w3c propagation.TraceContext

// traceHeaders is a propagation.TextMapCarrier of exactly two values.
type traceHeaders struct{ parent, state string }

func (h *traceHeaders) Get(key string) string {
	switch key {
	case "traceparent":
		return h.parent
	case "tracestate":
		return h.state
	}
	return ""
}
func (h *traceHeaders) Set(string, string) {}
func (h *traceHeaders) Keys() []string     { return []string{"traceparent", "tracestate"} }

// DecodeTraceParent decodes the W3C trace context a record arrived with
// (the values of its traceparent and tracestate headers, as received) into
// the remote span context its first span is a child of. A traceparent over
// MaxTraceParentBytes, or one the W3C propagator refuses (a bad version,
// length, hex digit, flag, an all-zero id, several values joined), is an
// error wrapping ErrBadTraceParent; a tracestate over MaxTraceStateBytes or
// that does not parse is left out, as the W3C specification asks. It never
// panics.
func DecodeTraceParent(parent, state string) (trace.SpanContext, error) {
	if len(parent) > MaxTraceParentBytes {
		return trace.SpanContext{}, fmt.Errorf("%w: %d bytes, more than %d", ErrBadTraceParent, len(parent), MaxTraceParentBytes)
	}
	if len(state) > MaxTraceStateBytes {
		state = ""
	}
	h := traceHeaders{parent: parent, state: state}
	sc := trace.SpanContextFromContext(w3c.Extract(context.Background(), &h))
	if !sc.IsValid() {
		return trace.SpanContext{}, fmt.Errorf("%w: %.64q", ErrBadTraceParent, parent)
	}
	return sc, nil
}
