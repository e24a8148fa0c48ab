package optest_test

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/clock/clocktest"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/operators/optest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

type wc = operators.Windowed[string, int64]

func perMinute(in operators.Stream[string]) operators.Stream[wc] {
	byWord := operators.KeyBy(in, "by-word", func(w string) string { return w })
	return operators.WindowCount(byWord, "count", operators.Tumbling(time.Minute))
}

func render(ws []wc) string {
	slices.SortFunc(ws, func(a, b wc) int {
		return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.Key, b.Key), cmp.Compare(a.Value, b.Value))
	})
	var parts []string
	for _, w := range ws {
		parts = append(parts, fmt.Sprintf("%s@%d=%d", w.Key, w.Start.Unix()/60, w.Value))
	}
	return strings.Join(parts, " ")
}

func TestWatermarksFireWindows(t *testing.T) {
	h := optest.New(t, perMinute)
	h.PushAt("a", time.Unix(1, 0))
	h.PushAt("b", time.Unix(2, 0))
	h.PushAt("a", time.Unix(59, 0))
	if got := h.Output(); len(got) != 0 {
		t.Fatalf("output before the watermark: %v", got)
	}
	h.Watermark(time.Unix(60, 0))
	if got := render(h.WaitOutput(2)); got != "a@0=2 b@0=1" {
		t.Fatalf("after the watermark: %s", got)
	}
	h.PushAt("a", time.Unix(30, 0)) // late
	h.PushAt("a", time.Unix(70, 0))
	if got := render(h.Finish()); got != "a@0=2 b@0=1 a@1=1" {
		t.Fatalf("at the end: %s", got)
	}
	if late := h.Stats("count").Late; late != 1 {
		t.Fatalf("Late = %d, want 1", late)
	}
}

// Restore from a checkpoint: the window state survives a crash, and the
// records pushed after the checkpoint are read again.
func TestRestoreFromCheckpoint(t *testing.T) {
	h := optest.New(t, perMinute)
	h.PushAt("a", time.Unix(1, 0))
	h.PushAt("a", time.Unix(2, 0))
	h.Checkpoint()
	h.PushAt("a", time.Unix(3, 0))
	h = h.Restart()
	h.PushAt("b", time.Unix(4, 0))
	if got := render(h.Finish()); got != "a@0=3 b@0=1" {
		t.Fatalf("after the restart: %s", got)
	}
}

// A failure injected at a record fails the job, naming the operator; the
// restarted job goes on from the checkpoint.
func TestInjectedFailure(t *testing.T) {
	h := optest.New(t, perMinute)
	h.PushAt("a", time.Unix(1, 0))
	h.Checkpoint()
	h.FailAt(2)
	h.PushAt("a", time.Unix(2, 0))
	h.PushAt("a", time.Unix(3, 0))
	err := h.WaitErr()
	var opErr *operators.OperatorError
	if !errors.As(err, &opErr) || !strings.Contains(err.Error(), "failure injected at record 2") {
		t.Fatalf("job error: %v", err)
	}
	h = h.Restart()
	if got := render(h.Finish()); got != "a@0=3" {
		t.Fatalf("after the failure and restart: %s", got)
	}
}

func TestProcessingTimeWithManualClock(t *testing.T) {
	clock := clocktest.NewManual(time.Unix(600, 0))
	h := optest.New(t, func(in operators.Stream[string]) operators.Stream[wc] {
		return operators.WindowCount(operators.KeyBy(in, "by-word", func(w string) string { return w }), "count",
			operators.Tumbling(time.Minute).ProcessingTime())
	}, optest.WithClock(clock))
	h.Push("x", "x", "y")
	h.Sync() // every record is in its window
	if got := h.Output(); len(got) != 0 {
		t.Fatalf("output before the clock passed the window: %v", got)
	}
	clock.Advance(time.Minute)
	if got := render(h.WaitOutput(2)); got != "x@10=2 y@10=1" {
		t.Fatalf("after a minute: %s", got)
	}
}
