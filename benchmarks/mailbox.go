package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
)

func quietSystem() *actor.ActorSystem {
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
}

// counterActor counts int64 messages and closes done at want.
// overloadStall is how long a protoactor baseline of the overload
// benchmark may consume nothing before it is reported as hung.
const overloadStall = 10 * time.Second

type counterActor struct {
	n, want int64
	burn    int
	done    chan struct{}
	sink    int64
	seen    atomic.Int64 // n, for a watchdog in another goroutine
}

func (c *counterActor) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(overloadEnd); ok {
		close(c.done)
		return
	}
	if v, ok := ctx.Message().(int64); ok {
		if c.burn > 0 {
			c.sink += spin(c.burn, v)
		}
		c.seen.Add(1)
		if c.n++; c.n == c.want {
			close(c.done)
		}
	}
}

// spin does k rounds of cheap arithmetic: the consumer's "work".
//
//go:noinline
func spin(k int, v int64) int64 {
	x := v
	for i := 0; i < k; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x & 1
}

func benchHop(ctx context.Context, e *env) ([]Result, error) {
	n := e.n(5_000_000)   // messages, one record each
	nb := e.n(20_000_000) // records, in batches
	raw := timedCase{n, func() (time.Duration, error) {
		sys := quietSystem()
		defer sys.Shutdown()
		root := actor.NewRootContext(sys, nil)
		c := &counterActor{want: int64(n), done: make(chan struct{})}
		pid := root.Spawn(actor.PropsFromProducer(func() actor.Actor { return c }))
		start := time.Now()
		for i := int64(0); i < int64(n); i++ {
			root.Send(pid, i)
		}
		<-c.done
		return time.Since(start), nil
	}}
	// sluiceHop sends n messages to a sluice actor with a Block(1024)
	// mailbox, through send. (protoactor's own send path, root.Send, is not
	// measured: a Block mailbox refuses what it posts beyond the capacity,
	// so that it would not deliver n.)
	sluiceHop := func(send func(sys *actors.System, ref *actors.Ref, v int64) error) timedCase {
		return timedCase{n, func() (time.Duration, error) {
			sys, err := actors.NewSystem(actors.Config{Name: "hop"})
			if err != nil {
				return 0, err
			}
			defer sys.Stop(ctx)
			c := &counterActor{want: int64(n), done: make(chan struct{})}
			ref, err := sys.Spawn("counter", func() actor.Actor { return c }, actors.Mailbox(mailbox.Block(1024)))
			if err != nil {
				return 0, err
			}
			start := time.Now()
			for i := int64(0); i < int64(n); i++ {
				if err := send(sys, ref, i); err != nil {
					return 0, err
				}
			}
			<-c.done
			return time.Since(start), nil
		}}
	}
	block := sluiceHop(func(_ *actors.System, ref *actors.Ref, v int64) error { return ref.Send(ctx, v) })
	topoHop := func(topt ...operators.TopologyOption) timedCase {
		return timedCase{nb, func() (time.Duration, error) {
			sys, err := actors.NewSystem(actors.Config{Name: "hop"})
			if err != nil {
				return 0, err
			}
			defer sys.Stop(ctx)
			var count int64
			t := operators.NewTopology("hop", topt...)
			src := operators.Source(t, "src", operators.Generate(int64(nb), hopGen))
			operators.Sink(src, "sink", operators.SinkFunc(hopSinkOf(&count)), operators.NoFusion())
			_, d, err := runTimed(ctx, sys, t)
			if err != nil {
				return 0, err
			}
			if count != int64(nb) {
				return 0, fmt.Errorf("topology hop delivered %d of %d", count, nb)
			}
			return d, nil
		}}
	}
	chanHopOf := func(batch int, recycle bool) timedCase {
		return timedCase{nb, func() (time.Duration, error) {
			start := time.Now()
			if got := batchedChannelHop(nb, batch, benchInFlight/batch, recycle); got != int64(nb) {
				return 0, fmt.Errorf("channel hop delivered %d of %d", got, nb)
			}
			return time.Since(start), nil
		}}
	}
	rawHop := func(recycle bool) timedCase {
		return timedCase{nb, func() (time.Duration, error) {
			start := time.Now()
			got, err := protoactorBatchHop(nb, benchBatch, recycle)
			if err != nil {
				return 0, err
			}
			if got != int64(nb) {
				return 0, fmt.Errorf("protoactor batch hop delivered %d of %d", got, nb)
			}
			return time.Since(start), nil
		}}
	}
	// Every round runs each case once (interleaved), so that a ratio
	// compares cases measured in the same states of the machine.
	bests, err := interleaved(e.rounds, []timedCase{
		raw, block, topoHop(), topoHop(operators.BatchSize(bigBatch)),
		chanHopOf(bigBatch, false), chanHopOf(bigBatch, true),
		chanHopOf(benchBatch, false), chanHopOf(benchBatch, true), rawHop(false), rawHop(true),
	})
	if err != nil {
		return nil, err
	}
	v := func(i int) float64 { return bests[i].rate }
	rawRate, blockRate, topo, topoBig := v(0), v(1), v(2), v(3)
	bigBases := [2]float64{v(4), v(5)}          // channels of bigBatch records, allocating and recycled
	bases := [4]float64{v(6), v(7), v(8), v(9)} // channels, channels recycled, protoactor, protoactor recycled
	rRaw := Result{Name: "hop/base-protoactor-default", Value: rawRate, Unit: "msgs/s", Note: "root.Send, one message each, into protoactor's default unbounded mailbox"}
	chanNote := fmt.Sprintf("two goroutines joined by chan []int64 of %d-record batches, %d slots; generator and sink functions per record, as the topology", benchBatch, benchInFlight/benchBatch)
	rChan := Result{Name: "hop/base-channels-batched", Value: bases[0], Unit: "records/s", Note: chanNote + "; a fresh array per batch"}
	rChanR := Result{Name: "hop/base-channels-batched-recycled", Value: bases[1], Unit: "records/s", Note: chanNote + "; the receiver hands arrays back"}
	rawNote := fmt.Sprintf("root.Send of one []int64 of %d records per message, default mailbox", benchBatch)
	rRawBatch := Result{Name: "hop/base-protoactor-batched", Value: bases[2], Unit: "records/s", Note: rawNote + "; a fresh array per batch"}
	rRawBatchR := Result{Name: "hop/base-protoactor-batched-recycled", Value: bases[3], Unit: "records/s", Note: rawNote + "; the receiver hands arrays back"}
	bigNote := fmt.Sprintf("two goroutines joined by chan []int64 of %d-record batches, %d slots; generator and sink functions per record", bigBatch, benchInFlight/bigBatch)
	rBig := Result{Name: fmt.Sprintf("hop/base-channels-batched-%d", bigBatch), Value: bigBases[0], Unit: "records/s", Note: bigNote + "; a fresh array per batch"}
	rBigR := Result{Name: fmt.Sprintf("hop/base-channels-batched-%d-recycled", bigBatch), Value: bigBases[1], Unit: "records/s", Note: bigNote + "; the receiver hands arrays back"}
	topoR := Result{Name: "hop/sluice-topology", Value: topo, Unit: "records/s", Note: "source -> sink actor, batches of 256, 4096 credits"}
	return []Result{
		rRaw, rChan, rChanR, rRawBatch, rRawBatchR,
		Result{Name: "hop/sluice-block-send-vs-protoactor-default", Value: blockRate, Unit: "msgs/s", Note: "Ref.Send (waits when full) into Block(1024) (aim >= 1.0x)"}.against(rRaw).
			spread(roundRatios(bests[1], bests[0])),
		// Against each baseline's faster configuration (bestBase).
		topoR.rename("hop/sluice-topology-vs-channels-batched", "aim >= 0.8x; base: the faster of "+rChan.Name+" and "+rChanR.Name).against(bestBase(rChan, rChanR)).
			spread(roundRatios(bests[2], bests[6], bests[7])),
		topoR.rename("hop/sluice-topology-vs-protoactor-batched", "base: the faster of "+rRawBatch.Name+" and "+rRawBatchR.Name).against(bestBase(rRawBatch, rRawBatchR)).
			spread(roundRatios(bests[2], bests[8], bests[9])),
		rBig, rBigR,
		Result{Name: fmt.Sprintf("hop/sluice-topology-batch-%d-vs-channels-batched-%d", bigBatch, bigBatch), Value: topoBig, Unit: "records/s",
			Note: fmt.Sprintf("context: the topology hop with operators.BatchSize(%d) (the default is %d), %d credits; base: the faster of %s and %s", bigBatch, benchBatch, benchInFlight, rBig.Name, rBigR.Name)}.against(bestBase(rBig, rBigR)),
	}, nil
}

