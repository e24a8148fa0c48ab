package overload

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
)

// Sample is the overload program. Create it with New.
type Sample struct {
	cfg Config

	once     sync.Once // measures once per Topology
	accounts []Accounting
	err      error
	digest   time.Duration // the work of one record, measured
	probe    uint64        // the digests measured, kept so that the work is done
}

// New returns the sample with DefaultConfig.
func New() *Sample { return &Sample{cfg: DefaultConfig()} }

// Name implements samples.Sample.
func (s *Sample) Name() string { return "overload" }

// Description implements samples.Sample.
func (s *Sample) Description() string {
	return "one load through three slow consumers side by side: mailboxes that block, drop the oldest, and spill to disk"
}

// Flags implements samples.Sample.
func (s *Sample) Flags(fs *flag.FlagSet) {
	fs.Int64Var(&s.cfg.Records, "records", s.cfg.Records, "records produced by each source")
	fs.IntVar(&s.cfg.Slow, "slow", s.cfg.Slow, "work per record in each consumer: rounds of a 64-bit hash (2000: about 10µs)")
	fs.IntVar(&s.cfg.Capacity, "capacity", s.cfg.Capacity, "each consumer's mailbox capacity, in records")
}

// Configure sets the options without flags (for tests and embedding).
func (s *Sample) Configure(cfg Config) { s.cfg = cfg }

// Topology implements samples.Sample. Its job is a driver: its source,
// "measure", runs the Pipelines on an actors.System of its own when it
// opens, waits for them to end, and reads their statistics (Run.Stats),
// which a sample's Report does not otherwise see; it then emits one
// Accounting per pipeline to the sink "report".
//
//	measure (source) -> report (sink)
func (s *Sample) Topology() (*operators.Topology, error) {
	if err := s.cfg.Validate(); err != nil {
		return nil, err
	}
	s.once, s.accounts, s.err = sync.Once{}, nil, nil
	t := operators.NewTopology("overload-driver")
	accounts := operators.Source(t, "measure", measureSource{s})
	operators.Sink(accounts, "report", operators.SinkFunc(func(Accounting) error { return nil }))
	return t, nil
}

// measureSource runs the pipelines when opened, then reads their accounts.
type measureSource struct{ s *Sample }

func (m measureSource) Open(ctx context.Context, part, parts int, offset int64) (operators.Reader[Accounting], error) {
	m.s.once.Do(func() { m.s.accounts, m.s.err = m.s.measure(ctx) })
	if m.s.err != nil {
		return nil, m.s.err
	}
	return operators.FromSlice(m.s.accounts).Open(ctx, part, parts, offset)
}

func (s *Sample) measure(ctx context.Context) (accounts []Accounting, err error) {
	p, err := NewPipelines(s.cfg)
	if err != nil {
		return nil, err
	}
	const probe = 200
	start := time.Now()
	for seq := range int64(probe) {
		s.probe += Digest(seq, s.cfg.Slow)
	}
	s.digest = time.Since(start) / probe
	sys, err := actors.NewSystem(actors.Config{Name: "overload"})
	if err != nil {
		return nil, err
	}
	defer func() {
		stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		err = errors.Join(err, sys.Stop(stop))
	}()
	return p.Measure(ctx, sys)
}

// Accounts returns each pipeline's accounting, once the job has finished.
func (s *Sample) Accounts() []Accounting { return s.accounts }

