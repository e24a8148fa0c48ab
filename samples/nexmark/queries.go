package nexmark

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/operators"
)

// The queries as sluice topologies
//
// Each BuildQn takes the stream of events as a source produces it (the live
// generator, Source, or an event file, FileSource) and adds the query's
// operators, returning the stream of its results; Build does the same by
// name and renders the results as JSON lines. The builders that need event
// time (q4–q9, q11) take it from Event.Time with operators.Timestamps,
// allowing Params.OutOfOrderness, right after the events stream (so
// watermarks from upstream are replaced), or for q8 right after the filter
// that keeps its persons and auctions (the events it drops are not read for
// a time; a watermark from the events kept is never ahead of one from all
// of them, so no event kept is late that was not); q0–q3 need none. Every operator a
// builder adds is named after its query ("q5.count", "q5.max", ...), so that
// several queries fit in one topology, each once.
//
// With the default windows and auction skip (those of the models), the
// results equal the models' (ModelQ0...ModelQ11) as multisets, and for the
// queries that emit updates (q4, q6) the last update per key equals the
// model, provided no event is late. With the generator's streams and
// ParamsOf(cfg, ...), none is, whatever cfg's OutOfOrderGroupSize: the
// watermark trails the latest event time by Config.MaxOutOfOrderness, so it
// is never ahead of the generator's own (Beam's) watermark. The windowed
// operators count late events (OperatorStats.Late) and drop them; the
// Process operators of q4, q5, q6, q7 and q9 count them too, and handle them
// as well as they can.
//
// Person and auction ids may repeat (see the models): q3 and the winning
// bids of q4, q6 and q9 keep the first record of each id, as the models do.

// Params are the settings of the query topologies. The zero Params is Beam's
// defaults with parallelism 1, for input in event-time order whose ids may
// repeat; ParamsOf takes them from a Config.
type Params struct {
	// Parallelism is the number of instances of every keyed operator (joins,
	// windows, Process, aggregations). Sources keep their own parallelism,
	// and so do the stateless operators fused with them. Default (0): 1.
	Parallelism int
	// OutOfOrderness is how far behind the latest event time an event may
	// arrive and still be on time (operators.OutOfOrderness). Default 0:
	// events arrive in order, as the generator produces them with
	// OutOfOrderGroupSize 1. For the generator's out-of-order streams
	// ParamsOf sets the generator's own, Config.MaxOutOfOrderness.
	OutOfOrderness time.Duration
	// WindowSize is the size of q5's sliding windows and of q7's and q8's
	// tumbling windows, and the gap of q11's sessions (Beam's
	// windowSizeSec). Default (0): 10 s.
	WindowSize time.Duration
	// WindowPeriod is the period of q5's sliding windows (Beam's
	// windowPeriodSec). Default (0): 5 s.
	WindowPeriod time.Duration
	// AuctionSkip: q2 selects the bids whose auction id is a multiple of it
	// (Beam's auctionSkip). Default (0): 123.
	AuctionSkip int64
	// UniqueIDs promises that no auction id repeats in the input: the
	// winning-bid operator of q4, q6 and q9 then opens an auction as soon as
	// it arrives and forgets it closedFor (15 s of event time) after it has
	// closed: until then the bids that come after it closed are ignored at
	// once (a fifth of the generator's bids, most within 15 s), instead of
	// each waiting for an auction that cannot come. Without it (the
	// default) it keeps the first auction of each id (the earliest, as
	// ModelQ9): it opens an auction only once the watermark has passed its
	// time (no earlier copy can come then), and remembers every closed id
	// for the rest of the run, to ignore later copies. ParamsOf sets it when
	// the configuration's generator repeats no id (Config.RepeatsIDs).
	UniqueIDs bool
}

// The defaults of Params, Beam's.
const (
	// DefaultWindowSize is Beam's windowSizeSec, 10 s.
	DefaultWindowSize = 10 * time.Second
	// DefaultWindowPeriod is Beam's windowPeriodSec, 5 s.
	DefaultWindowPeriod = 5 * time.Second
	// DefaultAuctionSkip is Beam's auctionSkip, 123.
	DefaultAuctionSkip = 123
)

// ParamsOf returns the query parameters of cfg's knobs: WindowSizeSec,
// WindowPeriodSec, AuctionSkip; as the OutOfOrderness WatermarkHoldbackSec
// plus the generator's own out-of-orderness (Config.MaxOutOfOrderness), so
// that the queries' watermark is never ahead of the generator's; and
// UniqueIDs unless the generator repeats ids (Config.RepeatsIDs); with the
// given parallelism. cfg must be valid. For an event file, pass the
// configuration it was generated with.
func ParamsOf(cfg Config, parallelism int) Params {
	ooo := cfg.MaxOutOfOrderness()
	if hold := time.Duration(cfg.WatermarkHoldbackSec) * time.Second; hold/time.Second != time.Duration(cfg.WatermarkHoldbackSec) || ooo > math.MaxInt64-hold {
		ooo = math.MaxInt64
	} else {
		ooo += hold
	}
	return Params{
		Parallelism:    parallelism,
		OutOfOrderness: ooo,
		WindowSize:     time.Duration(cfg.WindowSizeSec) * time.Second,
		WindowPeriod:   time.Duration(cfg.WindowPeriodSec) * time.Second,
		AuctionSkip:    int64(cfg.AuctionSkip),
		UniqueIDs:      !cfg.RepeatsIDs(),
	}
}

