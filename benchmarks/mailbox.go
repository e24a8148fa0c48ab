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
type counterActor struct {
	n, want int64
	burn    int
	done    chan struct{}
	sink    int64
}

func (c *counterActor) Receive(ctx actor.Context) {
	if v, ok := ctx.Message().(int64); ok {
		if c.burn > 0 {
			c.sink += spin(c.burn, v)
		}
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
	n := e.n(5_000_000)
	raw, err := best(e.rounds, n, func() (time.Duration, error) {
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
	})
	if err != nil {
		return nil, err
	}
	// sluiceHop sends n messages to a sluice actor with a Block(1024)
	// mailbox, through send.
	sluiceHop := func(send func(sys *actors.System, ref *actors.Ref, v int64) error) (float64, error) {
		return best(e.rounds, n, func() (time.Duration, error) {
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
		})
	}
	block, err := sluiceHop(func(_ *actors.System, ref *actors.Ref, v int64) error { return ref.Send(ctx, v) })
	if err != nil {
		return nil, err
	}
	post, err := sluiceHop(func(sys *actors.System, ref *actors.Ref, v int64) error {
		sys.Root().Send(ref.PID(), v) // protoactor's send path into sluice's mailbox
		return nil
	})
	if err != nil {
		return nil, err
	}
	topo, err := best(e.rounds, n, func() (time.Duration, error) {
		sys, err := actors.NewSystem(actors.Config{Name: "hop"})
		if err != nil {
			return 0, err
		}
		defer sys.Stop(ctx)
		var count int64
		t := operators.NewTopology("hop")
		src := operators.Source(t, "src", operators.Generate(int64(n), func(i int64) int64 { return i }))
		operators.Sink(src, "sink", operators.SinkFunc(func(int64) error { count++; return nil }), operators.NoFusion())
		start := time.Now()
		run, err := sys.Run(ctx, t)
		if err != nil {
			return 0, err
		}
		if err := run.Wait(ctx); err != nil {
			return 0, err
		}
		if count != int64(n) {
			return 0, fmt.Errorf("topology hop delivered %d of %d", count, n)
		}
		return time.Since(start), nil
	})
	if err != nil {
		return nil, err
	}
	rRaw := Result{Name: "hop/protoactor-default", Value: raw, Unit: "msgs/s", Note: "root.Send into the default unbounded mailbox"}
	return []Result{
		rRaw,
		Result{Name: "hop/sluice-block-send", Value: block, Unit: "msgs/s", Note: "Ref.Send (waits when full) into Block(1024)"}.against(rRaw),
		Result{Name: "hop/sluice-block-post", Value: post, Unit: "msgs/s", Note: "root.Send into Block(1024), protoactor's path"}.against(rRaw),
		Result{Name: "hop/sluice-topology-block", Value: topo, Unit: "records/s", Note: "source -> sink actor, batches of 256, credits"}.against(rRaw),
	}, nil
}

// overloadReport is what an overload child prints.
type overloadReport struct {
	Case      string  `json:"case"`
	Delivered int64   `json:"delivered"`
	Dropped   int64   `json:"dropped"`
	Seconds   float64 `json:"seconds"`
	// PeakRSSKiB is the child's own peak RSS (VmHWM), 0 where unknown.
	PeakRSSKiB int64 `json:"peak_rss_kib"`
}

var overloadCases = []string{"protoactor-unbounded", "sluice-block", "sluice-drop-oldest", "sluice-spill"}

// benchOverload runs each case in a child process of its own and reports its
// peak RSS.
func benchOverload(ctx context.Context, e *env) ([]Result, error) {
	n := e.n(10_000_000)
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	burn := calibrateBurn()
	var out []Result
	var base Result
	for _, c := range overloadCases {
		cmd := exec.CommandContext(ctx, self, "-child", "overload", "-child-case", c, "-child-n", fmt.Sprint(n), "-child-burn", fmt.Sprint(burn))
		cmd.Stderr = os.Stderr
		raw, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("overload %s: %w", c, err)
		}
		var rep overloadReport
		if err := json.Unmarshal(raw, &rep); err != nil {
			return nil, fmt.Errorf("overload %s: child said %q: %w", c, raw, err)
		}
		rss := float64(rep.PeakRSSKiB) / 1024
		if rss == 0 { // no /proc: rusage, which may count the parent's peak
			if ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage); ru != nil {
				rss = float64(ru.Maxrss) / 1024 // KiB on Linux
			}
		}
		r := Result{Name: "overload/" + c + "/peak-rss", Value: rss, Unit: "MiB",
			Note: fmt.Sprintf("%d msgs, consumer ~10x slower: delivered %d, dropped %d, %.1fs", n, rep.Delivered, rep.Dropped, rep.Seconds)}
		if c == "protoactor-unbounded" {
			base = r
		} else {
			r = r.against(base)
		}
		out = append(out, r)
	}
	return out, nil
}

// calibrateBurn finds the spin count that makes the consumer about ten
// times slower than a sluice Ref.Send.
func calibrateBurn() int {
	const probe = 200_000
	start := time.Now()
	var s int64
	for i := int64(0); i < probe; i++ {
		s += spin(100, i)
	}
	perHundred := time.Since(start) / probe
	_ = s
	target := 2 * time.Microsecond // ~10x a Send on this class of machine
	return max(1, int(100*target/max(perHundred, 1)))
}

func overloadChild(c string, n int64, burn int) error {
	ctx := context.Background()
	start := time.Now()
	rep := overloadReport{Case: c}
	done := make(chan struct{})
	cons := &counterActor{burn: burn, done: done}
	switch c {
	case "protoactor-unbounded":
		sys := quietSystem()
		root := actor.NewRootContext(sys, nil)
		cons.want = n
		pid := root.Spawn(actor.PropsFromProducer(func() actor.Actor { return cons }))
		for i := int64(0); i < n; i++ {
			root.Send(pid, i)
		}
		<-done
		rep.Delivered = cons.n
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
