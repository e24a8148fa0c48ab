package bank

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/operators"
)

// Sample is the bank program. Create it with New.
type Sample struct {
	w             Workload
	snapshotEvery uint64
	store         string

	prepare sync.Once // runs the bank, once per Topology
	prepErr error
	result  Result
	windows *operators.Collector[operators.Windowed[string, Deposits]]
}

// New returns the sample with its default options: 100 accounts of 10 000
// cents, 10 000 operations, a snapshot every 50 events.
func New() *Sample {
	return &Sample{w: Workload{Accounts: 100, Ops: 10_000, Seed: 1, Initial: 10_000}, snapshotEvery: 50}
}

// Name implements samples.Sample.
func (s *Sample) Name() string { return "bank" }

// Description implements samples.Sample.
func (s *Sample) Description() string {
	return "an embedded event-sourced actor: a bank-account app that uses sluice actors without a topology"
}

// Flags implements samples.Sample.
func (s *Sample) Flags(fs *flag.FlagSet) {
	fs.IntVar(&s.w.Accounts, "accounts", s.w.Accounts, "accounts, opened with 10 000 cents each")
	fs.IntVar(&s.w.Ops, "ops", s.w.Ops, "random operations (deposits, withdrawals, transfers)")
	fs.Uint64Var(&s.w.Seed, "seed", s.w.Seed, "seed of the operations")
	fs.Uint64Var(&s.snapshotEvery, "snapshot-every", s.snapshotEvery, "snapshot an account every so many of its events (0: never)")
	fs.StringVar(&s.store, "store", s.store, "store file, kept afterwards for `sluice store inspect` (default: a temporary file)")
}

// Configure sets the options without flags (for tests and embedding).
func (s *Sample) Configure(accounts, ops int, seed, snapshotEvery uint64, store string) {
	s.w.Accounts, s.w.Ops, s.w.Seed, s.snapshotEvery, s.store = accounts, ops, seed, snapshotEvery, store
}

// Workload returns the workload that the sample runs.
func (s *Sample) Workload() Workload { return s.w }

// Topology implements samples.Sample. The bank runs when the job opens its
// source, "journal": the workload on a first system, then the recovery on
// a second one; the source then reads the journal's events, and the job
// counts the deposits per account and minute.
func (s *Sample) Topology() (*operators.Topology, error) {
	if err := s.w.validate(); err != nil {
		return nil, err
	}
	s.prepare, s.prepErr, s.result = sync.Once{}, nil, Result{}
	t := operators.NewTopology("bank")
	entries := operators.Source(t, "journal", journalSource{s})
	timed := operators.Timestamps(entries, "time", Entry.At)
	s.windows = operators.NewCollector[operators.Windowed[string, Deposits]]()
	operators.Sink(DepositsPerMinute(timed), "collect", s.windows)
	return t, nil
}

// journalSource runs the bank when opened, then reads its journal.
type journalSource struct{ s *Sample }

func (j journalSource) Open(ctx context.Context, part, parts int, offset int64) (operators.Reader[Entry], error) {
	j.s.prepare.Do(func() { j.s.result, j.s.prepErr = j.s.runBank(ctx) })
	if j.s.prepErr != nil {
		return nil, j.s.prepErr
	}
	return operators.FromSlice(j.s.result.Entries).Open(ctx, part, parts, offset)
}

func (s *Sample) runBank(ctx context.Context) (Result, error) {
	path := s.store
	if path == "" {
		dir, err := os.MkdirTemp("", "sluice-bank-")
		if err != nil {
			return Result{}, err
		}
		defer os.RemoveAll(dir)
		path = filepath.Join(dir, "bank.db")
	}
	return Run(ctx, path, s.w, s.snapshotEvery)
}

// Result returns what the bank recorded and recovered, once the topology
// has finished.
func (s *Sample) Result() Result { return s.result }

// Deposits returns the job's deposits per account and minute, once the
// topology has finished.
func (s *Sample) Deposits() map[Window]Deposits {
	m := map[Window]Deposits{}
	if s.windows == nil {
		return m
	}
	for _, w := range s.windows.Items() {
		m[Window{Account: w.Key, Start: w.Start}] = w.Value
	}
	return m
}

