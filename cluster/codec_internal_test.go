package cluster

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/wire"
)

type (
	order struct {
		ID    int
		Items []string
		Price float64
	}
	shipped struct{ ID int }
)

func testCodec(t testing.TB) *codec {
	t.Helper()
	r := NewRegistry()
	if err := errors.Join(Register[order](r, "shop.Order"), Register[*shipped](r, "shop.Shipped"),
		Register[*wrapperspb.StringValue](r, "shop.Note")); err != nil {
		t.Fatal(err)
	}
	c, err := newCodec(r, slog.New(slog.DiscardHandler), func(*actor.PID) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRegistryRefusesClashes(t *testing.T) {
	r := NewRegistry()
	if err := Register[order](r, "shop.Order"); err != nil {
		t.Fatal(err)
	}
	if err := Register[order](r, "shop.Order"); err != nil {
		t.Errorf("registering the same again: %v", err)
	}
	for name, err := range map[string]error{
		"another name for the type":  Register[order](r, "shop.Order2"),
		"another type for the name":  Register[shipped](r, "shop.Order"),
		"a reserved name":            Register[shipped](r, "sluice.x"),
		"an empty name":              Register[shipped](r, ""),
		"a name with a slash":        Register[shipped](r, "a/b"),
		"an interface":               Register[error](r, "err"),
		"a proto value, not pointer": Register[wrapperspb.StringValue](r, "note"),
	} {
		if err == nil {
			t.Errorf("%s: registered", name)
		}
	}
}

func TestPackUnpack(t *testing.T) {
	c := testCodec(t)
	for _, v := range []any{order{ID: 1, Items: []string{"a", "b"}, Price: 2.5}, &shipped{ID: 7}, wrapperspb.String("hi")} {
		a, err := c.pack(v)
		if err != nil {
			t.Fatalf("pack %T: %v", v, err)
		}
		got, err := c.unpack(a)
		if err != nil {
			t.Fatalf("unpack %T: %v", v, err)
		}
		switch want := v.(type) {
		case order:
			if g := got.(order); g.ID != want.ID || len(g.Items) != 2 || g.Price != want.Price {
				t.Errorf("round trip %+v -> %+v", want, g)
			}
		case *shipped:
			if got.(*shipped).ID != 7 {
				t.Errorf("round trip %+v -> %+v", want, got)
			}
		case *wrapperspb.StringValue:
			if got.(*wrapperspb.StringValue).GetValue() != "hi" {
				t.Errorf("round trip %v -> %v", want, got)
			}
		}
	}
	// A value of a registered pointer type sent as a value is another type.
	if _, err := c.pack(shipped{ID: 1}); !errors.Is(err, ErrUnregistered) {
		t.Errorf("pack of an unregistered value type: %v", err)
	}
	// protoactor's own messages pass as they are, other protos are refused.
	if m, err := c.outgoing(&actor.PoisonPill{}); err != nil || m.(*actor.PoisonPill) == nil {
		t.Errorf("PoisonPill: %v", err)
	}
	if _, err := c.outgoing(wrapperspb.Int64(1)); !errors.Is(err, ErrUnregistered) {
		t.Errorf("an unregistered proto: %v", err)
	}
	// A name registered for msgpack does not decode as protobuf, and the
	// other way round.
	a, _ := c.pack(order{ID: 1})
	a.TypeUrl = protoURL + "shop.Order"
	if _, err := c.unpack(a); !errors.Is(err, ErrUnregistered) {
		t.Errorf("msgpack type under the proto prefix: %v", err)
	}
	st := c.stats()
	if st.Packed != 4 || st.Unpacked != 3 || st.Unregistered != 2 || st.Unknown != 1 {
		t.Errorf("stats %+v", st)
	}
}

// Without the guard, protoactor's deserializer panics on a type name the
// binary does not know: the reason filterBatch exists.
func TestProtoactorPanicsOnUnknownType(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("protoactor decoded an unknown type without panicking: the guard may be obsolete")
		}
	}()
	_, _ = remote.Deserialize([]byte{1}, "evil.Unknown", 0)
}

