package cluster

import (
	"strings"
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/internal/wire"
)

// TestChangeFenced: a node carries out a live change only for a
// generation it hosts now, from that generation's coordinator; a change
// from another node, of an older generation, of another job or never
// prepared is refused with the reason.
func TestChangeFenced(t *testing.T) {
	a := &jobsActor{n: &Node{cfg: Config{Name: "c", RequestTimeout: DefaultRequestTimeout}},
		gens: map[genKey]hosted{{"127.0.0.1:1", "job-j", 2}: {info: HostedGeneration{Job: "j", Gen: 2}, changes: map[uint64]*hostedChange{}}}}
	coord := actor.NewPID("127.0.0.1:1", "future$1")
	change := func(mod func(*wire.Change)) *wire.Change {
		m := &wire.Change{Job: "j", JobAddress: "127.0.0.1:1", JobID: "job-j", Gen: 2, ID: 5, Phase: phaseCommit, Task: 1, Op: "count",
			Input: &wire.Input{Policy: "block", Capacity: 64}}
		if mod != nil {
			mod(m)
		}
		return m
	}
	for _, tc := range []struct {
		name   string
		sender *actor.PID
		m      *wire.Change
		want   string // in the refusal; "" accepted
	}{
		{"asked by another node", actor.NewPID("127.0.0.1:9", "f"), change(nil), "asked by 127.0.0.1:9"},
		{"an older generation", coord, change(func(m *wire.Change) { m.Gen = 1 }), "hosts no generation 1"},
		{"another coordinator (the job taken over)", actor.NewPID("127.0.0.1:3", "f"), change(func(m *wire.Change) { m.JobAddress = "127.0.0.1:3" }), "hosts no generation 2 of the job coordinated by 127.0.0.1:3"},
		{"another job", coord, change(func(m *wire.Change) { m.Job = "k" }), "hosts no generation"},
		{"a commit never prepared", coord, change(nil), "change 5 was not prepared here"},
		{"an unknown phase", coord, change(func(m *wire.Change) { m.Phase = "apply-now" }), "unknown phase"},
		{"an abort of what it does not keep", coord, change(func(m *wire.Change) { m.Phase = phaseAbort }), ""},
	} {
		got := a.change(tc.sender, tc.m)
		switch {
		case tc.want == "" && got != "":
			t.Errorf("%s: refused: %s", tc.name, got)
		case tc.want != "" && !strings.Contains(got, tc.want):
			t.Errorf("%s: %q, want a refusal with %q", tc.name, got, tc.want)
		}
	}
}
