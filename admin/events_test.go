package admin_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
)

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestEventsLoggedAndTraced: every change, applied or rejected, is an
// event in the job's history (who, what, when, the outcome), a log line
// and a span.
func TestEventsLoggedAndTraced(t *testing.T) {
	sys, ctx := newSystem(t)
	feed := make(chan int64)
	top := operators.NewTopology("traced")
	src := operators.Source(top, "src", operators.FromChannel(feed))
	operators.Sink(src, "sink", operators.SinkFunc(func(int64) error { return nil }), operators.Input(mailbox.Block(64)))
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
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())
	var logs syncBuffer
	srv, err := admin.New(admin.Options{Token: "t", Logger: slog.New(slog.NewTextHandler(&logs, nil)), TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Add(run); err != nil {
		t.Fatal(err)
	}
	if err := srv.SetInput(ctx, "alice", "traced", "sink", admin.Input{Policy: "drop-newest", Capacity: 32}); err != nil {
		t.Fatal(err)
	}
	if err := srv.SetInput(ctx, "bob", "traced", "sink", admin.Input{Policy: "throttle", Capacity: 32}); err == nil {
		t.Fatal("a throttle without a rate was applied")
	}
	if err := srv.Pause(ctx, "carol", "traced", "sink", true); err == nil {
		t.Fatal("a sink was paused")
	}
	hist, err := srv.History("traced")
	if err != nil || len(hist) != 3 {
		t.Fatalf("history: %v %+v", err, hist)
	}
	want := []struct{ who, what, result, detail, err string }{
		// Block holds room for every channel's window: one batch of 256.
		{"alice", "set-input", "applied", "drop-newest:32 (was block:256)", ""},
		{"bob", "set-input", "rejected", "throttle:32", "input.rate"},
		{"carol", "pause", "rejected", "", "not a source"},
	}
	for i, w := range want {
		ev := hist[i]
		if ev.Who != w.who || ev.What != w.what || ev.Result != w.result || ev.Detail != w.detail || !strings.Contains(ev.Error, w.err) || ev.At.IsZero() {
			t.Errorf("event %d: %+v, want %+v", i, ev, w)
		}
	}
	ended := spans.Ended()
	if len(ended) != 3 || ended[0].Name() != "sluice.control.set-input" || ended[2].Name() != "sluice.control.pause" {
		t.Fatalf("spans: %d %v", len(ended), ended)
	}
	if l := logs.String(); strings.Count(l, "control change") != 3 || !strings.Contains(l, "who=alice") || !strings.Contains(l, "control change rejected") {
		t.Fatalf("logs:\n%s", l)
	}
}
