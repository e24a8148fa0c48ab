package engine

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/graph"
	"github.com/sluicehq/sluice/internal/shed"
)

// shedTasks plans top and returns the controller's table of tasks: where
// each would be shed for and how.
func shedTasks(t *testing.T, top *graph.Topology) map[string]shed.Task {
	t.Helper()
	p, err := top.Plan()
	if err != nil {
		t.Fatal(err)
	}
	x := &execution{topo: top, plan: p}
	if err := x.setupLatency(); err != nil {
		t.Fatal(err)
	}
	m := map[string]shed.Task{}
	for _, task := range x.shedder.c.Tasks {
		m[task.Name] = task
	}
	return m
}

func double(v int64) int64 { return 2 * v }

// Where a LatencyTarget sheds for each bottleneck: at the sources when
// everything they feed passes through it, else on the edges into it; by
// sampling unless a Selective operator is downstream of the point.
func TestShedPoints(t *testing.T) {
	target := graph.LatencyTarget(200 * time.Millisecond)
	check := func(name string, got shed.Task, point string, sample bool) {
		t.Helper()
		if got.Point != point || got.Sample != sample {
			t.Errorf("%s: shed at %q (sample %v), want %q (sample %v)", name, got.Point, got.Sample, point, sample)
		}
	}

	// numbers -> a -> b -> out: a linear pipeline sheds at the source.
	top := graph.NewTopology("linear", target)
	src := graph.Source[int64](top, "numbers", numbers(10))
	a := graph.Map(src, "a", double, graph.NoFusion())
	b := graph.Map(a, "b", double, graph.NoFusion())
	graph.Sink[int64](b, "out", discard{}, graph.NoFusion())
	tasks := shedTasks(t, top)
	check("numbers", tasks["numbers"], "", false)
	check("a", tasks["a"], "numbers", true)
	check("b", tasks["b"], "numbers", true)

	// numbers -> {slow -> out1, fast -> out2}: a branch bypasses slow, so
	// slow is relieved on the edge into it, which spares the other branch.
	top = graph.NewTopology("fan-out", target)
	src = graph.Source[int64](top, "numbers", numbers(10))
	slow := graph.Map(src, "slow", double, graph.NoFusion())
	fast := graph.Map(src, "fast", double, graph.NoFusion())
	graph.Sink[int64](slow, "out1", discard{}, graph.NoFusion())
	graph.Sink[int64](fast, "out2", discard{}, graph.NoFusion())
	tasks = shedTasks(t, top)
	check("slow", tasks["slow"], "numbers->slow", true)
	check("out2", tasks["out2"], "fast->out2", true)

	// numbers -> a -> pick (Selective) -> b -> out: sampling at the source
	// would starve pick, so the source drops whole batches for a or pick;
	// b, downstream of pick, is relieved by sampling the edge into it.
	top = graph.NewTopology("selective", target)
	src = graph.Source[int64](top, "numbers", numbers(10))
	a = graph.Map(src, "a", double, graph.NoFusion())
	pick := graph.Map(a, "pick", double, graph.NoFusion(), graph.Selective())
	b = graph.Map(pick, "b", double, graph.NoFusion())
	graph.Sink[int64](b, "out", discard{}, graph.NoFusion())
	tasks = shedTasks(t, top)
	check("a", tasks["a"], "numbers", false)
	check("pick", tasks["pick"], "numbers", false)
	check("b", tasks["b"], "pick->b", true)
}

// A target needs the measurement, and a negative one is refused.
func TestLatencyTargetOptions(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []graph.TopologyOption
	}{
		{"without measurement", []graph.TopologyOption{graph.LatencyTarget(time.Second), graph.NoLatencyStats()}},
		{"negative", []graph.TopologyOption{graph.LatencyTarget(-time.Second)}},
		{"with a fixed rate", []graph.TopologyOption{graph.LatencyTarget(time.Second), graph.FixedShed(0.5, false)}},
	} {
		top := graph.NewTopology("bad", c.opts...)
		src := graph.Source[int64](top, "numbers", numbers(10))
		graph.Sink[int64](src, "out", discard{})
		p, err := top.Plan()
		if err != nil {
			t.Fatal(err)
		}
		x := &execution{topo: top, plan: p}
		if err := x.setupLatency(); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}
