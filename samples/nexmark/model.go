package nexmark

import (
	"cmp"
	"slices"
	"strings"
)

// The reference models: one plain, single-goroutine function per query that
// computes the query's final output from a finite input, as Beam's
// QueryNModel classes do. The tests of the topologies compare their output
// with these.
//
// Every model is a function of the multiset of its input events: it sees the
// whole input at once, so the order of the events never changes its result
// (bids may come before their auction, auctions before their seller, input
// may be out of time order). Every open window fires at the end of the input,
// so the models output every window. Each model returns its results in
// canonical order (Sorted, SortedEvents), so
//
//	slices.Equal(Sorted(topologyOutput), ModelQ5(events))
//
// checks a topology. For q4 and q6, whose topologies emit updates, reduce
// the topology's update stream with LastPerKeyQ4 and LastPerKeyQ6 first.
//
// An event is the kind of its first non-nil field in the order Person,
// Auction, Bid (as Event.Time reads it); empty events are passed through by
// q0 and ignored by the other queries.
//
// Person and auction ids may repeat: the generator repeats some when
// OutOfOrderGroupSize does not divide a generator's count (as Beam's does).
// The queries that identify persons or auctions by id keep the first record
// of each id, as Beam's q3 keeps the first person of an id, and ignore the
// others: q3 (each auction once, with the first person of its seller) and
// the winning bids of q4, q6 and q9 (each auction id once: its first
// auction). The first is the earliest in event time; records of one id at
// the same time are ordered by the fields the query reads (auctions by
// expiry, seller, category and reserve; persons by name, city and state), so
// the result does not depend on the input's order.
// The copies the generator makes differ only in their times. q8 works per
// window, as Beam's: a person or auction id repeated in another window
// counts there.

// Windows of the queries, in ms (Beam's windowSizeSec = 10, windowPeriodSec
// = 5, which the Flink SQL queries hard-code).
const (
	// modelWindowSize is the size of q5's sliding windows and q7's and q8's
	// tumbling windows, and the gap of q11's sessions.
	modelWindowSize int64 = 10_000
	// modelWindowPeriod is the period of q5's sliding windows.
	modelWindowPeriod int64 = 5_000
	// modelQ6Last is how many of a seller's winning bids q6 averages.
	modelQ6Last = 10
	// modelQ2Skip selects q2's auctions: auction % modelQ2Skip == 0.
	modelQ2Skip = 123
)

// modelFloorDiv is a/b rounded down (b > 0), so that windows before the
// epoch are aligned too.
func modelFloorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// modelTumbleStart is the start of the tumbling window of the given size
// that holds t: the window [k·size, (k+1)·size) with k·size ≤ t.
func modelTumbleStart(t, size int64) int64 {
	return modelFloorDiv(t, size) * size
}

// modelSlideStarts returns the starts of the sliding windows [k·period,
// k·period+size) that hold t, latest first: size/period windows when period
// divides size.
func modelSlideStarts(t, size, period int64) []int64 {
	var starts []int64
	for s := modelTumbleStart(t, period); s > t-size; s -= period {
		starts = append(starts, s)
	}
	return starts
}

// ModelQ0 is q0, pass-through: every event, unchanged (in canonical order).
func ModelQ0(events []Event) []Event {
	return SortedEvents(events)
}

// ModelQ1 is q1, currency conversion: every bid, with its price·89/100
// (integer division, as Beam).
func ModelQ1(events []Event) []Q1 {
	var out []Q1
	for _, b := range modelBids(events) {
		out = append(out, Q1{Auction: b.Auction, Bidder: b.Bidder, Price: b.Price * 89 / 100, DateTime: b.DateTime})
	}
	return Sorted(out)
}

// ModelQ2 is q2, selection: the auction and price of every bid whose
// auction % 123 == 0.
func ModelQ2(events []Event) []Q2 {
	var out []Q2
	for _, b := range modelBids(events) {
		if b.Auction%modelQ2Skip == 0 {
			out = append(out, Q2{Auction: b.Auction, Price: b.Price})
		}
	}
	return Sorted(out)
}