// ErrInvalidParams is wrapped by every error of Params.Validate.
var ErrInvalidParams = errors.New("nexmark: invalid query parameters")

// Validate reports the first negative field (zero fields take their
// defaults).
func (p Params) Validate() error {
	switch {
	case p.Parallelism < 0:
		return fmt.Errorf("%w: parallelism %d: want 1 or more (0: 1)", ErrInvalidParams, p.Parallelism)
	case p.OutOfOrderness < 0:
		return fmt.Errorf("%w: out-of-orderness %v: must not be negative", ErrInvalidParams, p.OutOfOrderness)
	case p.WindowSize < 0:
		return fmt.Errorf("%w: window size %v: must not be negative (0: %v)", ErrInvalidParams, p.WindowSize, DefaultWindowSize)
	case p.WindowPeriod < 0:
		return fmt.Errorf("%w: window period %v: must not be negative (0: %v)", ErrInvalidParams, p.WindowPeriod, DefaultWindowPeriod)
	case p.AuctionSkip < 0:
		return fmt.Errorf("%w: auction skip %d: must not be negative (0: %d)", ErrInvalidParams, p.AuctionSkip, DefaultAuctionSkip)
	}
	return nil
}

// withDefaults fills in the zero fields.
func (p Params) withDefaults() Params {
	if p.Parallelism == 0 {
		p.Parallelism = 1
	}
	if p.WindowSize == 0 {
		p.WindowSize = DefaultWindowSize
	}
	if p.WindowPeriod == 0 {
		p.WindowPeriod = DefaultWindowPeriod
	}
	if p.AuctionSkip == 0 {
		p.AuctionSkip = DefaultAuctionSkip
	}
	return p
}

func (p Params) par() operators.Option { return operators.Parallelism(p.Parallelism) }

// queries lists the builders by name, in order.
var queries = []struct {
	name  string
	build func(events operators.Stream[Event], p Params) operators.Stream[string]
}{
	{"q0", func(e operators.Stream[Event], p Params) operators.Stream[string] {
		return operators.Map(BuildQ0(e, p), "q0.json", func(ev Event) string { return string(AppendJSON(make([]byte, 0, 512), ev)) })
	}},
	{"q1", jsonLines("q1", BuildQ1)},
	{"q2", jsonLines("q2", BuildQ2)},
	{"q3", jsonLines("q3", BuildQ3)},
	{"q4", jsonLines("q4", BuildQ4)},
	{"q5", jsonLines("q5", BuildQ5)},
	{"q6", jsonLines("q6", BuildQ6)},
	{"q7", jsonLines("q7", BuildQ7)},
	{"q8", jsonLines("q8", BuildQ8)},
	{"q9", jsonLines("q9", BuildQ9)},
	{"q11", jsonLines("q11", BuildQ11)},
}

// jsonLines wraps a typed builder into one that renders its results with
// their AppendJSON.
func jsonLines[R interface{ AppendJSON([]byte) []byte }](q string, build func(operators.Stream[Event], Params) operators.Stream[R]) func(operators.Stream[Event], Params) operators.Stream[string] {
	return func(e operators.Stream[Event], p Params) operators.Stream[string] {
		return operators.Map(build(e, p), q+".json", func(r R) string { return string(r.AppendJSON(make([]byte, 0, 96))) })
	}
}

// Queries returns the names of the queries Build knows, in order: q0 to q9
// and q11.
func Queries() []string {
	names := make([]string, len(queries))
	for i, q := range queries {
		names[i] = q.name
	}
	return names
}

// Build adds the query called name (see Queries) over events and returns its
// results as JSON lines without their line breaks: for q0 the events in the
// event file's format (AppendJSON), for the others the result types'
// AppendJSON. It returns an error for an unknown query, listing the valid
// ones, and for invalid parameters.
func Build(name string, events operators.Stream[Event], p Params) (operators.Stream[string], error) {
	if err := p.Validate(); err != nil {
		return operators.Stream[string]{}, err
	}
	for _, q := range queries {
		if q.name == name {
			return q.build(events, p), nil
		}
	}
	return operators.Stream[string]{}, fmt.Errorf("nexmark: no query %q (valid: %s)", name, strings.Join(Queries(), ", "))
}

// ---- projections: the fields a query keeps of an event ----

func isPerson(e Event) bool  { return e.Person != nil }
func isAuction(e Event) bool { return e.Person == nil && e.Auction != nil }
func isBid(e Event) bool     { return e.Person == nil && e.Auction == nil && e.Bid != nil }

