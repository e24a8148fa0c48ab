package operators_test

import (
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clock/clocktest"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/operators/optest"
)

// Process with state and event-time timers: per key, count the records of
// each second in a map in the key's state, and emit a second's count when
// its timer fires (the watermark passed the second's last instant).
func TestProcessStateAndTimers(t *testing.T) {
	evs := randomEvents(9, 5000, 6, 0)
	model := map[win]int64{}
	for _, e := range evs {
		model[win{K: e.K, Start: e.T / 1000 * 1000}]++
	}
	var want []win
	for w, n := range model {
		w.End, w.N = w.Start+1000, n
		want = append(want, w)
	}
	type state struct{ Counts map[int64]int64 }
	sys, ctx := newSystem(t)
	top := operators.NewTopology(t.Name(), operators.BatchSize(16))
	src := operators.Timestamps(operators.Source(top, "events", operators.FromSlice(evs)), "ts", tevTime)
	seconds := operators.Process(operators.KeyBy(src, "by-key", tevKey, operators.Parallelism(2)), "seconds",
		func(c *operators.ProcessContext[string, state, win], e tev) {
			st := c.State()
			if st.Counts == nil {
				st.Counts = map[int64]int64{}
			}
			sec := e.T / 1000 * 1000
			st.Counts[sec]++
			c.Timer(time.UnixMilli(sec + 999))
		},
		func(c *operators.ProcessContext[string, state, win]) {
			st := c.State()
			sec := c.Time().UnixMilli() - 999
			c.Emit(win{c.Key(), sec, sec + 1000, st.Counts[sec]})
			delete(st.Counts, sec)
			if len(st.Counts) == 0 {
				c.Clear()
			}
		})
	col := operators.NewCollector[win]()
	operators.Sink(seconds, "out", col)
	runToEnd(t, sys, ctx, top)
	order := func(a, b win) int { return cmp.Or(cmp.Compare(a.K, b.K), cmp.Compare(a.Start, b.Start)) }
	got := col.Items()
	slices.SortFunc(got, order)
	slices.SortFunc(want, order)
	if !slices.Equal(got, want) {
		t.Fatalf("%d results, model %d: %s", len(got), len(want), firstDiff(got, want))
	}
}

// A processing-time timer per key: a reminder a minute after a key's first
// record, tested with the kit's harness and clock, across a restore.
func TestProcessingTimerSurvivesRestore(t *testing.T) {
	clock := clocktest.NewManual(time.Unix(1000, 0))
	type state struct{ N int }
	h := optest.New(t, func(in operators.Stream[string]) operators.Stream[string] {
		return operators.Process(operators.KeyBy(in, "by-key", func(s string) string { return s }), "remind",
			func(c *operators.ProcessContext[string, state, string], s string) {
				st := c.State()
				if st.N == 0 {
					c.ProcessingTimer(clock.Now().Add(time.Minute))
				}
				st.N++
			},
			func(c *operators.ProcessContext[string, state, string]) {
				if !c.IsProcessingTimer() {
					t.Errorf("an event-time timer fired")
				}
				c.Emit(fmt.Sprintf("%s:%d@%d", c.Key(), c.State().N, c.Time().Unix()))
				c.Clear()
			})
	}, optest.WithClock(clock))
	h.Push("a", "a", "b")
	h.Checkpoint()
	h = h.Restart() // the timers come back from the checkpoint
	h.Push("a")
	h.Sync()
	clock.Advance(time.Minute)
	got := h.WaitOutput(2)
	slices.Sort(got)
	if want := []string{"a:3@1060", "b:1@1060"}; !slices.Equal(got, want) {
		t.Fatalf("reminders %v, want %v", got, want)
	}
}

// A Process function sees late records as late and can count them.
func TestProcessLateRecords(t *testing.T) {
	h := optest.New(t, func(in operators.Stream[string]) operators.Stream[string] {
		return operators.Process(operators.KeyBy(in, "by-key", func(s string) string { return s }), "late",
			func(c *operators.ProcessContext[string, struct{}, string], s string) {
				if c.IsLate() {
					c.CountLate()
					return
				}
				c.Emit(s)
			}, nil)
	})
	h.PushAt("a", time.Unix(10, 0))
	h.Watermark(time.Unix(20, 0))
	h.PushAt("b", time.Unix(15, 0)) // behind the watermark
	h.PushAt("c", time.Unix(25, 0))
	got := h.Finish()
	if !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("emitted %v", got)
	}
	if late := h.Stats("late").Late; late != 1 {
		t.Fatalf("Late = %d, want 1", late)
	}
}