// ModelQ3 is q3, local item suggestion: the inner join of the auctions in
// category 10 with the persons in state OR, ID or CA on auction.seller =
// person.id, whatever their order. Each auction (id and seller) is joined
// once, however often it occurs, with the first of the person events of its
// seller's id in those states: the earliest, then by name, city and state.
// (The topology keeps the first person to arrive: the same one when the
// copies of a person differ only in time, as the generator's do.)
func ModelQ3(events []Event) []Q3 {
	type sale struct{ id, seller int64 }
	persons := make(map[int64]*Person) // by id: the first
	auctions := make(map[sale]bool)
	for _, e := range events {
		switch {
		case e.Person != nil:
			p := e.Person
			if p.State != "OR" && p.State != "ID" && p.State != "CA" {
				continue
			}
			if q := persons[p.ID]; q == nil || cmp.Or(cmp.Compare(p.DateTime, q.DateTime), strings.Compare(p.Name, q.Name),
				strings.Compare(p.City, q.City), strings.Compare(p.State, q.State)) < 0 {
				persons[p.ID] = p
			}
		case e.Auction != nil:
			if e.Auction.Category == 10 {
				auctions[sale{e.Auction.ID, e.Auction.Seller}] = true
			}
		}
	}
	var out []Q3
	for a := range auctions {
		if p := persons[a.seller]; p != nil {
			out = append(out, Q3{Name: p.Name, City: p.City, State: p.State, ID: a.id})
		}
	}
	return Sorted(out)
}

// ModelQ4 is q4, average price per category: for each category with at
// least one auction with a winning bid (see ModelQ9), the average of the
// winning prices of its auctions, computed as
// float64(sum of the prices as int64) / float64(number of auctions). That
// is the last update per category of the topology.
func ModelQ4(events []Event) []Q4 {
	type acc struct{ sum, n int64 }
	byCategory := make(map[int64]*acc)
	for _, w := range modelWinningBids(events) {
		a := byCategory[w.auction.Category]
		if a == nil {
			a = new(acc)
			byCategory[w.auction.Category] = a
		}
		a.sum += w.bid.Price
		a.n++
	}
	out := make([]Q4, 0, len(byCategory))
	for c, a := range byCategory {
		out = append(out, Q4{Category: c, AvgPrice: float64(a.sum) / float64(a.n)})
	}
	return Sorted(out)
}

// ModelQ5 is q5, hot items: for each sliding window of 10 s every 5 s that
// holds at least one bid, every auction whose number of bids in the window
// equals the window's maximum (ties all output, with their count). A bid at
// time t is in the windows [s, s+10 s) with s a multiple of 5 s and
// s ≤ t < s+10 s: two windows.
func ModelQ5(events []Event) []Q5 {
	type key struct{ start, auction int64 }
	counts := make(map[key]int64)
	maxima := make(map[int64]int64) // by window start
	for _, b := range modelBids(events) {
		for _, s := range modelSlideStarts(b.DateTime, modelWindowSize, modelWindowPeriod) {
			k := key{s, b.Auction}
			counts[k]++
			maxima[s] = max(maxima[s], counts[k])
		}
	}
	var out []Q5
	for k, n := range counts {
		if n == maxima[k.start] {
			out = append(out, Q5{WindowStart: k.start, WindowEnd: k.start + modelWindowSize, Auction: k.auction, Count: n})
		}
	}
	return Sorted(out)
}

// ModelQ6 is q6, average selling price by seller: for each seller with at
// least one winning bid, the last update of ModelQ6Updates, i.e. the average
// price of the seller's last 10 winning bids in order of auction expiry
// (ties by auction id).
func ModelQ6(events []Event) []Q6 {
	return LastPerKeyQ6(ModelQ6Updates(events))
}