// The hop's per-record work, called through function values as the
// topology calls its generator and sink functions, in every variant: the
// topology's sink is SinkFunc(hopSinkOf(&count)), the baselines call the
// same function for every record.
var (
	hopGen    = func(i int64) int64 { return i }
	hopSinkOf = func(count *int64) func(int64) error { return func(int64) error { *count++; return nil } }
)

// batchedChannelHop sends 0..n-1 from one goroutine to another in
// batches of up to batch records over a channel of slots batches, and
// returns how many records arrived. recycle: the receiver hands each array
// back to the sender (batchPool); else every batch is a fresh array.
func batchedChannelHop(n, batch, slots int, recycle bool) int64 {
	pool := newBatchPool(recycle, slots)
	ch := make(chan []int64, slots)
	done := make(chan int64)
	go func() {
		var count int64
		sink := hopSinkOf(&count)
		for b := range ch {
			for _, v := range b {
				if sink(v) != nil {
					panic("the hop's sink failed")
				}
			}
			pool.put(b)
		}
		done <- count
	}()
	buf := pool.get(batch)
	for i := int64(0); i < int64(n); i++ {
		if buf = append(buf, hopGen(i)); len(buf) == batch {
			ch <- buf
			buf = pool.get(batch)
		}
	}
	if len(buf) > 0 {
		ch <- buf
	}
	close(ch)
	return <-done
}

