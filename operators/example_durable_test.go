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

// An application feeds a checkpointed count through a durable ingress:
// each Send returns once its record is durable in the system's store, and a
// restarted job would read again from its last checkpoint.
func ExampleNewDurableIngress() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		panic(err)
	}
	defer sys.Stop(ctx)

	in, err := operators.NewDurableIngress[string](sys, "words", operators.DurableIngressConfig{})
	if err != nil {
		panic(err)
	}
	t := operators.NewTopology("app-count", operators.Checkpoints(100*time.Millisecond))
	words := operators.Source(t, "words", in)
	byWord := operators.KeyBy(words, "by-word", func(w string) string { return w })
	counts := operators.Count(byWord, "count", operators.Emit(operators.EmitAtEnd))
	out := operators.NewCollector[operators.KV[string, int64]]()
	operators.Sink(counts, "collect", out)

	job, err := operators.Start(ctx, sys, t)
	if err != nil {
		panic(err)
	}
	for _, w := range strings.Fields("to be or not to be") {
		if err := in.Send(ctx, w); err != nil { // durable when it returns
			panic(err)
		}
	}
	if err := in.Close(); err != nil { // the end of the stream
		panic(err)
	}
	if err := job.Wait(ctx); err != nil {
		panic(err)
	}
	res := out.Items()
	slices.SortFunc(res, func(a, b operators.KV[string, int64]) int { return strings.Compare(a.Key, b.Key) })
	fmt.Println(res, "trimmed up to", in.Stats().First)
	// Output: [{be 2} {not 1} {or 1} {to 2}] trimmed up to 6
}
