package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
)

// benchCheckpoint measures a keyed counting job with checkpoints every
// second against the same job without checkpoints: over 1 000 keys, over
// 1 M keys (the memory backend's changelog: each checkpoint writes the
// keys changed since the one before), and over 1 M keys with the count
// back-pressured by a slow consumer. Each checkpointed run lasts at least
// 20 s (at -scale 1), so that it takes about 20 checkpoints; the results
// give the checkpoints' p50, p99 and slowest durations and the bytes the
// process wrote per checkpoint.
func benchCheckpoint(ctx context.Context, e *env) ([]Result, error) {
	var out []Result
	for _, c := range []struct {
		name      string
		keys      int64
		changelog bool
		slow      bool
	}{
		{"checkpoint", 1000, false, false},
		{"checkpoint-1m-keys", 1_000_000, true, false},
		{"checkpoint-1m-keys-backpressure", 1_000_000, true, true},
	} {
		if e.cases != nil && !e.cases.MatchString(c.name) {
			continue
		}
		rs, err := checkpointCase(ctx, e, c.name, c.keys, c.changelog, c.slow)
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
	}
	return out, nil
}

// checkpointMinRun is how long a checkpointed run lasts at least at -scale
// 1: the records a run counts are sized from a calibration probe and then
// from one run of that size, both without checkpoints, to take this long
// without checkpoints.
const checkpointMinRun = 20 * time.Second

// slowCountRounds is the work per update of the back-pressured case's
// consumer (rounds of xorshift): several times the source's cost per
// record, so that the count's input stays full.
const slowCountRounds = 60

