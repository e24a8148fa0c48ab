package bank

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/persistence"
)

// Epoch is the time at which the workload opens its accounts; its
// operations follow, Spacing apart.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// StopTimeout bounds how long Run waits for its systems to stop.
const StopTimeout = 10 * time.Second

// Spacing is the event time between two operations of the workload.
const Spacing = 100 * time.Millisecond

// Workload is a deterministic series of random operations on a bank: every
// operation depends only on the seed and its number, so that the same
// workload can be run on the actors and replayed on a plain map.
type Workload struct {
	Accounts int    // opened at Epoch, named AccountName(0), ...; at least 2
	Ops      int    // operations after the openings
	Seed     uint64 // of the operations
	Initial  int64  // the opening balance of each account, cents
}

func (w Workload) validate() error {
	if w.Accounts < 2 || w.Ops < 0 || w.Initial < 0 {
		return fmt.Errorf("bank: workload of %d accounts, %d operations, %d cents each: want at least 2 accounts and no negative numbers",
			w.Accounts, w.Ops, w.Initial)
	}
	return nil
}

// OpKind is the kind of an operation of the workload.
type OpKind uint8

// The operations: 40% deposits, 30% withdrawals, 30% transfers.
const (
	OpDeposit OpKind = iota + 1
	OpWithdraw
	OpTransfer
)

func (k OpKind) String() string {
	switch k {
	case OpDeposit:
		return "deposit"
	case OpWithdraw:
		return "withdraw"
	case OpTransfer:
		return "transfer"
	}
	return fmt.Sprintf("OpKind(%d)", uint8(k))
}

// Op is one operation of the workload.
type Op struct {
	Kind    OpKind
	Account string // the account, or the sender of a transfer
	To      string // the receiver of a transfer
	Amount  int64  // cents
	At      time.Time
}

// AccountName returns the name of account i: "acct-007".
func AccountName(i int) string { return fmt.Sprintf("acct-%03d", i) }

// Closed returns the account that one transfer in 50 goes to: it was never
// opened, so those transfers are refunded.
func (w Workload) Closed() string { return AccountName(w.Accounts) }

// Op returns operation i (0-based): deposits of 1 to 50 units, withdrawals
// of 1 to 200 and transfers of 1 to 150 (a unit is 100 cents, plus up to
// 99 cents), on accounts drawn uniformly.
func (w Workload) Op(i int) Op {
	r := rand.New(rand.NewPCG(w.Seed, uint64(i)))
	from := r.IntN(w.Accounts)
	op := Op{Account: AccountName(from), At: Epoch.Add(time.Duration(i+1) * Spacing)}
	switch k := r.IntN(10); {
	case k < 4:
		op.Kind, op.Amount = OpDeposit, 100+r.Int64N(4_901)
	case k < 7:
		op.Kind, op.Amount = OpWithdraw, 100+r.Int64N(19_901)
	default:
		op.Kind, op.Amount = OpTransfer, 100+r.Int64N(14_901)
		if r.IntN(50) == 0 {
			op.To = w.Closed()
		} else {
			to := r.IntN(w.Accounts - 1)
			if to >= from {
				to++
			}
			op.To = AccountName(to)
		}
	}
	return op
}

// Outcome is where a workload leaves the bank.
type Outcome struct {
	Balances map[string]int64 // of the opened accounts, cents
	Refused  int              // operations refused, refunded transfers included
	Refunded int              // transfers to the closed account, refunded
}

// Total returns the sum of the balances.
func (o Outcome) Total() int64 {
	var t int64
	for _, b := range o.Balances {
		t += b
	}
	return t
}

// Expected replays the workload on a plain map, without actors, journal or
// sagas: the independent computation that a Run must agree with.
func Expected(w Workload) Outcome {
	o := Outcome{Balances: map[string]int64{}}
	for i := range w.Accounts {
		o.Balances[AccountName(i)] = w.Initial
	}
	for i := range w.Ops {
		op := w.Op(i)
		switch op.Kind {
		case OpDeposit:
			o.Balances[op.Account] += op.Amount
		case OpWithdraw, OpTransfer:
			_, open := o.Balances[op.To]
			switch {
			case op.Amount > o.Balances[op.Account]:
				o.Refused++
			case op.Kind == OpTransfer && !open:
				o.Refused++
				o.Refunded++
			default:
				o.Balances[op.Account] -= op.Amount
				if op.Kind == OpTransfer {
					o.Balances[op.To] += op.Amount
				}
			}
		}
	}
	return o
}