func eventTime(e Event) time.Time { return time.UnixMilli(e.Time()) }

// timestamped assigns event times for query q.
func timestamped(events operators.Stream[Event], q string, p Params) operators.Stream[Event] {
	return operators.Timestamps(events, q+".time", eventTime, operators.OutOfOrderness(p.OutOfOrderness))
}

// bids returns the bids of events, projected to bidInfo.
func bids(events operators.Stream[Event], q string) operators.Stream[bidInfo] {
	return operators.Map(operators.Filter(events, q+".bids", isBid), q+".bid", bidOf)
}

// bidOf is the bid of a bid event, projected to bidInfo.
func bidOf(e Event) bidInfo {
	b := e.Bid
	return bidInfo{Auction: b.Auction, Bidder: b.Bidder, Price: b.Price, DateTime: b.DateTime}
}

// keyedPair brings the events of two kinds together by key, as
// operators.KeyedUnion of two filtered and projected streams does, in one
// pass: a filter of both kinds and a projection into Either, fused with the
// events' source, then the KeyBy. The records and keys are KeyedUnion's;
// only the plan differs: two streams taken from the events would each read
// every event in a chain of its own, one hop more per event and per side
// (the planner fuses an operator with its input only when it is that
// input's one consumer). isL and isR must not both hold for an event.
// With timed, the kept events get their event times (timestamped) before
// they are projected: the events dropped are not read for a time (a bid's
// is behind a pointer the filter does not follow).
func keyedPair[L, R any](events operators.Stream[Event], name string, p Params, timed bool, isL, isR func(Event) bool,
	l func(Event) L, r func(Event) R, lkey func(L) int64, rkey func(R) int64) operators.KeyedStream[int64, operators.Either[L, R]] {
	kept := operators.Filter(events, name+".select", func(e Event) bool { return isL(e) || isR(e) })
	if timed {
		kept = timestamped(kept, name, p)
	}
	tagged := operators.Map(kept, name+".tag", func(e Event) operators.Either[L, R] {
		if isL(e) {
			return operators.Either[L, R]{L: l(e)}
		}
		return operators.Either[L, R]{R: r(e), Right: true}
	})
	return operators.KeyBy(tagged, name+".key", func(e operators.Either[L, R]) int64 {
		if e.Right {
			return rkey(e.R)
		}
		return lkey(e.L)
	}, p.par())
}

// bidInfo is a bid without its padding.
//
// Its fields, and auctionInfo's and auctionState's, are omitempty: the
// winning-bid operator's checkpoints hold a closed auction, kept for
// closedFor, as its two fields set, not its zero auction and bid in full.
type bidInfo struct {
	Auction  int64 `msgpack:"a,omitempty"`
	Bidder   int64 `msgpack:"b,omitempty"`
	Price    int64 `msgpack:"p,omitempty"`
	DateTime int64 `msgpack:"t,omitempty"` // ms
}

// auctionOrBid is an auction (auctionInfo) or a bid (bidInfo) on its way
// to the winning-bid operator, in 56 bytes: their Either took 88, copied
// at every step from the events' source to the operator.
type auctionOrBid struct {
	Auction  int64 `msgpack:"a"` // the auction's id, or the bid's auction
	DateTime int64 `msgpack:"t"` // ms
	// An auction's seller and category, a bid's bidder and price.
	SellerOrBidder  int64 `msgpack:"s"`
	CategoryOrPrice int64 `msgpack:"c"`
	Expires         int64 `msgpack:"e"` // an auction's, ms
	Reserve         int64 `msgpack:"r"` // an auction's
	IsBid           bool  `msgpack:"b"`
}

// auctionOrBidOf is the auction or bid of an event that is one of them.
func auctionOrBidOf(e Event) auctionOrBid {
	if isAuction(e) {
		a := e.Auction
		return auctionOrBid{Auction: a.ID, DateTime: a.DateTime, SellerOrBidder: a.Seller, CategoryOrPrice: a.Category,
			Expires: a.Expires, Reserve: a.Reserve}
	}
	b := e.Bid
	return auctionOrBid{Auction: b.Auction, DateTime: b.DateTime, SellerOrBidder: b.Bidder, CategoryOrPrice: b.Price, IsBid: true}
}

func (x auctionOrBid) auction() auctionInfo {
	return auctionInfo{ID: x.Auction, Seller: x.SellerOrBidder, Category: x.CategoryOrPrice, DateTime: x.DateTime,
		Expires: x.Expires, Reserve: x.Reserve}
}

func (x auctionOrBid) bid() bidInfo {
	return bidInfo{Auction: x.Auction, Bidder: x.SellerOrBidder, Price: x.CategoryOrPrice, DateTime: x.DateTime}
}

// auctionInfo is what the winning-bid operator keeps of an auction.
type auctionInfo struct {
	ID       int64 `msgpack:"id,omitempty"`
	Seller   int64 `msgpack:"s,omitempty"`
	Category int64 `msgpack:"c,omitempty"`
	DateTime int64 `msgpack:"t,omitempty"` // ms
	Expires  int64 `msgpack:"e,omitempty"` // ms
	Reserve  int64 `msgpack:"r,omitempty"`
}