// checkpointCase runs the keyed count over keys keys with and without
// checkpoints every second, alternating the two in each of the rounds,
// and reports the medians, the p50, p99 and slowest of every completed
// checkpoint's duration, and the bytes the process wrote per checkpoint
// (write(2) bytes from /proc/self/io during the checkpointed runs, less
// those of the runs without, over the checkpoints completed). changelog:
// the checkpointed runs keep a changelog (the memory backend's incremental
// checkpoints). slow: the count emits every update into a consumer slower
// than the source, fused with it, so the count's input is full
// (back-pressure up to the source) while checkpoints are taken.
func checkpointCase(ctx context.Context, e *env, name string, keys int64, changelog, slow bool) ([]Result, error) {
	var durations []time.Duration
	run := func(n int, interval time.Duration) (time.Duration, int64, int64, error) {
		dir, err := os.MkdirTemp("", "sluice-cp-bench-")
		if err != nil {
			return 0, 0, 0, err
		}
		defer os.RemoveAll(dir)
		sys, err := actors.NewSystem(actors.Config{Name: "cp-bench", Store: filepath.Join(dir, "store.db")})
		if err != nil {
			return 0, 0, 0, err
		}
		defer sys.Stop(ctx)
		var opts []operators.TopologyOption
		if interval > 0 {
			opts = append(opts, operators.Checkpoints(interval))
			if changelog {
				opts = append(opts, operators.StateBackend(operators.MemoryState().Changelog(filepath.Join(dir, "changelog"))))
			}
		}
		var sum int64
		var updates atomic.Int64
		t := operators.NewTopology("cp-bench", opts...)
		src := operators.Source(t, "numbers", operators.Generate(int64(n), func(i int64) int64 { return i }))
		by := operators.KeyBy(src, "by-key", func(v int64) int64 { return v % keys }, operators.Parallelism(2))
		if slow {
			// Every update goes through the slow map, fused with the count:
			// the count's input is where records wait.
			counts := operators.Count(by, "count")
			slowed := operators.Map(counts, "slow", func(kv operators.KV[int64, int64]) operators.KV[int64, int64] {
				kv.Value = work(kv.Value, slowCountRounds)
				return kv
			})
			operators.Sink(slowed, "updates", operators.SinkFunc(func(operators.KV[int64, int64]) error { updates.Add(1); return nil }))
		} else {
			counts := operators.Count(by, "count", operators.Emit(operators.EmitAtEnd))
			operators.Sink(counts, "sum", operators.SinkFunc(func(kv operators.KV[int64, int64]) error { sum += kv.Value; return nil }), operators.Parallelism(1))
		}
		runtime.GC()
		w0 := writtenBytes()
		start := time.Now()
		job, err := sys.Run(ctx, t)
		if err != nil {
			return 0, 0, 0, err
		}
		if err := job.Wait(ctx); err != nil {
			return 0, 0, 0, err
		}
		d := time.Since(start)
		written := writtenBytes() - w0
		if !slow && sum != int64(n) {
			return 0, 0, 0, fmt.Errorf("checkpoint bench %s: counted %d of %d", name, sum, n)
		}
		if slow && updates.Load() != int64(n) {
			return 0, 0, 0, fmt.Errorf("checkpoint bench %s: %d updates of %d records", name, updates.Load(), n)
		}
		st := operators.CheckpointStatsOf(job)
		if interval > 0 {
			for _, h := range st.History {
				durations = append(durations, h.Duration)
			}
		}
		return d, st.Completed, written, nil
	}
	// Calibrate: size the runs to last checkpointMinRun (scaled) without
	// checkpoints, and at least the old fixed 30 M records at -scale 1.
	// The probe reaches every key several times, so that its rate is not
	// that of a map still growing (with 1 M keys a probe of 2 M records
	// gave runs of 9 s instead of 20).
	probe := max(e.n(2_000_000), e.n(int(10*keys)))
	if slow {
		probe = max(e.n(200_000), e.n(int(2*keys)))
	}
	minRun := time.Duration(float64(checkpointMinRun) * e.scale)
	d, _, _, err := run(probe, 0)
	if err != nil {
		return nil, err
	}
	n := max(int(float64(probe)/d.Seconds()*minRun.Seconds()), probe)
	if !slow {
		n = max(n, e.n(30_000_000))
	}
	// The probe runs slower than a long run (its table still grows, the
	// machine is not warm), so runs sized from it alone fell short of
	// minRun (13.9 s with 1 M keys, session 20): one run of that size
	// without checkpoints sizes them again, to a third over minRun, as
	// this machine's speed moves by 20-30 % within minutes (a margin of a
	// tenth, applied only under minRun, gave rounds of 17.7 s, session 21).
	if d, _, _, err = run(n, 0); err != nil {
		return nil, err
	}
	if target := minRun * 4 / 3; d < target {
		n = int(float64(n) / d.Seconds() * target.Seconds())
	}
	var nones, withs, ratios []float64
	var completed, writtenWith, writtenNone int64
	var withTime time.Duration
	for r := range max(e.rounds, 1) {
		var none, with float64
		for k := range 2 {
			interval := time.Duration(0)
			if (r+k)%2 == 1 {
				interval = time.Second
			}
			d, c, w, err := run(n, interval)
			if err != nil {
				return nil, err
			}
			if interval == 0 {
				none, writtenNone = float64(n)/d.Seconds(), writtenNone+w
			} else {
				with, completed, writtenWith, withTime = float64(n)/d.Seconds(), completed+c, writtenWith+w, withTime+d
			}
		}
		nones, withs, ratios = append(nones, none), append(withs, with), append(ratios, with/none)
	}
	slices.Sort(durations)
	at := func(q int) time.Duration {
		if len(durations) == 0 {
			return 0
		}
		return durations[min(len(durations)-1, len(durations)*q/100)]
	}
	var perCheckpoint float64
	if completed > 0 {
		perCheckpoint = float64(max(writtenWith-writtenNone, 0)) / float64(completed)
	}
	rounds := len(nones)
	what := fmt.Sprintf("keyed count over %d keys, 2 instances, %d records a run", keys, n)
	if slow {
		what = fmt.Sprintf("keyed count over %d keys, 2 instances, every update into a consumer slower than the source (fused with the count: its input full, back-pressure to the source), %d records a run", keys, n)
	}
	base := Result{Name: name + "/none", Value: median(nones), Unit: "records/s",
		Note: fmt.Sprintf("%s, no checkpoints; median of %d rounds", what, rounds)}
	sr := slices.Sorted(slices.Values(ratios))
	with := Result{Name: name + "/every-1s", Value: median(withs), Unit: "records/s",
		Note: fmt.Sprintf("same job, aligned checkpoints every second into a bbolt store%s: %d completed in %d rounds of %.1f s on average; duration p50 %v, p99 %v, slowest %v; ratio: median of %d alternated rounds, spread %.3f-%.3f",
			map[bool]string{true: " (memory backend with a changelog)"}[changelog], completed, rounds, withTime.Seconds()/float64(rounds),
			at(50).Round(time.Millisecond), at(99).Round(time.Millisecond), at(100).Round(time.Millisecond), len(sr), sr[0], sr[len(sr)-1])}.against(base)
	with.Ratio = median(ratios)
	p99 := Result{Name: name + "/every-1s-p99", Value: float64(at(99).Microseconds()) / 1000, Unit: "ms",
		Note: fmt.Sprintf("p99 of the %d checkpoints' durations, barriers injected to stored (p50 %v, slowest %v; aim <= 500 ms)", len(durations), at(50).Round(time.Millisecond), at(100).Round(time.Millisecond))}
	bytes := Result{Name: name + "/every-1s-bytes-per-checkpoint", Value: perCheckpoint, Unit: "bytes",
		Note: fmt.Sprintf("bytes the process wrote (write(2), /proc/self/io wchar) in the checkpointed runs less those of the runs without, over %d checkpoints: %.1f MiB with, %.1f MiB without", completed, float64(writtenWith)/(1<<20), float64(writtenNone)/(1<<20))}
	return []Result{base, with, p99, bytes}, nil
}

