package stage

import (
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// A checkpoint written before the joins and Process kept their state in a
// table (the whole map in msgpack) restores into the table.
func TestRestoreStateOfBeforeTables(t *testing.T) {
	old, err := msgpack.Marshal(&keyedBufs[string, JoinBuf[string, int]]{Keys: []string{"a", "b"},
		Bufs: []JoinBuf[string, int]{{Ls: []string{"x"}}, {Rs: []int{7}}}})
	if err != nil {
		t.Fatal(err)
	}
	j := NewJoin(func(e Either[string, int]) string { return "a" }, func(l string, r int) string { return l }, 0, &sinkPusher[string]{}, testCtx(0, 1)).(*JoinStage[string, string, int, string])
	if err := j.RestoreState(old); err != nil {
		t.Fatal(err)
	}
	if b, ok := j.t.tab.Get("b"); !ok || len(b.Rs) != 1 || b.Rs[0] != 7 {
		t.Fatalf("b: %v %v", b, ok)
	}
	out := &sinkPusher[string]{}
	j.next, j.out = out, NewOutBuf[string](out, j.sc)
	j.Push(&Batch[Either[string, int]]{Vs: []Either[string, int]{{R: 1, Right: true}}})
	if len(out.got) != 1 || out.got[0] != "x" {
		t.Fatalf("joined %v with the restored buffer of a, want [x]", out.got)
	}
	oldP, err := msgpack.Marshal(&processState[string, int]{Wm: 5, Keys: []string{"k"}, States: []int{3}, TKeys: []string{"k"}, TAt: []int64{9}})
	if err != nil {
		t.Fatal(err)
	}
	p := NewProcess(func(v string) string { return v }, func(c *ProcessContext[string, int, int], v string) { *c.State()++ }, nil,
		&sinkPusher[int]{}, testCtx(0, 1)).(*ProcessStage[string, string, int, int])
	if err := p.RestoreState(oldP); err != nil {
		t.Fatal(err)
	}
	if v, ok := p.t.tab.Get("k"); !ok || *v != 3 || p.wm != 5 || len(p.timers) != 1 {
		t.Fatalf("restored %v %v, event time %d, %d timers", v, ok, p.wm, len(p.timers))
	}
}
