package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/workers"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
)

// The pipeline workload: records 0..n-1, mapped, filtered (half pass), summed.
// Every variant calls the same functions through function values, as the
// topology does: sluice's sink is SinkFunc(pipeSinkOf(&sum)), and the
// baselines call that same function for every record.
var (
	pipeGen    = func(i int64) int64 { return i }
	pipeMap    = func(v int64) int64 { return v*3 + 1 }
	pipeFilter = func(v int64) bool { return v&1 == 0 }
	pipeSinkOf = func(sum *int64) func(int64) error { return func(v int64) error { *sum += v; return nil } }
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

// The sizes sluice runs with by default (internal/graph): records per batch
// and records in flight per edge (the receiver's capacity, granted to its
// one sender as credits). The channel and protoactor baselines carry the same
// batches; the channels hold the same records in flight per edge.
const (
	benchBatch    = 256
	benchInFlight = 4096
	// bigBatch is the larger batch the pipeline and the hop also run with
	// (operators.BatchSize), as context: what a batch's own cost is.
	bigBatch = 1024
)

func benchPipeline(ctx context.Context, e *env) ([]Result, error) {
	n := e.n(20_000_000)
	want := expectedSum(n)
	check := func(name string, got int64) error {
		if got != want {
			return fmt.Errorf("%s: sum %d, want %d", name, got, want)
		}
		return nil
	}
	timed := func(name string, f func() (int64, error)) timedCase {
		return timedCase{n, func() (time.Duration, error) {
			start := time.Now()
			sum, err := f()
			if err != nil {
				return 0, err
			}
			return time.Since(start), check(name, sum)
		}}
	}
	cases := []struct {
		name string
		f    func() (int64, error)
		b    bestRound // its rounds (zero for a case that did not run)
	}{
		{name: "loop", f: func() (int64, error) { return handLoop(n, pipeGen, pipeMap, pipeFilter), nil }},
		{name: "channels-batched", f: func() (int64, error) {
			return batchedChannelPipeline(n, benchBatch, benchInFlight/benchBatch, false), nil
		}},
		{name: "channels-batched-recycled", f: func() (int64, error) {
			return batchedChannelPipeline(n, benchBatch, benchInFlight/benchBatch, true), nil
		}},
		{name: "protoactor-batched", f: func() (int64, error) { return protoactorBatchChain(n, benchBatch, false) }},
		{name: "protoactor-batched-recycled", f: func() (int64, error) { return protoactorBatchChain(n, benchBatch, true) }},
		{name: "actor-floor", f: func() (int64, error) { return actorBatchChain(n, benchBatch, true, true, 0) }},
		{name: "protoactor-batched-bounded", f: func() (int64, error) {
			return actorBatchChain(n, benchBatch, true, false, benchInFlight/benchBatch)
		}},
		{name: "sluice-fused", f: func() (int64, error) { return sluicePipeline(ctx, n, true) }},
		{name: "sluice-unfused", f: func() (int64, error) { return sluicePipeline(ctx, n, false) }},
		// Context: batches of bigBatch records (operators.BatchSize), the
		// same records in flight per edge, against channels carrying them.
		{name: "channels-batched-big", f: func() (int64, error) {
			return batchedChannelPipeline(n, bigBatch, benchInFlight/bigBatch, false), nil
		}},
		{name: "channels-batched-recycled-big", f: func() (int64, error) {
			return batchedChannelPipeline(n, bigBatch, benchInFlight/bigBatch, true), nil
		}},
		{name: "sluice-unfused-big", f: func() (int64, error) {
			return sluicePipeline(ctx, n, false, operators.BatchSize(bigBatch))
		}},
		{name: "channels-per-record", f: func() (int64, error) { return channelPipeline(n, benchInFlight), nil }},
		{name: "protoactor-per-record", f: func() (int64, error) { return protoactorChain(n) }},
	}
	// Every round runs each case once (interleaved), so that a ratio
	// compares cases measured in the same states of the machine.
	var run []timedCase
	var which []int // the case of each of run
	for i := range cases {
		if e.skipSlow && strings.HasSuffix(cases[i].name, "per-record") {
			continue
		}
		run = append(run, timed(cases[i].name, cases[i].f))
		which = append(which, i)
	}
	bests, err := interleaved(e.rounds, run)
	if err != nil {
		return nil, err
	}
	for j, b := range bests {
		cases[which[j]].b = b
	}
	// find is a case's rounds (zero for a case that did not run); v is its
	// best rate, cpu the end of a note that says what its best round cost,
	// per the round-by-round ratios of case num ÷ the faster of dens.
	find := func(name string) bestRound {
		for _, c := range cases {
			if c.name == name {
				return c.b
			}
		}
		return bestRound{}
	}
	v := func(name string) float64 { return find(name).rate }
	cpu := func(name string) string { b := find(name); return cpuNote(n, b.rate, b.cpu) }
	per := func(num string, dens ...string) []float64 {
		var bs []bestRound
		for _, d := range dens {
			bs = append(bs, find(d))
		}
		return roundRatios(find(num), bs...)
	}
	rLoop := Result{Name: "pipeline/base-loop", Value: v("loop"), Unit: "records/s", Note: "hand-written single-goroutine loop, same functions" + cpu("loop")}
	chanNote := fmt.Sprintf("goroutine per stage, chan []int64 of %d-record batches, %d slots (%d records in flight per edge)", benchBatch, benchInFlight/benchBatch, benchInFlight)
	rChan := Result{Name: "pipeline/base-channels-batched", Value: v("channels-batched"), Unit: "records/s", Note: chanNote + "; a fresh array per batch" + cpu("channels-batched")}
	rChanR := Result{Name: "pipeline/base-channels-batched-recycled", Value: v("channels-batched-recycled"), Unit: "records/s", Note: chanNote + "; the sink hands arrays back to the source" + cpu("channels-batched-recycled")}
	rawNote := fmt.Sprintf("protoactor actor per stage, default mailbox, one []int64 of %d records per message", benchBatch)
	rRaw := Result{Name: "pipeline/base-protoactor-batched", Value: v("protoactor-batched"), Unit: "records/s", Note: rawNote + "; a fresh array per batch" + cpu("protoactor-batched")}
	rRawR := Result{Name: "pipeline/base-protoactor-batched-recycled", Value: v("protoactor-batched-recycled"), Unit: "records/s", Note: rawNote + "; the sink hands arrays back to the source" + cpu("protoactor-batched-recycled")}
	unfused := Result{Name: "pipeline/sluice-unfused", Value: v("sluice-unfused"), Unit: "records/s", Note: "actor per stage, Block edges, batches of 256, 4096 credits per edge" + cpu("sluice-unfused")}
	// protoactor's own bounded mailboxes, Bounded(16): 16 batches, the
	// records in flight per edge of sluice's credits and of the channels'
	// slots, a full mailbox's sender waiting (protoactor's ring buffer
	// retries with runtime.Gosched).
	rRawB := Result{Name: "pipeline/base-protoactor-batched-bounded", Value: v("protoactor-batched-bounded"), Unit: "records/s",
		Note: rawNote + fmt.Sprintf(", protoactor's Bounded(%d) mailboxes (%d records in flight per edge; the sender retries while one is full); the sink hands arrays back to the source", benchInFlight/benchBatch, benchInFlight) + cpu("protoactor-batched-bounded")}
	out := []Result{rLoop, rChan, rChanR, rRaw, rRawR, rRawB,
		Result{Name: "pipeline/sluice-fused-vs-loop", Value: v("sluice-fused"), Unit: "records/s", Note: "one actor" + cpu("sluice-fused") + " (aim >= 0.5x)"}.against(rLoop).spread(per("sluice-fused", "loop")),
		// Against each baseline's faster configuration (sluice hands its
		// arrays back, stage.Arrays; the baselines do when it pays).
		unfused.rename("pipeline/sluice-unfused-vs-channels-batched", "aim >= 0.8x; base: the faster of "+rChan.Name+" and "+rChanR.Name).against(bestBase(rChan, rChanR)).
			spread(per("sluice-unfused", "channels-batched", "channels-batched-recycled")),
		unfused.rename("pipeline/sluice-unfused-vs-protoactor-batched", "aim >= 1.0x; base: the fastest of "+rRaw.Name+", "+rRawR.Name+" and "+rRawB.Name).against(bestBase(rRaw, rRawR, rRawB)).
			spread(per("sluice-unfused", "protoactor-batched", "protoactor-batched-recycled", "protoactor-batched-bounded")),
	}
	bigNote := fmt.Sprintf("goroutine per stage, chan []int64 of %d-record batches, %d slots (%d records in flight per edge)", bigBatch, benchInFlight/bigBatch, benchInFlight)
	rBig := Result{Name: fmt.Sprintf("pipeline/base-channels-batched-%d", bigBatch), Value: v("channels-batched-big"), Unit: "records/s", Note: bigNote + "; a fresh array per batch" + cpu("channels-batched-big")}
	rBigR := Result{Name: fmt.Sprintf("pipeline/base-channels-batched-%d-recycled", bigBatch), Value: v("channels-batched-recycled-big"), Unit: "records/s", Note: bigNote + "; the sink hands arrays back to the source" + cpu("channels-batched-recycled-big")}
	// Context: the floor of an actor per stage (actorBatchChain), and how
	// far sluice is above it and the channels below it.
	rFloor := Result{Name: "pipeline/context-actor-floor", Value: v("actor-floor"), Unit: "records/s",
		Note: rawNote + ", on sluice's mailbox and worker pool, no flow control, nothing else of sluice's; the sink hands arrays back" + cpu("actor-floor")}
	out = append(out, rFloor,
		rFloor.rename("pipeline/context-actor-floor-vs-channels-batched", "what 'unfused ÷ channels' could reach with an engine that cost nothing; base: the faster of "+rChan.Name+" and "+rChanR.Name).against(bestBase(rChan, rChanR)).
			spread(per("actor-floor", "channels-batched", "channels-batched-recycled")),
		unfused.rename("pipeline/context-sluice-unfused-vs-actor-floor", "what the engine's credits, envelopes, clock and counters cost").against(rFloor).
			spread(per("sluice-unfused", "actor-floor")))
	out = append(out, rBig, rBigR,
		Result{Name: fmt.Sprintf("pipeline/sluice-unfused-batch-%d-vs-channels-batched-%d", bigBatch, bigBatch), Value: v("sluice-unfused-big"), Unit: "records/s",
			Note: fmt.Sprintf("context: the unfused pipeline with operators.BatchSize(%d) (the default is %d), %d credits per edge; base: the faster of %s and %s", bigBatch, benchBatch, benchInFlight, rBig.Name, rBigR.Name) + cpu("sluice-unfused-big")}.against(bestBase(rBig, rBigR)))
	if !e.skipSlow { // context only: one record per channel send or per message
		out = append(out,
			Result{Name: "pipeline/context-channels-per-record", Value: v("channels-per-record"), Unit: "records/s", Note: fmt.Sprintf("goroutine per stage, chan int64 cap %d, one record per send", benchInFlight)},
			Result{Name: "pipeline/context-protoactor-per-record", Value: v("protoactor-per-record"), Unit: "records/s", Note: "protoactor actor per stage, one record per message"})
	}
	return out, nil
}

// rename gives r another name and adds aim to its note.
func (r Result) rename(name, aim string) Result {
	r.Name = name
	if aim != "" {
		r.Note = r.Note + " (" + aim + ")"
	}
	return r
}

//go:noinline
func handLoop(n int, gen func(int64) int64, m func(int64) int64, f func(int64) bool) int64 {
	var sum int64
	sink := pipeSinkOf(&sum)
	for i := int64(0); i < int64(n); i++ {
		if v := m(gen(i)); f(v) {
			if sink(v) != nil {
				panic("the pipeline's sink failed")
			}
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
		sink := pipeSinkOf(&sum)
		for v := range c {
			if sink(v) != nil {
				panic("the pipeline's sink failed")
			}
		}
		done <- sum
	}()
	return <-done
}

// batchedChannelPipeline is channelPipeline carrying batches: the source
// fills a []int64 of up to batch records and sends it on a channel of
// slots batches; map and filter own the slice they receive and work in
// place, as an idiomatic Go pipeline would (and as sluice's stages do with a
// batch they own, stage.Batch.Own). recycle: the sink (and the filter, of
// a batch it empties) hands the array back to the source through a free
// list, as sluice does (stage.Arrays); else every batch is a fresh array.
func batchedChannelPipeline(n, batch, slots int, recycle bool) int64 {
	pool := newBatchPool(recycle, slots)
	a := make(chan []int64, slots)
	b := make(chan []int64, slots)
	c := make(chan []int64, slots)
	done := make(chan int64)
	go func() {
		buf := pool.get(batch)
		for i := int64(0); i < int64(n); i++ {
			if buf = append(buf, pipeGen(i)); len(buf) == batch {
				a <- buf
				buf = pool.get(batch)
			}
		}
		if len(buf) > 0 {
			a <- buf
		}
		close(a)
	}()
	go func() {
		for in := range a { // the slice is this stage's: mapped in place
			for i, v := range in {
				in[i] = pipeMap(v)
			}
			b <- in
		}
		close(b)
	}()
	go func() {
		for in := range b { // filtered in place
			out := in[:0]
			for _, v := range in {
				if pipeFilter(v) {
					out = append(out, v)
				}
			}
			if len(out) > 0 {
				c <- out
			} else {
				pool.put(out)
			}
		}
		close(c)
	}()
	go func() {
		var sum int64
		sink := pipeSinkOf(&sum)
		for in := range c {
			for _, v := range in {
				if sink(v) != nil {
					panic("the pipeline's sink failed")
				}
			}
			pool.put(in)
		}
		done <- sum
	}()
	return <-done
}

// protoactorBatchChain is protoactorChain carrying one []int64 of up to
// batch records per message (a fresh slice per message from the source,
// mapped and filtered in place, as the channel baseline does), default
// unbounded mailboxes, no flow control. recycle: as batchedChannelPipeline's.
func protoactorBatchChain(n, batch int, recycle bool) (int64, error) {
	return actorBatchChain(n, batch, recycle, false, 0)
}

// actorBatchChain is protoactorBatchChain; with sluiceParts its actors run
// on what sluice's operator instances run on, sluice's mailbox (Block, with
// room for every batch of the run: no flow control) and its worker pool
// (internal/workers), and nothing else of sluice's: no credits, envelopes,
// clock or counters. That is the floor of an actor per stage on this
// machine: what sluice's engine adds is the difference. Without
// sluiceParts, bounded > 0 gives each actor protoactor's Bounded(bounded)
// mailbox (its sender retries while it is full) instead of the default
// unbounded one.
func actorBatchChain(n, batch int, recycle, sluiceParts bool, bounded int) (int64, error) {
	pool := newBatchPool(recycle, benchInFlight/batch)
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	defer sys.Shutdown()
	var opts []actor.PropsOption
	if sluiceParts {
		// Room for every message of the run, so that a send from the
		// source's loop (no credits) is never refused.
		mb, err := mailbox.Block(n/batch + 16).Producer(nil)
		if err != nil {
			return 0, err
		}
		wp := workers.New(300, 0) // as actors.System's
		defer wp.Stop()
		opts = append(opts, actor.WithMailbox(mb), actor.WithDispatcher(wp))
	} else if bounded > 0 {
		opts = append(opts, actor.WithMailbox(actor.Bounded(bounded)))
	}
	props := func(f actor.ReceiveFunc) *actor.Props { return actor.PropsFromFunc(f, opts...) }
	root := actor.NewRootContext(sys, nil)
	done := make(chan int64, 1)
	var sum int64
	add := pipeSinkOf(&sum)
	sink := root.Spawn(props(func(c actor.Context) {
		switch m := c.Message().(type) {
		case []int64:
			for _, v := range m {
				if add(v) != nil {
					panic("the pipeline's sink failed")
				}
			}
			pool.put(m)
		case rawEnd:
			done <- sum
		}
	}))
	filter := root.Spawn(props(func(c actor.Context) {
		switch m := c.Message().(type) {
		case []int64: // the slice is this actor's: filtered in place
			out := m[:0]
			for _, v := range m {
				if pipeFilter(v) {
					out = append(out, v)
				}
			}
			if len(out) > 0 {
				c.Send(sink, out)
			} else {
				pool.put(out)
			}
		case rawEnd:
			c.Send(sink, m)
		}
	}))
	mapper := root.Spawn(props(func(c actor.Context) {
		switch m := c.Message().(type) {
		case []int64: // mapped in place
			for i, v := range m {
				m[i] = pipeMap(v)
			}
			c.Send(filter, m)
		case rawEnd:
			c.Send(filter, m)
		}
	}))
	buf := pool.get(batch)
	for i := int64(0); i < int64(n); i++ {
		if buf = append(buf, pipeGen(i)); len(buf) == batch {
			root.Send(mapper, buf)
			buf = pool.get(batch)
		}
	}
	if len(buf) > 0 {
		root.Send(mapper, buf)
	}
	root.Send(mapper, rawEnd{})
	select {
	case s := <-done:
		return s, nil
	case <-time.After(5 * time.Minute):
		return 0, fmt.Errorf("protoactor batch chain did not finish")
	}
}

type rawEnd struct{}

// batchPool hands batch arrays from the last stage of a baseline back to
// its source, as a Go pipeline tuned for throughput would; a nil pool
// allocates every batch.
type batchPool chan []int64

// newBatchPool is a free list of room for every batch in flight (nil: none).
func newBatchPool(recycle bool, slots int) batchPool {
	if !recycle {
		return nil
	}
	return make(batchPool, 4*slots+4)
}

// get is a free array, or a new one of capacity batch.
func (p batchPool) get(batch int) []int64 {
	select {
	case b := <-p:
		return b[:0]
	default:
		return make([]int64, 0, batch)
	}
}

// put gives b back (dropped when the list is full, or there is none).
func (p batchPool) put(b []int64) {
	select {
	case p <- b:
	default:
	}
}

// bestBase is the fastest of a baseline's configurations (allocating and
// recycling its batch arrays; for protoactor also with bounded mailboxes):
// the one a ratio is taken against.
func bestBase(alloc Result, others ...Result) Result {
	b := alloc
	for _, o := range others {
		if o.Value > b.Value {
			b = o
		}
	}
	return b
}

// protoactorChain runs map, filter and sink as three protoactor actors with
// default (unbounded) mailboxes, fed one message per record from a goroutine.
func protoactorChain(n int) (int64, error) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	defer sys.Shutdown()
	root := actor.NewRootContext(sys, nil)
	done := make(chan int64, 1)
	var sum int64
	add := pipeSinkOf(&sum)
	sink := root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case int64:
			if add(m) != nil {
				panic("the pipeline's sink failed")
			}
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

func sluicePipeline(ctx context.Context, n int, fused bool, topt ...operators.TopologyOption) (int64, error) {
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
	t := operators.NewTopology("pipeline", topt...)
	src := operators.Source(t, "source", operators.Generate(int64(n), pipeGen), opt)
	mapped := operators.Map(src, "map", pipeMap, opt)
	kept := operators.Filter(mapped, "filter", pipeFilter, opt)
	operators.Sink(kept, "sink", operators.SinkFunc(pipeSinkOf(&sum)), opt)
	run, err := sys.Run(ctx, t)
	if err != nil {
		return 0, err
	}
	if err := run.Wait(ctx); err != nil {
		return 0, err
	}
	return sum, nil
}