// ---- q0, q1, q2: stateless ----

// BuildQ0 is q0, pass-through: every event, unchanged.
func BuildQ0(events operators.Stream[Event], _ Params) operators.Stream[Event] {
	return operators.Map(events, "q0.pass", func(e Event) Event { return e })
}

// BuildQ1 is q1, currency conversion: every bid with its price·89/100
// (integer division, as Beam).
func BuildQ1(events operators.Stream[Event], _ Params) operators.Stream[Q1] {
	return operators.Map(operators.Filter(events, "q1.bids", isBid), "q1.convert", func(e Event) Q1 {
		b := e.Bid
		return Q1{Auction: b.Auction, Bidder: b.Bidder, Price: b.Price * 89 / 100, DateTime: b.DateTime}
	})
}

// BuildQ2 is q2, selection: the auction and price of the bids whose auction
// id is a multiple of p.AuctionSkip (default 123).
func BuildQ2(events operators.Stream[Event], p Params) operators.Stream[Q2] {
	skip := p.withDefaults().AuctionSkip
	sel := operators.Filter(events, "q2.select", func(e Event) bool { return isBid(e) && e.Bid.Auction%skip == 0 })
	return operators.Map(sel, "q2.project", func(e Event) Q2 { return Q2{Auction: e.Bid.Auction, Price: e.Bid.Price} })
}

// ---- q3: unbounded join ----

// q3Person is what q3 keeps of a person.
type q3Person struct {
	ID    int64  `msgpack:"id"`
	Name  string `msgpack:"n"`
	City  string `msgpack:"c"`
	State string `msgpack:"s"`
}

// q3Auction is what q3 keeps of an auction.
type q3Auction struct {
	ID     int64 `msgpack:"id"`
	Seller int64 `msgpack:"s"`
}

// q3State is a seller's state in q3: the first person of its id in OR, ID
// or CA, and the ids of its auctions in category 10 so far, each once.
type q3State struct {
	Person    q3Person `msgpack:"p"`
	HasPerson bool     `msgpack:"h"`
	Auctions  []int64  `msgpack:"a,omitempty"`
}

type q3Ctx = operators.ProcessContext[int64, q3State, Q3]

// BuildQ3 is q3, local item suggestion: the regular (unbounded) inner join
// of the auctions in category 10 with the persons in OR, ID or CA on seller
// = person id: both brought together by person id (keyedPair) into a
// Process that keeps, per seller, the first person of its id and the ids of
// its auctions. Each auction id of a seller is joined once, whichever side
// comes first, with the first person to arrive; later copies of an auction
// or a person are ignored (the generator's copies differ only in time). The
// state is kept for ever, as in Flink's regular join without state TTL.
func BuildQ3(events operators.Stream[Event], p Params) operators.Stream[Q3] {
	p = p.withDefaults()
	bySeller := keyedPair(events, "q3.by-seller", p, false,
		func(e Event) bool { return isAuction(e) && e.Auction.Category == 10 },
		func(e Event) bool {
			if !isPerson(e) {
				return false
			}
			s := e.Person.State
			return s == "OR" || s == "ID" || s == "CA"
		},
		func(e Event) q3Auction { return q3Auction{ID: e.Auction.ID, Seller: e.Auction.Seller} },
		func(e Event) q3Person {
			return q3Person{ID: e.Person.ID, Name: e.Person.Name, City: e.Person.City, State: e.Person.State}
		},
		func(a q3Auction) int64 { return a.Seller }, func(x q3Person) int64 { return x.ID })
	return operators.Process(bySeller, "q3.join",
		func(c *q3Ctx, e operators.Either[q3Auction, q3Person]) {
			st := c.State()
			if e.Right { // a person
				if st.HasPerson {
					return // a later copy
				}
				st.Person, st.HasPerson = e.R, true
				for _, id := range st.Auctions {
					c.Emit(Q3{Name: e.R.Name, City: e.R.City, State: e.R.State, ID: id})
				}
				return
			}
			if slices.Contains(st.Auctions, e.L.ID) {
				return // a later copy
			}
			st.Auctions = append(st.Auctions, e.L.ID)
			if st.HasPerson {
				c.Emit(Q3{Name: st.Person.Name, City: st.Person.City, State: st.Person.State, ID: e.L.ID})
			}
		}, nil, p.par())
}

// ---- winning bids: the core of q4, q6 and q9 ----

// winningBid is an auction with its winning bid.
type winningBid struct {
	Auction  int64 `msgpack:"a"`
	Seller   int64 `msgpack:"s"`
	Category int64 `msgpack:"c"`
	Expires  int64 `msgpack:"e"` // ms
	Bidder   int64 `msgpack:"b"`
	Price    int64 `msgpack:"p"`
	DateTime int64 `msgpack:"t"` // the bid's, ms
}

