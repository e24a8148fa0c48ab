package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/operators"
)

// A dashboard over a small job that has finished: the snapshot the page
// receives, its deterministic fields printed as JSON (rates, times and
// coordinates left out).
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
	operators.Sink(counts, "collect", operators.NewCollector[operators.KV[string, int64]]())
	run, err := sys.Run(ctx, t)
	if err != nil {
		panic(err)
	}
	if err := run.Wait(ctx); err != nil {
		panic(err)
	}

	d, err := dashboard.New(dashboard.Options{Title: "example"})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	if err := d.Add(run); err != nil {
		panic(err)
	}
	// Serve it in an application: http.Handle("/sluice/", http.StripPrefix("/sluice", d.Handler()))
	_ = http.StripPrefix("/sluice", d.Handler())

	job := d.Snapshot().Jobs[0]
	type task struct {
		ID          int      `json:"id"`
		Operators   []string `json:"operators"`
		Parallelism int      `json:"parallelism"`
		Depth       int      `json:"depth"`
	}
	type operator struct {
		Name string `json:"name"`
		In   int64  `json:"in"`
		Out  int64  `json:"out"`
	}
	type edge struct {
		From      int    `json:"from"`
		To        int    `json:"to"`
		Partition string `json:"partition"`
		Via       string `json:"via"`
	}
	view := struct {
		Name      string     `json:"name"`
		State     string     `json:"state"`
		Tasks     []task     `json:"tasks"`
		Edges     []edge     `json:"edges"`
		Operators []operator `json:"operators"`
	}{Name: job.Name, State: job.State}
	for _, b := range job.Graph.Tasks {
		view.Tasks = append(view.Tasks, task{b.ID, b.Operators, b.Parallelism, b.Depth})
	}
	for _, e := range job.Graph.Edges {
		view.Edges = append(view.Edges, edge{e.From, e.To, e.Partition, e.Via})
	}
	for _, op := range job.Operators {
		view.Operators = append(view.Operators, operator{op.Name, op.In, op.Out})
	}
	out, _ := json.MarshalIndent(view, "", "  ")
	fmt.Println(string(out))
	// Output:
	// {
	//   "name": "wordcount",
	//   "state": "finished",
	//   "tasks": [
	//     {
	//       "id": 0,
	//       "operators": [
	//         "lines",
	//         "split"
	//       ],
	//       "parallelism": 1,
	//       "depth": 0
	//     },
	//     {
	//       "id": 1,
	//       "operators": [
	//         "count",
	//         "collect"
	//       ],
	//       "parallelism": 2,
	//       "depth": 1
	//     }
	//   ],
	//   "edges": [
	//     {
	//       "from": 0,
	//       "to": 1,
	//       "partition": "hash",
	//       "via": "by-word"
	//     }
	//   ],
	//   "operators": [
	//     {
	//       "name": "lines",
	//       "in": 0,
	//       "out": 2
	//     },
	//     {
	//       "name": "split",
	//       "in": 2,
	//       "out": 6
	//     },
	//     {
	//       "name": "count",
	//       "in": 6,
	//       "out": 4
	//     },
	//     {
	//       "name": "collect",
	//       "in": 4,
	//       "out": 0
	//     }
	//   ]
	// }
}
