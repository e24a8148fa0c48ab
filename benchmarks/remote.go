package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/bits"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/operators"
)

// remoteRecord is what the cross-node benchmarks send: a small record, as
// an operator's output would be.
type remoteRecord struct {
	Seq   int64
	Key   string
	Value int64
}

// countTo counts messages of any kind and closes done at want.
type countTo struct {
	n, want int64
	done    chan struct{}
}

func (c *countTo) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case remoteRecord, *wrapperspb.BytesValue, int64:
		if c.n++; c.n == c.want {
			close(c.done)
		}
	}
}

// benchRemote measures one hop between two nodes on loopback (two nodes in
// this process): through sluice's cluster (a msgpack record in an
// anypb.Any), through raw protoactor remote with a plain proto message
// (wrapperspb.BytesValue of the same 24 bytes), and, for scale, one
// in-process actor hop.
func benchRemote(ctx context.Context, e *env) ([]Result, error) {
	n := e.n(300_000)
	quiet := slog.New(slog.DiscardHandler)

	local, err := best(e.rounds, n, func() (time.Duration, error) {
		sys := quietSystem()
		defer sys.Shutdown()
		root := actor.NewRootContext(sys, nil)
		c := &countTo{want: int64(n), done: make(chan struct{})}
		pid := root.Spawn(actor.PropsFromProducer(func() actor.Actor { return c }))
		start := time.Now()
		for i := int64(0); i < int64(n); i++ {
			root.Send(pid, remoteRecord{Seq: i, Key: "key", Value: i})
		}
		<-c.done
		return time.Since(start), nil
	})
	if err != nil {
		return nil, err
	}

	// Raw protoactor remote: two actor systems, no cluster, no codec.
	sysA, remA, err := startRawRemote()
	if err != nil {
		return nil, err
	}
	sysB, remB, err := startRawRemote()
	if err != nil {
		return nil, err
	}
	defer func() {
		remA.Shutdown(false)
		remB.Shutdown(false)
		sysA.Shutdown()
		sysB.Shutdown()
	}()
	payload := make([]byte, 24)
	round := 0
	raw, err := best(e.rounds, n, func() (time.Duration, error) {
		round++
		c := &countTo{want: int64(n), done: make(chan struct{})}
		name := fmt.Sprintf("raw-%d", round)
		if _, err := sysB.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return c }), name); err != nil {
			return 0, err
		}
		pid := actor.NewPID(sysB.Address(), name)
		start := time.Now()
		for i := 0; i < n; i++ {
			sysA.Root.Send(pid, &wrapperspb.BytesValue{Value: payload})
		}
		select {
		case <-c.done:
		case <-time.After(2 * time.Minute):
			return 0, fmt.Errorf("raw remote: %d of %d messages arrived", c.n, n)
		}
		return time.Since(start), nil
	})
	if err != nil {
		return nil, err
	}

	// sluice: two nodes, the record packed by the codec.
	reg := cluster.NewRegistry()
	if err := cluster.Register[remoteRecord](reg, "bench.Record"); err != nil {
		return nil, err
	}
	nodeA, err := cluster.Start(ctx, cluster.Config{Name: "bench-a", ClusterName: "bench", Registry: reg, Logger: quiet})
	if err != nil {
		return nil, err
	}
	defer nodeA.Stop(ctx)
	nodeB, err := cluster.Start(ctx, cluster.Config{Name: "bench-b", ClusterName: "bench", Registry: reg, Logger: quiet})
	if err != nil {
		return nil, err
	}
	defer nodeB.Stop(ctx)
	sluice, err := best(e.rounds, n, func() (time.Duration, error) {
		round++
		c := &countTo{want: int64(n), done: make(chan struct{})}
		name := fmt.Sprintf("sluice-%d", round)
		if _, err := nodeB.Spawn(name, actor.PropsFromProducer(func() actor.Actor { return c })); err != nil {
			return 0, err
		}
		pid := nodeA.PID(nodeB.Address(), name)
		start := time.Now()
		for i := int64(0); i < int64(n); i++ {
			if err := nodeA.Send(pid, remoteRecord{Seq: i, Key: "key", Value: i}); err != nil {
				return 0, err
			}
		}
		select {
		case <-c.done:
		case <-time.After(2 * time.Minute):
			return 0, fmt.Errorf("sluice remote: %d of %d messages arrived", c.n, n)
		}
		return time.Since(start), nil
	})
	if err != nil {
		return nil, err
	}
	if st := nodeB.Stats().Codec; st.Unpacked < uint64(n) || st.Undecodable+st.Unknown+st.Foreign > 0 {
		return nil, fmt.Errorf("sluice remote: codec counted %+v for %d messages per round", st, n)
	}

	rawR := Result{Name: "remote/protoactor-raw", Value: raw, Unit: "msgs/s", Note: "wrapperspb.BytesValue, 24 bytes"}
	localR := Result{Name: "remote/in-process-hop", Value: local, Unit: "msgs/s", Note: "protoactor, one process"}
	sluiceR := Result{Name: "remote/sluice-codec", Value: sluice, Unit: "msgs/s", Note: "msgpack record in anypb.Any"}
	return []Result{
		localR,
		rawR.against(localR),
		sluiceR.against(rawR),
		Result{Name: "remote/sluice-vs-in-process", Value: sluice, Unit: "msgs/s"}.against(localR),
	}, nil
}

