package fraud

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"reflect"
	"time"

	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/samples/internal/collect"
)

// Sample is the fraud program. Create it with New.
type Sample struct {
	cfg         Config
	parallelism int
	show        int

	data   Data
	alerts *collect.Sink[Alert]
}

// New returns the sample with DefaultConfig, two instances of each join,
// and the first ten alerts printed.
func New() *Sample { return &Sample{cfg: DefaultConfig(), parallelism: 2, show: 10} }

// Name implements samples.Sample.
func (s *Sample) Name() string { return "fraud" }

// Description implements samples.Sample.
func (s *Sample) Description() string {
	return "flag card transactions after a stolen-card report or too far from the last one (interval joins, one a self-join)"
}

// Flags implements samples.Sample.
func (s *Sample) Flags(fs *flag.FlagSet) {
	fs.IntVar(&s.cfg.Cards, "cards", s.cfg.Cards, "cards")
	fs.IntVar(&s.cfg.Transactions, "transactions", s.cfg.Transactions, "ordinary transactions (the planted frauds come on top)")
	fs.Uint64Var(&s.cfg.Seed, "seed", s.cfg.Seed, "seed of the generated streams")
	fs.IntVar(&s.cfg.Stolen, "stolen", s.cfg.Stolen, "cards reported stolen, then used 1 to 3 times")
	fs.IntVar(&s.cfg.Trips, "trips", s.cfg.Trips, "planted impossible trips")
	fs.DurationVar(&s.cfg.After, "after", s.cfg.After, "alert on a card's transactions this long after it was reported stolen")
	fs.DurationVar(&s.cfg.TravelWindow, "travel-window", s.cfg.TravelWindow, "alert on two transactions of a card within this time ...")
	fs.IntVar(&s.cfg.DistanceKm, "distance", s.cfg.DistanceKm, "... more than this many km apart")
	fs.IntVar(&s.parallelism, "parallelism", s.parallelism, "instances of each join")
	fs.IntVar(&s.show, "show", s.show, "how many alerts to print")
}

// Configure sets the options without flags (for tests and embedding).
func (s *Sample) Configure(cfg Config, parallelism, show int) {
	s.cfg, s.parallelism, s.show = cfg, parallelism, show
}

// Config returns the sample's configuration.
func (s *Sample) Config() Config { return s.cfg }

// Topology implements samples.Sample.
//
//	transactions (source) -> tx-time ==by card==> after-stolen (interval join) --+
//	                                 ==by card==> travel (interval join, self) -> far-apart --+-> alerts (merge) -> collect (sink)
//	stolen (source) -> report-time   ==by card==> after-stolen
func (s *Sample) Topology() (*operators.Topology, error) {
	if err := s.cfg.Validate(); err != nil {
		return nil, err
	}
	if s.parallelism < 1 || s.show < 0 {
		return nil, fmt.Errorf("fraud: parallelism %d, show %d: parallelism must be at least 1 and show not negative", s.parallelism, s.show)
	}
	s.data = Generate(s.cfg)
	s.alerts = collect.New[Alert]()
	t := operators.NewTopology("fraud")
	txs := operators.Timestamps(operators.Source(t, "transactions", operators.FromSlice(s.data.Txs)),
		"tx-time", Tx.EventTime, operators.OutOfOrderness(MaxDelay))
	reports := operators.Timestamps(operators.Source(t, "stolen", operators.FromSlice(s.data.Reports)),
		"report-time", Stolen.EventTime)
	operators.Sink(Detect(txs, reports, s.cfg.After, s.cfg.TravelWindow, s.cfg.DistanceKm, s.parallelism), "collect", s.alerts)
	return t, nil
}

// Data returns the generated streams (after Topology).
func (s *Sample) Data() Data { return s.data }

// Alerts returns the job's alerts in Sort's order (after the job).
func (s *Sample) Alerts() []Alert {
	if s.alerts == nil {
		return nil
	}
	out := s.alerts.Items()
	Sort(out)
	return out
}

// Missed returns the planted cases that no alert reports.
func Missed(planted []Case, alerts []Alert) []Case {
	raised := map[Case]bool{}
	for _, a := range alerts {
		raised[Case{Kind: a.Kind, Card: a.Card, Tx: a.Tx, Cause: a.Cause}] = true
	}
	var out []Case
	for _, c := range planted {
		if !raised[c] {
			out = append(out, c)
		}
	}
	return out
}

