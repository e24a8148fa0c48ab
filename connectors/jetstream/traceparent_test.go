package jetstream_test

import (
	"context"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/connectors/jetstream"
	"github.com/sluicehq/sluice/operators"
)

// TestTraceContextsOfMessages: against the real JetStream, the reader
// hands over each message's traceparent and tracestate headers (lower-case
// or canonical spelling) for exactly the record made from it, indexed in
// the buffer of the Read that returned it; messages without one give
// none, several traceparent values are passed on joined (the runtime
// refuses them) and an over-long one cut just over the runtime's bound.
func TestTraceContextsOfMessages(t *testing.T) {
	f := newFixture(t)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	long := tp + string(make([]byte, 1000))
	heads := []nats.Header{
		{"traceparent": {tp}, "tracestate": {"congo=t61rcWkgMzE"}},
		nil,
		{"Traceparent": {tp}},
		{"traceparent": {tp, tp}},
		{"other": {"x"}},
		{"traceparent": {long}},
	}
	want := []operators.TraceContext{
		{TraceParent: tp, TraceState: "congo=t61rcWkgMzE"}, {}, {TraceParent: tp}, {TraceParent: tp + "," + tp}, {}, {TraceParent: long[:257]},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, h := range heads {
		m := &nats.Msg{Subject: f.subject + ".x", Data: []byte(strconv.Itoa(i)), Header: h}
		if _, err := f.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	src := jetstream.NewSource(jetstream.SourceConfig[int]{URL: f.url, Stream: f.stream, Bounded: true, AckNone: true})
	r, err := src.Open(ctx, 0, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	tc, ok := r.(operators.TraceCarrier)
	if !ok {
		t.Fatalf("the reader %T is no TraceCarrier", r)
	}
	var got []operators.TraceContext
	buf := make([]int, 4) // two Reads at least: indexes restart at 0
	for len(got) < len(heads) {
		n, err := r.Read(buf)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			if err := r.(operators.Waiter).Wait(ctx); err != nil {
				t.Fatal(err)
			}
			continue
		}
		byIdx := map[int]operators.TraceContext{}
		last := -1
		for _, x := range tc.TraceContexts() {
			if x.Index <= last || x.Index >= n {
				t.Fatalf("trace context for record %d of %d after %d", x.Index, n, last)
			}
			last = x.Index
			x.Index = 0
			byIdx[last] = x
		}
		for i := range n {
			if buf[i] != len(got) {
				t.Fatalf("record %d is %d", len(got), buf[i])
			}
			got = append(got, byIdx[i])
		}
	}
	if len(got) != len(want) {
		t.Fatalf("read %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("message %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}
