package latency

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
)

// Config describes the experiment.
type Config struct {
	// Cost is the slow operator's work per record: its capacity is 1/Cost
	// records a second.
	Cost time.Duration
	// Overload and Calm are how long the load runs at 3× and then at 0.5×
	// the capacity.
	Overload, Calm time.Duration
	Target         time.Duration // the LatencyTarget
	Keys           int           // keys of the approximate counts
	// Selective declares the slow operator Selective: the target then
	// drops whole batches at the source instead of sampling.
	Selective bool
	Capacity  int // the slow operator's mailbox, records
	// Jitter makes the slow operator's work per record vary as a real
	// clock's timers do on a loaded machine: Cost × (1 + Jitter × u), u
	// uniform in [0, 1) (0: exactly Cost). The load is then three times
	// the mean capacity, 1 / (Cost × (1 + Jitter/2)).
	Jitter float64
	// Policies are the pipelines to run, of the package's Policies (nil:
	// all three).
	Policies []string
	// Seed seeds the jitter and the shedding's random numbers
	// (operators.ShedSeed): on the simulated clock a run is a function of
	// it.
	Seed uint64
	// Clock drives the load, the work and the job (nil: the real clock).
	// Under testing/synctest the real clock is the bubble's fake one, and
	// the experiment's outcome does not depend on the machine's speed.
	Clock clock.Clock
}

// DefaultConfig is what `sluice run latency` runs without flags.
func DefaultConfig() Config {
	return Config{Cost: time.Millisecond, Overload: 10 * time.Second, Calm: 5 * time.Second,
		Target: 200 * time.Millisecond, Keys: 20, Capacity: 256}
}

// Validate reports a configuration that cannot run.
func (c Config) Validate() error {
	var errs []error
	if c.Cost <= 0 {
		errs = append(errs, fmt.Errorf("cost %v: must be positive", c.Cost))
	}
	if c.Overload <= 0 || c.Calm < 0 {
		errs = append(errs, fmt.Errorf("overload %v, calm %v: the overload must be positive, the calm not negative", c.Overload, c.Calm))
	}
	if c.Target <= 0 {
		errs = append(errs, fmt.Errorf("target %v: must be positive", c.Target))
	}
	if c.Jitter < 0 || c.Jitter > 10 {
		errs = append(errs, fmt.Errorf("jitter %v: must be in [0, 10]", c.Jitter))
	}
	for _, p := range c.Policies {
		if !slices.Contains(Policies, p) {
			errs = append(errs, fmt.Errorf("policy %q: not one of %v", p, Policies))
		}
	}
	if c.Keys < 1 || c.Capacity < 1 {
		errs = append(errs, fmt.Errorf("keys %d, capacity %d: must be at least 1", c.Keys, c.Capacity))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("latency: %w", err)
	}
	return nil
}

// Rate is the slow operator's mean capacity, records a second.
func (c Config) Rate() float64 {
	return float64(time.Second) / (float64(c.Cost) * (1 + c.Jitter/2))
}

// Policies are the three ways compared, in the order they are reported.
var Policies = []string{"block", "drop-oldest", "target"}

// Second is one second of a pipeline's run: its end-to-end p99 over the
// latest latency window, and what it kept.
type Second struct {
	At        time.Duration // since the load started
	P99       time.Duration
	Keep      float64 // the target's sample rate (1: nothing shed)
	Shed      int64   // records shed or dropped so far
	Processed int64   // records the slow operator handled so far
}

// Outcome is one pipeline's run.
type Outcome struct {
	Policy    string
	Seconds   []Second
	Offered   int64 // records that arrived
	Processed int64 // records the slow operator handled
	Shed      int64 // records the target shed, or the mailbox dropped
	ShedBy    map[string]int64
	// The approximate counts (target; see Accuracy).
	Accuracy
	Elapsed time.Duration
}

// Throughput is the records processed a second.
func (o Outcome) Throughput() float64 { return float64(o.Processed) / o.Elapsed.Seconds() }

// readLag is how long after each second the sample reads the pipelines'
// statistics.
const readLag = 50 * time.Millisecond

