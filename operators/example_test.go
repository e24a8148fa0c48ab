package operators_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
)

// A word count: split lines into words, partition by word over two
// instances, count, and collect the final counts.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		panic(err)
	}
	defer sys.Stop(ctx)

	t := operators.NewTopology("wordcount")
	lines := operators.Source(t, "lines", operators.FromSlice([]string{"to be or", "not to be"}))
	words := operators.FlatMap(lines, "split", strings.Fields)
	byWord := operators.KeyBy(words, "by-word", func(w string) string { return w }, operators.Parallelism(2))
	counts := operators.Count(byWord, "count", operators.Emit(operators.EmitAtEnd))
	out := operators.NewCollector[operators.KV[string, int64]]()
	operators.Sink(counts, "collect", out)

	run, err := sys.Run(ctx, t)
	if err != nil {
		panic(err)
	}
	if err := run.Wait(ctx); err != nil {
		panic(err)
	}
	res := out.Items()
	slices.SortFunc(res, func(a, b operators.KV[string, int64]) int { return strings.Compare(a.Key, b.Key) })
	fmt.Println(res)
	// Output: [{be 2} {not 1} {or 1} {to 2}]
}

// Plan shows how operators are fused into actors.
func ExampleTopology_Plan() {
	t := operators.NewTopology("etl")
	src := operators.Source(t, "numbers", operators.Generate(100, func(i int64) int64 { return i }))
	even := operators.Filter(src, "even", func(v int64) bool { return v%2 == 0 })
	squared := operators.Map(even, "square", func(v int64) int64 { return v * v })
	operators.Sink(squared, "print", operators.Stdout[int64](), operators.Parallelism(2))
	p, err := t.Plan()
	if err != nil {
		panic(err)
	}
	fmt.Print(p)
	// Output:
	// topology etl: 2 tasks, 1 edges
	//   task 0  x1  numbers(source) -> even(filter) -> square(map)  [fused]
	//   task 1  x2  print(sink)
	//   edge    task 0 -> task 1  rebalance
}

// Validation names every operator at fault.
func ExampleTopology_Validate() {
	t := operators.NewTopology("broken")
	src := operators.Source(t, "numbers", operators.FromSlice([]int{1, 2, 3}))
	operators.Map(src, "double", func(v int) int { return 2 * v }, operators.Parallelism(0))
	err := t.Validate()
	fmt.Println(err)
	// Output:
	// operators: topology "broken": operator "double": invalid parallelism: parallelism 0: must be at least 1
	// operators: topology "broken": operator "double": unconnected: output is not consumed (add a Sink, or remove the operator)
}
