package engine

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/clock/clocktest"
	"github.com/sluicehq/sluice/internal/graph"
)

// On the system clock the engine's timestamps are the monotonic clock
// from the job's start added to that start's unix time: they stay within
// a millisecond of time.Now (the two clocks run at one rate) and never go
// back. On any other clock they are that clock's time, exactly.
func TestExecutionClock(t *testing.T) {
	if !graph.NewTopology("default").Config().SystemClock {
		t.Fatal("the default clock is not the system clock")
	}
	sys := graph.NewTopology("sys", graph.WithClock(clock.Real())).Config()
	if !sys.SystemClock {
		t.Fatal("WithClock(clock.Real()) is not the system clock")
	}
	var x execution
	x.setClock(sys)
	prev := int64(0)
	for range 1000 {
		before := time.Now().UnixNano()
		got := x.now()
		after := time.Now().UnixNano()
		if got < before-int64(time.Millisecond) || got > after+int64(time.Millisecond) {
			t.Fatalf("now() = %d, time.Now between %d and %d", got, before, after)
		}
		if got < prev {
			t.Fatalf("now() went back from %d to %d", prev, got)
		}
		prev = got
	}

	m := clocktest.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	manual := graph.NewTopology("manual", graph.WithClock(m)).Config()
	if manual.SystemClock {
		t.Fatal("a manual clock is taken for the system clock")
	}
	var y execution
	y.setClock(manual)
	m.Advance(1500 * time.Millisecond)
	if got, want := y.now(), m.Now().UnixNano(); got != want {
		t.Fatalf("now() on the manual clock = %d, want %d", got, want)
	}
}
