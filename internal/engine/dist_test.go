package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/internal/graph"

	"github.com/sluicehq/sluice/internal/stage"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/wire"
)

// fakeDist is a graph.Distributor for the wire checks: nothing is deployed.
type fakeDist struct{ addr string }

func (f fakeDist) Address() string                                  { return f.addr }
func (fakeDist) Root() *actor.RootContext                           { return nil }
func (fakeDist) Props(p *actor.Props) *actor.Props                  { return p }
func (fakeDist) Place(string, int, graph.Task, int) string          { return "" }
func (fakeDist) Deploy(context.Context, string, *wire.Deploy) error { return nil }
func (fakeDist) StopOn(string, *wire.StopGen)                       {}
func (fakeDist) Watch(func(string)) func()                          { return func() {} }

// Unpack stands for the cluster codec: a packed message is unwrapped, one
// whose value is nil does not decode.
func (fakeDist) Unpack(msg any) (any, error) {
	if p, ok := msg.(packed); ok {
		if p.v == nil {
			return nil, errors.New("undecodable")
		}
		return p.v, nil
	}
	return msg, nil
}

// packed is a message as another process's connection posts it.
type packed struct{ v any }

// remoteReceiver is an instance of the map task of a small topology whose
// one input channel comes from another process.
func remoteReceiver(t *testing.T) *instance {
	t.Helper()
	top := graph.NewTopology("wire")
	src := graph.Source[int64](top, "numbers", numbers(10))
	m := graph.Map(src, "double", func(v int64) int64 { return 2 * v }, graph.NoFusion())
	graph.Sink[int64](m, "out", discard{})
	p, err := top.Plan()
	if err != nil {
		t.Fatal(err)
	}
	x := &execution{topo: top, plan: p, dist: fakeDist{addr: "here:1"}}
	return &instance{exec: x, task: 1, self: actor.NewPID("here:1", "t1.0"),
		ins: []inChan{{sender: actor.NewPID("there:2", "t0.0")}}, outs: []*outChan{{}}}
}

func records(t *testing.T, in *instance, seq uint64, vs ...int64) *wire.Records {
	t.Helper()
	data, err := in.exec.plan.Chains[1][0].NewCodec().Encode(&actors.Envelope{Kind: actors.Data, Count: len(vs), Payload: &stage.Batch[int64]{Vs: vs}})
	if err != nil {
		t.Fatal(err)
	}
	return &wire.Records{Seq: seq, Data: data}
}

// TestCreditTotals: credits are totals, so a lost credit message is made
// good by the next and a late one adds none.
func TestCreditTotals(t *testing.T) {
	in := remoteReceiver(t)
	oc := in.outs[0]
	for _, c := range []struct {
		total int64
		want  int // credit added
	}{{10, 10}, {30, 20}, {25, 0}, {30, 0}, {31, 1}} {
		before := oc.credits
		in.onCredit(&wire.Credit{Out: 0, Total: c.total})
		if n := oc.credits - before; n != c.want {
			t.Fatalf("total %d: credit %d, want %d", c.total, n, c.want)
		}
	}
	before := oc.credits
	in.onCredit(&wire.Credit{Out: 7, Total: 100})
	if oc.credits != before {
		t.Fatal("a credit for an output that does not exist was taken")
	}
}
