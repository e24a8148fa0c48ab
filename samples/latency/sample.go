package latency

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
)

// Sample is the latency program. Create it with New.
type Sample struct {
	cfg      Config
	once     sync.Once
	outcomes []Outcome
	err      error
}

// New returns the sample with DefaultConfig.
func New() *Sample { return &Sample{cfg: DefaultConfig()} }

// Name implements samples.Sample.
func (s *Sample) Name() string { return "latency" }

// Description implements samples.Sample.
func (s *Sample) Description() string {
	return "a topology fed at 3x its capacity under Block, DropOldest and LatencyTarget(200ms), side by side: p99 every second, throughput, shed counts, the approximate counts' error"
}

// Flags implements samples.Sample.
func (s *Sample) Flags(fs *flag.FlagSet) {
	fs.DurationVar(&s.cfg.Cost, "cost", s.cfg.Cost, "the slow operator's work per record (its capacity is 1/cost a second)")
	fs.DurationVar(&s.cfg.Overload, "overload", s.cfg.Overload, "how long the load runs at 3x the capacity")
	fs.DurationVar(&s.cfg.Calm, "calm", s.cfg.Calm, "how long it then runs at 0.5x")
	fs.DurationVar(&s.cfg.Target, "target", s.cfg.Target, "the latency target")
	fs.Float64Var(&s.cfg.Jitter, "jitter", s.cfg.Jitter, "vary the slow operator's work per record by up to this fraction of cost (the load stays 3x the mean capacity)")
	fs.Uint64Var(&s.cfg.Seed, "seed", s.cfg.Seed, "seed of the jitter and of the shedding's random numbers")
	fs.BoolVar(&s.cfg.Selective, "selective", s.cfg.Selective, "declare the slow operator Selective: the target drops whole batches instead of sampling")
}

// Configure sets the options without flags (for tests and embedding).
func (s *Sample) Configure(cfg Config) { s.cfg = cfg }

// Topology implements samples.Sample: a driver whose source runs the three
// pipelines on a system of its own when it opens (as the overload
// sample's), then ends.
func (s *Sample) Topology() (*operators.Topology, error) {
	if err := s.cfg.Validate(); err != nil {
		return nil, err
	}
	s.once, s.outcomes, s.err = sync.Once{}, nil, nil
	t := operators.NewTopology("latency-driver")
	done := operators.Source(t, "measure", driver{s})
	operators.Sink(done, "report", operators.SinkFunc(func(int) error { return nil }))
	return t, nil
}

type driver struct{ s *Sample }

func (d driver) Open(ctx context.Context, part, parts int, offset int64) (operators.Reader[int], error) {
	d.s.once.Do(func() { d.s.outcomes, d.s.err = d.s.measure(ctx) })
	if d.s.err != nil {
		return nil, d.s.err
	}
	return operators.FromSlice([]int{len(d.s.outcomes)}).Open(ctx, part, parts, offset)
}

func (s *Sample) measure(ctx context.Context) (out []Outcome, err error) {
	sys, err := actors.NewSystem(actors.Config{Name: "latency", Clock: s.cfg.Clock})
	if err != nil {
		return nil, err
	}
	defer func() {
		stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		err = errors.Join(err, sys.Stop(stop))
	}()
	return Run(ctx, sys, s.cfg)
}

// Outcomes returns each pipeline's outcome, once the job has finished.
func (s *Sample) Outcomes() []Outcome { return s.outcomes }

// Report implements samples.Sample.
func (s *Sample) Report(w io.Writer) error {
	if s.err != nil {
		return s.err
	}
	Print(w, s.cfg, s.outcomes)
	return nil
}

// Print writes the outcomes side by side.
func Print(w io.Writer, cfg Config, outs []Outcome) {
	capacity := cfg.Rate()
	fmt.Fprintf(w, "capacity %.0f records/s; %v at 3x, then %v at 0.5x; target p99 %v\n", capacity, cfg.Overload, cfg.Calm, cfg.Target)
	fmt.Fprintf(w, "%6s", "t")
	for _, o := range outs {
		fmt.Fprintf(w, " %14s", o.Policy+" p99")
	}
	fmt.Fprintf(w, " %12s %14s\n", "target keeps", "target proc/s")
	rows := 0
	for _, o := range outs {
		rows = max(rows, len(o.Seconds))
	}
	for i := range rows {
		at, keep, proc := "", "", ""
		var cells []string
		for _, o := range outs {
			if i >= len(o.Seconds) {
				cells = append(cells, "")
				continue
			}
			sec := o.Seconds[i]
			at = fmt.Sprintf("%ds", int(sec.At.Round(time.Second).Seconds()))
			cells = append(cells, sec.P99.Round(time.Millisecond).String())
			if o.Policy == "target" {
				keep = fmt.Sprintf("%.2f", sec.Keep)
				var before int64
				if i > 0 {
					before = o.Seconds[i-1].Processed
				}
				proc = fmt.Sprint(sec.Processed - before)
			}
		}
		fmt.Fprintf(w, "%6s", at)
		for _, c := range cells {
			fmt.Fprintf(w, " %14s", c)
		}
		fmt.Fprintf(w, " %12s %14s\n", keep, proc)
	}
	for _, o := range outs {
		ot := o.OverloadThroughput(cfg.Overload)
		fmt.Fprintf(w, "%-12s offered %d, processed %d (%.0f/s, %.2fx the capacity; %.0f/s, %.2fx during the overload), shed or dropped %d %v\n",
			o.Policy, o.Offered, o.Processed, o.Throughput(), o.Throughput()/capacity, ot, ot/capacity, o.Shed, o.ShedBy)
		if o.Windows > 0 {
			fmt.Fprintf(w, "%-12s approximate counts: %d key-windows, mean error %.1f %%, truth within the 95 %% interval in %.1f %% (misses: %d outside the interval, %d wrong without the approximate mark, %d never emitted)\n",
				"", o.Windows, 100*o.MeanError, 100*o.Covered, o.Outside, o.Unmarked, o.Missing)
		}
	}
}
