package operators_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
)

func TestScratch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop(ctx)
	lines := []string{"a b c", "a b", "a"}
	var many []string
	for i := 0; i < 10000; i++ {
		many = append(many, lines...)
	}
	top := operators.NewTopology("wc")
	src := operators.Source(top, "lines", operators.FromSlice(many))
	words := operators.FlatMap(src, "split", strings.Fields)
	by := operators.KeyBy(words, "by-word", func(w string) string { return w }, operators.Parallelism(4))
	counts := operators.Count(by, "count", operators.Emit(operators.EmitAtEnd))
	col := operators.NewCollector[operators.KV[string, int64]]()
	operators.Sink(counts, "collect", col)
	plan, err := top.Plan()
	if err != nil {
		t.Fatal(err)
	}
	t.Log(plan)
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	t.Log(col.Items())
	for _, s := range run.Stats() {
		t.Logf("%+v", s)
	}
}