// auctionInfoOf is what the winning-bid operator keeps of a.
func auctionInfoOf(a *Auction) auctionInfo {
	return auctionInfo{ID: a.ID, Seller: a.Seller, Category: a.Category, DateTime: a.DateTime, Expires: a.Expires, Reserve: a.Reserve}
}

// compareAuctionCopies orders the auctions of one id: the first is the
// earliest, then the one that expires first, then by seller, category and
// reserve. Copies equal in all of these give the same results.
func compareAuctionCopies(a, b auctionInfo) int {
	return cmp.Or(cmp.Compare(a.DateTime, b.DateTime), cmp.Compare(a.Expires, b.Expires),
		cmp.Compare(a.Seller, b.Seller), cmp.Compare(a.Category, b.Category), cmp.Compare(a.Reserve, b.Reserve))
}

// auctionState is the state of one auction id in the winning-bid operator.
type auctionState struct {
	Auction auctionInfo `msgpack:"a,omitempty"`
	Has     bool        `msgpack:"h,omitempty"` // Auction is set
	// Open: Auction is the id's first auction, valid bids count. Until then
	// (without Params.UniqueIDs) it is the earliest so far, and the bids
	// wait in Pending.
	Open   bool `msgpack:"o,omitempty"`
	Closed bool `msgpack:"x,omitempty"` // the first auction has closed: ignore the id
	// Forget is when a closed auction is forgotten, ms (Params.UniqueIDs;
	// 0: never).
	Forget  int64   `msgpack:"f,omitempty"`
	Best    bidInfo `msgpack:"b,omitempty"`
	HasBest bool    `msgpack:"bh,omitempty"`
	// Pending are the bids that came before their auction was open, kept
	// until it opens or the watermark passes their time rounded up to the
	// second (pendingUntil): by then an auction they are valid for
	// (A.dateTime ≤ B.dateTime) has arrived, or none will.
	Pending []bidInfo `msgpack:"p,omitempty"`
}

// offer applies a bid to the open auction: it wins if it is valid and better
// than the best so far (the rules of ModelQ9).
func (st *auctionState) offer(b bidInfo) {
	a := &st.Auction
	if b.DateTime < a.DateTime || b.DateTime > a.Expires || b.Price < a.Reserve {
		return
	}
	if !st.HasBest || cmp.Or(cmp.Compare(b.Price, st.Best.Price), cmp.Compare(st.Best.DateTime, b.DateTime),
		cmp.Compare(st.Best.Bidder, b.Bidder)) > 0 {
		st.Best, st.HasBest = b, true
	}
}

type winCtx = operators.ProcessContext[int64, auctionState, winningBid]

// pendingGrain is the step of the times at which an auction id's pending
// bids are dropped: one timer serves the id's bids of one second (a
// third of the bids pend, most of them bids after their auction closed:
// a timer each made 5 of 6 of the operator's timers). Keeping a bid longer
// changes no result: an auction that is not late comes after the
// watermark, so it starts after every bid the watermark has passed.
const pendingGrain = 1000 // ms

// closedFor is how long after its expiry the winning-bid operator
// remembers a closed auction with Params.UniqueIDs, in event time (ms):
// the bids that come in that time are ignored at once. Of the bids that
// the generator makes after their auction closed (at Beam's defaults a
// fifth of them), 99 % come within 15 s.
const closedFor = 15_000

// pendingUntil is when a bid at ms pending since then is dropped: the next
// multiple of pendingGrain after ms.
func pendingUntil(ms int64) int64 {
	if ms > math.MaxInt64-pendingGrain {
		return math.MaxInt64
	}
	return ms - ((ms%pendingGrain)+pendingGrain)%pendingGrain + pendingGrain
}

// open opens the auction: the pending bids are offered to it, and a timer
// closes it at its expiry.
func (st *auctionState) open(c *winCtx) {
	st.Open = true
	for _, b := range st.Pending {
		st.offer(b)
	}
	st.Pending = nil
	c.Timer(time.UnixMilli(st.Auction.Expires))
}