// protoactorBatchHop sends 0..n-1 to a protoactor actor in batches of up
// to batch records, one per message, and returns how many arrived.
// recycle: as batchedChannelHop's.
func protoactorBatchHop(n, batch int, recycle bool) (int64, error) {
	pool := newBatchPool(recycle, benchInFlight/batch)
	sys := quietSystem()
	defer sys.Shutdown()
	root := actor.NewRootContext(sys, nil)
	done := make(chan int64, 1)
	var count int64
	sink := hopSinkOf(&count)
	pid := root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case []int64:
			for _, v := range m {
				if sink(v) != nil {
					panic("the hop's sink failed")
				}
			}
			pool.put(m)
		case rawEnd:
			done <- count
		}
	}))
	buf := pool.get(batch)
	for i := int64(0); i < int64(n); i++ {
		if buf = append(buf, hopGen(i)); len(buf) == batch {
			root.Send(pid, buf)
			buf = pool.get(batch)
		}
	}
	if len(buf) > 0 {
		root.Send(pid, buf)
	}
	root.Send(pid, rawEnd{})
	select {
	case c := <-done:
		return c, nil
	case <-time.After(5 * time.Minute):
		return 0, fmt.Errorf("protoactor batch hop did not finish")
	}
}

// overloadReport is what an overload child prints.
type overloadReport struct {
	Case      string  `json:"case"`
	Delivered int64   `json:"delivered"`
	Dropped   int64   `json:"dropped"`
	Seconds   float64 `json:"seconds"`
	// PeakRSSKiB is the child's own peak RSS (VmHWM), 0 where unknown.
	PeakRSSKiB int64 `json:"peak_rss_kib"`
	// Hung: the case did not finish in time (see overloadChild).
	Hung bool `json:"hung,omitempty"`
}

var overloadCases = []string{"protoactor-unbounded", "protoactor-bounded", "protoactor-bounded-dropping", "sluice-block", "sluice-drop-oldest", "sluice-spill"}

// overloadEnd follows the last message of a protoactor overload case: the
// consumer has seen everything that was not dropped when it arrives.
type overloadEnd struct{}

