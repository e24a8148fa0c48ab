package graph

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/stage"

	"github.com/sluicehq/sluice/mailbox"
)

// Plan is the physical plan of a topology: the tasks (chains of fused
// operators) that run as actors, with their parallelism, and the edges that
// carry records between them.
type Plan struct {
	Topology string
	Tasks    []Task
	Edges    []Edge

	// runtime view
	Chains [][]*Node
	Ins    [][]PhysEdge // per task: its input edges
	Outs   [][]PhysEdge // per task: its output edges, in consumer order
	Par    map[*Node]int
}

// Edge carries records from every instance of task From to instances of task To.
type Edge struct {
	From, To  int
	Partition string // forward, rebalance, hash, broadcast
	Via       string // the KeyBy, Broadcast or Rebalance operator that chose the partitioning, if any
}

type PhysEdge struct {
	From, To int // task ids
	Part     stage.Partition
	Via      *Node
	ToNode   *Node
	Index    int // position in the consumer task's inputs
}

// Validate checks the topology and returns every problem found, each a
// *TopologyError naming the operator, joined with errors.Join.
func (t *Topology) Validate() error {
	_, err := t.Plan()
	return err
}

// Plan validates the topology and computes its physical plan.
func (t *Topology) Plan() (*Plan, error) {
	errs := slices.Clone(t.errs)

	byName := make(map[string]*Node, len(t.nodes))
	for _, n := range t.nodes {
		if n.name == "" {
			errs = append(errs, opErr(t, fmt.Sprintf("#%d %s", n.id, n.kind), KindInvalid, "empty name"))
			continue
		}
		if prev, dup := byName[n.name]; dup {
			errs = append(errs, opErr(t, n.name, KindDuplicateName,
				fmt.Sprintf("the name is used by a %s and a %s", prev.kind, n.kind)))
			continue
		}
		byName[n.name] = n
	}

	// Resolve connections into a copy of the graph's edges, so that Plan can
	// be called more than once.
	inputs := make(map[*Node][]*Node, len(t.nodes))
	consumers := make(map[*Node][]*Node, len(t.nodes))
	for _, n := range t.nodes {
		inputs[n] = slices.Clone(n.inputs)
		consumers[n] = slices.Clone(n.consumers)
	}
	for _, c := range t.connects {
		from, to := byName[c.from], byName[c.to]
		switch {
		case to == nil:
			errs = append(errs, opErr(t, c.to, KindUnknown, fmt.Sprintf("Connect(%q, %q): no operator named %q", c.from, c.to, c.to)))
		case from == nil:
			errs = append(errs, opErr(t, c.to, KindUnknown, fmt.Sprintf("Connect(%q, %q): no operator named %q", c.from, c.to, c.from)))
		case !to.declared:
			errs = append(errs, opErr(t, c.to, KindInvalid, fmt.Sprintf("Connect(%q, %q): %q is a %s, not a declared input", c.from, c.to, c.to, to.kind)))
		case from.outType == nil:
			errs = append(errs, opErr(t, c.to, KindTypeMismatch, fmt.Sprintf("Connect(%q, %q): %q is a sink and has no output", c.from, c.to, c.from)))
		case from.outType != to.inType:
			errs = append(errs, opErr(t, c.to, KindTypeMismatch,
				fmt.Sprintf("input takes %v but %q produces %v", to.inType, c.from, from.outType)))
		default:
			inputs[to] = append(inputs[to], from)
			consumers[from] = append(consumers[from], to)
		}
	}

	for _, name := range slices.Sorted(maps.Keys(t.cfg.Parallelism)) {
		p := t.cfg.Parallelism[name]
		switch {
		case byName[name] == nil:
			errs = append(errs, opErr(t, name, KindUnknown, fmt.Sprintf("RunParallelism(%q, %d): no operator named %q", name, p, name)))
		case p < 1:
			errs = append(errs, opErr(t, name, KindParallelism, fmt.Sprintf("RunParallelism(%q, %d): must be at least 1", name, p)))
		}
	}

	hasSource := false
	for _, n := range t.nodes {
		if n.explicitP && n.parallelism < 1 {
			errs = append(errs, opErr(t, n.name, KindParallelism, fmt.Sprintf("parallelism %d: must be at least 1", n.parallelism)))
		}
		if n.role == RoleSource {
			hasSource = true
		}
		if n.declared && len(inputs[n]) == 0 {
			errs = append(errs, opErr(t, n.name, KindUnconnected, "declared input is never connected (use Topology.Connect)"))
		}
		if n.recordPolicy {
			switch {
			case n.kind != "map" && n.kind != "filter" && n.kind != "flatmap" && !n.stateful:
				errs = append(errs, opErr(t, n.name, KindInvalid, fmt.Sprintf("OnRecordFailure on a %s: only map, filter, flatmap and per-key aggregations take it", n.kind)))
			case n.recordAttempts < 1:
				errs = append(errs, opErr(t, n.name, KindInvalid, fmt.Sprintf("OnRecordFailure(%d): at least one attempt", n.recordAttempts)))
			}
		}
		if n.input != nil {
			if err := checkInput(n); err != nil {
				errs = append(errs, opErr(t, n.name, KindInvalid, err.Error()))
			} else if c := n.input.Capacity; c < t.cfg.BatchSize && n.input.Overflow != mailbox.OverflowBlock {
				// A batch is admitted whole into an empty mailbox, so such a
				// mailbox would hold more than its capacity.
				errs = append(errs, opErr(t, n.name, KindInvalid, fmt.Sprintf(
					"input capacity %d is below the topology's batch size %d: raise it, or lower BatchSize", c, t.cfg.BatchSize)))
			}
		}
		if n.role != RoleSink && len(consumers[n]) == 0 {
			errs = append(errs, opErr(t, n.name, KindUnconnected, "output is not consumed (add a Sink, or remove the operator)"))
		}
	}
	if len(t.nodes) > 0 && !hasSource {
		errs = append(errs, opErr(t, "", KindNoSource, "the topology has no source"))
	}
	if len(t.nodes) == 0 {
		errs = append(errs, opErr(t, "", KindNoSource, "the topology is empty"))
	}
	timedOut := make(map[*Node]bool)
	var timed func(n *Node, depth int) bool
	timed = func(n *Node, depth int) bool {
		if v, ok := timedOut[n]; ok {
			return v
		}
		v := false
		switch {
		case n.timed:
			v = true
		case n.role == RoleSource || depth > len(t.nodes):
		case n.stateful && n.emit != EmitUpdates:
		default:
			v = len(inputs[n]) > 0
			for _, in := range inputs[n] {
				v = v && timed(in, depth+1)
			}
		}
		timedOut[n] = v
		return v
	}
	for _, n := range t.nodes {
		if !n.needsTime {
			continue
		}
		for _, in := range inputs[n] {
			if !timed(in, 0) {
				errs = append(errs, opErr(t, n.name, KindInvalid, fmt.Sprintf(
					"event-time %s needs event times, but its input %q carries none: add operators.Timestamps upstream", n.kind, in.name)))
				break
			}
		}
	}
	if cyc := findCycle(t.nodes, consumers); cyc != nil {
		names := make([]string, len(cyc))
		for i, n := range cyc {
			names[i] = n.name
		}
		errs = append(errs, opErr(t, cyc[0].name, KindCycle, strings.Join(names, " -> ")))
	}
	if t.cfg.CheckpointInterval < 0 {
		errs = append(errs, opErr(t, "", KindInvalid, fmt.Sprintf("checkpoint interval %v: must be positive", t.cfg.CheckpointInterval)))
	}
	if t.cfg.CheckpointInterval > 0 {
		for _, n := range t.nodes {
			if n.role == RoleSource && !n.replayable {
				errs = append(errs, opErr(t, n.name, KindInvalid, "checkpoints need replayable sources: this source cannot rewind to an offset (for records an application sends, use operators.NewDurableIngress instead of Ingress or FromChannel)"))
			}
			for _, st := range n.stateTypes {
				if err := spillable(st); err != nil {
					errs = append(errs, opErr(t, n.name, KindInvalid, "checkpointed state: "+err.Error()))
				}
			}
		}
	}
	if cfgErr := t.cfg.Validate(); cfgErr != nil {
		errs = append(errs, opErr(t, "", KindInvalid, cfgErr.Error()))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return buildPlan(t, inputs, consumers), nil
}

func (c Config) Validate() error {
	if c.State.Disk() && c.State.Budget < 0 {
		return fmt.Errorf("disk state budget %d: must not be negative", c.State.Budget)
	}
	if c.BatchSize < 1 {
		return fmt.Errorf("batch size %d: must be at least 1", c.BatchSize)
	}
	if c.Capacity < c.BatchSize {
		return fmt.Errorf("capacity %d: must be at least the batch size %d", c.Capacity, c.BatchSize)
	}
	if c.LatencyEvery < 1 {
		return fmt.Errorf("latency every %d batches: must be at least 1", c.LatencyEvery)
	}
	return nil
}

// findCycle returns the nodes of one cycle, or nil.
func findCycle(nodes []*Node, consumers map[*Node][]*Node) []*Node {
	const (
		white = iota
		grey
		black
	)
	color := make(map[*Node]int, len(nodes))
	var stack []*Node
	var found []*Node
	var visit func(n *Node) bool
	visit = func(n *Node) bool {
		color[n] = grey
		stack = append(stack, n)
		for _, c := range consumers[n] {
			switch color[c] {
			case grey:
				i := slices.Index(stack, c)
				found = append(slices.Clone(stack[i:]), c)
				return true
			case white:
				if visit(c) {
					return true
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[n] = black
		return false
	}
	for _, n := range nodes {
		if color[n] == white && visit(n) {
			return found
		}
	}
	return nil
}

// topoOrder orders an acyclic graph so that every node follows its inputs.
func topoOrder(nodes []*Node, inputs map[*Node][]*Node) []*Node {
	done := make(map[*Node]bool, len(nodes))
	var out []*Node
	var visit func(n *Node)
	visit = func(n *Node) {
		if done[n] {
			return
		}
		done[n] = true
		for _, in := range inputs[n] {
			visit(in)
		}
		out = append(out, n)
	}
	for _, n := range nodes {
		visit(n)
	}
	return out
}

type upstream struct {
	node *Node
	part stage.Partition
	via  *Node // partition node, nil for a plain edge
}

func buildPlan(t *Topology, inputs, consumers map[*Node][]*Node) *Plan {
	order := topoOrder(t.nodes, inputs)

	// Effective parallelism: explicit, else the first input's.
	par := make(map[*Node]int, len(order))
	for _, n := range order {
		switch {
		case t.cfg.Parallelism[n.name] > 0:
			par[n] = t.cfg.Parallelism[n.name]
		case n.explicitP:
			par[n] = n.parallelism
		case len(inputs[n]) > 0:
			par[n] = par[inputs[n][0]]
		default:
			par[n] = 1
		}
	}

	executes := func(n *Node) bool { return n.role != rolePartition && n.role != roleJunction }

	// Physical inputs of every executing node: partition and junction nodes
	// are folded into edges; the partition nearest the consumer wins.
	var expand func(n *Node, via *Node) []upstream
	expand = func(n *Node, via *Node) []upstream {
		if executes(n) {
			return []upstream{{node: n, via: via}}
		}
		if n.role == rolePartition && via == nil {
			via = n
		}
		var out []upstream
		for _, in := range inputs[n] {
			out = append(out, expand(in, via)...)
		}
		return out
	}
	phys := make(map[*Node][]upstream)
	physOut := make(map[*Node][]*Node)
	for _, n := range order {
		if !executes(n) {
			continue
		}
		var ups []upstream
		for _, in := range inputs[n] {
			ups = append(ups, expand(in, nil)...)
		}
		for i := range ups {
			u := &ups[i]
			switch {
			case u.via != nil:
				u.part = u.via.partition
			case par[u.node] == par[n]:
				u.part = stage.Forward
			default:
				u.part = stage.Rebalance
			}
			physOut[u.node] = append(physOut[u.node], n)
		}
		phys[n] = ups
	}

	// Fusion: n joins its single upstream's chain over a forward edge when
	// neither opts out, n is stateless, and the upstream feeds only n.
	chainOf := make(map[*Node]int)
	var chains [][]*Node
	for _, n := range order {
		if !executes(n) {
			continue
		}
		ups := phys[n]
		if len(ups) == 1 {
			u := ups[0]
			if u.part == stage.Forward && !n.stateful && n.role != RoleSource && !n.noFusion && !u.node.noFusion && n.input == nil &&
				len(physOut[u.node]) == 1 {
				c := chainOf[u.node]
				if chains[c][len(chains[c])-1] == u.node {
					chains[c] = append(chains[c], n)
					chainOf[n] = c
					continue
				}
			}
		}
		chainOf[n] = len(chains)
		chains = append(chains, []*Node{n})
	}

	p := &Plan{Topology: t.tname, Chains: chains, Par: par,
		Ins: make([][]PhysEdge, len(chains)), Outs: make([][]PhysEdge, len(chains))}
	for id, ch := range chains {
		task := Task{ID: id, Parallelism: par[ch[0]]}
		for _, n := range ch {
			task.Operators = append(task.Operators, n.name)
			task.Kinds = append(task.Kinds, n.kind)
		}
		p.Tasks = append(p.Tasks, task)
	}
	for id, ch := range chains {
		head := ch[0]
		for _, u := range phys[head] {
			e := PhysEdge{From: chainOf[u.node], To: id, Part: u.part, Via: u.via, ToNode: head, Index: len(p.Ins[id])}
			p.Ins[id] = append(p.Ins[id], e)
			p.Outs[e.From] = append(p.Outs[e.From], e)
			pe := Edge{From: e.From, To: id, Partition: u.part.String()}
			if u.via != nil {
				pe.Via = u.via.name
			}
			p.Edges = append(p.Edges, pe)
		}
	}
	return p
}

// checkInput validates an operator's Input mailbox as the job will build it.
func checkInput(n *Node) error {
	if n.role == RoleSource || n.role == rolePartition || n.role == roleJunction {
		return fmt.Errorf("input mailbox on a %s: only operators and sinks have one", n.kind)
	}
	cfg := *n.input
	if cfg.Overflow == mailbox.OverflowSpill {
		if err := spillable(n.inType); err != nil {
			return fmt.Errorf("spill: %w", err)
		}
		cfg.Spill = &mailbox.SpillOptions{Store: &mailbox.SpillStore{}, Queue: "check", Codec: stage.Codec[int]{}}
	}
	return cfg.Validate()
}

// spillable reports whether msgpack encodes every field of t, so that a
// spilled record comes back whole.
func spillable(t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return fmt.Errorf("records of type %v cannot be encoded", t)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() && f.Tag.Get("msgpack") != "-" {
				return fmt.Errorf("records of type %v have the unexported field %s, which msgpack does not encode", t, f.Name)
			}
		}
	}
	return nil
}
