package clickstream

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/samples/internal/collect"
)

// Sample is the clickstream program. Create it with New.
type Sample struct {
	cfg         Config
	parallelism int
	top         int

	clicks   []Click
	sessions *collect.Sink[Session]
	late     *collect.Sink[Click]
}

// New returns the sample with DefaultConfig, two instances of the session
// windows, and the five longest sessions printed.
func New() *Sample { return &Sample{cfg: DefaultConfig(), parallelism: 2, top: 5} }

// Name implements samples.Sample.
func (s *Sample) Name() string { return "clickstream" }

// Description implements samples.Sample.
func (s *Sample) Description() string {
	return "sessionize a click stream in event time, with out-of-order and late clicks (session windows, allowed lateness, a late side output)"
}

// Flags implements samples.Sample.
func (s *Sample) Flags(fs *flag.FlagSet) {
	fs.IntVar(&s.cfg.Users, "users", s.cfg.Users, "users clicking")
	fs.Int64Var(&s.cfg.Clicks, "clicks", s.cfg.Clicks, "clicks generated")
	fs.Uint64Var(&s.cfg.Seed, "seed", s.cfg.Seed, "seed of the generated clicks")
	fs.Float64Var(&s.cfg.LateFraction, "late-fraction", s.cfg.LateFraction, "share of clicks delayed beyond --out-of-order")
	fs.DurationVar(&s.cfg.OutOfOrder, "out-of-order", s.cfg.OutOfOrder, "how far behind the latest event time a click may arrive and be on time (a quarter of the clicks are delayed up to this)")
	fs.DurationVar(&s.cfg.Gap, "gap", s.cfg.Gap, "a session ends after this much event time without a click")
	fs.DurationVar(&s.cfg.Lateness, "lateness", s.cfg.Lateness, "allowed lateness: how long a fired session still takes late clicks")
	fs.IntVar(&s.parallelism, "parallelism", s.parallelism, "instances of the session windows")
	fs.IntVar(&s.top, "top", s.top, "how many of the longest sessions to print")
}

// Configure sets the options without flags (for tests and embedding).
func (s *Sample) Configure(cfg Config, parallelism, top int) {
	s.cfg, s.parallelism, s.top = cfg, parallelism, top
}

// Config returns the sample's configuration.
func (s *Sample) Config() Config { return s.cfg }

// Topology implements samples.Sample. The job reads one click per batch
// (BatchSize(1)), so that a watermark follows every click and the late
// clicks are exactly those Expect predicts, whatever the timing.
//
//	clicks (source) -> event-time ==hash by user==> sessions (window) x P -> session (map) -> collect (sink)
//	                                                sessions' late output -> late (sink)
func (s *Sample) Topology() (*operators.Topology, error) {
	if err := s.cfg.Validate(); err != nil {
		return nil, err
	}
	if s.parallelism < 1 || s.top < 0 {
		return nil, fmt.Errorf("clickstream: parallelism %d, top %d: parallelism must be at least 1 and top not negative", s.parallelism, s.top)
	}
	s.clicks = Generate(s.cfg)
	s.sessions = collect.New[Session]()
	s.late = collect.New[Click]()
	t := operators.NewTopology("clickstream", operators.BatchSize(1))
	clicks := operators.Source(t, "clicks", operators.FromSlice(s.clicks))
	sessions := Sessionize(clicks, s.cfg.OutOfOrder, s.cfg.Gap, s.cfg.Lateness, s.late, s.parallelism)
	operators.Sink(sessions, "collect", s.sessions)
	return t, nil
}

// Clicks returns the generated clicks in their arrival order (after
// Topology).
func (s *Sample) Clicks() []Click { return s.clicks }

// Results returns the sessions the job emitted, updates included, each
// user's in the order the job emitted them (after the job).
func (s *Sample) Results() []Session {
	if s.sessions == nil {
		return nil
	}
	return s.sessions.Items()
}