// benchOverload runs each case in a child process of its own and reports its
// peak RSS.
func benchOverload(ctx context.Context, e *env) ([]Result, error) {
	n := e.n(10_000_000)
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cal := calibrateOverload()
	slow := fmt.Sprintf("consumer %.1fx slower than the producer (measured: producer %.2f M msgs/s, consumer %.2f M msgs/s)",
		cal.producer/cal.consumer, cal.producer/1e6, cal.consumer/1e6)
	var out []Result
	var base Result
	for _, c := range overloadCases {
		cmd := exec.CommandContext(ctx, self, childFlag, "-case", c, "-n", fmt.Sprint(n), "-burn", fmt.Sprint(cal.burn))
		cmd.Stderr = os.Stderr
		raw, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("overload %s: %w", c, err)
		}
		var rep overloadReport
		if err := json.Unmarshal(raw, &rep); err != nil {
			return nil, fmt.Errorf("overload %s: child said %q: %w", c, raw, err)
		}
		if !rep.Hung && rep.Delivered+rep.Dropped != int64(n) {
			return nil, fmt.Errorf("overload %s: delivered %d + dropped %d != %d", c, rep.Delivered, rep.Dropped, n)
		}
		rss := float64(rep.PeakRSSKiB) / 1024
		if rss == 0 { // no /proc: rusage, which may count the parent's peak
			if ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage); ru != nil {
				rss = float64(ru.Maxrss) / 1024 // KiB on Linux
			}
		}
		name := "overload/" + c + "/peak-rss"
		if strings.HasPrefix(c, "protoactor-") {
			name = "overload/base-" + c + "/peak-rss"
		}
		r := Result{Name: name, Value: rss, Unit: "MiB",
			Note: fmt.Sprintf("%d msgs, %s: delivered %d, dropped %d, %.1fs", n, slow, rep.Delivered, rep.Dropped, rep.Seconds)}
		if rep.Hung {
			r.Note = fmt.Sprintf("%d msgs, %s: HUNG: nothing consumed for %v, after %.0fs (its sender blocked in the mailbox's make-room race), peak RSS until then", n, slow, overloadStall, rep.Seconds)
		}
		switch c {
		case "protoactor-bounded":
			base = r
		case "protoactor-unbounded", "protoactor-bounded-dropping":
		default:
			r.Name = "overload/" + c + "-vs-protoactor-bounded/peak-rss"
			r.Note += " (aim <= the baseline + 16 MiB)"
			r = r.against(base)
		}
		out = append(out, r)
	}
	return out, nil
}

// overloadCalibration: the spin count of the consumer's work per message,
// and the rates it gives, measured on this machine now.
type overloadCalibration struct {
	burn               int
	producer, consumer float64 // messages/s
}

// calibrateOverload measures the producer's rate (root.Send into a
// protoactor actor that does nothing) and picks the consumer's work so that
// the consumer is about ten times slower, then measures the consumer's
// rate with that work (the same counting actor, fed as fast as it goes).
func calibrateOverload() overloadCalibration {
	const probe = 500_000
	rate := func(burn int) (send, consume float64) {
		sys := quietSystem()
		defer sys.Shutdown()
		root := actor.NewRootContext(sys, nil)
		c := &counterActor{want: probe, burn: burn, done: make(chan struct{})}
		pid := root.Spawn(actor.PropsFromProducer(func() actor.Actor { return c }))
		start := time.Now()
		for i := int64(0); i < probe; i++ {
			root.Send(pid, i)
		}
		sent := time.Since(start)
		<-c.done
		return probe / sent.Seconds(), probe / time.Since(start).Seconds()
	}
	producer, _ := rate(0)
	start := time.Now()
	var s int64
	for i := int64(0); i < probe/10; i++ {
		s += spin(100, i)
	}
	perHundred := time.Since(start) / (probe / 10)
	_ = s
	target := time.Duration(10 * float64(time.Second) / producer)
	burn := max(1, int(100*target/max(perHundred, 1)))
	_, consumer := rate(burn)
	// The spin's cost alone misses the actor's own cost per message: correct
	// the work once by the slowness measured, and measure again.
	if slow := producer / consumer; slow < 8 || slow > 12 {
		burn = max(1, int(float64(burn)*10/slow))
		_, consumer = rate(burn)
	}
	return overloadCalibration{burn: burn, producer: producer, consumer: consumer}
}

