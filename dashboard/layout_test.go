package dashboard

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/operators"
)

func ident(v int64) int64 { return v }

// Plans of real topologies, from a straight pipeline to fan-out and fan-in.
func realPlans(t *testing.T) map[string]*operators.Plan {
	t.Helper()
	build := map[string]func() *operators.Topology{
		"wordcount": func() *operators.Topology {
			top := operators.NewTopology("wordcount")
			lines := operators.Source(top, "lines", operators.FromSlice([]string{"a b", "b c"}))
			words := operators.FlatMap(lines, "split", strings.Fields)
			by := operators.KeyBy(words, "by-word", func(w string) string { return w }, operators.Parallelism(4))
			counts := operators.Count(by, "count")
			operators.Sink(counts, "collect", operators.NewCollector[operators.KV[string, int64]]())
			return top
		},
		"diamond": func() *operators.Topology {
			top := operators.NewTopology("diamond")
			src := operators.Source(top, "src", operators.Generate(10, ident))
			b := operators.Broadcast(src, "copy")
			left := operators.Map(b, "left", ident, operators.Parallelism(2), operators.NoFusion())
			right := operators.Map(src, "right", ident, operators.NoFusion())
			slow := operators.Map(right, "slow", ident, operators.NoFusion())
			all := operators.Merge("all", left, slow)
			operators.Sink(operators.Rebalance(all, "spread"), "out", operators.NewCollector[int64](), operators.Parallelism(3))
			return top
		},
		"two-sources": func() *operators.Topology {
			top := operators.NewTopology("two-sources")
			a := operators.Source(top, "a", operators.Generate(10, ident))
			b := operators.Source(top, "b", operators.Generate(10, ident), operators.Parallelism(2))
			c := operators.Source(top, "c", operators.Generate(10, ident))
			ab := operators.Merge("ab", a, b)
			by := operators.KeyBy(ab, "by", ident, operators.Parallelism(2))
			sum := operators.Reduce(by, "sum", func(x, y int64) int64 { return x + y })
			vals := operators.Map(sum, "vals", func(kv operators.KV[int64, int64]) int64 { return kv.Value })
			operators.Sink(operators.Merge("final", vals, c), "out", operators.NewCollector[int64]())
			return top
		},
	}
	plans := map[string]*operators.Plan{}
	for name, f := range build {
		p, err := f().Plan()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		plans[name] = p
	}
	return plans
}

// checkLayout checks a layout of tasks and edges: every task placed once,
// inside the drawing, no boxes overlapping, depths that follow the edges,
// and every edge joining two placed tasks at their sides.
func checkLayout(t *testing.T, tasks []operators.Task, edges []operators.Edge, g Graph) {
	t.Helper()
	if len(g.Tasks) != len(tasks) {
		t.Fatalf("%d boxes for %d tasks", len(g.Tasks), len(tasks))
	}
	box := map[int]TaskBox{}
	for _, b := range g.Tasks {
		if _, dup := box[b.ID]; dup {
			t.Fatalf("task %d placed twice", b.ID)
		}
		box[b.ID] = b
		if b.W <= 0 || b.H != boxHeight(len(b.Operators), b.Mailbox) || b.X < 0 || b.Y < 0 ||
			b.X+b.W > g.Width || b.Y+b.H > g.Height {
			t.Errorf("task %d: box %+v outside %dx%d or of the wrong size", b.ID, b, g.Width, g.Height)
		}
	}
	for _, task := range tasks {
		b, ok := box[task.ID]
		if !ok {
			t.Fatalf("task %d not placed", task.ID)
		}
		if strings.Join(b.Operators, ",") != strings.Join(task.Operators, ",") || b.Parallelism != task.Parallelism {
			t.Errorf("task %d: box %v ×%d, plan %v ×%d", task.ID, b.Operators, b.Parallelism, task.Operators, task.Parallelism)
		}
	}
	for i, a := range g.Tasks {
		for _, b := range g.Tasks[i+1:] {
			if a.X < b.X+b.W && b.X < a.X+a.W && a.Y < b.Y+b.H && b.Y < a.Y+a.H {
				t.Errorf("boxes of tasks %d and %d overlap: %+v %+v", a.ID, b.ID, a, b)
			}
		}
	}
	inputs := map[int][]int{}
	for _, e := range g.Edges {
		from, okF := box[e.From]
		to, okT := box[e.To]
		if !okF || !okT {
			t.Fatalf("edge %d -> %d joins a task that is not placed", e.From, e.To)
		}
		if from.Depth >= to.Depth {
			t.Errorf("edge %d -> %d goes from depth %d to depth %d", e.From, e.To, from.Depth, to.Depth)
		}
		if e.X1 != from.X+from.W || e.Y1 < from.Y || e.Y1 > from.Y+from.H || e.X2 != to.X || e.Y2 < to.Y || e.Y2 > to.Y+to.H {
			t.Errorf("edge %d -> %d drawn from (%d,%d) to (%d,%d), not between the boxes' sides %+v %+v",
				e.From, e.To, e.X1, e.Y1, e.X2, e.Y2, from, to)
		}
		inputs[e.To] = append(inputs[e.To], e.From)
	}
	for _, b := range g.Tasks {
		want := 0
		for _, f := range inputs[b.ID] {
			want = max(want, box[f].Depth+1)
		}
		if b.Depth != want || b.Mailbox != (len(inputs[b.ID]) > 0) {
			t.Errorf("task %d: depth %d mailbox %v, want depth %d (the longest path from a source)", b.ID, b.Depth, b.Mailbox, want)
		}
	}
	if len(g.Edges) != len(edges) {
		t.Errorf("%d edges drawn of %d", len(g.Edges), len(edges))
	}
}

