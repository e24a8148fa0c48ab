package operators_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
)

func identity[T any](v T) T { return v }

// checkInvalid asserts that t fails validation with kind, in an error that
// names the operator.
func checkInvalid(t *testing.T, top *operators.Topology, kind error, operator string) {
	t.Helper()
	err := top.Validate()
	if err == nil {
		t.Fatalf("Validate() = nil, want %v naming %q", kind, operator)
	}
	if !errors.Is(err, kind) {
		t.Fatalf("Validate() = %v, want errors.Is %v", err, kind)
	}
	var found bool
	for _, e := range unjoin(err) {
		var te *operators.TopologyError
		if errors.As(e, &te) && errors.Is(te, kind) && te.Operator == operator {
			found = true
			if !strings.Contains(te.Error(), `"`+operator+`"`) {
				t.Errorf("error text %q does not name operator %q", te.Error(), operator)
			}
		}
	}
	if !found {
		t.Fatalf("Validate() = %v: no %v error for operator %q", err, kind, operator)
	}
	if _, err := top.Plan(); err == nil {
		t.Fatal("Plan() succeeded on an invalid topology")
	}
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func discard[T any]() operators.SinkConnector[T] {
	return operators.SinkFunc(func(T) error { return nil })
}

func TestValidTopology(t *testing.T) {
	top := operators.NewTopology("ok")
	src := operators.Source(top, "src", operators.FromSlice([]int{1, 2, 3}))
	operators.Sink(operators.Map(src, "double", func(v int) int { return 2 * v }), "out", discard[int]())
	if err := top.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestDuplicateName(t *testing.T) {
	top := operators.NewTopology("dup")
	src := operators.Source(top, "src", operators.FromSlice([]int{1}))
	m := operators.Map(src, "step", identity[int])
	operators.Sink(operators.Map(m, "step", identity[int]), "out", discard[int]())
	checkInvalid(t, top, operators.ErrDuplicateName, "step")
}

func TestParallelismBelowOne(t *testing.T) {
	for _, p := range []int{0, -3} {
		top := operators.NewTopology("par")
		src := operators.Source(top, "src", operators.FromSlice([]int{1}))
		operators.Sink(operators.Map(src, "m", identity[int], operators.Parallelism(p)), "out", discard[int]())
		checkInvalid(t, top, operators.ErrParallelism, "m")
	}
}

func TestUnconnectedOutput(t *testing.T) {
	top := operators.NewTopology("dangling")
	src := operators.Source(top, "src", operators.FromSlice([]int{1}))
	operators.Sink(src, "out", discard[int]())
	operators.Filter(src, "unused", func(int) bool { return true })
	checkInvalid(t, top, operators.ErrUnconnected, "unused")
}

func TestUnconnectedKeyBy(t *testing.T) {
	top := operators.NewTopology("dangling-key")
	src := operators.Source(top, "src", operators.FromSlice([]int{1}))
	operators.Sink(src, "out", discard[int]())
	operators.KeyBy(src, "by", identity[int])
	checkInvalid(t, top, operators.ErrUnconnected, "by")
}

func TestUnconnectedDeclaredInput(t *testing.T) {
	top := operators.NewTopology("undeclared")
	in := operators.Declare[int](top, "later")
	operators.Sink(in, "out", discard[int]())
	src := operators.Source(top, "src", operators.FromSlice([]int{1}))
	operators.Sink(src, "out2", discard[int]())
	checkInvalid(t, top, operators.ErrUnconnected, "later")
}

func TestCycle(t *testing.T) {
	top := operators.NewTopology("loop")
	src := operators.Source(top, "src", operators.FromSlice([]int{1}))
	back := operators.Declare[int](top, "feedback")
	merged := operators.Merge("merged", src, back)
	step := operators.Map(merged, "step", func(v int) int { return v + 1 })
	operators.Sink(step, "out", discard[int]())
	top.Connect("step", "feedback")
	err := top.Validate()
	checkInvalid(t, top, operators.ErrCycle, firstCycleOperator(err))
	for _, name := range []string{"feedback", "merged", "step"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("cycle error %q does not list %q", err, name)
		}
	}
}

func firstCycleOperator(err error) string {
	for _, e := range unjoin(err) {
		var te *operators.TopologyError
		if errors.As(e, &te) && errors.Is(te, operators.ErrCycle) {
			return te.Operator
		}
	}
	return "(none)"
}

func TestTypeMismatch(t *testing.T) {
	top := operators.NewTopology("types")
	src := operators.Source(top, "words", operators.FromSlice([]string{"a"}))
	in := operators.Declare[int](top, "numbers")
	operators.Sink(in, "out", discard[int]())
	top.Connect("words", "numbers")
	checkInvalid(t, top, operators.ErrTypeMismatch, "numbers")
	if err := top.Validate(); !strings.Contains(err.Error(), "string") || !strings.Contains(err.Error(), "int") {
		t.Errorf("type mismatch error %q does not name both types", err)
	}
	_ = src
}

func TestConnectUnknown(t *testing.T) {
	top := operators.NewTopology("unknown")
	in := operators.Declare[int](top, "in")
	operators.Sink(in, "out", discard[int]())
	top.Connect("ghost", "in")
	checkInvalid(t, top, operators.ErrUnknown, "in")
}

func TestForeignStream(t *testing.T) {
	a := operators.NewTopology("a")
	b := operators.NewTopology("b")
	sa := operators.Source(a, "sa", operators.FromSlice([]int{1}))
	sb := operators.Source(b, "sb", operators.FromSlice([]int{1}))
	operators.Sink(sa, "outa", discard[int]())
	operators.Sink(operators.Merge("both", sb, sa), "outb", discard[int]())
	checkInvalid(t, b, operators.ErrForeignStream, "both")
}

func TestNilFunction(t *testing.T) {
	top := operators.NewTopology("nil")
	src := operators.Source(top, "src", operators.FromSlice([]int{1}))
	operators.Sink(operators.Map[int, int](src, "m", nil), "out", discard[int]())
	checkInvalid(t, top, operators.ErrInvalid, "m")
}

func TestNoSource(t *testing.T) {
	top := operators.NewTopology("empty")
	if err := top.Validate(); !errors.Is(err, operators.ErrNoSource) {
		t.Fatalf("Validate() = %v, want ErrNoSource", err)
	}
}

func TestEveryErrorReported(t *testing.T) {
	top := operators.NewTopology("many")
	src := operators.Source(top, "src", operators.FromSlice([]int{1}))
	operators.Map(src, "a", identity[int], operators.Parallelism(0))
	operators.Map(src, "a", identity[int])
	err := top.Validate()
	for _, kind := range []error{operators.ErrParallelism, operators.ErrDuplicateName, operators.ErrUnconnected} {
		if !errors.Is(err, kind) {
			t.Errorf("Validate() = %v: missing %v", err, kind)
		}
	}
}

func TestPlanFusion(t *testing.T) {
	top := operators.NewTopology("fusion")
	src := operators.Source(top, "src", operators.FromSlice([]string{"a b"}))
	words := operators.FlatMap(src, "split", strings.Fields)
	upper := operators.Map(words, "upper", strings.ToUpper, operators.NoFusion())
	by := operators.KeyBy(upper, "by", identity[string], operators.Parallelism(3))
	counts := operators.Count(by, "count")
	fmtd := operators.Map(counts, "format", func(kv operators.KV[string, int64]) string { return kv.Key })
	operators.Sink(fmtd, "out", discard[string]())
	p, err := top.Plan()
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		ops []string
		par int
	}{
		{[]string{"src", "split"}, 1},
		{[]string{"upper"}, 1},
		{[]string{"count", "format", "out"}, 3},
	}
	if len(p.Tasks) != len(want) {
		t.Fatalf("plan has %d tasks, want %d:\n%s", len(p.Tasks), len(want), p)
	}
	for i, w := range want {
		if got := p.Tasks[i]; strings.Join(got.Operators, ",") != strings.Join(w.ops, ",") || got.Parallelism != w.par {
			t.Errorf("task %d = %v x%d, want %v x%d", i, got.Operators, got.Parallelism, w.ops, w.par)
		}
	}
	wantEdges := []operators.Edge{{From: 0, To: 1, Partition: "forward"}, {From: 1, To: 2, Partition: "hash", Via: "by"}}
	if len(p.Edges) != len(wantEdges) {
		t.Fatalf("edges = %+v, want %+v", p.Edges, wantEdges)
	}
	for i := range wantEdges {
		if p.Edges[i] != wantEdges[i] {
			t.Errorf("edge %d = %+v, want %+v", i, p.Edges[i], wantEdges[i])
		}
	}
	if s := p.String(); !strings.Contains(s, "count(count) -> format(map) -> out(sink)  [fused]") {
		t.Errorf("plan text lacks the fused chain:\n%s", s)
	}
}