func overloadChild(c string, n int64, burn int) error {
	ctx := context.Background()
	start := time.Now()
	rep := overloadReport{Case: c}
	done := make(chan struct{})
	cons := &counterActor{burn: burn, done: done}
	switch c {
	case "protoactor-unbounded", "protoactor-bounded", "protoactor-bounded-dropping":
		sys := quietSystem()
		root := actor.NewRootContext(sys, nil)
		cons.want = -1
		var opts []actor.PropsOption
		switch c {
		case "protoactor-bounded": // the sender waits when it is full
			opts = append(opts, actor.WithMailbox(actor.Bounded(1024)))
		case "protoactor-bounded-dropping": // drops the oldest when full
			opts = append(opts, actor.WithMailbox(actor.BoundedDropping(1024)))
		}
		pid := root.Spawn(actor.PropsFromProducer(func() actor.Actor { return cons }, opts...))
		go func() { // ends with the process
			for i := int64(0); i < n; i++ {
				root.Send(pid, i)
			}
			root.Send(pid, overloadEnd{}) // pushed last: never the one dropped
		}()
		// protoactor's BoundedDropping checks the queue's length and then
		// takes its oldest message to make room: when the consumer empties
		// the queue in between, the sender blocks for ever. A case that
		// stops moving (no message consumed for overloadStall) is reported
		// as hung, with its peak RSS so far.
		tick := time.NewTicker(overloadStall / 20)
		defer tick.Stop()
		last, moved := int64(-1), time.Now()
		for waiting := true; waiting; {
			select {
			case <-done:
				rep.Delivered, rep.Dropped = cons.n, n-cons.n
				waiting = false
			case now := <-tick.C:
				if s := cons.seen.Load(); s != last {
					last, moved = s, now
				} else if now.Sub(moved) >= overloadStall {
					rep.Hung, waiting = true, false
				}
			}
		}
	default:
		cfg := mailbox.Block(1024)
		var stopStore func()
		switch c {
		case "sluice-drop-oldest":
			cfg = mailbox.DropOldest(1024)
		case "sluice-spill":
			dir, err := os.MkdirTemp("", "sluice-overload-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			st, err := mailbox.OpenSpillStore(filepath.Join(dir, "spill.db"))
			if err != nil {
				return err
			}
			stopStore = func() { st.Close() }
			cfg = mailbox.Spill(1024, mailbox.SpillOptions{Store: st, Queue: "overload", Codec: mailbox.NewTypeCodec().Register("i", int64(0))})
		}
		sys, err := actors.NewSystem(actors.Config{Name: "overload"})
		if err != nil {
			return err
		}
		cons.want = -1
		ref, err := sys.Spawn("consumer", func() actor.Actor { return cons }, actors.Mailbox(cfg))
		if err != nil {
			return err
		}
		for i := int64(0); i < n; i++ {
			if err := ref.Send(ctx, i); err != nil && !errors.Is(err, mailbox.ErrDropped) {
				return err
			}
		}
		// Wait until every record is delivered or dropped.
		for {
			st := ref.Stats()
			if st.Delivered+st.DroppedTotal() == n {
				rep.Delivered, rep.Dropped = st.Delivered, st.DroppedTotal()
				break
			}
			select {
			case <-time.After(10 * time.Millisecond):
			case <-done:
			}
		}
		if err := sys.Stop(ctx); err != nil {
			return err
		}
		if stopStore != nil {
			stopStore()
		}
	}
	rep.Seconds = time.Since(start).Seconds()
	rep.PeakRSSKiB = peakRSSKiB()
	return json.NewEncoder(os.Stdout).Encode(rep)
}

// peakRSSKiB is this process's own peak resident set (VmHWM). The rusage a
// parent gets from wait4 is no good here: Go starts children with
// CLONE_VM, and the kernel then counts the parent's peak as the child's.
func peakRSSKiB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kib int64
			fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), &kib)
			return kib
		}
	}
	return 0
}

// benchSpill compares the spill path with an in-memory mailbox: the
// consumer is held until every message was sent, so that under Spill all but
// the first capacity messages go through disk.
// measureSpill sends n records to a consumer through a Spill mailbox
// (spill; else a memory one), in a store of its own fsynced per group
// (durable; else a temporary one), and returns the records/s.
func measureSpill(ctx context.Context, e *env, n int, spill, durable bool) (float64, error) {
	return best(e.rounds, n, func() (time.Duration, error) {
		cfg := actors.Config{Name: "spill"}
		if durable { // a store file of its own, fsynced on every group
			dir, err := os.MkdirTemp("", "sluice-spill-bench-")
			if err != nil {
				return 0, err
			}
			defer os.RemoveAll(dir)
			cfg.Store = filepath.Join(dir, "store.db")
		}
		sys, err := actors.NewSystem(cfg)
		if err != nil {
			return 0, err
		}
		defer sys.Stop(ctx)
		mcfg := mailbox.Block(n + 1)
		if spill {
			st, err := sys.SpillStore()
			if err != nil {
				return 0, err
			}
			mcfg = mailbox.Spill(1024, mailbox.SpillOptions{Store: st, Queue: "bench", Codec: mailbox.NewTypeCodec().Register("i", int64(0))})
		}
		gate := make(chan struct{})
		c := &counterActor{want: int64(n), done: make(chan struct{})}
		ref, err := sys.Spawn("consumer", func() actor.Actor { return &gated{gate: gate, inner: c} }, actors.Mailbox(mcfg))
		if err != nil {
			return 0, err
		}
		start := time.Now()
		if err := ref.Send(ctx, "hold"); err != nil {
			return 0, err
		}
		for i := int64(0); i < int64(n); i++ {
			if err := ref.Send(ctx, i); err != nil {
				return 0, err
			}
		}
		close(gate)
		<-c.done
		d := time.Since(start)
		if spill && ref.Stats().Spilled < int64(n)/2 {
			return 0, fmt.Errorf("spill benchmark: only %d of %d went through the spill", ref.Stats().Spilled, n)
		}
		return d, nil
	})
}

