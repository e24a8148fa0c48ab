package overload

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
)

// Sample is the overload program. Create it with New.
type Sample struct {
	cfg Config

	p        *Pipelines   // the topology of the latest Topology call
	run      *actors.Run  // the run of it, told by Observe
	started  time.Time    // when Observe was told
	accounts []Accounting // read by Report once the run ended
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

// Topology implements samples.Sample: the Pipelines themselves, which
// `sluice run overload` runs on its own system, so that their drops and
// spills show in the progress line, the dashboard (--ui) and the traces
// (--trace). The runner tells the sample of the run (Observe), and Report
// reads the pipelines' statistics from it once it has ended.
//
//	source-block       -> slow-block (block)             -> sink-block
//	source-drop-oldest -> slow-drop-oldest (drop-oldest) -> sink-drop-oldest
//	source-spill       -> slow-spill (spill)             -> sink-spill
func (s *Sample) Topology() (*operators.Topology, error) {
	if err := s.cfg.Validate(); err != nil {
		return nil, err
	}
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
	s.p, s.run, s.accounts, s.err = p, nil, nil, nil
	return p.Topology(), nil
}

// Observe implements samples.Observer: run is the run of the topology
// Topology returned last, just started.
func (s *Sample) Observe(run *actors.Run) {
	// The run's own start (its sources may have read everything already).
	s.run, s.started = run, time.Now().Add(-run.Elapsed())
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
	if s.p == nil || s.run == nil {
		return errors.New("overload: Report before the pipelines ran: run the topology of Topology and tell the sample with Observe")
	}
	select {
	case <-s.run.Done():
	default:
		return errors.New("overload: Report while the pipelines run: wait for the run to end")
	}
	if s.accounts == nil && s.err == nil {
		if err := s.run.Execution().Err(); err != nil {
			s.err = err
		} else {
			s.accounts, s.err = s.p.Account(s.run, s.started)
		}
	}
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

// NotResumable implements samples.NotResumable: the sample measures its
// pipelines from their start.
func (s *Sample) NotResumable() string {
	return "the overload sample measures its pipelines from their start (a measurement: timing matters, and a resumed one would measure something else, and its sinks keep what they received in memory); run it without --checkpoints"
}
