package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
)

// The pipeline workload: records 0..n-1, mapped, filtered (half pass), summed.
// Every variant calls the same functions through function values, as the
// topology does.
var (
	pipeGen    = func(i int64) int64 { return i }
	pipeMap    = func(v int64) int64 { return v*3 + 1 }
	pipeFilter = func(v int64) bool { return v&1 == 0 }
)

// expectedSum is the sink's result for n records, computed directly.
func expectedSum(n int) int64 {
	var s int64
	for i := int64(0); i < int64(n); i++ {
		if v := i*3 + 1; v&1 == 0 {
			s += v
		}
	}
	return s
}

func benchPipeline(ctx context.Context, e *env) ([]Result, error) {
	n := e.n(20_000_000)
	want := expectedSum(n)
	check := func(name string, got int64) error {
		if got != want {
			return fmt.Errorf("%s: sum %d, want %d", name, got, want)
		}
		return nil
	}

	loop, err := best(e.rounds, n, func() (time.Duration, error) {
		start := time.Now()
		sum := handLoop(n, pipeGen, pipeMap, pipeFilter)
		return time.Since(start), check("loop", sum)
	})
	if err != nil {
		return nil, err
	}
	chans, err := best(e.rounds, n, func() (time.Duration, error) {
		start := time.Now()
		sum := channelPipeline(n, 1024)
		return time.Since(start), check("channels", sum)
	})
	if err != nil {
		return nil, err
	}
	raw, err := best(e.rounds, n, func() (time.Duration, error) {
		start := time.Now()
		sum, err := protoactorChain(n)
		if err != nil {
			return 0, err
		}
		return time.Since(start), check("protoactor", sum)
	})
	if err != nil {
		return nil, err
	}
	sluice := func(fused bool) (float64, error) {
		return best(e.rounds, n, func() (time.Duration, error) {
			start := time.Now()
			sum, err := sluicePipeline(ctx, n, fused)
			if err != nil {
				return 0, err
			}
			return time.Since(start), check("sluice", sum)
		})
	}
	fused, err := sluice(true)
	if err != nil {
		return nil, err
	}
	unfused, err := sluice(false)
	if err != nil {
		return nil, err
	}

	rLoop := Result{Name: "pipeline/loop", Value: loop, Unit: "records/s", Note: "hand-written single-goroutine loop"}
	rChan := Result{Name: "pipeline/channels", Value: chans, Unit: "records/s", Note: "goroutine per stage, chan cap 1024"}
	rRaw := Result{Name: "pipeline/protoactor-chain", Value: raw, Unit: "records/s", Note: "actor per stage, default mailbox, message per record"}
	return []Result{
		rLoop, rChan, rRaw.against(rChan),
		Result{Name: "pipeline/sluice-fused", Value: fused, Unit: "records/s", Note: "one actor"}.against(rLoop),
		Result{Name: "pipeline/sluice-unfused", Value: unfused, Unit: "records/s", Note: "actor per stage, credit-gated edges"}.against(rChan),
		Result{Name: "pipeline/sluice-unfused-vs-protoactor", Value: unfused, Unit: "records/s"}.against(rRaw),
	}, nil
}

//go:noinline
func handLoop(n int, gen func(int64) int64, m func(int64) int64, f func(int64) bool) int64 {
	var sum int64
	for i := int64(0); i < int64(n); i++ {
		if v := m(gen(i)); f(v) {
			sum += v
		}
	}
	return sum
}

func channelPipeline(n, capacity int) int64 {
	a := make(chan int64, capacity)
	b := make(chan int64, capacity)
	c := make(chan int64, capacity)
	done := make(chan int64)
	go func() {
		for i := int64(0); i < int64(n); i++ {
			a <- pipeGen(i)
		}
		close(a)
	}()
	go func() {
		for v := range a {
			b <- pipeMap(v)
		}
		close(b)
	}()
	go func() {
		for v := range b {
			if pipeFilter(v) {
				c <- v
			}
		}
		close(c)
	}()
	go func() {
		var sum int64
		for v := range c {
			sum += v
		}
		done <- sum
	}()
	return <-done
}

type rawEnd struct{}

// protoactorChain runs map, filter and sink as three protoactor actors with
// default (unbounded) mailboxes, fed one message per record from a goroutine.
func protoactorChain(n int) (int64, error) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	defer sys.Shutdown()
	root := actor.NewRootContext(sys, nil)
	done := make(chan int64, 1)
	var sum int64
	sink := root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case int64:
			sum += m
		case rawEnd:
			done <- sum
		}
	}))
	filter := root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case int64:
			if pipeFilter(m) {
				c.Send(sink, m)
			}
		case rawEnd:
			c.Send(sink, m)
		}
	}))
	mapper := root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case int64:
			c.Send(filter, pipeMap(m))
		case rawEnd:
			c.Send(filter, m)
		}
	}))
	for i := int64(0); i < int64(n); i++ {
		root.Send(mapper, pipeGen(i))
	}
	root.Send(mapper, rawEnd{})
	select {
	case s := <-done:
		return s, nil
	case <-time.After(5 * time.Minute):
		return 0, fmt.Errorf("protoactor chain did not finish")
	}
}

func sluicePipeline(ctx context.Context, n int, fused bool) (int64, error) {
	sys, err := actors.NewSystem(actors.Config{Name: "bench"})
	if err != nil {
		return 0, err
	}
	defer sys.Stop(ctx)
	var opt operators.Option // the zero Option changes nothing
	if !fused {
		opt = operators.NoFusion()
	}
	var sum int64
	t := operators.NewTopology("pipeline")
	src := operators.Source(t, "source", operators.Generate(int64(n), pipeGen), opt)
	mapped := operators.Map(src, "map", pipeMap, opt)
	kept := operators.Filter(mapped, "filter", pipeFilter, opt)
	operators.Sink(kept, "sink", operators.SinkFunc(func(v int64) error { sum += v; return nil }), opt)
	run, err := sys.Run(ctx, t)
	if err != nil {
		return 0, err
	}
	if err := run.Wait(ctx); err != nil {
		return 0, err
	}
	return sum, nil
}