// winningBids adds the winning-bid operator of query q: auctions and bids
// brought together by auction id (as keyedPair does, in an auctionOrBid)
// into a Process that keeps the auction, its best valid bid so far and the
// bids that came before it, and emits the winning bid when the watermark
// passes the auction's expiry (an event-time timer), with the expiry as its
// event time. The first auction of an id counts, later copies are ignored
// (see Params.UniqueIDs); with UniqueIDs a closed auction is remembered for
// closedFor, then forgotten (a timer).
func winningBids(events operators.Stream[Event], q string, p Params) operators.Stream[winningBid] {
	events = timestamped(events, q, p)
	unique := p.UniqueIDs
	// As keyedPair of the auctions and the bids, with auctionOrBid for
	// their Either.
	kept := operators.Filter(events, q+".by-auction.select", func(e Event) bool { return isAuction(e) || isBid(e) })
	tagged := operators.Map(kept, q+".by-auction.tag", auctionOrBidOf)
	byAuction := operators.KeyBy(tagged, q+".by-auction.key", func(x auctionOrBid) int64 { return x.Auction }, p.par())
	return operators.Process(byAuction, q+".winning",
		func(c *winCtx, e auctionOrBid) {
			if c.IsLate() {
				c.CountLate()
			}
			st := c.State()
			switch {
			case st.Closed: // a later copy of the auction, or a bid after it closed
			case !e.IsBid: // an auction
				// An open auction is the first: a copy at or before its time
				// cannot come once the watermark has passed it.
				a := e.auction()
				if st.Open || st.Has && compareAuctionCopies(a, st.Auction) >= 0 {
					return
				}
				st.Auction, st.Has = a, true
				if unique {
					st.open(c)
				} else {
					c.Timer(time.UnixMilli(a.DateTime)) // no earlier copy can come then
				}
			case st.Open:
				st.offer(e.bid())
			default: // a bid before its auction is open, or after it closed
				// One timer serves the bids of a second: that of the last
				// bid pending, if of the same second, is still set (it
				// would have dropped that bid).
				until := pendingUntil(e.DateTime)
				if n := len(st.Pending); n == 0 || pendingUntil(st.Pending[n-1].DateTime) != until {
					c.Timer(time.UnixMilli(until))
				}
				st.Pending = append(st.Pending, e.bid())
			}
		},
		func(c *winCtx) {
			st := c.State()
			now := c.Time().UnixMilli()
			switch {
			case st.Closed:
				if st.Forget != 0 && now >= st.Forget {
					c.Clear()
				}
				return
			case st.Open:
				if now < st.Auction.Expires {
					return // the timer of a bid that was pending
				}
				if st.HasBest {
					a, b := &st.Auction, &st.Best
					c.Emit(winningBid{Auction: a.ID, Seller: a.Seller, Category: a.Category, Expires: a.Expires,
						Bidder: b.Bidder, Price: b.Price, DateTime: b.DateTime})
				}
				exp := st.Auction.Expires
				*st = auctionState{Closed: true}
				if unique {
					if exp > math.MaxInt64-closedFor {
						c.Clear()
						return
					}
					st.Forget = exp + closedFor
					c.Timer(time.UnixMilli(st.Forget))
				}
				return
			case st.Has && now >= st.Auction.DateTime:
				st.open(c)
				return
			}
			// No auction open for these bids by now: drop those it is too
			// late for (an auction that comes later starts after them; a
			// bid's timer may have fired for another bid of its second).
			st.Pending = slices.DeleteFunc(st.Pending, func(b bidInfo) bool { return b.DateTime <= now })
			if !st.Has && len(st.Pending) == 0 {
				c.Clear()
			}
		}, p.par())
}

// BuildQ9 is q9, winning bids: for each auction with at least one valid bid
// (A.dateTime ≤ B.dateTime ≤ A.expires, price ≥ reserve), the bid with the
// highest price, ties to the earliest, then to the smallest bidder id. It
// is emitted when the watermark passes the auction's expiry.
func BuildQ9(events operators.Stream[Event], p Params) operators.Stream[Q9] {
	p = p.withDefaults()
	return operators.Map(winningBids(events, "q9", p), "q9.result", func(w winningBid) Q9 {
		return Q9{Auction: w.Auction, Bidder: w.Bidder, Price: w.Price, DateTime: w.DateTime}
	})
}

// q4Sum is the running sum of a category's winning prices.
type q4Sum struct {
	Sum int64 `msgpack:"s"`
	N   int64 `msgpack:"n"`
}

// BuildQ4 is q4, average price per category: the winning bids (as q9) keyed
// by category into an Aggregate of their sum and number, which emits an
// update per winning bid: float64(sum)/float64(n). The last update of each
// category is the result.
func BuildQ4(events operators.Stream[Event], p Params) operators.Stream[Q4] {
	p = p.withDefaults()
	byCategory := operators.KeyBy(winningBids(events, "q4", p), "q4.by-category", func(w winningBid) int64 { return w.Category }, p.par())
	sums := operators.Aggregate(byCategory, "q4.sum", func() q4Sum { return q4Sum{} },
		func(a q4Sum, w winningBid) q4Sum { return q4Sum{Sum: a.Sum + w.Price, N: a.N + 1} },
		operators.Emit(operators.EmitUpdates))
	return operators.Map(sums, "q4.average", func(kv operators.KV[int64, q4Sum]) Q4 {
		return Q4{Category: kv.Key, AvgPrice: float64(kv.Value.Sum) / float64(kv.Value.N)}
	})
}

// q6Last is how many of a seller's winning bids q6 averages.
const q6Last = 10

// q6State is a seller's state in q6.
type q6State struct {
	// Pending are the winning bids not yet applied, until the watermark
	// passes their auction's expiry.
	Pending []winningBid `msgpack:"p,omitempty"`
	Last    []int64      `msgpack:"l,omitempty"` // the last ≤ 10 prices, oldest first
}

