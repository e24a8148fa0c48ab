package dashboard

import (
	"cmp"
	"slices"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
)

// Graph is a job's physical plan laid out for drawing: tasks are boxes in
// columns by topological depth (sources on the left), edges join the right
// side of a box to the left side of the next. Coordinates are in SVG user
// units from the top left corner.
type Graph struct {
	Width  int        `json:"width"`
	Height int        `json:"height"`
	Tasks  []TaskBox  `json:"tasks"`
	Edges  []EdgeLine `json:"edges"`
}

// TaskBox is one task: a chain of fused operators run by Parallelism actors.
type TaskBox struct {
	ID          int      `json:"id"`
	Operators   []string `json:"operators"` // in chain order
	Kinds       []string `json:"kinds"`
	Parallelism int      `json:"parallelism"`
	Depth       int      `json:"depth"` // the longest path from a source task, in edges
	// Mailbox is true for a task with inputs: its box has a queue bar under
	// the task line.
	Mailbox bool `json:"mailbox"`
	X       int  `json:"x"`
	Y       int  `json:"y"`
	W       int  `json:"w"`
	H       int  `json:"h"`
}

// EdgeLine carries records from task From to task To.
type EdgeLine struct {
	From      int    `json:"from"`
	To        int    `json:"to"`
	Partition string `json:"partition"`     // forward, rebalance, hash, broadcast
	Via       string `json:"via,omitempty"` // the KeyBy, Broadcast or Rebalance that chose it
	X1        int    `json:"x1"`
	Y1        int    `json:"y1"`
	X2        int    `json:"x2"`
	Y2        int    `json:"y2"`
}

// The geometry of the drawing, shared with app.js through the coordinates
// only: the page draws what the layout says.
const (
	boxW    = 250
	headerH = 26 // task line: "task 1 ×4"
	opH     = 38 // per operator: name and kind, then its rates
	barH    = 18 // the input queue bar, on tasks with a mailbox
	padY    = 6
	gapX    = 150 // room for the edge's labels
	gapY    = 28
	margin  = 16
)

// boxHeight is the height of a box for a chain of n operators.
func boxHeight(n int, mailbox bool) int {
	h := headerH + n*opH + padY
	if mailbox {
		h += barH
	}
	return h
}

// layout places the tasks of a plan. Every task gets a column by its depth
// (longest path from a task without inputs) and, within its column, a row
// ordered by the mean row of its inputs, which keeps edges short and mostly
// uncrossed for the pipelines sluice runs. It never fails: a plan with an
// edge naming an unknown task (impossible from Plan) simply loses that edge.
func layout(tasks []operators.Task, edges []operators.Edge) Graph {
	idx := make(map[int]int, len(tasks)) // task id -> position in tasks
	for i, t := range tasks {
		idx[t.ID] = i
	}
	var valid []operators.Edge
	for _, e := range edges {
		_, okF := idx[e.From]
		_, okT := idx[e.To]
		if okF && okT && e.From != e.To {
			valid = append(valid, e)
		}
	}

	// Depth by Kahn's algorithm: a task's depth is one more than its
	// deepest input. Tasks left over (a cycle, which Plan rules out) go
	// one column past the deepest.
	indeg := make([]int, len(tasks))
	outs := make([][]int, len(tasks))
	ins := make([][]int, len(tasks))
	for _, e := range valid {
		f, t := idx[e.From], idx[e.To]
		indeg[t]++
		outs[f] = append(outs[f], t)
		ins[t] = append(ins[t], f)
	}
	depth := make([]int, len(tasks))
	placed := make([]bool, len(tasks))
	var queue []int
	for i := range tasks {
		if indeg[i] == 0 {
			queue = append(queue, i)
		}
	}
	maxDepth := 0
	for len(queue) > 0 {
		i := queue[0]
		queue = queue[1:]
		placed[i] = true
		maxDepth = max(maxDepth, depth[i])
		for _, o := range outs[i] {
			depth[o] = max(depth[o], depth[i]+1)
			if indeg[o]--; indeg[o] == 0 {
				queue = append(queue, o)
			}
		}
	}
	for i := range tasks {
		if !placed[i] {
			depth[i] = maxDepth + 1
		}
	}

	// Rows: column by column, tasks ordered by the mean row of their inputs
	// (their id when they have none, or as a tie-break).
	cols := map[int][]int{}
	for i := range tasks {
		cols[depth[i]] = append(cols[depth[i]], i)
	}
	row := make([]float64, len(tasks))
	g := Graph{Tasks: make([]TaskBox, len(tasks))}
	colHeights := map[int]int{}
	for d := 0; d <= maxDepth+1; d++ {
		col := cols[d]
		key := func(i int) float64 {
			if len(ins[i]) == 0 {
				return float64(tasks[i].ID)
			}
			s := 0.0
			for _, f := range ins[i] {
				s += row[f]
			}
			return s / float64(len(ins[i]))
		}
		slices.SortStableFunc(col, func(a, b int) int {
			return cmp.Or(cmp.Compare(key(a), key(b)), cmp.Compare(tasks[a].ID, tasks[b].ID))
		})
		y := margin
		for r, i := range col {
			row[i] = float64(r)
			t := tasks[i]
			h := boxHeight(len(t.Operators), len(ins[i]) > 0)
			g.Tasks[i] = TaskBox{
				ID: t.ID, Operators: slices.Clone(t.Operators), Kinds: slices.Clone(t.Kinds),
				Parallelism: t.Parallelism, Depth: d, Mailbox: len(ins[i]) > 0,
				X: margin + d*(boxW+gapX), Y: y, W: boxW, H: h,
			}
			y += h + gapY
		}
		colHeights[d] = y
	}
	for _, b := range g.Tasks {
		g.Width = max(g.Width, b.X+b.W+margin)
	}
	for _, h := range colHeights {
		g.Height = max(g.Height, h-gapY+margin)
	}
	for _, e := range valid {
		f, t := g.Tasks[idx[e.From]], g.Tasks[idx[e.To]]
		g.Edges = append(g.Edges, EdgeLine{
			From: e.From, To: e.To, Partition: e.Partition, Via: e.Via,
			X1: f.X + f.W, Y1: f.Y + f.H/2,
			X2: t.X, Y2: t.Y + t.H/2,
		})
	}
	return g
}

// planOf returns the physical plan of a run: the plan the execution runs
// when it has one (every topology does), else tasks rebuilt from the
// operators' statistics, without edges.
func planOf(run *actors.Run) ([]operators.Task, []operators.Edge) {
	if plan := operators.PlanOf(run); plan != nil {
		return plan.Tasks, plan.Edges
	}
	var tasks []operators.Task
	for _, s := range run.Stats() {
		if n := len(tasks); n == 0 || tasks[n-1].ID != s.Task {
			tasks = append(tasks, operators.Task{ID: s.Task, Parallelism: s.Parallelism})
		}
		t := &tasks[len(tasks)-1]
		t.Operators = append(t.Operators, s.Name)
		t.Kinds = append(t.Kinds, s.Kind)
	}
	return tasks, nil
}