func TestLayoutOfRealPlans(t *testing.T) {
	for name, p := range realPlans(t) {
		t.Run(name, func(t *testing.T) {
			g := layout(p.Tasks, p.Edges)
			checkLayout(t, p.Tasks, p.Edges, g)
			if t.Failed() {
				t.Logf("plan:\n%s", p)
			}
		})
	}
}

func TestLayoutDepths(t *testing.T) {
	p := realPlans(t)["two-sources"]
	g := layout(p.Tasks, p.Edges)
	depth := map[string]int{}
	for _, b := range g.Tasks {
		for _, op := range b.Operators {
			depth[op] = b.Depth
		}
	}
	// a and b feed sum; sum's chain feeds out, as c does: c is a source
	// (depth 0), and out is one past the deepest of its inputs.
	want := map[string]int{"a": 0, "b": 0, "c": 0, "sum": 1, "vals": 1, "out": 2}
	for op, d := range want {
		if depth[op] != d {
			t.Errorf("%s at depth %d, want %d\n%s", op, depth[op], d, p)
		}
	}
}

// Layout never fails: edges to unknown tasks and self-loops are left out,
// and a cycle (which Plan rules out) still places every task.
func TestLayoutOfOddGraphs(t *testing.T) {
	task := func(id int) operators.Task {
		return operators.Task{ID: id, Operators: []string{fmt.Sprint("op", id)}, Kinds: []string{"map"}, Parallelism: 1}
	}
	cases := map[string]struct {
		tasks []operators.Task
		edges []operators.Edge
		kept  int
	}{
		"empty":   {nil, nil, 0},
		"alone":   {[]operators.Task{task(0)}, nil, 0},
		"unknown": {[]operators.Task{task(0), task(1)}, []operators.Edge{{From: 0, To: 1}, {From: 0, To: 7}, {From: 1, To: 1}}, 1},
		"cycle":   {[]operators.Task{task(0), task(1), task(2)}, []operators.Edge{{From: 0, To: 1}, {From: 1, To: 2}, {From: 2, To: 1}}, 3},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			g := layout(c.tasks, c.edges)
			if len(g.Tasks) != len(c.tasks) || len(g.Edges) != c.kept {
				t.Fatalf("%d boxes, %d edges; want %d and %d", len(g.Tasks), len(g.Edges), len(c.tasks), c.kept)
			}
			ids := map[int]bool{}
			for _, b := range g.Tasks {
				ids[b.ID] = true
			}
			for _, e := range g.Edges {
				if !ids[e.From] || !ids[e.To] {
					t.Errorf("edge %d -> %d joins an unplaced task", e.From, e.To)
				}
			}
		})
	}
}
