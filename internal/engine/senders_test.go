package engine

import (
	"slices"
	"sync"
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/dist"
	"github.com/sluicehq/sluice/internal/stage"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/mailbox"
)

// forgeryDist is fakeDist counting what the runtime refuses as forged.
type forgeryDist struct {
	fakeDist
	mu     sync.Mutex
	forged []string
}

func (f *forgeryDist) Forged(what, from, claim string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forged = append(f.forged, what+" from "+from+" for "+claim)
}

func (f *forgeryDist) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.forged)
}

// fromNet is msg as the cluster's guard posts it: packed, from the peer
// at addr.
func fromNet(addr string, msg any) *actor.MessageEnvelope {
	env := &actor.MessageEnvelope{Message: packed{msg}}
	env.SetHeader(dist.FromHeader, addr)
	return env
}

// TestMessagesCheckedAgainstTheirProcess: a message from another process
// that speaks for an instance (statistics, acknowledgements, finished
// notices) or a channel (records) is taken only from the process the
// placement puts it in; from any other it is dropped and counted, and
// changes nothing.
func TestMessagesCheckedAgainstTheirProcess(t *testing.T) {
	coord := wireJob(t, "here:1", "there:2", 0)
	fd := &forgeryDist{fakeDist: fakeDist{addr: "here:1"}}
	coord.dist = fd
	coord.placement = []string{"here:1", "there:2", "here:1"} // numbers, double, out
	coord.notePlacement()

	host := wireJob(t, "there:2", "there:2", 0)
	host.counters[host.plan.Chains[1][0]][0].In.Store(40)
	report := overWire(t, host.hostStats(false))

	coord.onStats("evil:9", report) // another member, naming there:2
	if n := opStats(t, coord, "double").In; n != 0 || fd.count() != 1 {
		t.Fatalf("statistics from evil:9 for there:2: double In %d, %d refused; want 0 and 1", n, fd.count())
	}
	lying := overWire(t, host.hostStats(false))
	lying.Instances[0].Task = 0 // there:2 speaking for the source, which runs here
	lying.Instances[0].Ops = make([]wire.OpStats, len(coord.plan.Chains[0]))
	lying.Instances[0].Ops[0].Out = 1 << 40
	coord.onStats("there:2", lying)
	if n := opStats(t, coord, "numbers").Out; n != 0 || fd.count() != 2 {
		t.Fatalf("statistics from there:2 for the source here: numbers Out %d, %d refused; want 0 and 2", n, fd.count())
	}
	coord.onStats("there:2", report)
	if n := opStats(t, coord, "double").In; n != 40 || fd.count() != 2 {
		t.Fatalf("statistics from there:2 for itself: double In %d, %d refused; want 40 and 2", n, fd.count())
	}

	for _, c := range []struct {
		from     string
		gen, num int
		want     bool
	}{
		{"", 0, 0, true},          // this process
		{"there:2", 0, 1, true},   // double, placed there
		{"there:2", 0, 0, false},  // the source, placed here
		{"there:2", 0, 2, false},  // the sink
		{"evil:9", 0, 1, false},   // not the placement's
		{"there:2", 0, 99, false}, // no such instance
		{"there:2", 1, 1, false},  // a generation not started
	} {
		if got := coord.fromInstance(c.from, c.gen, c.num); got != c.want {
			t.Errorf("fromInstance(%q, gen %d, instance %d) = %v, want %v", c.from, c.gen, c.num, got, c.want)
		}
	}
	// Generation 1 places double at there:3: its messages come from there
	// now, generation 0's still from there:2.
	coord.gen, coord.placement = 1, []string{"here:1", "there:3", "here:1"}
	coord.notePlacement()
	if !coord.fromInstance("there:3", 1, 1) || coord.fromInstance("there:2", 1, 1) || !coord.fromInstance("there:2", 0, 1) || coord.fromInstance("there:3", 0, 1) {
		t.Error("after a restart, each generation's messages are checked against its own placement")
	}
	if n := coord.instanceNum(1, 0); n != 1 {
		t.Errorf("instanceNum(1, 0) = %d, want 1", n)
	}
	if n := coord.instanceNum(1, 1); n != -1 {
		t.Errorf("instanceNum(1, 1) = %d, want -1 (double has one instance)", n)
	}

	// Records: instance double's one channel comes from numbers at there:2
	// in remoteReceiver's plan; records from another process are dropped
	// without failing the instance, and leave the sequence as it was.
	in := remoteReceiver(t)
	rd := &forgeryDist{fakeDist: fakeDist{addr: "here:1"}}
	in.exec.dist = rd
	mb, err := mailbox.New(mailbox.Block(1000))
	if err != nil {
		t.Fatal(err)
	}
	inbox := newRemoteInbox(mb, in)
	inbox.PostUserMessage(fromNet("there:2", records(t, in, 1, 1, 2)))
	inbox.PostUserMessage(fromNet("evil:9", records(t, in, 2, 66)))
	inbox.PostUserMessage(fromNet("evil:9", nil)) // undecodable, from a process that sends on no channel
	inbox.PostUserMessage(fromNet("there:2", records(t, in, 2, 3)))
	r := &recorder{}
	inbox.RegisterHandlers(r, inline{})
	inbox.Start()
	var got []int64
	for _, m := range r.got {
		env, ok := m.(*actors.Envelope)
		if !ok {
			t.Fatalf("delivered %v: want only records", m)
		}
		got = append(got, env.Payload.(*stage.Batch[int64]).Vs...)
	}
	if !slices.Equal(got, []int64{1, 2, 3}) || rd.count() != 1 {
		t.Fatalf("delivered %v with %d refused (%v); want [1 2 3] and 1 (the undecodable one is dropped by Unpack)", got, rd.count(), rd.forged)
	}
}
