package operators_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
)

// TestRunParallelism: RunParallelism runs an operator at another
// parallelism for one run, as Parallelism would (the operators after it
// that set none follow it), leaving the topology as it was; an unknown
// operator or a parallelism below 1 fails Start, naming it.
func TestRunParallelism(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sys, err := actors.NewSystem(actors.Config{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop(ctx)
	top := operators.NewTopology("rp")
	src := operators.Source(top, "src", operators.FromSlice([]int64{1, 2, 3, 4, 5, 6}))
	keyed := operators.KeyBy(src, "by", func(v int64) int64 { return v % 3 }, operators.Parallelism(2))
	out := operators.NewCollector[operators.KV[int64, int64]]()
	operators.Sink(operators.Count(keyed, "count"), "sink", out)
	par := func(j *operators.Job) map[string]int {
		m := map[string]int{}
		for _, task := range j.Plan().Tasks {
			m[task.Name()] = task.Parallelism
		}
		return m
	}
	job, err := operators.Start(ctx, sys, top, operators.RunParallelism("count", 3))
	if err != nil {
		t.Fatal(err)
	}
	if err := job.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if p := par(job); p["count -> sink"] != 3 {
		t.Fatalf("plan with RunParallelism(count, 3): %v", p)
	}
	if n := len(out.Items()); n != 6 {
		t.Fatalf("%d results, want 6", n)
	}
	again, err := operators.Start(ctx, sys, top)
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if p := par(again); p["count -> sink"] != 2 {
		t.Fatalf("the next run without it: %v", p)
	}
	for _, c := range []struct {
		op   string
		n    int
		want string
	}{{"nope", 2, `no operator named "nope"`}, {"count", 0, "must be at least 1"}} {
		if _, err := operators.Start(ctx, sys, top, operators.RunParallelism(c.op, c.n)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("RunParallelism(%q, %d): %v, want an error with %q", c.op, c.n, err, c.want)
		}
	}
}