// writtenBytes is what this process has passed to write(2) and its kin
// (wchar of /proc/self/io; 0 where that file is missing).
func writtenBytes() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// benchUnaligned measures a job under Block back-pressure (a consumer
// about ten times slower than the source, its inputs full all the time)
// with unaligned checkpoints every second against the same job without
// checkpoints, and reports how long the checkpoints took.
func benchUnaligned(ctx context.Context, e *env) ([]Result, error) {
	n := e.n(2_000_000)
	type outcome struct {
		completed int64
		last      time.Duration
		worst     time.Duration
		durations []time.Duration // of the checkpoints seen complete
		underLoad int             // of those, completed while the spill held 100 000 records or more
		maxSpill  int64
	}
	// With spill the consumer is slower still (the spill path writes at a
	// few hundred thousand records a second, which bounds the source), so
	// that the spill holds 100 000 records and more.
	// once runs the job one time and returns its duration and what the
	// checkpoints did.
	once := func(spill, slow bool, opts ...operators.TopologyOption) (int, time.Duration, outcome, error) {
		n, rounds := n, 3000
		if slow {
			n, rounds = e.n(1_000_000), 30_000
		}
		var out outcome
		runtime.GC()
		d, err := func() (time.Duration, error) {
			dir, err := os.MkdirTemp("", "sluice-ua-bench-")
			if err != nil {
				return 0, err
			}
			defer os.RemoveAll(dir)
			sys, err := actors.NewSystem(actors.Config{Name: "ua-bench", Store: filepath.Join(dir, "store.db")})
			if err != nil {
				return 0, err
			}
			defer sys.Stop(ctx)
			var sum atomic.Int64
			t := operators.NewTopology("ua-bench", append([]operators.TopologyOption{operators.Capacity(1024)}, opts...)...)
			src := operators.Source(t, "numbers", operators.Generate(int64(n), func(i int64) int64 { return i }))
			by := operators.KeyBy(src, "by-key", func(v int64) int64 { return v % 1000 }, operators.Parallelism(2))
			var copts []operators.AggregateOption
			if spill {
				copts = append(copts, operators.Input(mailbox.Spill(1024, mailbox.SpillOptions{})))
			}
			counts := operators.Count(by, "count", copts...)
			slow := operators.Map(counts, "slow", func(kv operators.KV[int64, int64]) operators.KV[int64, int64] {
				kv.Value = work(kv.Value, rounds)
				return kv
			})
			// The sink is fused with the count (no edge after it): the count's
			// input is where records wait.
			operators.Sink(slow, "updates", operators.SinkFunc(func(operators.KV[int64, int64]) error { sum.Add(1); return nil }))
			start := time.Now()
			run, err := sys.Run(ctx, t)
			if err != nil {
				return 0, err
			}
			out = outcome{}
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			var lastID uint64
			for done := false; !done; {
				select {
				case <-run.Done():
					done = true
				case <-tick.C:
					st := operators.CheckpointStatsOf(run)
					var pending int64
					for _, o := range run.Stats() {
						pending += o.SpillPending
					}
					out.maxSpill = max(out.maxSpill, pending)
					if st.LastID != lastID {
						lastID = st.LastID
						out.durations = append(out.durations, st.LastDuration)
						if pending >= 100_000 {
							out.underLoad++
						}
					}
					if st.LastDuration > out.worst {
						out.worst = st.LastDuration
					}
				}
			}
			if err := run.Wait(ctx); err != nil {
				return 0, err
			}
			d := time.Since(start)
			if sum.Load() != int64(n) {
				return 0, fmt.Errorf("unaligned bench: counted %d of %d", sum.Load(), n)
			}
			st := operators.CheckpointStatsOf(run)
			out.completed, out.last = st.Completed, st.LastDuration
			return d, nil
		}()
		return n, d, out, err
	}
	// Rounds measure the three Block variants in a rotating order (none,
	// aligned, unaligned; then aligned, unaligned, none; ...), so that none
	// always runs first on a machine warming up or loaded by turns; each
	// round gives a ratio against its own none, and the result is the
	// median of those ratios with their spread, beside the median
	// records/s of each variant.
	variants := [3][]operators.TopologyOption{nil, {operators.Checkpoints(time.Second)},
		{operators.Checkpoints(time.Second), operators.UnalignedCheckpoints()}}
	var rates [3][]float64
	var ratios [2][]float64
	var outs [3]outcome
	for r := range max(e.rounds, 1) {
		var round [3]float64
		for k := range 3 {
			v := (r + k) % 3
			m, d, o, err := once(false, false, variants[v]...)
			if err != nil {
				return nil, err
			}
			round[v] = float64(m) / d.Seconds()
			rates[v] = append(rates[v], round[v])
			outs[v].completed += o.completed
			outs[v].worst = max(outs[v].worst, o.worst)
		}
		ratios[0] = append(ratios[0], round[1]/round[0])
		ratios[1] = append(ratios[1], round[2]/round[0])
	}
	none, aligned, unaligned := median(rates[0]), median(rates[1]), median(rates[2])
	ao, uo := outs[1], outs[2]
	spread := func(vs []float64) string {
		s := slices.Sorted(slices.Values(vs))
		return fmt.Sprintf("median of %d rotated rounds, spread %.3f-%.3f", len(s), s[0], s[len(s)-1])
	}
	m, d, so, err := once(true, true, operators.Checkpoints(500*time.Millisecond), operators.UnalignedCheckpoints())
	if err != nil {
		return nil, err
	}
	spilled := float64(m) / d.Seconds()
	// The same slow job with its count's input under Block (back-pressure
	// to the source instead of a spill).
	bm, bd, bo, err := once(false, true, operators.Checkpoints(500*time.Millisecond), operators.UnalignedCheckpoints())
	if err != nil {
		return nil, err
	}
	blocked := float64(bm) / bd.Seconds()
	p99Of := func(ds []time.Duration) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		ds = slices.Sorted(slices.Values(ds))
		return ds[min(len(ds)-1, len(ds)*99/100)]
	}
	p99, bp99 := p99Of(so.durations), p99Of(bo.durations)
	base := Result{Name: "checkpoint/backpressure-none", Value: none, Unit: "records/s", Note: "keyed count and a consumer ~10x slower than the source (Block, capacity 1024), no checkpoints; median of the rounds"}
	withRatio := func(r Result, ratios []float64) Result {
		r = r.against(base)
		r.Ratio = median(ratios) // the median of the rounds' own ratios, not the ratio of medians
		return r
	}
	return []Result{base,
		withRatio(Result{Name: "checkpoint/backpressure-aligned-1s", Value: aligned, Unit: "records/s",
			Note: fmt.Sprintf("aligned checkpoints every second: %d completed in all rounds, slowest seen %v; ratio: %s", ao.completed, ao.worst.Round(time.Millisecond), spread(ratios[0]))}, ratios[0]),
		withRatio(Result{Name: "checkpoint/backpressure-unaligned-1s", Value: unaligned, Unit: "records/s",
			Note: fmt.Sprintf("unaligned checkpoints every second: %d completed in all rounds, slowest seen %v; ratio: %s", uo.completed, uo.worst.Round(time.Millisecond), spread(ratios[1]))}, ratios[1]),
		Result{Name: "checkpoint/spill-unaligned-500ms", Value: spilled, Unit: "records/s",
			Note: fmt.Sprintf("%d records, a consumer 10x slower still, its input spilling (Spill 1024), unaligned checkpoints every 500 ms: %d completed, %d of them while the spill held >= 100k records (at most %d), p99 duration %v", e.n(1_000_000),
				so.completed, so.underLoad, so.maxSpill, p99.Round(time.Millisecond))}.against(base),
		Result{Name: "checkpoint/slow-block-unaligned-500ms", Value: blocked, Unit: "records/s",
			Note: fmt.Sprintf("the same %d records and consumer under Block (capacity 1024, back-pressure to the source), unaligned checkpoints every 500 ms: %d completed, p99 duration %v, slowest %v", e.n(1_000_000),
				bo.completed, bp99.Round(time.Millisecond), bo.worst.Round(time.Millisecond))}.against(base),
	}, nil
}