func TestPlanRebalanceOnParallelismChange(t *testing.T) {
	top := operators.NewTopology("rebalance")
	src := operators.Source(top, "src", operators.FromSlice([]int{1}))
	m := operators.Map(src, "m", identity[int], operators.Parallelism(2))
	operators.Sink(m, "out", discard[int]())
	p, err := top.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Tasks) != 2 || p.Edges[0].Partition != "rebalance" {
		t.Fatalf("plan:\n%s\nwant src alone, then m -> out x2 over a rebalance edge", p)
	}
}

// A shedding or spilling mailbox smaller than a batch would hold more than
// its capacity: the topology is refused.
func TestInputCapacityBelowBatchSize(t *testing.T) {
	top := operators.NewTopology("small-mailbox", operators.BatchSize(256))
	src := operators.Source(top, "numbers", operators.FromSlice([]int{1}))
	operators.Sink(src, "out", operators.NewCollector[int](), operators.Input(mailbox.DropOldest(64)))
	err := top.Validate()
	if !errors.Is(err, operators.ErrInvalid) || !strings.Contains(err.Error(), `"out"`) || !strings.Contains(err.Error(), "below the topology's batch size 256") {
		t.Fatalf("got %v", err)
	}
	ok := operators.NewTopology("small-batches", operators.BatchSize(64))
	src = operators.Source(ok, "numbers", operators.FromSlice([]int{1}))
	operators.Sink(src, "out", operators.NewCollector[int](), operators.Input(mailbox.DropOldest(64)))
	if err := ok.Validate(); err != nil {
		t.Fatalf("batches of 64 into 64: %v", err)
	}
}