// Check verifies what must hold whatever the timing: produced = delivered
// + dropped with nothing queued at the end, for each pipeline; no queue
// above its capacity; results in order with correct digests; block and
// spill lossless, with the sum of their digests equal to ExpectedSum's
// plain loop; drop-oldest's drops all evictions, and its newest record
// delivered.
func Check(cfg Config, accounts []Accounting) error {
	var problems []error
	want := ExpectedSum(cfg)
	for _, a := range accounts {
		fail := func(format string, args ...any) {
			problems = append(problems, fmt.Errorf("%s: "+format, append([]any{a.Policy}, args...)...))
		}
		if !a.Balanced() {
			fail("produced %d != delivered %d + dropped %d + queued %d, or records left queued", a.Produced, a.Delivered, a.Dropped, a.Queued)
		}
		if a.Produced != cfg.Records {
			fail("produced %d of %d records", a.Produced, cfg.Records)
		}
		if a.HighWater > cfg.Capacity {
			fail("%d records queued in memory, capacity %d", a.HighWater, cfg.Capacity)
		}
		var byReason int64
		for _, n := range a.DroppedBy {
			byReason += n
		}
		if byReason != a.Dropped {
			fail("drops by reason %v do not add up to %d", a.DroppedBy, a.Dropped)
		}
		if !a.InOrder || !a.DigestsOK {
			fail("results in order: %v, digests right: %v", a.InOrder, a.DigestsOK)
		}
		switch a.Policy {
		case "block", "spill":
			if !a.Complete || a.Dropped != 0 {
				fail("lossless, yet %d of %d delivered (%d dropped)", a.Delivered, a.Produced, a.Dropped)
			} else if a.Sum != want {
				fail("digests sum to %d, the plain loop %d", a.Sum, want)
			}
		case "drop-oldest":
			if a.Dropped != a.DroppedBy["evicted"] {
				fail("drops %v, want evictions only", a.DroppedBy)
			}
			if !a.Newest {
				fail("the newest record was dropped")
			}
		}
	}
	if len(accounts) != len(Policies) {
		problems = append(problems, fmt.Errorf("%d pipelines accounted for, want %d", len(accounts), len(Policies)))
	}
	if len(problems) > 0 {
		return fmt.Errorf("overload: the accounting does not hold:\n%w", errors.Join(problems...))
	}
	return nil
}

// Report implements samples.Sample: each pipeline's accounting side by
// side, checked with Check.
func (s *Sample) Report(w io.Writer) error {
	if s.err != nil {
		return s.err
	}
	if err := Check(s.cfg, s.accounts); err != nil {
		return err
	}
	fmt.Fprintf(w, "%d records into three identical consumers (%d rounds of work a record, %v here), mailbox capacity %d:\n",
		s.cfg.Records, s.cfg.Slow, s.digest.Round(time.Microsecond/10), s.cfg.Capacity)
	row := func(label string, cell func(a Accounting) string) {
		fmt.Fprintf(w, "  %-22s", label)
		for _, a := range s.accounts {
			fmt.Fprintf(w, " %16s", cell(a))
		}
		fmt.Fprintln(w)
	}
	row("", func(a Accounting) string { return a.Policy })
	row("produced", func(a Accounting) string { return fmt.Sprint(a.Produced) })
	row("delivered", func(a Accounting) string { return fmt.Sprint(a.Delivered) })
	row("dropped", func(a Accounting) string { return fmt.Sprint(a.Dropped) })
	row("  by reason", func(a Accounting) string {
		var parts []string
		for _, r := range slices.Sorted(maps.Keys(a.DroppedBy)) {
			parts = append(parts, fmt.Sprintf("%s %d", r, a.DroppedBy[r]))
		}
		if len(parts) == 0 {
			return "-"
		}
		return strings.Join(parts, ", ")
	})
	row("spilled", func(a Accounting) string { return fmt.Sprint(a.Spilled) })
	row("queued at the end", func(a Accounting) string { return fmt.Sprint(a.Queued) })
	row("queue high-water", func(a Accounting) string { return fmt.Sprint(a.HighWater) })
	row("source back-pressured", func(a Accounting) string { return ms(a.Backpressured) })
	row("source read all after", func(a Accounting) string { return ms(a.SourceDone) })
	row("consumer done after", func(a Accounting) string { return ms(a.ConsumerDone) })
	fmt.Fprintln(w, "produced = delivered + dropped, nothing queued at the end: holds for all three")
	fmt.Fprintln(w, "block and spill delivered every record in order; their digests sum to the plain loop's")
	drop := s.accounts[slices.IndexFunc(s.accounts, func(a Accounting) bool { return a.Policy == "drop-oldest" })]
	fmt.Fprintf(w, "drop-oldest delivered %d records in order, the newest among them; the %d others were evicted\n", drop.Delivered, drop.Dropped)
	return nil
}

func ms(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}

// NotResumable implements samples.NotResumable: the measured pipelines run
// on a system of their own when the job's source opens.
func (s *Sample) NotResumable() string {
	return "the overload sample measures its pipelines on a system of its own when its source opens (a measurement: timing matters, and a resumed one would measure something else); run it without --checkpoints"
}