// startRawRemote starts an actor system serving protoactor's remote on a
// free loopback port, without TLS (the raw baselines).
func startRawRemote() (*actor.ActorSystem, *remote.Remote, error) {
	sys := quietSystem()
	r := remote.NewRemote(sys, remote.Configure("127.0.0.1", 0,
		remote.WithDialOptions(grpc.WithTransportCredentials(insecure.NewCredentials()))))
	if err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("remote: %v", p)
			}
		}()
		r.Start()
		return nil
	}(); err != nil {
		return nil, nil, err
	}
	return sys, r, nil
}

// benchRemoteTopology measures records crossing nodes inside a topology:
// a job source -> map -> sink whose map runs on a second node (two cluster
// nodes in this process on loopback, OffCoordinator: the source and the
// sink on the coordinator), so every record crosses twice, in sluice's
// batches of 256 with credits. The baseline is raw protoactor remote
// carrying the same batches: two actor systems, a batch of 256 int64s per
// message (a BytesValue of their varints) to an actor on the second system
// that applies the same map and sends the batch back, the same sum checked.
//
// Records in flight are the same in all, not per edge: the baseline holds
// 32 batches (8,192 records) from the source to the sink, on either hop,
// and its sink returns a batch's room to the source in the same process
// (a channel); sluice holds 4,096 records (the default Capacity, 16
// batches) per edge, 8,192 on the two, and each receiver grants room back
// to its sender across the network, every half window. So a sluice edge
// waits for a network round trip that the baseline's loop spreads over
// twice the records. Work per record is the same (the generator, the map,
// a plain sum at the sink); the encodings differ in form, not much in size
// (sluice's envelope codec writes a batch's int64s zigzagged in the fewest
// bytes that hold them all, 3 here, the baseline's varints take 3 or 4).
func benchRemoteTopology(ctx context.Context, e *env) ([]Result, error) {
	n := e.n(5_000_000)
	const batch, inFlight = 256, 32
	quiet := slog.New(slog.DiscardHandler)
	want := int64(0)
	for i := range int64(n) {
		want += pipeMap(pipeGen(i))
	}

	// The baseline.
	sysA, remA, err := startRawRemote()
	if err != nil {
		return nil, err
	}
	defer func() { remA.Shutdown(false); sysA.Shutdown() }()
	sysB, remB, err := startRawRemote()
	if err != nil {
		return nil, err
	}
	defer func() { remB.Shutdown(false); sysB.Shutdown() }()
	decode := func(b []byte, into []int64) []int64 {
		for len(b) > 0 {
			v, k := binary.Varint(b)
			if k <= 0 {
				break
			}
			into, b = append(into, v), b[k:]
		}
		return into
	}
	encode := func(vs []int64) []byte { // into a buffer of the exact size
		size := 0
		for _, v := range vs {
			size += max(1, (bits.Len64(uint64(v<<1)^uint64(v>>63))+6)/7)
		}
		out := make([]byte, 0, size)
		for _, v := range vs {
			out = binary.AppendVarint(out, v)
		}
		return out
	}
	round := 0
	rawRound := func() (time.Duration, error) {
		round++
		credits := make(chan struct{}, inFlight)
		done := make(chan struct{})
		var sum, seen int64
		sinkName, mapName := fmt.Sprintf("raw-sink-%d", round), fmt.Sprintf("raw-map-%d", round)
		var buf []int64
		var first, last time.Time
		sink, err := sysA.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
			if m, ok := c.Message().(*wrapperspb.BytesValue); ok {
				if seen == 0 {
					first = time.Now()
				}
				buf = decode(m.Value, buf[:0])
				for _, v := range buf {
					sum += v
				}
				if seen += int64(len(buf)); seen == int64(n) {
					last = time.Now()
					close(done)
				}
				<-credits
			}
		}), sinkName)
		if err != nil {
			return 0, err
		}
		sinkPID := actor.NewPID(sysA.Address(), sink.Id)
		var mbuf []int64
		if _, err := sysB.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
			if m, ok := c.Message().(*wrapperspb.BytesValue); ok {
				mbuf = decode(m.Value, mbuf[:0])
				for i, v := range mbuf {
					mbuf[i] = pipeMap(v)
				}
				c.Send(sinkPID, &wrapperspb.BytesValue{Value: encode(mbuf)})
			}
		}), mapName); err != nil {
			return 0, err
		}
		mapPID := actor.NewPID(sysB.Address(), mapName)
		out := make([]int64, 0, batch)
		for i := int64(0); i < int64(n); i++ {
			if out = append(out, pipeGen(i)); len(out) == batch || i == int64(n)-1 {
				credits <- struct{}{}
				sysA.Root.Send(mapPID, &wrapperspb.BytesValue{Value: encode(out)})
				out = out[:0]
			}
		}
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			return 0, fmt.Errorf("raw remote batches: %d of %d records arrived", seen, n)
		}
		d := last.Sub(first)
		if sum != want {
			return 0, fmt.Errorf("raw remote batches: sum %d, want %d", sum, want)
		}
		return d, nil
	}

	// sluice: the job on two nodes.
	// The sink adds plainly, as the baseline's does: its one instance
	// writes these from its actor, and the benchmark reads them after
	// run.Wait, which the sink's end happens before (its Finished
	// message to the job actor, the run's end); atomics per record would
	// be work the baseline does not do.
	var sum, seen int64
	var first, last int64 // unix nanoseconds of the sink's first and last record
	jobs := cluster.Jobs{"hop": func() *operators.Topology {
		t := operators.NewTopology("hop")
		src := operators.Source(t, "source", operators.Generate(int64(n), pipeGen), operators.NoFusion())
		m := operators.Map(src, "map", pipeMap, operators.NoFusion())
		operators.Sink(m, "sink", operators.SinkFunc(func(v int64) error {
			sum += v
			switch seen++; seen {
			case 1:
				first = time.Now().UnixNano()
			case int64(n):
				last = time.Now().UnixNano()
			}
			return nil
		}), operators.NoFusion())
		return t
	}}
	dir, err := os.MkdirTemp("", "sluice-bench-remote-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cl := "bench-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	nodeA, err := cluster.Start(ctx, cluster.Config{Name: "bench-a", ClusterName: cl, Jobs: jobs, Logger: quiet, Store: filepath.Join(dir, "a.db")})
	if err != nil {
		return nil, err
	}
	defer nodeA.Stop(ctx)
	nodeB, err := cluster.Start(ctx, cluster.Config{Name: "bench-b", ClusterName: cl, Jobs: jobs, Logger: quiet, Store: filepath.Join(dir, "b.db"),
		Peers: []string{nodeA.Address()}})
	if err != nil {
		return nil, err
	}
	defer nodeB.Stop(ctx)
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := nodeA.AwaitMembers(actx, 2); err != nil {
		return nil, err
	}
	placedOn := ""
	var startup time.Duration
	var blocked []string // the time the source and the map waited for credit, of the measured time
	topoRound := func() (time.Duration, error) {
		sum, seen = 0, 0
		start := time.Now()
		run, err := cluster.Run(ctx, nodeA, "hop", cluster.RunOptions{OffCoordinator: true})
		if err != nil {
			return 0, err
		}
		where := cluster.PlacementOf(run)
		if err := run.Wait(ctx); err != nil {
			return 0, err
		}
		d := time.Duration(last - first)
		startup = time.Duration(first - start.UnixNano())
		blocked = blocked[:0]
		for _, st := range run.Stats() {
			if st.Name == "source" || st.Name == "map" {
				blocked = append(blocked, fmt.Sprintf("%s %.0f%%", st.Name, 100*st.Blocked.Seconds()/d.Seconds()))
			}
		}
		if where[nodeB.Address()] == 0 {
			return 0, fmt.Errorf("remote topology: nothing ran on the second node: %v", where)
		}
		placedOn = fmt.Sprint(where)
		if got := sum; got != want {
			return 0, fmt.Errorf("remote topology: sum %d, want %d", got, want)
		}
		return d, nil
	}
	// The rounds of the two alternate (interleaved), so that the ratio
	// compares runs in the same states of the machine: both pairs of
	// nodes stay up for the whole step.
	bests, err := interleaved(e.rounds, []timedCase{{n, rawRound}, {n, topoRound}})
	if err != nil {
		return nil, err
	}
	raw, topo := bests[0].rate, bests[1].rate
	rawR := Result{Name: "remote-topology/base-protoactor-batched", Value: raw, Unit: "records/s",
		Note: fmt.Sprintf("%d records, two remote hops (A -> map on B -> A), a BytesValue of %d varints per message, %d batches in flight from the source to the sink; from the sink's first record to its last", n, batch, inFlight)}
	topoR := Result{Name: "remote-topology/sluice-vs-base-protoactor-batched", Value: topo, Unit: "records/s",
		Note: fmt.Sprintf("job source -> map -> sink, the map on the second node (%s instances per address), batches of %d with credits (%d records per edge); from the sink's first record to its last", placedOn, batch, 4096)}
	return []Result{rawR, topoR.against(rawR).spread(roundRatios(bests[1], bests[0])),
		{Name: "remote-topology/context-startup", Value: float64(startup.Microseconds()) / 1000, Unit: "ms",
			Note: "the last round's time from cluster.Run to the sink's first record (deploying on both nodes, the checkpoint log), not in the rates"},
		{Name: "remote-topology/context-blocked", Value: float64(len(blocked)), Unit: "operators",
			Note: "the last round's time without credit to send, of the time measured: " + strings.Join(blocked, ", ") +
				" (a source faster than what follows it waits for credit most of the time; a map that waits little is not held back by the sink's credits)"}}, nil
}
