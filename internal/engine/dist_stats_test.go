package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/graph"

	"github.com/sluicehq/sluice/internal/stage"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/mailbox"
)

// wireJob is the execution of the "wire" topology (numbers -> double ->
// out, one instance each) in the process at self, in generation gen, with
// the double instance at doubleAt and the others at "here:1": the
// coordinator's side when self is "here:1", a host's otherwise.
func wireJob(t *testing.T, self, doubleAt string, gen int) *execution {
	t.Helper()
	in := remoteReceiver(t)
	x := in.exec
	x.dist, x.gen = fakeDist{addr: self}, gen
	x.counters = map[*graph.Node][]*stage.Counters{}
	for id, chain := range x.plan.Chains {
		addr := "here:1"
		if id == 1 {
			addr = doubleAt
		}
		x.instances = append(x.instances, []*instance{{exec: x, task: id, gen: gen, self: actor.NewPID(addr, "t")}})
		for _, n := range chain {
			x.counters[n] = []*stage.Counters{new(stage.Counters)}
		}
	}
	return x
}

func opStats(t *testing.T, x *execution, name string) actors.OperatorStats {
	t.Helper()
	for _, st := range x.Stats() {
		if st.Name == name {
			return st
		}
	}
	t.Fatalf("no operator %q in %+v", name, x.Stats())
	return actors.OperatorStats{}
}

