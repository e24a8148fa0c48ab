package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/cluster"
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
	startRaw := func() (*actor.ActorSystem, *remote.Remote, error) {
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
	sysA, remA, err := startRaw()
	if err != nil {
		return nil, err
	}
	sysB, remB, err := startRaw()
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
