package operators_test

import (
	"testing"

	"github.com/sluicehq/sluice/operators"
)

// TestInstanceStatsSumToStats: the figures of each task instance add up to
// what Stats reports for its operators, and a key that takes most records
// shows as one instance taking most of them (skew).
func TestInstanceStatsSumToStats(t *testing.T) {
	sys, ctx := newSystem(t)
	top := operators.NewTopology("instances", operators.BatchSize(16))
	src := operators.Source(top, "numbers", operators.Generate(10_000, func(i int64) int64 { return i }))
	// Nine records in ten have key 0: one instance of four gets them.
	keyed := operators.KeyBy(src, "by-key", func(v int64) int64 {
		if v%10 != 0 {
			return 0
		}
		return v
	}, operators.Parallelism(4))
	counts := operators.Count(keyed, "count")
	operators.Sink(counts, "out", operators.SinkFunc(func(operators.KV[int64, int64]) error { return nil }))
	run := runToEnd(t, sys, ctx, top)

	plan, err := top.Plan()
	if err != nil {
		t.Fatal(err)
	}
	insts := operators.InstanceStatsOf(run)
	in := map[string]int64{}
	perInstance := map[int][]int64{} // task -> In of its first operator, by instance
	for _, s := range insts {
		task := plan.Tasks[s.Task]
		if len(s.In) != len(task.Operators) || len(s.Out) != len(task.Operators) {
			t.Fatalf("instance %d/%d: %d counters for %d operators", s.Task, s.Instance, len(s.In), len(task.Operators))
		}
		for pos, op := range task.Operators {
			in[op] += s.In[pos]
		}
		perInstance[s.Task] = append(perInstance[s.Task], s.In[0])
		if !s.BusyKnown || s.Host != "" {
			t.Errorf("instance %d/%d: busy known %v, host %q", s.Task, s.Instance, s.BusyKnown, s.Host)
		}
	}
	for _, st := range run.Stats() {
		if in[st.Name] != st.In {
			t.Errorf("%s: instances took %d, Stats says %d", st.Name, in[st.Name], st.In)
		}
		if st.Name == "count" {
			ins := perInstance[st.Task]
			if len(ins) != 4 {
				t.Fatalf("count: %d instances, want 4", len(ins))
			}
			top := max(ins[0], ins[1], ins[2], ins[3])
			if top < 9_000 {
				t.Errorf("count's instances took %v: no instance has the 9,000 records of key 0", ins)
			}
		}
	}
}
