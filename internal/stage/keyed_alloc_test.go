package stage

import (
	"testing"

	"github.com/sluicehq/sluice/internal/state"
)

// TestKeyedMemoryNoAllocs: with the memory backend, folding a batch of
// records of keys already seen allocates nothing (the record loop uses the
// map directly); with the disk backend, cache hits allocate nothing either.
func TestKeyedMemoryNoAllocs(t *testing.T) {
	for _, disk := range []bool{false, true} {
		sc := testCtx(0, 1)
		if disk {
			sc.State = state.Spec{Dir: t.TempDir(), Budget: 1 << 20}
		}
		s := NewKeyed(func(v int64) int64 { return v % 100 }, func(a int64, _ bool, _ int64) int64 { return a + 1 },
			func(k, a int64) int64 { return a }, EmitAtEnd, &sinkPusher[int64]{}, sc).(*KeyedStage[int64, int64, int64, int64])
		b := &Batch[int64]{Vs: make([]int64, 256)}
		for i := range b.Vs {
			b.Vs[i] = int64(i)
		}
		s.Push(b) // every key seen once
		if n := testing.AllocsPerRun(100, func() { s.Push(b) }); n != 0 {
			t.Errorf("disk %v: %v allocations per batch", disk, n)
		}
		if err := s.CloseState(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestProcessMemoryNoAllocs: with the memory backend, a Process whose
// function reads and changes the state of keys already seen allocates
// nothing per batch (the table's map is used directly).
func TestProcessMemoryNoAllocs(t *testing.T) {
	s := NewProcess(func(v int64) int64 { return v % 100 }, func(c *ProcessContext[int64, int64, int64], v int64) {
		*c.State() += v
	}, nil, &sinkPusher[int64]{}, testCtx(0, 1)).(*ProcessStage[int64, int64, int64, int64])
	b := &Batch[int64]{Vs: make([]int64, 256)}
	for i := range b.Vs {
		b.Vs[i] = int64(i)
	}
	s.Push(b) // every key seen once
	if n := testing.AllocsPerRun(100, func() { s.Push(b) }); n != 0 {
		t.Errorf("%v allocations per batch", n)
	}
}

// TestProcessClearReusesStates: with the memory backend, a Process whose
// keys come and go (each batch gives every key a state and clears it)
// allocates nothing per batch once warm: a key gets a state Clear forgot,
// zeroed, and the compaction of the cleared keys reuses its set.
func TestProcessClearReusesStates(t *testing.T) {
	type st struct {
		N int64
		P *int64
	}
	var one int64
	var dirty int // a state State returned that was not zero
	s := NewProcess(func(v int64) int64 { return v % 128 }, func(c *ProcessContext[int64, st, int64], v int64) {
		p := c.State()
		if v < 128 { // the key's first record of the batch: a cleared key
			if p.N != 0 || p.P != nil {
				dirty++
			}
			p.N, p.P = v+1, &one
			return
		}
		c.Clear() // the second
	}, nil, &sinkPusher[int64]{}, testCtx(0, 1)).(*ProcessStage[int64, int64, st, int64])
	b := &Batch[int64]{Vs: make([]int64, 256)}
	for i := range b.Vs {
		b.Vs[i] = int64(i)
	}
	for range 3 {
		s.Push(b)
	}
	if n := testing.AllocsPerRun(100, func() { s.Push(b) }); n != 0 {
		t.Errorf("%v allocations per batch", n)
	}
	if dirty != 0 {
		t.Errorf("%d states not zero when their key came again", dirty)
	}
	if len(s.spare) == 0 {
		t.Error("no cleared state kept for reuse")
	}
}