// ModelQ6Updates is q6's stream of updates, in the order a topology emits
// them: the winning bids (see ModelQ9) ordered by their auction's expiry,
// ties by auction id; for each, its seller and the average price of the
// seller's last 10 winning bids so far, this one included, computed as
// float64(sum of the prices as int64) / float64(their number, at most 10).
func ModelQ6Updates(events []Event) []Q6 {
	wins := modelWinningBids(events)
	slices.SortFunc(wins, func(x, y modelWin) int {
		return cmp.Or(cmp.Compare(x.auction.Expires, y.auction.Expires), cmp.Compare(x.auction.ID, y.auction.ID))
	})
	last := make(map[int64][]int64) // by seller: the last ≤ 10 prices, oldest first
	out := make([]Q6, 0, len(wins))
	for _, w := range wins {
		seller := w.auction.Seller
		prices := append(last[seller], w.bid.Price)
		if len(prices) > modelQ6Last {
			prices = prices[len(prices)-modelQ6Last:]
		}
		last[seller] = prices
		var sum int64
		for _, p := range prices {
			sum += p
		}
		out = append(out, Q6{Seller: seller, AvgPrice: float64(sum) / float64(len(prices))})
	}
	return out
}

// ModelQ7 is q7, highest bid: for each tumbling window of 10 s that holds at
// least one bid, every bid whose price equals the window's highest price
// (each such bid event once; ties all output). A bid at time t is in the
// window [s, s+10 s) with s the multiple of 10 s with s ≤ t < s+10 s.
func ModelQ7(events []Event) []Q7 {
	bids := modelBids(events)
	maxima := make(map[int64]int64) // by window start
	for _, b := range bids {
		s := modelTumbleStart(b.DateTime, modelWindowSize)
		if m, ok := maxima[s]; !ok || b.Price > m {
			maxima[s] = b.Price
		}
	}
	var out []Q7
	for _, b := range bids {
		s := modelTumbleStart(b.DateTime, modelWindowSize)
		if b.Price == maxima[s] {
			out = append(out, Q7{WindowStart: s, WindowEnd: s + modelWindowSize, Auction: b.Auction,
				Bidder: b.Bidder, Price: b.Price, DateTime: b.DateTime})
		}
	}
	return Sorted(out)
}

// ModelQ8 is q8, monitor new users: the persons who created at least one
// auction (auction.seller = person.id) in the tumbling window of 10 s in
// which they joined (the windows of person.dateTime and auction.dateTime are
// the same). Each distinct (id, name, window) is output once, however many
// auctions and person events match it.
func ModelQ8(events []Event) []Q8 {
	type sellerWindow struct{ seller, start int64 }
	sold := make(map[sellerWindow]bool)
	joined := make(map[Q8]bool)
	for _, e := range events {
		switch {
		case e.Person != nil:
			joined[Q8{ID: e.Person.ID, Name: e.Person.Name, WindowStart: modelTumbleStart(e.Person.DateTime, modelWindowSize)}] = true
		case e.Auction != nil:
			sold[sellerWindow{e.Auction.Seller, modelTumbleStart(e.Auction.DateTime, modelWindowSize)}] = true
		}
	}
	var out []Q8
	for p := range joined {
		if sold[sellerWindow{p.ID, p.WindowStart}] {
			out = append(out, p)
		}
	}
	return Sorted(out)
}

// ModelQ9 is q9, winning bids: for each auction with at least one valid bid,
// its winning bid. A bid is valid for auction A if bid.auction = A.id,
// A.dateTime ≤ bid.dateTime ≤ A.expires (both ends included) and
// bid.price ≥ A.reserve. The winning bid is the valid bid with the highest
// price; ties go to the earliest (smallest dateTime), then to the smallest
// bidder id. Bids that tie on all of these have the same output, so the
// result does not depend on the order of the input. An auction id that
// occurs more than once is one auction, its first (modelFirstAuctions); the
// others are ignored.
func ModelQ9(events []Event) []Q9 {
	var out []Q9
	for _, w := range modelWinningBids(events) {
		out = append(out, Q9{Auction: w.auction.ID, Bidder: w.bid.Bidder, Price: w.bid.Price, DateTime: w.bid.DateTime})
	}
	return Sorted(out)
}

