package stage

import (
	"testing"
	"time"
)

// FuzzTableStageRestore feeds hostile bytes to the restore of the stages
// whose state is a bundle of their own part and a state table (joins,
// Process, on the memory backend): an error, never a panic.
func FuzzTableStageRestore(f *testing.F) {
	proc := func() *ProcessStage[string, string, event, int] {
		return NewProcess(func(v string) string { return v }, func(c *ProcessContext[string, event, int], v string) {
			c.State().ID = int64(len(v))
			c.Timer(time.UnixMilli(5))
		}, nil, &sinkPusher[int]{}, testCtx(0, 1)).(*ProcessStage[string, string, event, int])
	}
	ij := func() *IntervalStage[string, event, event, int] {
		return NewIntervalJoin(func(e Either[event, event]) string { return "k" }, func(event, event) int { return 1 }, -5, 5,
			&sinkPusher[int]{}, testCtx(0, 1)).(*IntervalStage[string, event, event, int])
	}
	p := proc()
	p.Push(&Batch[string]{Vs: []string{"a", "bb"}, Ts: []int64{1, 2}})
	b, err := p.SnapshotState(1)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	j := ij()
	j.Push(&Batch[Either[event, event]]{Vs: []Either[event, event]{{L: sampleEvents()[0]}}, Ts: []int64{3}})
	if b, err = j.SnapshotState(1); err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = proc().RestoreState(data)
		_ = ij().RestoreState(data)
		_ = ij().RestoreKeyGroups([][]byte{data, data}, 0, 64)
	})
}
