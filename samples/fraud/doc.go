// Package fraud is the sample of joins in event time: it flags card
// transactions that come within minutes after the card was reported
// stolen, and pairs of transactions of one card too far apart to have been
// made by the same person, with two interval joins, one of them a
// self-join.
//
// # Basics
//
// Two streams come in: transactions (Tx: a card, a time, a city, an
// amount), a little out of order (up to MaxDelay), and the reports of
// cards stolen (Stolen). Each gets its event time from operators.Timestamps;
// the transactions' watermark trails them by MaxDelay, so that none of
// them is late. Detect then joins them by card:
//
//	after-stolen = IntervalJoin(reports, txs, by card, [0, After])
//	travel       = IntervalJoin(txs, txs, by card, [1ns, TravelWindow]) -> far-apart (Filter on the distance)
//	alerts       = Merge(after-stolen, travel)
//
// An interval join pairs each left record l with every right record of the
// same key whose event time is within [l+lower, l+upper], as soon as both
// are there, whichever came first. It keeps a record only until the
// watermark (the lowest over its inputs) passes the end of the interval it
// can still join, so its state stays bounded by the traffic of one
// interval. The travel join is a self-join: both of its inputs are the
// transactions, and a lower bound of one nanosecond pairs each transaction
// with the later ones only (not with itself, and each pair once). An
// alert holds the suspicious transaction and its cause: the report, or
// the earlier transaction and the distance between the two (Km, great
// circle).
//
// # The data
//
// Generate makes a deterministic day of transactions from a seed: cards
// that stay within DistanceKm/2 of home or fly away only after a pause
// longer than TravelWindow (so ordinary use raises no alert), and planted
// frauds: transactions far from one of the card's transactions within
// TravelWindow after it (Trips), and cards reported stolen then used one to
// three times within After (Stolen). Each planted case is a Case that an
// alert must report. A planted transaction may also raise alerts with the
// card's other transactions around it: the legitimate transaction in Paris
// twenty minutes after the thief's in Madrid is suspicious too.
//
// # Checking it
//
// Expected computes the alerts with nested loops over the records (every
// report with every transaction; every pair of a card's transactions).
// Report checks that the job's alerts equal them exactly and that every
// planted case is among them (Missed), then prints the alerts by kind and
// the first suspicious transactions:
//
//	sluice run fraud --cards 500 --transactions 20000 --stolen 20 --trips 15 \
//		--after 30m --travel-window 1h --distance 500
//
// The tests run it small with several rules and parallelisms, check that
// no record was late for the joins (OperatorStats.Late), and check
// Expected itself on a stream made by hand.
package fraud