type q6Ctx = operators.ProcessContext[int64, q6State, Q6]

// BuildQ6 is q6, average selling price by seller: the winning bids (as q9)
// keyed by seller into a Process that applies them in order of auction
// expiry, ties by auction id. They come from several instances of the
// winning-bid operator, so it buffers each until the watermark passes its
// auction's expiry (a timer): by then every winning bid that expires at or
// before it has arrived. For each it emits the seller's average over its
// last 10 winning prices, float64(sum)/float64(n); the last update of each
// seller is the result.
func BuildQ6(events operators.Stream[Event], p Params) operators.Stream[Q6] {
	p = p.withDefaults()
	bySeller := operators.KeyBy(winningBids(events, "q6", p), "q6.by-seller", func(w winningBid) int64 { return w.Seller }, p.par())
	return operators.Process(bySeller, "q6.average",
		func(c *q6Ctx, w winningBid) {
			if c.IsLate() {
				c.CountLate()
			}
			st := c.State()
			st.Pending = append(st.Pending, w)
			c.Timer(time.UnixMilli(w.Expires))
		},
		func(c *q6Ctx) {
			st := c.State()
			now := c.Time().UnixMilli()
			var due []winningBid
			st.Pending = slices.DeleteFunc(st.Pending, func(w winningBid) bool {
				if w.Expires <= now {
					due = append(due, w)
					return true
				}
				return false
			})
			slices.SortFunc(due, func(x, y winningBid) int {
				return cmp.Or(cmp.Compare(x.Expires, y.Expires), cmp.Compare(x.Auction, y.Auction))
			})
			for _, w := range due {
				st.Last = append(st.Last, w.Price)
				if len(st.Last) > q6Last {
					st.Last = slices.Delete(st.Last, 0, len(st.Last)-q6Last)
				}
				var sum int64
				for _, x := range st.Last {
					sum += x
				}
				c.Emit(Q6{Seller: c.Key(), AvgPrice: float64(sum) / float64(len(st.Last))})
			}
		}, p.par())
}

// ---- q5, q7: windows, then the maximum per window ----

// q5State is the running maximum of one window in q5.
type q5State struct {
	Start    int64   `msgpack:"s"` // ms
	End      int64   `msgpack:"e"` // ms
	Max      int64   `msgpack:"m"`
	Auctions []int64 `msgpack:"a"` // those with Max bids
}

type q5Ctx = operators.ProcessContext[int64, q5State, Q5]

// BuildQ5 is q5, hot items: the bids counted per auction in sliding windows
// (WindowCount, p.WindowSize every p.WindowPeriod), then the counts keyed by
// window into a Process that keeps the window's maximum and its auctions
// and emits them when the watermark passes the window's last instant (every
// count of the window has arrived by then: the counts carry that instant as
// their event time).
func BuildQ5(events operators.Stream[Event], p Params) operators.Stream[Q5] {
	p = p.withDefaults()
	byAuction := operators.KeyBy(bids(timestamped(events, "q5", p), "q5"), "q5.by-auction", func(b bidInfo) int64 { return b.Auction }, p.par())
	counts := operators.WindowCount(byAuction, "q5.count", operators.Sliding(p.WindowSize, p.WindowPeriod))
	byWindow := operators.KeyBy(counts, "q5.by-window", func(w operators.Windowed[int64, int64]) int64 { return w.Start.UnixMilli() }, p.par())
	return operators.Process(byWindow, "q5.max",
		func(c *q5Ctx, w operators.Windowed[int64, int64]) {
			if c.IsLate() {
				c.CountLate()
			}
			st := c.State()
			switch {
			case len(st.Auctions) == 0 || w.Value > st.Max:
				st.Start, st.End, st.Max = w.Start.UnixMilli(), w.End.UnixMilli(), w.Value
				st.Auctions = append(st.Auctions[:0], w.Key)
				c.Timer(w.End.Add(-time.Nanosecond))
			case w.Value == st.Max:
				st.Auctions = append(st.Auctions, w.Key)
			}
		},
		func(c *q5Ctx) {
			st := c.State()
			for _, a := range st.Auctions {
				c.Emit(Q5{WindowStart: st.Start, WindowEnd: st.End, Auction: a, Count: st.Max})
			}
			c.Clear()
		}, p.par())
}

// q7Max is the highest price of a window and the bids with it.
type q7Max struct {
	Start int64     `msgpack:"s"` // ms, in the per-window state
	End   int64     `msgpack:"e"` // ms, in the per-window state
	Max   int64     `msgpack:"m"`
	Bids  []bidInfo `msgpack:"b"`
}

// add makes b one of the bids with the highest price, if it is.
func (m q7Max) add(b bidInfo) q7Max {
	switch {
	case len(m.Bids) == 0 || b.Price > m.Max:
		m.Max, m.Bids = b.Price, append(m.Bids[:0], b)
	case b.Price == m.Max:
		m.Bids = append(m.Bids, b)
	}
	return m
}