// overWire sends v through msgpack, as the cluster's codec does.
func overWire[T any](t *testing.T, v *T) *T {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	out := new(T)
	if err := msgpack.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDistributedStats: the coordinator's Stats count the instances that
// run in other processes from their reports, as if they ran here: record
// Counters summed over every generation (monotonic across a restart that
// moves the instance), mailbox, blocked time and watermark of the current
// generation, a stale report after a final one ignored.
func TestDistributedStats(t *testing.T) {
	coord := wireJob(t, "here:1", "there:2", 0)
	coord.counters[coord.plan.Chains[0][0]][0].Out.Store(100) // the source runs here

	// Generation 0: double runs at there:2; its host reports.
	host := wireJob(t, "there:2", "there:2", 0)
	dbl := host.instances[1][0]
	c := host.counters[host.plan.Chains[1][0]][0]
	c.In.Store(40)
	c.Out.Store(40)
	c.Late.Store(1)
	mb, err := mailbox.New(mailbox.DropNewest(10))
	if err != nil {
		t.Fatal(err)
	}
	mb.PostUserMessage(&actors.Envelope{Kind: actors.Data, Count: 15, Payload: &stage.Batch[int64]{Vs: make([]int64, 15)}})
	dbl.mb.Store(mb)
	dbl.blocked.Store(int64(time.Second))
	wm := time.Unix(1_700_000_000, 0)
	dbl.evTime.Store(wm.UnixNano())

	report := host.hostStats(false)
	if len(report.Instances) != 1 || report.Address != "there:2" {
		t.Fatalf("the host reports %+v, want its one instance", report)
	}
	coord.onStats("", overWire(t, report))
	st := opStats(t, coord, "double")
	if st.In != 40 || st.Out != 40 || st.Late != 1 || st.Dropped != 5 || st.DroppedBy["full"] != 5 ||
		st.Queued != 10 || st.Capacity != 10 || st.Policy != "drop-newest" || st.Blocked != time.Second || !st.Watermark.Equal(wm) {
		t.Fatalf("double's stats from its host's report: %+v", st)
	}
	if src := opStats(t, coord, "numbers"); src.Out != 100 {
		t.Fatalf("the coordinator's own source: %+v", src)
	}
	seen := []int64{st.In}

	// The generation stops (a restart): the host's final report, then a
	// periodic one that was computed earlier and arrives late.
	c.In.Store(50)
	final := host.hostStats(true)
	c.In.Store(45)
	stale := host.hostStats(false)
	coord.onStats("", overWire(t, final))
	seen = append(seen, opStats(t, coord, "double").In)
	coord.onStats("", overWire(t, stale))
	seen = append(seen, opStats(t, coord, "double").In)

	// Generation 1 places double at there:3; it finishes and says so with
	// its final counters.
	coord.instMu.Lock()
	coord.gen = 1
	coord.instances[1][0] = &instance{exec: coord, task: 1, gen: 1, self: actor.NewPID("there:3", "t")}
	coord.instMu.Unlock()
	seen = append(seen, opStats(t, coord, "double").In)
	fin := overWire(t, &wire.Finished{Task: 1, Instance: 0, Gen: 1, Stats: &wire.InstanceStats{
		Task: 1, Ops: []wire.OpStats{{In: 7, Out: 7}}, Policy: "drop-newest", Capacity: 10, Dropped: []int64{2}, Final: true}})
	coord.noteStats(fin.Gen, fin.Stats)
	st = opStats(t, coord, "double")
	seen = append(seen, st.In)
	if want := []int64{40, 50, 50, 50, 57}; !slices.Equal(seen, want) {
		t.Fatalf("double's records in, step by step: %v, want %v (every generation counted once, never going back)", seen, want)
	}
	if st.Dropped != 2 || st.Queued != 0 || st.Blocked != 0 || st.Backpressured != 0 {
		t.Fatalf("the mailbox of the current generation only, as in one process: %+v", st)
	}
	// A report of another plan is ignored.
	coord.noteStats(1, &wire.InstanceStats{Task: 7, Ops: []wire.OpStats{{In: 1}}})
	coord.noteStats(1, &wire.InstanceStats{Task: 1, Instance: 3, Ops: []wire.OpStats{{In: 1}}})
	if got := opStats(t, coord, "double").In; got != 57 {
		t.Fatalf("a report for no instance of the plan was counted: in %d", got)
	}
}

// TestDistributedLatencyStats: what an instance in another process
// measured (queue wait, processing, a sink's end-to-end latency, busy
// time, records shed) reaches the coordinator's Stats through its host's
// reports over msgpack, every generation counted; a report whose
// histogram does not add up is refused (and logged), its counters kept.
func TestDistributedLatencyStats(t *testing.T) {
	sys, err := actors.NewSystem(actors.Config{Name: "dist-latency"})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop(t.Context())
	withLats := func(x *execution) *execution {
		x.sys = sys
		x.lats = make([][]*instLatency, len(x.plan.Chains))
		for id := range x.plan.Chains {
			x.lats[id] = []*instLatency{new(instLatency)}
		}
		return x
	}
	coord := withLats(wireJob(t, "here:1", "there:2", 0))
	host := withLats(wireJob(t, "there:2", "there:2", 0))
	l := host.lats[1][0] // double, at there:2
	l.queue.observe(3*time.Millisecond, 100)
	l.queue.observe(40*time.Millisecond, 2)
	l.proc.observe(time.Millisecond, 102)
	l.busy.Store(int64(50 * time.Millisecond))
	l.shed[shedSampled].Store(7)

	coord.onStats("", overWire(t, host.hostStats(false)))
	st := opStats(t, coord, "double")
	if q := st.Latency.QueueWait; q.Count != 102 || q.P50 < 3*time.Millisecond || q.P50 > 4*time.Millisecond ||
		q.Max < 40*time.Millisecond || q.Max > 43*time.Millisecond {
		t.Fatalf("double's queue wait from its host's report: %+v", q)
	}
	if p := st.Latency.Processing; p.Count != 102 {
		t.Fatalf("double's processing: %+v", p)
	}
	if st.Shed != 7 || st.ShedBy["latency-sampled"] != 7 {
		t.Fatalf("double's shed records: %d %v", st.Shed, st.ShedBy)
	}
	if busy := coord.taskLatency(1).busy; busy != 50*time.Millisecond {
		t.Fatalf("double's busy time at the coordinator: %v", busy)
	}

	// A later report of the next generation adds to it; a malformed one
	// (a bucket out of range) is refused and the one before stays.
	host.gen = 1
	host.instances[1][0].gen = 1
	l2 := new(instLatency)
	l2.queue.observe(time.Millisecond, 10)
	host.lats[1][0] = l2
	coord.onStats("", overWire(t, host.hostStats(false)))
	if n := opStats(t, coord, "double").Latency.QueueWait.Count; n != 112 {
		t.Fatalf("queue waits over two generations: %d, want 112", n)
	}
	bad := overWire(t, host.hostStats(false))
	bad.Instances[0].Latency.Queue.Index[0] = histBuckets + 5
	bad.Instances[0].Ops[0].In = 99
	coord.onStats("", bad)
	if st := opStats(t, coord, "double"); st.Latency.QueueWait.Count != 112 || st.In != 99 {
		t.Fatalf("after a malformed latency report: %d queue waits (want 112), %d in (want 99: the counters are kept)", st.Latency.QueueWait.Count, st.In)
	}
}