// Check compares the job's alerts with Expected and checks that every
// planted case was caught.
func (s *Sample) Check() error {
	got, want := s.Alerts(), Expected(s.data, s.cfg)
	var problems []error
	if !reflect.DeepEqual(got, want) {
		problems = append(problems, fmt.Errorf("%d alerts, the nested loops %d; first difference: %s", len(got), len(want), firstDiff(got, want)))
	}
	if missed := Missed(s.data.Planted, got); len(missed) > 0 {
		problems = append(problems, fmt.Errorf("%d of %d planted cases missed: %+v", len(missed), len(s.data.Planted), missed[:min(5, len(missed))]))
	}
	if len(problems) > 0 {
		return fmt.Errorf("fraud: the job disagrees with the direct computation:\n%w", errors.Join(problems...))
	}
	return nil
}

func firstDiff(got, want []Alert) string {
	for i := range min(len(got), len(want)) {
		if !reflect.DeepEqual(got[i], want[i]) {
			return fmt.Sprintf("#%d is %+v, the nested loops %+v", i, got[i], want[i])
		}
	}
	switch {
	case len(got) > len(want):
		return fmt.Sprintf("extra %+v", got[len(want)])
	case len(want) > len(got):
		return fmt.Sprintf("missing %+v", want[len(got)])
	}
	return "none"
}

// Report implements samples.Sample: the alerts by kind, checked against
// the nested loops and the planted cases, then the first alerts.
func (s *Sample) Report(w io.Writer) error {
	if err := s.Check(); err != nil {
		return err
	}
	alerts := s.Alerts()
	kinds := map[string]int{}
	for _, a := range alerts {
		kinds[a.Kind]++
	}
	planted := map[string]int{}
	for _, c := range s.data.Planted {
		planted[c.Kind]++
	}
	suspects := Suspects(alerts)
	fmt.Fprintf(w, "%d transactions on %d cards (seed %d), %d cards reported stolen: %d alerts on %d transactions\n",
		len(s.data.Txs), s.cfg.Cards, s.cfg.Seed, len(s.data.Reports), len(alerts), len(suspects))
	fmt.Fprintf(w, "  %-18s %5d  (used within %v after the report; %d planted, all caught)\n",
		KindStolen, kinds[KindStolen], s.cfg.After, planted[KindStolen])
	fmt.Fprintf(w, "  %-18s %5d  (more than %d km from a transaction %v or less before; %d planted, all caught)\n",
		KindTravel, kinds[KindTravel], s.cfg.DistanceKm, s.cfg.TravelWindow, planted[KindTravel])
	fmt.Fprintln(w, "the alerts equal the nested-loop computation")
	for i, x := range suspects[:min(s.show, len(suspects))] {
		if i == 0 {
			fmt.Fprintln(w, "first suspicious transactions:")
		}
		a := x.Latest
		fmt.Fprintf(w, "  %s  %s  tx %-6d %9s  %-18s in %s, ", a.At.Format(time.TimeOnly), a.Card, a.Tx, cents(a.Amount), a.Kind, a.City)
		ago := a.At.Sub(a.CauseAt).Round(time.Second)
		if a.Kind == KindStolen {
			fmt.Fprintf(w, "%v after report %d\n", ago, a.Cause)
			continue
		}
		fmt.Fprintf(w, "%d km from %s %v before (tx %d)", a.Km, a.CauseCity, ago, a.Cause)
		if x.Alerts > 1 {
			fmt.Fprintf(w, ", and %d more", x.Alerts-1)
		}
		fmt.Fprintln(w)
	}
	return nil
}

// Suspect is a transaction with alerts of one kind: how many, and the one
// with the latest cause.
type Suspect struct {
	Latest Alert
	Alerts int
}

// Suspects groups alerts (in Sort's order) by transaction and kind, in the
// order of their first alert.
func Suspects(alerts []Alert) []Suspect {
	var out []Suspect
	idx := map[[2]any]int{}
	for _, a := range alerts {
		k := [2]any{a.Kind, a.Tx}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, Suspect{Latest: a})
		}
		out[i].Alerts++
		if a.CauseAt.After(out[i].Latest.CauseAt) {
			out[i].Latest = a
		}
	}
	return out
}

func cents(n int64) string { return fmt.Sprintf("%d.%02d", n/100, n%100) }