// ModelQ11 is q11, user sessions: each bidder's bids grouped into sessions
// with a gap of 10 s. Sorted by time, a bidder's consecutive bids at t1 ≤ t2
// are in the same session if and only if t2 − t1 < 10 s; so bids exactly
// 10 s apart are in different sessions (Beam's merging of the half-open
// windows [t, t+10 s); Flink would merge them). A session outputs its number
// of bids, sessionStart = its first bid's time and sessionEnd = its last
// bid's time + 10 s.
func ModelQ11(events []Event) []Q11 {
	times := make(map[int64][]int64) // by bidder
	for _, b := range modelBids(events) {
		times[b.Bidder] = append(times[b.Bidder], b.DateTime)
	}
	var out []Q11
	for bidder, ts := range times {
		slices.Sort(ts)
		cur := Q11{Bidder: bidder, Count: 1, SessionStart: ts[0], SessionEnd: ts[0] + modelWindowSize}
		for _, t := range ts[1:] {
			if t < cur.SessionEnd {
				cur.Count++
				cur.SessionEnd = t + modelWindowSize
				continue
			}
			out = append(out, cur)
			cur = Q11{Bidder: bidder, Count: 1, SessionStart: t, SessionEnd: t + modelWindowSize}
		}
		out = append(out, cur)
	}
	return Sorted(out)
}

// modelBids returns the bids of events, in input order.
func modelBids(events []Event) []*Bid {
	var bids []*Bid
	for _, e := range events {
		if e.Person == nil && e.Auction == nil && e.Bid != nil {
			bids = append(bids, e.Bid)
		}
	}
	return bids
}

// modelWin is an auction and its winning bid.
type modelWin struct {
	auction *Auction
	bid     *Bid
}

// modelBetterBid reports whether b beats the current best bid c of an
// auction: a higher price, or the same price and an earlier time, or the
// same price and time and a smaller bidder id.
func modelBetterBid(b, c *Bid) bool {
	return cmp.Or(cmp.Compare(b.Price, c.Price), cmp.Compare(c.DateTime, b.DateTime), cmp.Compare(c.Bidder, b.Bidder)) > 0
}

// modelFirstAuctions returns the first auction of each id (see the models'
// doc): the earliest, then the one first in the order of
// compareAuctionCopies.
func modelFirstAuctions(events []Event) map[int64]*Auction {
	first := make(map[int64]*Auction)
	for _, e := range events {
		if e.Person != nil || e.Auction == nil {
			continue
		}
		a := e.Auction
		if f := first[a.ID]; f == nil || compareAuctionCopies(auctionInfoOf(a), auctionInfoOf(f)) < 0 {
			first[a.ID] = a
		}
	}
	return first
}

// modelWinningBids returns the auctions that have a valid bid, with their
// winning bid (see ModelQ9), in the order of their ids.
func modelWinningBids(events []Event) []modelWin {
	byID := make(map[int64]*modelWin)
	for id, a := range modelFirstAuctions(events) {
		byID[id] = &modelWin{auction: a}
	}
	for _, b := range modelBids(events) {
		w := byID[b.Auction]
		if w == nil {
			continue
		}
		a := w.auction
		if b.DateTime < a.DateTime || b.DateTime > a.Expires || b.Price < a.Reserve {
			continue
		}
		if w.bid == nil || modelBetterBid(b, w.bid) {
			w.bid = b
		}
	}
	var out []modelWin
	for _, w := range byID {
		if w.bid != nil {
			out = append(out, *w)
		}
	}
	slices.SortFunc(out, func(x, y modelWin) int { return cmp.Compare(x.auction.ID, y.auction.ID) })
	return out
}