// work is deterministic CPU work per record (rounds of xorshift).
func work(v int64, rounds int) int64 {
	x := uint64(v) | 1
	for range rounds {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return v + int64(x&0)
}

// benchIngress measures an application feeding a checkpointed keyed count
// through the durable ingress (each batch durable before SendBatch
// returns) against the same records sent through a Spill mailbox into a
// store of its own (fsynced per group), the spill path.
func benchIngress(ctx context.Context, e *env) ([]Result, error) {
	n := e.n(1_000_000)
	const batch = 4096 // the spill commits a group every 4096 messages: like with like
	ingressOnce := func() (float64, error) {
		return best(1, n, func() (time.Duration, error) {
			dir, err := os.MkdirTemp("", "sluice-ingress-bench-")
			if err != nil {
				return 0, err
			}
			defer os.RemoveAll(dir)
			sys, err := actors.NewSystem(actors.Config{Name: "ingress-bench", Store: filepath.Join(dir, "store.db")})
			if err != nil {
				return 0, err
			}
			defer sys.Stop(ctx)
			in, err := operators.NewDurableIngress[int64](sys, "numbers", operators.DurableIngressConfig{})
			if err != nil {
				return 0, err
			}
			var sum int64
			t := operators.NewTopology("ingress-bench", operators.Checkpoints(time.Second))
			by := operators.KeyBy(operators.Source(t, "numbers", in), "by-key", func(v int64) int64 { return v % 1000 })
			counts := operators.Count(by, "count", operators.Emit(operators.EmitAtEnd))
			operators.Sink(counts, "sum", operators.SinkFunc(func(kv operators.KV[int64, int64]) error { sum += kv.Value; return nil }))
			start := time.Now()
			run, err := sys.Run(ctx, t)
			if err != nil {
				return 0, err
			}
			buf := make([]int64, 0, batch)
			for i := int64(0); i < int64(n); i++ {
				if buf = append(buf, i); len(buf) == batch || i == int64(n)-1 {
					if err := in.SendBatch(ctx, buf); err != nil {
						return 0, err
					}
					buf = buf[:0]
				}
			}
			if err := in.Close(); err != nil {
				return 0, err
			}
			if err := run.Wait(ctx); err != nil {
				return 0, err
			}
			if sum != int64(n) {
				return 0, fmt.Errorf("ingress bench: counted %d of %d", sum, n)
			}
			return time.Since(start), nil
		})
	}
	// Rounds alternate the two (the first of each pair switching); the
	// result is the median of the pairs' ratios with their spread.
	one := *e
	one.rounds = 1
	var ingresses, spills, ratios []float64
	for r := range max(e.rounds, 1) {
		var pair [2]float64
		for k := range 2 {
			var err error
			if (r+k)%2 == 0 {
				pair[0], err = ingressOnce()
			} else {
				pair[1], err = spillPath(ctx, &one, n)
			}
			if err != nil {
				return nil, err
			}
		}
		ingresses, spills = append(ingresses, pair[0]), append(spills, pair[1])
		ratios = append(ratios, pair[0]/pair[1])
	}
	sr := slices.Sorted(slices.Values(ratios))
	base := Result{Name: "checkpoint/spill-path", Value: median(spills), Unit: "records/s", Note: "records through a Spill mailbox into a store of its own (fsynced per group) to a consumer; median of the rounds"}
	res := Result{Name: "checkpoint/durable-ingress", Value: median(ingresses), Unit: "records/s",
		Note: fmt.Sprintf("SendBatch of %d, durable before it returns, into a checkpointed keyed count (checkpoints every second); ratio: median of %d alternated pairs, spread %.3f-%.3f", batch, len(sr), sr[0], sr[len(sr)-1])}.against(base)
	res.Ratio = median(ratios)
	return []Result{base, res}, nil
}