// spillPath is the durable spill path's records/s (benchIngress compares with it).
func spillPath(ctx context.Context, e *env, n int) (float64, error) {
	return measureSpill(ctx, e, n, true, true)
}

func benchSpill(ctx context.Context, e *env) ([]Result, error) {
	n := e.n(1_000_000)
	measure := func(spill, durable bool) (float64, error) { return measureSpill(ctx, e, n, spill, durable) }
	mem, err := measure(false, false)
	if err != nil {
		return nil, err
	}
	temp, err := measure(true, false)
	if err != nil {
		return nil, err
	}
	durable, err := measure(true, true)
	if err != nil {
		return nil, err
	}
	edge := func(cfg mailbox.Config) (float64, error) {
		records := 20 * n
		return best(e.rounds, records, func() (time.Duration, error) {
			sys, err := actors.NewSystem(actors.Config{Name: "spill-edge"})
			if err != nil {
				return 0, err
			}
			defer sys.Stop(ctx)
			gate := make(chan struct{})
			var got int64
			t := operators.NewTopology("spill-edge")
			src := operators.Source(t, "src", operators.Generate(int64(records), func(i int64) int64 { return i }))
			operators.Sink(src, "sink", operators.SinkFunc(func(int64) error { <-gate; got++; return nil }), operators.Input(cfg))
			start := time.Now()
			run, err := sys.Run(ctx, t)
			if err != nil {
				return 0, err
			}
			for emitted := int64(0); emitted < int64(records); { // hold the sink until the source is done
				for _, st := range run.Stats() {
					if st.Name == "src" {
						emitted = st.Out
					}
				}
				select {
				case <-run.Done():
					emitted = int64(records)
				case <-time.After(time.Millisecond):
				}
			}
			close(gate)
			if err := run.Wait(ctx); err != nil {
				return 0, err
			}
			if got != int64(records) {
				return 0, fmt.Errorf("spill edge: delivered %d of %d", got, records)
			}
			return time.Since(start), nil
		})
	}
	edgeMem, err := edge(mailbox.DropNewest(20*n + 1))
	if err != nil {
		return nil, err
	}
	edgeSpill, err := edge(mailbox.Spill(4096, mailbox.SpillOptions{}))
	if err != nil {
		return nil, err
	}
	rMem := Result{Name: "spill/in-memory", Value: mem, Unit: "msgs/s", Note: "Block mailbox large enough for everything"}
	rEdgeMem := Result{Name: "spill/edge-in-memory", Value: edgeMem, Unit: "records/s", Note: "topology edge, mailbox large enough for everything, sink held until the source is done"}
	return []Result{rEdgeMem,
		Result{Name: "spill/edge-bbolt", Value: edgeSpill, Unit: "records/s", Note: "topology edge with Spill(4096), batches of 256 records"}.against(rEdgeMem),
		rMem,
		Result{Name: "spill/bbolt-temporary", Value: temp, Unit: "msgs/s", Note: "Spill(1024) into the system's temporary store (no fsync)"}.against(rMem),
		Result{Name: "spill/bbolt-durable", Value: durable, Unit: "msgs/s", Note: "Spill(1024) into a store file, fsync per group of 4096"}.against(rMem),
	}, nil
}

// gated holds its first message ("hold") until gate closes.
type gated struct {
	gate  chan struct{}
	inner *counterActor
	held  atomic.Bool
}

func (g *gated) Receive(ctx actor.Context) {
	if s, ok := ctx.Message().(string); ok && s == "hold" {
		<-g.gate
		return
	}
	g.inner.Receive(ctx)
}
