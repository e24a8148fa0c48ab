package stage

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestEpisodeStartNeverAfterEnd: a mailbox reports the start of its next
// overflow episode and the end of the current one from different
// goroutines, so the next start can reach the current episode before its
// end (TestTracesMailboxOverflow failed so under -race: a span ending
// before it began). A start later than the episode's is ignored; an
// earlier one (the true start, after the first drops began the span) is
// taken.
func TestEpisodeStartNeverAfterEnd(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tr := NewTracer(tp.Tracer("test"), context.Background(), nil, "topo", "", Sampling{}, nil, nil)
	sc := &Ctx{Name: "op", Kind: "sink"}
	t0 := time.Unix(1000, 0)

	ep := tr.Episode(sc, t0.Add(time.Millisecond)) // begun by its first drop
	ep.Started(t0)                                 // its own start, reported after
	ep.Started(t0.Add(3 * time.Millisecond))       // the next episode's start, early
	ep.End(t0.Add(2 * time.Millisecond))           // this episode's end

	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	if !s.StartTime().Equal(t0) || !s.EndTime().Equal(t0.Add(2*time.Millisecond)) {
		t.Fatalf("episode span from %v to %v, want %v to %v", s.StartTime(), s.EndTime(), t0, t0.Add(2*time.Millisecond))
	}
}
