package stage

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestTimeHeapOrder checks the typed heap against a sorted model: random
// adds and pops at random times give every entry due at or before the time,
// earliest first, and none later.
func TestTimeHeapOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h timeHeap[int]
	var model []int64
	for step := range 20_000 {
		if r.IntN(3) > 0 {
			at := r.Int64N(1000)
			h.add(at, step)
			model = append(model, at)
			continue
		}
		slices.Sort(model)
		now := r.Int64N(1000)
		for len(model) > 0 && model[0] <= now {
			e, ok := h.due(now)
			if !ok || e.at != model[0] {
				t.Fatalf("step %d: due(%d) = %v %v, want %d", step, now, e, ok, model[0])
			}
			model = model[1:]
		}
		if e, ok := h.due(now); ok {
			t.Fatalf("step %d: due(%d) gave %v, the model has nothing due", step, now, e)
		}
		if h.Len() != len(model) {
			t.Fatalf("step %d: %d entries, the model %d", step, h.Len(), len(model))
		}
	}
}

func TestTimeHeapAddAllocates(t *testing.T) {
	h := make(timeHeap[int64], 0, 1024)
	allocs := testing.AllocsPerRun(100, func() {
		h = h[:0]
		for i := range 512 {
			h.add(int64(511-i), int64(i))
		}
		for _, ok := h.due(1 << 40); ok; _, ok = h.due(1 << 40) {
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per 512 adds and pops into a heap with room, want 0", allocs)
	}
}