// Report implements samples.Sample: the recovered balances against the
// direct computation, the deposits per minute against a direct count, and
// the largest balances. It returns an error when anything differs.
func (s *Sample) Report(w io.Writer) error {
	if s.prepErr != nil {
		return s.prepErr
	}
	got, want := s.result, Expected(s.w)
	fmt.Fprintf(w, "%d accounts, %d operations (%d refused, %d of them transfers to a closed account, refunded): total %s cents\n",
		s.w.Accounts, s.w.Ops, got.Refused, got.Refunded, Cents(got.Total()))
	var problems []error
	if got.Refused != want.Refused || got.Refunded != want.Refunded {
		problems = append(problems, fmt.Errorf("%d refused and %d refunded, the direct computation %d and %d",
			got.Refused, got.Refunded, want.Refused, want.Refunded))
	}
	ids := slices.Sorted(maps.Keys(want.Balances))
	wrong := 0
	for _, id := range ids {
		if b, ok := got.Balances[id]; !ok || b != want.Balances[id] {
			if wrong++; wrong <= 5 {
				problems = append(problems, fmt.Errorf("%s: balance %d cents (recovered: %v), the direct computation %d", id, b, ok, want.Balances[id]))
			}
		}
	}
	if wrong > 0 || len(got.Balances) != len(want.Balances) {
		problems = append(problems, fmt.Errorf("%d of %d balances differ from the direct computation", wrong, len(want.Balances)))
	} else {
		fmt.Fprintf(w, "recovered on a new system from %d snapshots + %d of the %d events; balances equal the direct computation\n",
			got.Snapshots, got.Replayed, got.Events)
	}

	gotDeposits, wantDeposits := s.Deposits(), ExpectedDeposits(s.w)
	windows := slices.SortedFunc(maps.Keys(wantDeposits), func(a, b Window) int {
		return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.Account, b.Account))
	})
	var busiest Window // the first with the most deposits, then the most cents
	for _, k := range windows {
		d, best := wantDeposits[k], wantDeposits[busiest]
		if gotDeposits[k] != d {
			problems = append(problems, fmt.Errorf("deposits of %s in the minute at %s: %+v, the direct count %+v",
				k.Account, k.Start.Format(time.TimeOnly), gotDeposits[k], d))
			break
		}
		if d.Count > best.Count || d.Count == best.Count && d.Cents > best.Cents {
			busiest = k
		}
	}
	if len(gotDeposits) != len(wantDeposits) {
		problems = append(problems, fmt.Errorf("deposits in %d windows, the direct count %d", len(gotDeposits), len(wantDeposits)))
	}
	if len(problems) == 0 && len(wantDeposits) > 0 {
		d := wantDeposits[busiest]
		fmt.Fprintf(w, "deposits per account per minute: %d windows, equal to the direct count; busiest: %s at %s, %d deposits (%s cents)\n",
			len(gotDeposits), busiest.Account, busiest.Start.Format("15:04"), d.Count, Cents(d.Cents))
	}
	if len(problems) > 0 {
		return fmt.Errorf("bank: the bank disagrees with the direct computation:\n%w", errors.Join(problems...))
	}

	slices.SortFunc(ids, func(a, b string) int {
		return cmp.Or(cmp.Compare(got.Balances[b], got.Balances[a]), cmp.Compare(a, b))
	})
	fmt.Fprintln(w, "largest balances:")
	for i, id := range ids[:min(5, len(ids))] {
		fmt.Fprintf(w, "%4d  %s  %12s cents\n", i+1, id, Cents(got.Balances[id]))
	}
	return nil
}

// Cents formats n with its digits in groups of three: 1 000 000.
func Cents(n int64) string {
	digits := strconv.FormatInt(n, 10)
	sign := ""
	if n < 0 {
		sign, digits = "-", digits[1:]
	}
	var out []byte
	for i := range len(digits) {
		if i > 0 && (len(digits)-i)%3 == 0 {
			out = append(out, ' ')
		}
		out = append(out, digits[i])
	}
	return sign + string(out)
}

// NotResumable implements samples.NotResumable: the bank's workload and
// recovery run on systems of their own when the job's source opens.
func (s *Sample) NotResumable() string {
	return "the bank sample runs its workload and its recovery on systems of its own when its source opens (its --store is that bank's store, kept for `sluice store inspect`); checkpoints of its topology could not resume them: run it without --checkpoints"
}