// ExpectedDeposits counts the deposits of the workload per account and
// minute, as DepositsPerMinute does over the journal.
func ExpectedDeposits(w Workload) map[Window]Deposits {
	m := map[Window]Deposits{}
	for i := range w.Ops {
		if op := w.Op(i); op.Kind == OpDeposit {
			k := Window{Account: op.Account, Start: op.At.Truncate(time.Minute)}
			m[k] = Deposits{Count: m[k].Count + 1, Cents: m[k].Cents + op.Amount}
		}
	}
	return m
}

// Window is an account's minute.
type Window struct {
	Account string
	Start   time.Time
}

// Result is what Run recorded, and recovered on a new system.
type Result struct {
	// Outcome has the balances that the new system recovered, and the
	// refusals that the first one answered.
	Outcome
	Snapshots int     // accounts recovered from a snapshot
	Replayed  int64   // events replayed after the snapshots (or from the start)
	Events    int64   // events in the journal
	Entries   []Entry // the journal's events, by time
}

// Run runs the workload on a Bank whose store is the file at path (which
// must not hold accounts yet), one operation at a time, with a snapshot of
// each account every snapshotEvery events. Then it stops that system,
// starts a new one on the same file, recovers every account (snapshot and
// journal), and reads their balances and their events.
func Run(ctx context.Context, path string, w Workload, snapshotEvery uint64) (Result, error) {
	if err := w.validate(); err != nil {
		return Result{}, err
	}
	var res Result
	ids := make([]string, w.Accounts)
	for i := range ids {
		ids[i] = AccountName(i)
	}
	err := onStore(ctx, path, snapshotEvery, func(b *Bank, j persistence.Journal, _ persistence.SnapshotStore) error {
		if seq, err := j.HighestSeq(ctx, PersistenceID(ids[0])); err != nil || seq > 0 {
			return errors.Join(err, fmt.Errorf("bank: %s already holds the account %q: use a new file", path, ids[0]))
		}
		for _, id := range ids {
			if _, err := b.Open(ctx, id, w.Initial, Epoch); err != nil {
				return err
			}
		}
		for i := range w.Ops {
			var err error
			switch op := w.Op(i); op.Kind {
			case OpDeposit:
				_, err = b.Deposit(ctx, op.Account, op.Amount, op.At)
			case OpWithdraw:
				_, err = b.Withdraw(ctx, op.Account, op.Amount, op.At)
			case OpTransfer:
				err = b.Transfer(ctx, op.Account, op.To, op.Amount, op.At)
			}
			switch {
			case errors.Is(err, ErrRefunded):
				res.Refunded++
				res.Refused++
			case errors.Is(err, ErrRefused):
				res.Refused++
			case err != nil:
				return fmt.Errorf("bank: operation %d: %w", i, err)
			}
		}
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	// A new system on the same file: every account recovers.
	err = onStore(ctx, path, snapshotEvery, func(b *Bank, j persistence.Journal, snaps persistence.SnapshotStore) error {
		res.Balances = map[string]int64{}
		for _, id := range ids {
			if _, ok, err := snaps.Latest(ctx, PersistenceID(id)); err != nil {
				return err
			} else if ok {
				res.Snapshots++
			}
			seq, err := j.HighestSeq(ctx, PersistenceID(id))
			if err != nil {
				return err
			}
			res.Events += int64(seq)
			a, err := b.Account(ctx, id)
			if err != nil {
				return err
			}
			res.Balances[id] = a.Balance
		}
		res.Replayed = b.Applied()
		res.Entries, err = ReadEntries(ctx, j, ids)
		return err
	})
	if err != nil {
		return Result{}, err
	}
	return res, nil
}

// onStore runs fn on a Bank on a new System whose store is the file at
// path, then closes the bank, the journal and the system, in that order.
func onStore(ctx context.Context, path string, snapshotEvery uint64, fn func(*Bank, persistence.Journal, persistence.SnapshotStore) error) (err error) {
	sys, err := actors.NewSystem(actors.Config{Name: "bank", Store: path})
	if err != nil {
		return err
	}
	// Closing goes on when ctx has ended, within its own deadline.
	closing := func(stop func(context.Context) error) {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), StopTimeout)
		defer cancel()
		err = errors.Join(err, stop(c))
	}
	defer closing(sys.Stop)
	db, err := sys.DB()
	if err != nil {
		return err
	}
	journal, err := persistence.NewBoltJournal(db)
	if err != nil {
		return err
	}
	// Closed after the accounts, before the system closes the file, so
	// that it compacts its log into the file.
	defer func() { err = errors.Join(err, journal.Close()) }()
	snapshots, err := persistence.NewBoltSnapshotStore(db)
	if err != nil {
		return err
	}
	b, err := NewBank(sys, Config{Journal: journal, Snapshots: snapshots, SnapshotEvery: snapshotEvery})
	if err != nil {
		return err
	}
	defer closing(b.Close)
	return fn(b, journal, snapshots)
}