// Late returns the clicks the job sent to its late output (after the job).
func (s *Sample) Late() []Click {
	if s.late == nil {
		return nil
	}
	return s.late.Items()
}

// Check compares the job's results and late clicks with Expect's: every
// user's results in order, and the set of late clicks.
func (s *Sample) Check() error {
	exp := Expect(s.clicks, s.cfg.OutOfOrder, s.cfg.Gap, s.cfg.Lateness)
	var problems []error
	got, want := ByUser(s.Results()), ByUser(exp.Results)
	for _, u := range slices.Sorted(maps.Keys(want)) {
		if !reflect.DeepEqual(got[u], want[u]) {
			problems = append(problems, fmt.Errorf("%s: %d results %s, the direct computation %d %s",
				u, len(got[u]), brief(got[u]), len(want[u]), brief(want[u])))
			if len(problems) == 5 {
				break
			}
		}
	}
	if len(got) != len(want) {
		problems = append(problems, fmt.Errorf("results for %d users, the direct computation %d", len(got), len(want)))
	}
	seqs := func(cs []Click) []int64 {
		out := make([]int64, len(cs))
		for i, c := range cs {
			out[i] = c.Seq
		}
		slices.Sort(out)
		return out
	}
	if g, w := seqs(s.Late()), seqs(exp.Late); !slices.Equal(g, w) {
		problems = append(problems, fmt.Errorf("late clicks %v, the direct computation %v", g[:min(10, len(g))], w[:min(10, len(w))]))
	}
	if len(problems) > 0 {
		return fmt.Errorf("clickstream: the job disagrees with the direct computation:\n%w", errors.Join(problems...))
	}
	return nil
}

func brief(ss []Session) string {
	var out []string
	for _, s := range ss[:min(3, len(ss))] {
		out = append(out, fmt.Sprintf("[%s, %s) %d clicks", s.Start.Format("15:04:05.000"), s.End.Format("15:04:05.000"), len(s.Clicks)))
	}
	if len(ss) > 3 {
		out = append(out, "...")
	}
	return fmt.Sprint(out)
}

// Report implements samples.Sample: the clicks, the sessions and the late
// clicks, checked against Expect, then the longest sessions.
func (s *Sample) Report(w io.Writer) error {
	if err := s.Check(); err != nil {
		return err
	}
	exp := Expect(s.clicks, s.cfg.OutOfOrder, s.cfg.Gap, s.cfg.Lateness)
	var delayed int
	for _, c := range s.clicks {
		if c.Delay > s.cfg.OutOfOrder {
			delayed++
		}
	}
	results := s.Results()
	final := Final(results)
	fmt.Fprintf(w, "%d clicks of %d users (seed %d): %d arrived out of order within %v, %d were delayed beyond it\n",
		len(s.clicks), s.cfg.Users, s.cfg.Seed, exp.OutOfOrder, s.cfg.OutOfOrder, delayed)
	fmt.Fprintf(w, "%d sessions (gap %v) in %d results: %d clicks arrived behind the watermark and still joined a session (open, or fired and within the allowed lateness of %v: emitted again)\n",
		len(final), s.cfg.Gap, len(results), exp.Behind, s.cfg.Lateness)
	fmt.Fprintf(w, "%d clicks arrived past the allowed lateness: counted late, sent to the late output\n", len(s.Late()))
	fmt.Fprintln(w, "every session and late click equals the direct computation")
	slices.SortFunc(final, longest)
	if n := min(s.top, len(final)); n > 0 {
		fmt.Fprintf(w, "longest sessions:\n")
		for i, x := range final[:n] {
			fmt.Fprintf(w, "%4d  %s  %s - %s  %3d clicks  %2d pages\n", i+1, x.User,
				x.Start.Format(time.TimeOnly), x.End.Add(-s.cfg.Gap).Format(time.TimeOnly), len(x.Clicks), len(x.Pages))
		}
	}
	return nil
}
