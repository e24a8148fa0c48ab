package operators

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/graph"
)

// Plan is the physical plan of a topology: the tasks (chains of fused
// operators) that run as actors, with their parallelism, and the edges that
// carry records between them.
type Plan struct {
	Topology string
	Tasks    []Task
	Edges    []Edge
}

// Task is a chain of operators fused into one actor per instance.
type Task struct {
	ID          int
	Operators   []string // in chain order
	Kinds       []string
	Parallelism int
}

// Name is the task's operators joined by " -> ".
func (t Task) Name() string { return strings.Join(t.Operators, " -> ") }

// Edge carries records from every instance of task From to instances of task To.
type Edge struct {
	From, To  int
	Partition string // forward, rebalance, hash, broadcast
	Via       string // the KeyBy, Broadcast or Rebalance operator that chose the partitioning, if any
}

// Plan validates the topology and computes its physical plan.
func (t *Topology) Plan() (*Plan, error) {
	ep, err := t.t.Plan()
	if err != nil {
		return nil, err
	}
	return planOf(ep), nil
}

// PlanOf is the physical plan a topology's run executes (nil for a run of
// another kind of job).
func PlanOf(run *actors.Run) *Plan {
	if ep := engine.PlanOf(run); ep != nil {
		return planOf(ep)
	}
	return nil
}

func planOf(ep *graph.Plan) *Plan {
	p := &Plan{Topology: ep.Topology, Tasks: make([]Task, len(ep.Tasks)), Edges: make([]Edge, len(ep.Edges))}
	for i, et := range ep.Tasks {
		p.Tasks[i] = Task{ID: et.ID, Operators: et.Operators, Kinds: et.Kinds, Parallelism: et.Parallelism}
	}
	for i, ee := range ep.Edges {
		p.Edges[i] = Edge{From: ee.From, To: ee.To, Partition: ee.Partition, Via: ee.Via}
	}
	return p
}

// String renders the plan for people, one task or edge a line.
func (p *Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "topology %s: %d tasks, %d edges\n", p.Topology, len(p.Tasks), len(p.Edges))
	for _, t := range p.Tasks {
		parts := make([]string, len(t.Operators))
		for i := range t.Operators {
			parts[i] = fmt.Sprintf("%s(%s)", t.Operators[i], t.Kinds[i])
		}
		fused := ""
		if len(parts) > 1 {
			fused = "  [fused]"
		}
		fmt.Fprintf(&b, "  task %d  x%d  %s%s\n", t.ID, t.Parallelism, strings.Join(parts, " -> "), fused)
	}
	for _, e := range p.Edges {
		via := ""
		if e.Via != "" {
			via = fmt.Sprintf(" via %q", e.Via)
		}
		fmt.Fprintf(&b, "  edge    task %d -> task %d  %s%s\n", e.From, e.To, e.Partition, via)
	}
	return b.String()
}
