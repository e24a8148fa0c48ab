package fraud

import (
	"cmp"
	"slices"
	"time"

	"github.com/sluicehq/sluice/operators"
)

// Alert is a suspicious transaction and what makes it so: the report of
// the card as stolen, or an earlier transaction of the card too far away.
type Alert struct {
	Kind   string // KindStolen or KindTravel
	Card   string
	Tx     int64 // the suspicious transaction
	At     time.Time
	City   string
	Amount int64
	// Cause is the Stolen report's ID (KindStolen) or the earlier
	// transaction's (KindTravel), at CauseAt in CauseCity (travel only).
	Cause     int64
	CauseAt   time.Time
	CauseCity string
	Km        int // between the two transactions (travel only)
}

// StolenAlert is the alert for tx, used within the window after the card
// was reported stolen.
func StolenAlert(s Stolen, tx Tx) Alert {
	return Alert{Kind: KindStolen, Card: tx.Card, Tx: tx.ID, At: tx.At, City: tx.City, Amount: tx.Amount,
		Cause: s.ID, CauseAt: s.At}
}

// TravelAlert is the alert for b, a transaction that follows a of the
// same card (it is one only when Km exceeds the distance).
func TravelAlert(a, b Tx) Alert {
	return Alert{Kind: KindTravel, Card: b.Card, Tx: b.ID, At: b.At, City: b.City, Amount: b.Amount,
		Cause: a.ID, CauseAt: a.At, CauseCity: a.City, Km: Km(a.City, b.City)}
}

func txCard(t Tx) string         { return t.Card }
func stolenCard(s Stolen) string { return s.Card }

// Detect is the job's core: two interval joins on the card, whose results
// are merged into one stream of alerts. The transactions and the reports
// must carry event times (operators.Timestamps).
//
//	after-stolen: every transaction in [report, report+after] of its card's report
//	travel:       every pair of a card's transactions a, b with b in (a, a+window],
//	              kept by far-apart when they are more than km apart
//
// Both joins keep a record only until the watermark passes the end of the
// interval it may still join with, so their state stays bounded.
func Detect(txs operators.Stream[Tx], reports operators.Stream[Stolen], after, window time.Duration, km, parallelism int) operators.Stream[Alert] {
	p := operators.Parallelism(parallelism)
	stolen := operators.IntervalJoin(reports, txs, "after-stolen", stolenCard, txCard, 0, after, StolenAlert, p)
	pairs := operators.IntervalJoin(txs, txs, "travel", txCard, txCard, time.Nanosecond, window, TravelAlert, p)
	far := operators.Filter(pairs, "far-apart", func(a Alert) bool { return a.Km > km })
	return operators.Merge("alerts", stolen, far)
}

// Expected returns the alerts of d by nested loops over the records, in
// Sort's order: for every report, every transaction of its card at most
// After after it; for every card, every pair of its transactions a, b with
// b after a by at most TravelWindow and more than DistanceKm apart.
func Expected(d Data, cfg Config) []Alert {
	var out []Alert
	for _, s := range d.Reports {
		for _, tx := range d.Txs {
			if tx.Card == s.Card && !tx.At.Before(s.At) && !tx.At.After(s.At.Add(cfg.After)) {
				out = append(out, StolenAlert(s, tx))
			}
		}
	}
	byCard := map[string][]Tx{}
	for _, tx := range d.Txs {
		byCard[tx.Card] = append(byCard[tx.Card], tx)
	}
	for _, txs := range byCard {
		for _, a := range txs {
			for _, b := range txs {
				if b.At.After(a.At) && !b.At.After(a.At.Add(cfg.TravelWindow)) && Km(a.City, b.City) > cfg.DistanceKm {
					out = append(out, TravelAlert(a, b))
				}
			}
		}
	}
	Sort(out)
	return out
}

// Sort orders alerts by time, then kind, transaction and cause.
func Sort(alerts []Alert) {
	slices.SortFunc(alerts, func(a, b Alert) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Tx, b.Tx), cmp.Compare(a.Cause, b.Cause))
	})
}