type estimates = operators.Collector[operators.Windowed[int, operators.Estimate]]

// pipeline builds one policy's topology: load -> ts -> slow -> (out, by-key
// -> count -> counts).
func pipeline(cfg Config, policy string, s *schedule, c clock.Clock) (*operators.Topology, *estimates) {
	// Batches of 32: at a millisecond a record, a batch is 32 ms of work,
	// fine enough for the latency windows of a second.
	opts := []operators.TopologyOption{operators.WithClock(c), operators.BatchSize(32), operators.ShedSeed(cfg.Seed)}
	in := operators.Input(mailbox.Block(cfg.Capacity))
	switch policy {
	case "drop-oldest":
		in = operators.Input(mailbox.DropOldest(cfg.Capacity))
	case "target":
		opts = append(opts, operators.LatencyTarget(cfg.Target))
	}
	t := operators.NewTopology("latency-"+policy, opts...)
	src := operators.Source(t, "load", &loadSource{s: s, c: c})
	ts := operators.Timestamps(src, "ts", func(e Event) time.Time { return e.Arrived })
	mapOpts := []operators.MapOption{in, operators.NoFusion()}
	if cfg.Selective {
		mapOpts = append(mapOpts, operators.Selective())
	}
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	cost := func() time.Duration {
		if cfg.Jitter == 0 {
			return cfg.Cost
		}
		mu.Lock()
		defer mu.Unlock()
		return time.Duration(float64(cfg.Cost) * (1 + cfg.Jitter*rng.Float64()))
	}
	slow := operators.Map(ts, "slow", func(e Event) Event { work(c, cost()); return e }, mapOpts...)
	operators.Sink(slow, "out", operators.SinkFunc(func(Event) error { return nil }))
	by := operators.KeyBy(slow, "by-key", func(e Event) int { return e.Key })
	counts := operators.WindowCountEstimate(by, "count", operators.Tumbling(time.Second))
	got := operators.NewCollector[operators.Windowed[int, operators.Estimate]]()
	operators.Sink(counts, "counts", got)
	return t, got
}

