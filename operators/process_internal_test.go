package operators

import (
	"testing"

	"github.com/sluicehq/sluice/internal/graph"
)

// TestProcessContextNoAllocs: the user's functions get the engine's
// context as it is, converted: a call allocates nothing (a wrapper made
// per call was one allocation per record and per timer).
func TestProcessContextNoAllocs(t *testing.T) {
	var keys int64
	var seen *ProcessContext[int64, int64, int64] // kept, as a function may (the context would escape)
	rec, tim := processFuncs(func(c *ProcessContext[int64, int64, int64], v int64) { keys += c.Key() + v; seen = c },
		func(c *ProcessContext[int64, int64, int64]) { keys += c.Key(); seen = c })
	c := new(graph.ProcessContext[int64, int64, int64])
	if n := testing.AllocsPerRun(100, func() { rec(c, 1); tim(c) }); n != 0 {
		t.Errorf("%v allocations per record and timer", n)
	}
	if keys != 100+1 { // AllocsPerRun runs the function once more to warm up
		t.Errorf("the functions ran %d times, want 101", keys)
	}
	if seen.in() != c {
		t.Error("the functions did not get the engine's context")
	}
	if r, tm := processFuncs[int64, int64, int64, int64](nil, nil); r != nil || tm != nil {
		t.Error("nil functions are not nil")
	}
}