type q7Ctx = operators.ProcessContext[int64, q7Max, Q7]

// q7Partitions is the number of partitions of q7's first stage.
const q7Partitions = 128

// BuildQ7 is q7, highest bid: in two stages, as a combiner. The bids are
// partitioned by price (so equal prices meet) into tumbling windows of
// p.WindowSize that keep the highest price and its bids (WindowAggregate);
// then the partial maxima are keyed by window into a Process that merges
// them and emits every bid with the window's highest price when the
// watermark passes the window's last instant.
func BuildQ7(events operators.Stream[Event], p Params) operators.Stream[Q7] {
	p = p.withDefaults()
	byPrice := operators.KeyBy(bids(timestamped(events, "q7", p), "q7"), "q7.by-price", func(b bidInfo) int64 { return b.Price % q7Partitions }, p.par())
	partial := operators.WindowAggregate(byPrice, "q7.partial", operators.Tumbling(p.WindowSize),
		func() q7Max { return q7Max{} }, q7Max.add, nil)
	byWindow := operators.KeyBy(partial, "q7.by-window", func(w operators.Windowed[int64, q7Max]) int64 { return w.Start.UnixMilli() }, p.par())
	return operators.Process(byWindow, "q7.max",
		func(c *q7Ctx, w operators.Windowed[int64, q7Max]) {
			if c.IsLate() {
				c.CountLate()
			}
			st := c.State()
			if len(st.Bids) == 0 {
				st.Start, st.End = w.Start.UnixMilli(), w.End.UnixMilli()
				c.Timer(w.End.Add(-time.Nanosecond))
			}
			for _, b := range w.Value.Bids {
				*st = st.add(b)
			}
		},
		func(c *q7Ctx) {
			st := c.State()
			for _, b := range st.Bids {
				c.Emit(Q7{WindowStart: st.Start, WindowEnd: st.End, Auction: b.Auction, Bidder: b.Bidder, Price: b.Price, DateTime: b.DateTime})
			}
			c.Clear()
		}, p.par())
}

// ---- q8: a windowed join ----

// q8Person is what q8 keeps of a person.
type q8Person struct {
	ID   int64  `msgpack:"id"`
	Name string `msgpack:"n"`
}

// q8Window is a person id's accumulator in one window: the names it joined
// with, and whether it created an auction.
type q8Window struct {
	Names []string `msgpack:"n,omitempty"`
	Sold  bool     `msgpack:"s"`
}

// BuildQ8 is q8, monitor new users: persons and auctions brought together
// by person id = seller (keyedPair) into tumbling windows of p.WindowSize
// (WindowAggregate) that note the names the id joined with and whether it
// created an auction; a window with both gives each distinct (id, name)
// once.
func BuildQ8(events operators.Stream[Event], p Params) operators.Stream[Q8] {
	p = p.withDefaults()
	byID := keyedPair(events, "q8.by-person", p, true, isPerson, isAuction,
		func(e Event) q8Person { return q8Person{ID: e.Person.ID, Name: e.Person.Name} },
		func(e Event) int64 { return e.Auction.Seller },
		func(x q8Person) int64 { return x.ID }, func(s int64) int64 { return s })
	windows := operators.WindowAggregate(byID, "q8.window", operators.Tumbling(p.WindowSize),
		func() q8Window { return q8Window{} },
		func(w q8Window, e operators.Either[q8Person, int64]) q8Window {
			if e.Right {
				w.Sold = true
			} else if !slices.Contains(w.Names, e.L.Name) {
				w.Names = append(w.Names, e.L.Name)
			}
			return w
		}, nil, p.par())
	return operators.FlatMap(windows, "q8.result", func(w operators.Windowed[int64, q8Window]) []Q8 {
		if !w.Value.Sold || len(w.Value.Names) == 0 {
			return nil
		}
		out := make([]Q8, len(w.Value.Names))
		for i, n := range w.Value.Names {
			out[i] = Q8{ID: w.Key, Name: n, WindowStart: w.Start.UnixMilli()}
		}
		return out
	})
}

// ---- q11: sessions ----

// BuildQ11 is q11, user sessions: the bids keyed by bidder, counted in
// session windows with a gap of p.WindowSize (WindowCount with
// operators.Sessions): a session is [first bid, last bid + gap), and bids
// less than the gap apart share one.
func BuildQ11(events operators.Stream[Event], p Params) operators.Stream[Q11] {
	p = p.withDefaults()
	byBidder := operators.KeyBy(bids(timestamped(events, "q11", p), "q11"), "q11.by-bidder", func(b bidInfo) int64 { return b.Bidder }, p.par())
	sessions := operators.WindowCount(byBidder, "q11.sessions", operators.Sessions(p.WindowSize))
	return operators.Map(sessions, "q11.result", func(w operators.Windowed[int64, int64]) Q11 {
		return Q11{Bidder: w.Key, Count: w.Value, SessionStart: w.Start.UnixMilli(), SessionEnd: w.End.UnixMilli()}
	})
}