func TestFilterBatch(t *testing.T) {
	c := testCodec(t)
	pid := actor.NewPID("127.0.0.1:1", "x")
	b := &remote.MessageBatch{
		TypeNames: []string{"google.protobuf.Any", "evil.Unknown", "actor.PoisonPill"},
		Targets:   []*actor.PID{pid},
		Senders:   []*actor.PID{pid},
		Envelopes: []*remote.MessageEnvelope{
			{TypeId: 0}, {TypeId: 1}, {TypeId: 2, Sender: 1}, {TypeId: 0, Sender: 2}, {TypeId: -1}, nil, {TypeId: 0, Target: 1},
		},
	}
	c.filterBatch(b)
	if len(b.Envelopes) != 2 || b.Envelopes[0].TypeId != 0 || b.Envelopes[1].TypeId != 2 {
		t.Errorf("kept %v, want the Any and the PoisonPill", b.Envelopes)
	}
	if c.stats().Foreign != 5 {
		t.Errorf("foreign %d, want 5", c.stats().Foreign)
	}
	b = &remote.MessageBatch{TypeNames: []string{"google.protobuf.Any"}, Targets: []*actor.PID{nil}, Envelopes: []*remote.MessageEnvelope{{}}}
	c.filterBatch(b)
	if len(b.Envelopes) != 0 {
		t.Error("a batch with a nil target kept its envelopes")
	}
}

// FuzzUnpack: whatever arrives, unpack returns a value or an error and
// never panics.
func FuzzUnpack(f *testing.F) {
	c := testCodec(f)
	for _, v := range []any{order{ID: 1, Items: []string{"x"}}, &shipped{ID: 2}, wrapperspb.String("s")} {
		a, _ := c.pack(v)
		f.Add(a.TypeUrl, a.Value)
	}
	f.Add(msgpackURL+"shop.Order", []byte{0xdd, 0x7f, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, url string, data []byte) {
		_, _ = c.unpack(&anypb.Any{TypeUrl: url, Value: data})
	})
}

// BenchmarkPackUnpack is the codec's cost per message between nodes: a
// small registered record packed into anypb.Any and unpacked again.
func BenchmarkPackUnpack(b *testing.B) {
	c := testCodec(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		a, err := c.pack(order{ID: i, Items: []string{"key"}, Price: 1})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.unpack(a); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzUnpackStats: an instance's report from another node, with its latency
// histograms, decodes through the safe path to a value or an error, never a
// panic; the engine checks the histograms it gets (latencyFromWire).
func FuzzUnpackStats(f *testing.F) {
	r := NewRegistry()
	if err := registerJobMessages(r); err != nil {
		f.Fatal(err)
	}
	c, err := newCodec(r, slog.New(slog.DiscardHandler), func(*actor.PID) bool { return false })
	if err != nil {
		f.Fatal(err)
	}
	lat := &wire.Latency{Queue: wire.Hist{Index: []int32{3, 40}, Count: []int64{100, 2}, N: 102, Max: 41_000_000},
		EndToEnd: wire.Hist{Index: []int32{90}, Count: []int64{7}, N: 7, Max: 200_000_000}, Busy: 50_000_000, Handled: 102, Shed: []int64{7, 0}}
	for _, v := range []any{
		&wire.Stats{Gen: 1, Address: "127.0.0.1:2", Instances: []wire.InstanceStats{{Task: 1, Ops: []wire.OpStats{{In: 102, Out: 102}}, Latency: lat}}},
		&wire.Finished{Task: 1, Gen: 1, Stats: &wire.InstanceStats{Task: 1, Final: true, Latency: lat}},
	} {
		a, err := c.pack(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(a.TypeUrl, a.Value)
	}
	f.Fuzz(func(t *testing.T, url string, data []byte) {
		_, _ = c.unpack(&anypb.Any{TypeUrl: url, Value: data})
	})
}