// Run runs the three pipelines side by side on sys, sampling each one's
// statistics every second of the clock, and returns their outcomes.
func Run(ctx context.Context, sys *actors.System, cfg Config) ([]Outcome, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.Clock
	if c == nil {
		c = clock.Real()
	}
	rate := cfg.Rate()
	phases := []Phase{{Rate: 3 * rate, Duration: cfg.Overload}, {Rate: rate / 2, Duration: cfg.Calm}}
	policies := cfg.Policies
	if policies == nil {
		policies = Policies
	}
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		out = make([]Outcome, len(policies))
		err error
	)
	for i, policy := range policies {
		wg.Add(1)
		go func() { // owned by Run, which waits for it
			defer wg.Done()
			o, e := runOne(ctx, sys, cfg, policy, phases, c)
			mu.Lock()
			out[i], err = o, errors.Join(err, e)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out, err
}

func runOne(ctx context.Context, sys *actors.System, cfg Config, policy string, phases []Phase, c clock.Clock) (Outcome, error) {
	s := &schedule{phases: phases, keys: cfg.Keys}
	top, got := pipeline(cfg, policy, s, c)
	start := c.Now()
	run, err := sys.Run(ctx, top)
	if err != nil {
		return Outcome{}, err
	}
	o := Outcome{Policy: policy}
	tick := make(chan struct{}, 1)
	var stop func() bool
	// Each second's reading is taken a little after the second (readLag),
	// so that it reads the latency window the job closed at that second,
	// not the one before it.
	next := 0
	arm := func() {
		next++
		d := start.Add(time.Duration(next)*time.Second + readLag).Sub(c.Now())
		stop = c.AfterFunc(max(d, 0), func() { tick <- struct{}{} })
	}
	arm()
	defer func() { stop() }()
	for done := false; !done; {
		select {
		case <-run.Done():
			done = true
		case <-ctx.Done():
			run.Stop(context.WithoutCancel(ctx))
			return o, ctx.Err()
		case <-tick:
			o.Seconds = append(o.Seconds, second(run, c.Now().Sub(start)))
			arm()
		}
	}
	if err := run.Wait(ctx); err != nil {
		return o, err
	}
	o.Elapsed = c.Now().Sub(start)
	st := stats(run)
	o.Offered, o.Processed = st["load"].Out, st["slow"].In
	o.Shed = st["load"].Shed + st["slow"].Dropped
	o.ShedBy = map[string]int64{}
	for _, op := range []string{"load", "slow"} {
		for r, n := range st[op].ShedBy {
			o.ShedBy[r] += n
		}
		for r, n := range st[op].DroppedBy {
			o.ShedBy[r] += n
		}
	}
	if policy == "target" {
		o.Accuracy = accuracy(got.Items(), s, cfg.Selective)
	}
	return o, nil
}

func stats(run *actors.Run) map[string]actors.OperatorStats {
	m := map[string]actors.OperatorStats{}
	for _, s := range run.Stats() {
		m[s.Name] = s
	}
	return m
}

func second(run *actors.Run, at time.Duration) Second {
	st := stats(run)
	return Second{At: at, P99: max(st["out"].LatencyWindow.EndToEnd.P99, st["counts"].LatencyWindow.EndToEnd.P99),
		Keep: st["load"].SampleRate, Shed: st["load"].Shed + st["slow"].Dropped, Processed: st["slow"].In}
}

// OverloadThroughput is the records processed a second from the start to
// the latest second within the overload (0 before one).
func (o Outcome) OverloadThroughput(overload time.Duration) float64 {
	var at time.Duration
	var n int64
	for _, s := range o.Seconds {
		if s.At <= overload+overload/100 {
			at, n = s.At, s.Processed
		}
	}
	if at <= 0 {
		return 0
	}
	return float64(n) / at.Seconds()
}

// Accuracy is how the approximate counts of whole windows compare with
// the truth from the schedule. A key-window counts when it is marked
// approximate, and also when it is not but is wrong (sampling shed some of
// its records in batches of which none was kept, so the window never saw a
// sampled record and claims to be exact) or was never emitted (sampling
// kept none of its records): those two are misses, as they would be to a
// user who trusted the mark. Not with dropped (whole batches, Selective):
// dropped records are counted as shed, not estimated, so only the windows
// marked approximate count (there should be none).
type Accuracy struct {
	Windows   int     // key-windows counted
	MeanError float64 // the mean of |estimate − truth| / truth over them
	Covered   float64 // the share marked approximate with the truth within the 95 % interval
	// The misses by kind: marked approximate with the truth outside the
	// interval, wrong without the mark, never emitted.
	Outside, Unmarked, Missing int
}

func accuracy(items []operators.Windowed[int, operators.Estimate], s *schedule, dropped bool) Accuracy {
	truth := map[[2]int64]int64{} // (key, window start in s) -> records
	for seq := int64(0); ; seq++ {
		at, ok := s.at(seq)
		if !ok {
			break
		}
		truth[[2]int64{seq % int64(s.keys), at.Unix()}]++
	}
	var a Accuracy
	in := 0
	var sum float64
	emitted := map[[2]int64]bool{}
	for _, w := range items {
		kw := [2]int64{int64(w.Key), w.Start.Unix()}
		want := truth[kw]
		emitted[kw] = true
		if want == 0 || (!w.Value.Approximate && (dropped || w.Value.Value == float64(want))) {
			continue
		}
		a.Windows++
		sum += math.Abs(w.Value.Value-float64(want)) / float64(want)
		switch {
		case !w.Value.Approximate:
			a.Unmarked++
		case w.Value.Contains(float64(want)):
			in++
		default:
			a.Outside++
		}
	}
	for kw := range truth {
		if !emitted[kw] && !dropped {
			a.Windows++
			a.Missing++
			sum++ // an error of 100 %
		}
	}
	if a.Windows > 0 {
		a.MeanError, a.Covered = sum/float64(a.Windows), float64(in)/float64(a.Windows)
	}
	return a
}
