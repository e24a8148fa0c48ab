package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicehq/sluice/cluster/replication"
	"github.com/sluicehq/sluice/internal/wire"
)

// TestGuardRules: what the guard lets a connection's peer send. The peer
// is b (member id b.1 at 127.0.0.1:2), a member unless said otherwise;
// every message that names its sender must name b, whatever b's standing.
func TestGuardRules(t *testing.T) {
	c, err := newCodec(nil, slog.New(slog.DiscardHandler), func(*actor.PID) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	if err := Register[Greet](c.user, "test.Greet"); err != nil {
		t.Fatal(err)
	}
	members := true
	gd := &guard{c: c, ref: &refusals{},
		member: func(name, id, addr string) bool {
			return members && name == "b" && id == "b.1" && addr == "127.0.0.1:2"
		},
		status: func(p *streamPeer) bool { return p.secure && p.name == "monitor" }}
	b := &streamPeer{secure: true, names: []string{"b"}, connected: true, id: "b.1", name: "b", addr: "127.0.0.1:2"}
	packed := func(v any) []byte {
		a, err := c.pack(v)
		if err != nil {
			t.Fatal(err)
		}
		data, err := proto.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	raw := func(m proto.Message) []byte {
		data, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	const anyType = "google.protobuf.Any"
	here, there := actor.NewPID("127.0.0.1:2", "x"), actor.NewPID("127.0.0.1:3", "x")
	cases := []struct {
		name     string
		peer     *streamPeer
		nonMem   bool // b is not a member
		typeName string
		data     []byte
		sender   *actor.PID
		want     refusal // refusalCount: accepted
	}{
		{"before the connect request", &streamPeer{}, false, anyType, packed(&statusRequest{}), nil, refusedConnection},
		{"a sender at another address", b, false, anyType, packed(Greet{}), there, refusedSender},
		{"an application's message from its sender", b, false, anyType, packed(Greet{}), here, refusalCount},
		{"actor.Stop", b, false, "actor.Stop", raw(&actor.Stop{}), nil, refusedSystem},
		{"actor.PoisonPill", b, false, "actor.PoisonPill", raw(&actor.PoisonPill{}), nil, refusedSystem},
		{"actor.Touch", b, false, "actor.Touch", raw(&actor.Touch{}), nil, refusedSystem},
		{"a watch for b's actor", b, false, "actor.Watch", raw(&actor.Watch{Watcher: here}), nil, refusalCount},
		{"a watch for another's actor", b, false, "actor.Watch", raw(&actor.Watch{Watcher: there}), nil, refusedNamed},
		{"a termination of another's actor", b, false, "actor.Terminated", raw(&actor.Terminated{Who: there}), nil, refusedNamed},
		{"a dead letter answer", b, false, "actor.DeadLetterResponse", raw(&actor.DeadLetterResponse{Target: there}), nil, refusalCount},
		{"a ping from b", b, true, anyType, packed(&ping{From: "127.0.0.1:2", ID: "b.1"}), nil, refusalCount},
		{"a ping naming another address", b, true, anyType, packed(&ping{From: "10.0.0.1:1", ID: "b.1"}), nil, refusedNamed},
		{"a pong from b", b, true, anyType, packed(&pong{Name: "b", ID: "b.1", Addr: "127.0.0.1:2"}), nil, refusalCount},
		{"a pong in c's name", b, false, anyType, packed(&pong{Name: "c", ID: "c.1", Addr: "127.0.0.1:3", Excluded: true}), nil, refusedNamed},
		{"a status request from a member", b, false, anyType, packed(&statusRequest{}), nil, refusalCount},
		{"a status request from a non-member", b, true, anyType, packed(&statusRequest{}), nil, refusedStatus},
		{"a status request from an allowed client", &streamPeer{secure: true, connected: true, id: "monitor.1", name: "monitor", addr: "127.0.0.1:9"},
			false, anyType, packed(&statusRequest{}), nil, refusalCount},
		{"a spawn request from a non-member", b, true, anyType, packed(&spawnRequest{Kind: "k"}), nil, refusedNotMember},
		{"an append from its leader", b, false, anyType, packed(&appendRequest{Log: "l", Leader: "b"}), nil, refusalCount},
		{"an append in c's name", b, false, anyType, packed(&appendRequest{Log: "l", Leader: "c"}), nil, refusedNamed},
		{"an append from a non-member", b, true, anyType, packed(&appendRequest{Log: "l", Leader: "b"}), nil, refusedNotMember},
		{"an ack in c's name", b, false, anyType, packed(&appendResponse{Log: "l", Replica: "c"}), nil, refusedNamed},
		{"a claim in c's name", b, false, anyType, packed(&claimRequest{Log: "l", Candidate: "c"}), nil, refusedNamed},
		{"a vote in c's name", b, false, anyType, packed(&claimResponse{Log: "l", Voter: "c"}), nil, refusedNamed},
		{"a deployment for a job elsewhere", b, false, anyType, packed(&wire.Deploy{Job: "j", JobAddress: "127.0.0.1:3"}), nil, refusedNamed},
		{"a deployment from its coordinator", b, false, anyType, packed(&wire.Deploy{Job: "j", JobAddress: "127.0.0.1:2"}), nil, refusalCount},
		{"a deployment from a non-member", b, true, anyType, packed(&wire.Deploy{Job: "j", JobAddress: "127.0.0.1:2"}), nil, refusedNotMember},
		{"a failure of an instance elsewhere", b, false, anyType, packed(&wire.Failed{Address: "127.0.0.1:3"}), nil, refusedNamed},
		{"a failure of b's instance", b, false, anyType, packed(&wire.Failed{Address: "127.0.0.1:2"}), nil, refusalCount},
		{"stats of another node", b, false, anyType, packed(&wire.Stats{Address: "127.0.0.1:3"}), nil, refusedNamed},
		{"a live change of a job coordinated elsewhere", b, false, anyType, packed(&wire.Change{Job: "j", JobAddress: "127.0.0.1:3", Phase: "commit"}), nil, refusedNamed},
		{"a live change from its coordinator", b, false, anyType, packed(&wire.Change{Job: "j", JobAddress: "127.0.0.1:2", Phase: "commit"}), nil, refusalCount},
		{"a live change from a non-member", b, true, anyType, packed(&wire.Change{Job: "j", JobAddress: "127.0.0.1:2"}), nil, refusedNotMember},
		{"a gate from a non-member", b, true, anyType, packed(&wire.Gate{Out: 1}), nil, refusedNotMember},
		{"a change's answer (Request checks it)", b, true, anyType, packed(&wire.Changed{Address: "127.0.0.1:3"}), nil, refusalCount},
		{"records from a non-member", b, true, anyType, packed(&wire.Records{Seq: 1}), nil, refusedNotMember},
		{"a cluster message that does not decode", b, false, anyType,
			raw(&anypb.Any{TypeUrl: clusterURL + "appendRequest", Value: []byte{0xdf, 0xff, 0xff, 0xff, 0xff}}), nil, refusedMalformed},
	}
	for _, tc := range cases {
		members = !tc.nonMem
		why, detail, ok := gd.check(tc.peer, tc.typeName, tc.data, tc.sender)
		switch {
		case tc.want == refusalCount && !ok:
			t.Errorf("%s: refused (%v: %s), want accepted", tc.name, why, detail)
		case tc.want != refusalCount && ok:
			t.Errorf("%s: accepted, want refused for %v", tc.name, tc.want)
		case tc.want != refusalCount && why != tc.want:
			t.Errorf("%s: refused for %v (%s), want %v", tc.name, why, detail, tc.want)
		}
	}
}

// Greet stands for an application's message.
type Greet struct{ Name string }

// TestLeaderAnswers: an append's answer counts only from a replica of the
// log, for an append it was sent (its sequence number), of the leader's
// epoch, or Stale with a newer one; with values below replication.Limit.
func TestLeaderAnswers(t *testing.T) {
	l := &leader{state: replication.New(replication.Config{Replicas: []string{"b", "c"}}, 3, replication.LogInfo{First: 1})}
	l.state, _ = replication.Step(l.state, replication.Start{}) // sends seq 1 to each
	ok := func(m appendResponse) string { m.Log = "l"; return l.answers(&m) }
	for _, tc := range []struct {
		name   string
		m      appendResponse
		accept bool
	}{
		{"an ack of b's", appendResponse{Replica: "b", Epoch: 3, Seq: 1}, true},
		{"an ack of a node that is no replica", appendResponse{Replica: "x", Epoch: 3, Seq: 1}, false},
		{"an ack of an append never sent", appendResponse{Replica: "b", Epoch: 3, Seq: 2}, false},
		{"an ack of sequence 0", appendResponse{Replica: "b", Epoch: 3, Seq: 0}, false},
		{"an ack of another epoch", appendResponse{Replica: "b", Epoch: 2, Seq: 1}, false},
		{"an ack beyond the limit", appendResponse{Replica: "b", Epoch: 3, Seq: 1, Match: math.MaxUint64}, false},
		{"a stale answer of the same epoch", appendResponse{Replica: "c", Result: uint8(replication.Stale), Epoch: 3, Seq: 1}, false},
		{"a stale answer of a newer epoch", appendResponse{Replica: "c", Result: uint8(replication.Stale), Epoch: 4, Seq: 1}, true},
		{"a stale answer of an epoch near 2^64", appendResponse{Replica: "c", Result: uint8(replication.Stale), Epoch: math.MaxUint64 - 1, Seq: 1}, false},
		{"an unknown result", appendResponse{Replica: "c", Result: 9, Epoch: 3, Seq: 1}, false},
	} {
		if why := ok(tc.m); (why == "") != tc.accept {
			t.Errorf("%s: refusal %q, want accepted %v", tc.name, why, tc.accept)
		}
	}
}

// TestOfficeNearTheLimit: a log whose promised epoch reached
// replication.Limit-1 can neither take office nor stand (the next epoch
// would reach the limit); appends near 2^64 are refused and change
// nothing; a claim near 2^64 is not granted.
func TestOfficeNearTheLimit(t *testing.T) {
	const log = "checkpoints/job"
	s := copyOf(t, "b")
	replicate(t, s, log, 1, 2)
	for _, a := range []replication.Append{
		{Epoch: math.MaxUint64, Seq: 1},
		{Epoch: 2, Seq: 1, Prev: math.MaxUint64 - 1, Entries: []replication.Entry{{Index: math.MaxUint64, Epoch: 2}}},
		{Epoch: 2, Seq: 1, Prev: 2, PrevEpoch: 1, Commit: math.MaxUint64},
		{Epoch: replication.Limit, Seq: 1, Prev: 2, PrevEpoch: 1},
	} {
		if _, err := s.receive(log, a); !errors.Is(err, replication.ErrOutOfRange) {
			t.Errorf("append %+v: %v, want ErrOutOfRange", a, err)
		}
	}
	if info := s.info(log); info.Last != 2 {
		t.Fatalf("the refused appends changed the log: %+v", info)
	}
	if g, err := s.grant(&claimRequest{Log: log, Epoch: math.MaxUint64, Candidate: "c", LastIndex: 2, LastEpoch: 1}); err != nil || g.Granted {
		t.Errorf("a claim of epoch 2^64-1: %+v %v, want refused", g, err)
	}
	// Promise Limit-1, as a leader of that epoch would make it do.
	if _, err := s.receive(log, replication.Append{Epoch: replication.Limit - 1, Seq: 1, Prev: 2, PrevEpoch: 1}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.takeOffice(log); !errors.Is(err, replication.ErrOutOfRange) {
		t.Errorf("take office after epoch 2^63-1: %v, want ErrOutOfRange", err)
	}
	if _, err := s.stand(log, "b"); !errors.Is(err, replication.ErrOutOfRange) {
		t.Errorf("stand after epoch 2^63-1: %v, want ErrOutOfRange", err)
	}
}

// FuzzGuardCheck: the guard decodes the head of every cluster message from
// the network (the protobuf Any around it, the msgpack inside) before
// anything else does. Whatever the bytes, it decides without panicking.
func FuzzGuardCheck(f *testing.F) {
	c, err := newCodec(nil, slog.New(slog.DiscardHandler), func(*actor.PID) bool { return false })
	if err != nil {
		f.Fatal(err)
	}
	gd := &guard{c: c, ref: &refusals{}, member: func(string, string, string) bool { return true }}
	for _, v := range []any{
		&ping{From: "127.0.0.1:2", ID: "b.1", Nonce: 7},
		&pong{Name: "b", ID: "b.1", Addr: "127.0.0.1:2", Peers: []string{"127.0.0.1:3"}, Excluded: true},
		&appendRequest{Log: "l", Leader: "b", Entries: []wireEntry{{Index: 1, Epoch: 1, Data: []byte("x")}}},
		&appendResponse{Log: "l", Replica: "b"},
		&claimRequest{Log: "l", Candidate: "b"},
		&wire.Deploy{Job: "j", JobAddress: "127.0.0.1:2", Checkpoint: &wire.Checkpoint{ID: 1, States: map[string][]byte{"s": {1}}}},
		&wire.Failed{Address: "127.0.0.1:2"},
		&wire.Stats{Address: "127.0.0.1:2", Instances: []wire.InstanceStats{{Ops: []wire.OpStats{{In: 1}}}}},
	} {
		a, err := c.pack(v)
		if err != nil {
			f.Fatal(err)
		}
		data, _ := proto.Marshal(a)
		f.Add("google.protobuf.Any", data)
	}
	w, _ := proto.Marshal(&actor.Watch{Watcher: actor.NewPID("127.0.0.1:2", "x")})
	f.Add("actor.Watch", w)
	f.Add("actor.Terminated", []byte{0x0a, 0xff})
	b := &streamPeer{connected: true, id: "b.1", name: "b", addr: "127.0.0.1:2"}
	f.Fuzz(func(t *testing.T, typeName string, data []byte) {
		_, _, _ = gd.check(b, typeName, data, nil)
	})
}

// TestMembershipCaps: answers cannot make a membership track more than
// maxPeers peers, nor more than maxPeers excluders; each refusal beyond
// the cap is counted.
func TestMembershipCaps(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	as := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	defer as.Shutdown()
	n := &Node{as: as, cfg: Config{Name: "a"}, lost: map[string]bool{}}
	var err error
	if n.codec, err = newCodec(nil, quiet, n.isLocal); err != nil {
		t.Fatal(err)
	}
	m := &membership{n: n, peers: map[string]*peer{}}
	for i := range maxPeers + 100 {
		m.add(fmt.Sprintf("10.0.%d.%d:7000", i/250, i%250), false, time.Now())
	}
	if len(m.peers) != maxPeers {
		t.Errorf("%d peers, want the cap %d", len(m.peers), maxPeers)
	}
	for i := range maxPeers + 10 {
		m.excludedBy(&pong{ID: fmt.Sprintf("p.%d", i), Name: "p", Members: 0})
	}
	if len(m.excluders) != maxPeers {
		t.Errorf("%d excluders, want the cap %d", len(m.excluders), maxPeers)
	}
	if got := n.refusals.stats().ByReason["peer-cap"]; got != 110 {
		t.Errorf("%d refusals for the cap, want 110", got)
	}
}
