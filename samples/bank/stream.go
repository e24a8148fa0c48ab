package bank

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/persistence"
)

// Entry is an event of an account as its journal holds it: the record of
// streams over the bank's history.
type Entry struct {
	Account string
	Seq     uint64
	Event   Event
}

// At returns the time of the entry's event.
func (e Entry) At() time.Time { return e.Event.When() }

// Deposits are the deposits of an account in a window: how many, how many
// cents.
type Deposits struct {
	Count int64
	Cents int64
}

// DepositsPerMinute counts the deposits (Deposited events) of each account
// per minute of event time: a filter, a key-by account and a tumbling
// window aggregate, whose state (the open windows) is checkpointed. The
// entries' event times must be assigned upstream (operators.Timestamps
// with Entry.At).
func DepositsPerMinute(entries operators.Stream[Entry]) operators.Stream[operators.Windowed[string, Deposits]] {
	deposits := operators.Filter(entries, "deposits", func(e Entry) bool {
		_, ok := e.Event.(Deposited)
		return ok
	})
	byAccount := operators.KeyBy(deposits, "by-account", func(e Entry) string { return e.Account })
	return operators.WindowAggregate(byAccount, "deposits-per-minute", operators.Tumbling(time.Minute),
		func() Deposits { return Deposits{} },
		func(d Deposits, e Entry) Deposits {
			return Deposits{Count: d.Count + 1, Cents: d.Cents + e.Event.(Deposited).Amount}
		},
		func(a, b Deposits) Deposits { return Deposits{Count: a.Count + b.Count, Cents: a.Cents + b.Cents} })
}

// ReadEntries reads every event of the accounts ids from journal, ordered
// by time (then account, then sequence number).
func ReadEntries(ctx context.Context, journal persistence.Journal, ids []string) ([]Entry, error) {
	events := Events()
	var out []Entry
	for _, id := range ids {
		err := journal.Replay(ctx, PersistenceID(id), 1, math.MaxUint64, -1, func(ev persistence.Event) error {
			v, err := events.Decode(ev.Type, ev.Data)
			if err != nil {
				return fmt.Errorf("seq %d: %w", ev.Seq, err)
			}
			e, ok := v.(Event)
			if !ok {
				return fmt.Errorf("seq %d: %T is not an account event", ev.Seq, v)
			}
			out = append(out, Entry{Account: id, Seq: ev.Seq, Event: e})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("bank: read the journal of %q: %w", id, err)
		}
	}
	slices.SortFunc(out, func(a, b Entry) int {
		return cmp.Or(a.At().Compare(b.At()), cmp.Compare(a.Account, b.Account), cmp.Compare(a.Seq, b.Seq))
	})
	return out, nil
}
