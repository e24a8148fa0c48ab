package nexmark

import (
	"fmt"
	"iter"
	"math"
	"math/bits"
	"slices"
	"time"
)

// BaseTime is the event time of the first event, 2015-07-15T00:00:00Z in ms
// since the Unix epoch: Beam's base time when useWallclockEventTime is false.
const BaseTime int64 = 1436918400000

// Beam's generator constants (GeneratorConfig, PersonGenerator,
// AuctionGenerator, BidGenerator).
const (
	firstPersonID   = 1000
	firstAuctionID  = 1000
	firstCategoryID = 10
	numCategories   = 5

	personProportion      = 1
	auctionProportion     = 3
	proportionDenominator = 50 // 1 person, 3 auctions, 46 bids

	personIDLead  = 10
	auctionIDLead = 10

	hotSellerRatio  = 100
	hotAuctionRatio = 100
	hotBidderRatio  = 100

	minStringLength = 3
)

var (
	usStates  = [...]string{"AZ", "CA", "ID", "OR", "WA", "WY"}
	usCities  = [...]string{"Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent", "Cheyenne"}
	firstName = [...]string{"Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"}
	lastName  = [...]string{"Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"}

	// personNames holds every "first last" name, indexed by
	// first*len(lastName)+last, so that a person's name costs no
	// allocation. It is never written after initialisation.
	personNames = func() (names [len(firstName) * len(lastName)]string) {
		for f, fn := range firstName {
			for l, ln := range lastName {
				names[f*len(lastName)+l] = fn + " " + ln
			}
		}
		return names
	}()
)

// timeline maps a generator's event number to its event time: Beam's
// GeneratorConfig.timestampAndInterEventDelayUsForEvent.
type timeline struct {
	baseTime       int64
	delaysUs       []int64 // per-generator inter-event delay of each rate step
	stepLengthSec  int64
	eventsPerEpoch int64 // events in one cycle through delaysUs (0 with one rate)
	epochPeriodMs  int64
}

// rateToPeriodUs is Beam's RateUnit.rateToPeriodUs: the rounded number of
// microseconds between events at rate.
func rateToPeriodUs(unit RateUnit, rate int64) int64 {
	return (unit.usPerUnit() + rate/2) / rate
}

// newTimeline derives the timeline of one generator from c, as Beam's
// RateShape.interEventDelayUs and stepLengthSec do. c's rates must be
// positive.
func newTimeline(c Config, baseTime int64) timeline {
	gens := int64(c.NumEventGenerators)
	t := timeline{baseTime: baseTime}
	steps := 10 // SINE
	if c.RateShape == RateShapeSquare {
		steps = 2
	}
	t.stepLengthSec = int64((int32(c.RatePeriodSec) + int32(steps) - 1) / int32(steps))
	switch {
	case c.FirstEventRate == c.NextEventRate:
		t.delaysUs = []int64{rateToPeriodUs(c.RateUnit, int64(c.FirstEventRate)) * gens}
	case c.RateShape == RateShapeSquare:
		t.delaysUs = []int64{
			rateToPeriodUs(c.RateUnit, int64(c.FirstEventRate)) * gens,
			rateToPeriodUs(c.RateUnit, int64(c.NextEventRate)) * gens,
		}
	default:
		// Java adds the two int rates in 32 bits before widening.
		mid := float64(int32(c.FirstEventRate)+int32(c.NextEventRate)) / 2.0
		amp := float64(int32(c.FirstEventRate)-int32(c.NextEventRate)) / 2.0
		twoPi := 2.0 * float64(math.Pi)
		t.delaysUs = make([]int64, steps)
		for i := range steps {
			r := float64(twoPi*float64(i)) / float64(steps)
			// The float64 conversion keeps the product rounded on its own,
			// as in Java, rather than fused into a multiply-add.
			rate := mid + float64(amp*math.Cos(r))
			t.delaysUs[i] = rateToPeriodUs(c.RateUnit, javaRound(rate)) * gens
		}
	}
	if len(t.delaysUs) > 1 {
		for _, d := range t.delaysUs {
			if d <= 0 {
				return t // Validate refuses this configuration
			}
			n := t.stepLengthSec * 1_000_000 / d
			t.eventsPerEpoch += n
			t.epochPeriodMs += n * d / 1000
		}
	}
	return t
}

// timestamp is the event time, in ms, of the event with number n.
func (t *timeline) timestamp(n int64) int64 {
	if len(t.delaysUs) == 1 {
		return t.baseTime + n*t.delaysUs[0]/1000
	}
	epoch := n / t.eventsPerEpoch
	n %= t.eventsPerEpoch
	var offsetMs int64
	for _, d := range t.delaysUs {
		steps := t.stepLengthSec * 1_000_000 / d
		if n < steps {
			return t.baseTime + epoch*t.epochPeriodMs + offsetMs + n*d/1000
		}
		n -= steps
		offsetMs += steps * d / 1000
	}
	panic("nexmark: timeline: eventsPerEpoch inconsistent with its delays") // unreachable
}

// javaRound is Java's Math.round(double): the closest long, ties toward
// positive infinity, NaN to 0, saturating.
func javaRound(x float64) int64 {
	switch {
	case x != x:
		return 0
	case x >= math.MaxInt64:
		return math.MaxInt64
	case x <= math.MinInt64:
		return math.MinInt64
	}
	f := math.Floor(x)
	if x-f >= 0.5 {
		f++
	}
	return int64(f)
}

// maxEvents is Beam's GeneratorConfig maxEvents: NumEvents, or for 0 the
// largest count whose estimated byte size cannot overflow.
func maxEvents(c Config) int64 {
	if c.NumEvents != 0 {
		return c.NumEvents
	}
	return math.MaxInt64 / (proportionDenominator * int64(max(c.AvgPersonByteSize, c.AvgAuctionByteSize, c.AvgBidByteSize)))
}

// genParams are the knobs a generator reads per event, narrowed to Java's
// int types once.
type genParams struct {
	avgPersonSize, avgAuctionSize, avgBidSize  int32
	hotAuctions, hotSellers, hotBidders        int32
	numInFlightAuctions, numActivePeople       int64
	outOfOrderGroupSize, auctionLookaheadEvent int64
}

// Generator produces the events of one of Beam's split generators: a
// contiguous range of event ids on its own timeline. It is deterministic:
// everything derives from the configuration and the position, so SetOffset
// replays exactly. A Generator is not safe for concurrent use; give each
// goroutine its own.
type Generator struct {
	p        genParams
	tl       timeline
	firstID  int64 // first event id of this split
	firstNum int64 // first event number (0: the splits share the timeline)
	size     int64 // events of this split
	count    int64 // eventsCountSoFar
	buf      []byte
}

// NewGenerator returns the generator of split part (0-based) of parts, as
// Beam's GeneratorConfig.split(parts) makes them: each of the first parts−1
// splits has NumEvents/parts events, the last one the rest, with
// consecutive ranges of event ids. The inter-event delay is multiplied by
// cfg.NumEventGenerators whatever parts is, as in Beam; parts is normally
// cfg.NumEventGenerators. It returns an error for an invalid configuration
// or split.
func NewGenerator(cfg Config, part, parts int) (*Generator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if parts < 1 || part < 0 || part >= parts {
		return nil, fmt.Errorf("%w: generator part %d of %d: want 0 <= part < parts", ErrInvalidConfig, part, parts)
	}
	g := &Generator{
		p: genParams{
			avgPersonSize:       int32(cfg.AvgPersonByteSize),
			avgAuctionSize:      int32(cfg.AvgAuctionByteSize),
			avgBidSize:          int32(cfg.AvgBidByteSize),
			hotAuctions:         int32(cfg.HotAuctionRatio),
			hotSellers:          int32(cfg.HotSellersRatio),
			hotBidders:          int32(cfg.HotBiddersRatio),
			numInFlightAuctions: int64(cfg.NumInFlightAuctions),
			numActivePeople:     int64(cfg.NumActivePeople),
			outOfOrderGroupSize: cfg.OutOfOrderGroupSize,
			// The events until numInFlightAuctions more auctions exist:
			// they set the average auction length.
			auctionLookaheadEvent: int64(cfg.NumInFlightAuctions) * proportionDenominator / auctionProportion,
		},
		tl: newTimeline(cfg, BaseTime),
	}
	total := maxEvents(cfg)
	g.size = total
	if parts > 1 {
		sub := total / int64(parts)
		g.firstID = int64(part) * sub
		g.size = sub
		if part == parts-1 {
			g.size = total - sub*int64(parts-1)
		}
	}
	return g, nil
}

// Len returns the number of events this generator produces in all.
func (g *Generator) Len() int64 { return g.size }

// Offset returns the number of events generated so far (Beam's
// eventsCountSoFar): the generator's whole checkpointable position.
func (g *Generator) Offset() int64 { return g.count }

// SetOffset sets the position: the next event is the one at offset, exactly as
// if offset events had been generated. offset must be in [0, Len()].
func (g *Generator) SetOffset(offset int64) error {
	if offset < 0 || offset > g.size {
		return fmt.Errorf("nexmark: generator offset %d: want 0 to %d", offset, g.size)
	}
	g.count = offset
	return nil
}

// adjusted is Beam's nextAdjustedEventNumber: the event number permuted
// within its out-of-order group.
func (g *Generator) adjusted(num int64) int64 {
	n := g.p.outOfOrderGroupSize
	if n == 1 {
		return num
	}
	return (num/n)*n + (num*953)%n
}

// Watermark returns a lower bound, in ms, of the event times of all the
// events not yet generated (Beam's watermark of the next event): with
// out-of-order groups it is the time of the current group's start. After
// the last event it is math.MaxInt64.
func (g *Generator) Watermark() int64 {
	if g.count >= g.size {
		return math.MaxInt64
	}
	n := g.p.outOfOrderGroupSize
	num := g.firstNum + g.count
	return g.tl.timestamp((num / n) * n)
}

// NextEventID returns the id of the next event: it seeds the event's
// random numbers and decides its kind.
func (g *Generator) NextEventID() int64 {
	return g.firstID + g.adjusted(g.firstNum+g.count)
}

// Next returns the next event, or false after the last one. Each event is
// one newly allocated Person, Auction or Bid whose strings share one
// allocation; the caller may keep it.
func (g *Generator) Next() (Event, bool) {
	if g.count >= g.size {
		return Event{}, false
	}
	adj := g.adjusted(g.firstNum + g.count)
	id := g.firstID + adj
	ts := g.tl.timestamp(adj)
	rnd := newJavaRandom(id)
	var ev Event
	switch rem := id % proportionDenominator; {
	case rem < personProportion:
		ev.Person = g.person(id, &rnd, ts)
	case rem < personProportion+auctionProportion:
		ev.Auction = g.auction(id, adj, &rnd, ts)
	default:
		ev.Bid = g.bid(id, &rnd, ts)
	}
	g.count++
	return ev, true
}

// All returns an iterator over the remaining events.
func (g *Generator) All() iter.Seq[Event] {
	return func(yield func(Event) bool) {
		for {
			ev, ok := g.Next()
			if !ok || !yield(ev) {
				return
			}
		}
	}
}

// lastBase0PersonID is the id (less firstPersonID) of the newest person at
// event id eid, eid's own if it is a person.
func lastBase0PersonID(eid int64) int64 {
	return eid / proportionDenominator // the offset always clamps to 0 with 1 person a block
}

// lastBase0AuctionID is the id (less firstAuctionID) of the newest auction at
// event id eid, eid's own if it is an auction.
func lastBase0AuctionID(eid int64) int64 {
	epoch := eid / proportionDenominator
	off := eid % proportionDenominator
	switch {
	case off < personProportion: // the last auction of the previous block
		epoch--
		off = auctionProportion - 1
	case off >= personProportion+auctionProportion: // the last of this block
		off = auctionProportion - 1
	default:
		off -= personProportion
	}
	return epoch*auctionProportion + off
}

// nextLongN is Beam's LongGenerator.nextLong: nextInt(n) for a bound that
// fits a Java int, else the skewed |nextLong() % n|.
func nextLongN(rnd *javaRandom, n int64) int64 {
	if n < math.MaxInt32 {
		return int64(rnd.nextIntn(int32(n)))
	}
	v := rnd.nextLong() % n
	if v < 0 {
		v = -v
	}
	return v
}

// randomPerson is Beam's nextBase0PersonId: one of the active persons or up
// to personIDLead not yet created.
func (g *Generator) randomPerson(eid int64, rnd *javaRandom) int64 {
	numPeople := lastBase0PersonID(eid) + 1
	active := min(numPeople, g.p.numActivePeople)
	n := nextLongN(rnd, active+personIDLead)
	return numPeople - active + n
}

// randomAuction is Beam's nextBase0AuctionId: one of the in-flight auctions
// or up to auctionIDLead not yet created.
func (g *Generator) randomAuction(eid int64, rnd *javaRandom) int64 {
	hi := lastBase0AuctionID(eid)
	lo := max(hi-g.p.numInFlightAuctions, 0)
	return lo + nextLongN(rnd, hi-lo+1+auctionIDLead)
}

// nextPrice is Beam's PriceGenerator.nextPrice: log-uniform cents in
// [100, 10^8].
func nextPrice(rnd *javaRandom) int64 {
	return javaRound(math.Pow(10.0, rnd.nextDouble()*6.0) * 100.0)
}

// appendString is Beam's StringsGenerator.nextString: 3 to maxLength−1
// characters, a space with probability 1/13, else a lower-case letter; then
// trimmed. It appends to buf.
func appendString(buf []byte, rnd *javaRandom, maxLength int32) []byte {
	start := len(buf)
	for n := minStringLength + rnd.nextIntn(maxLength-minStringLength); n > 0; n-- {
		if rnd.nextIntn13() == 0 {
			buf = append(buf, ' ')
		} else {
			buf = append(buf, byte('a'+rnd.nextIntn26()))
		}
	}
	end := len(buf)
	for end > start && buf[end-1] == ' ' {
		end--
	}
	lead := start
	for lead < end && buf[lead] == ' ' {
		lead++
	}
	copy(buf[start:], buf[lead:end])
	return buf[:start+end-lead]
}

// appendExtra is Beam's StringsGenerator.nextExtra: padding such that
// currentSize plus its length averages desiredAverageSize; each nextInt()
// gives 6 characters as base-26 digits taken with Java's signed remainder,
// so they range from 'H' to 'z'.
func appendExtra(buf []byte, rnd *javaRandom, currentSize, desiredAverageSize int32) []byte {
	if currentSize > desiredAverageSize {
		return buf
	}
	desiredAverageSize -= currentSize
	delta := int32(javaRound(float64(desiredAverageSize) * 0.2))
	size := desiredAverageSize - delta
	if delta != 0 {
		size += rnd.nextIntn(2 * delta)
	}
	n := int(size)
	buf = growBytes(buf, n)
	out := buf[len(buf) : len(buf)+n]
	i := 0
	for ; i+6 <= n; i += 6 { // 6 digits a draw: log_26(2^31)
		v := rnd.nextInt()
		for j := range out[i : i+6] {
			q := v / 26
			out[i+j] = byte('a' + (v - q*26)) // Java's remainder takes the sign of v
			v = q
		}
	}
	if i < n {
		v := rnd.nextInt()
		for ; i < n; i++ {
			q := v / 26
			out[i] = byte('a' + (v - q*26))
			v = q
		}
	}
	return buf[:len(buf)+n]
}

// growBytes makes room for n more bytes in buf.
func growBytes(buf []byte, n int) []byte {
	if cap(buf)-len(buf) < n {
		nb := make([]byte, len(buf), 2*cap(buf)+n)
		copy(nb, buf)
		buf = nb
	}
	return buf
}

// appendDigits4 appends v (0..9999) as four digits, Java's "%04d".
func appendDigits4(buf []byte, v int32) []byte {
	return append(buf, byte('0'+v/1000), byte('0'+v/100%10), byte('0'+v/10%10), byte('0'+v%10))
}

// person is Beam's PersonGenerator.nextPerson, drawing in the same order.
func (g *Generator) person(eid int64, rnd *javaRandom, ts int64) *Person {
	id := lastBase0PersonID(eid) + firstPersonID
	f := rnd.nextIntn(int32(len(firstName)))
	l := rnd.nextIntn(int32(len(lastName)))
	name := personNames[int(f)*len(lastName)+int(l)]
	buf := appendString(g.buf[:0], rnd, 7)
	buf = append(buf, '@')
	buf = appendString(buf, rnd, 5)
	buf = append(buf, ".com"...)
	emailEnd := len(buf)
	for i := range 4 {
		if i > 0 {
			buf = append(buf, ' ')
		}
		buf = appendDigits4(buf, rnd.nextIntn(10000))
	}
	cardEnd := len(buf)
	city := usCities[rnd.nextIntn(int32(len(usCities)))]
	state := usStates[rnd.nextIntn(int32(len(usStates)))]
	size := 8 + len(name) + cardEnd + len(city) + len(state) // email and card are buf[:cardEnd]
	buf = appendExtra(buf, rnd, int32(size), g.p.avgPersonSize)
	g.buf = buf
	s := string(buf)
	return &Person{
		ID:           id,
		Name:         name,
		EmailAddress: s[:emailEnd],
		CreditCard:   s[emailEnd:cardEnd],
		City:         city,
		State:        state,
		DateTime:     ts,
		Extra:        s[cardEnd:],
	}
}

// auction is Beam's AuctionGenerator.nextAuction, drawing in the same order.
func (g *Generator) auction(eid, adjusted int64, rnd *javaRandom, ts int64) *Auction {
	id := lastBase0AuctionID(eid) + firstAuctionID
	var seller int64
	if rnd.nextIntn(g.p.hotSellers) > 0 {
		seller = (lastBase0PersonID(eid) / hotSellerRatio) * hotSellerRatio
	} else {
		seller = g.randomPerson(eid, rnd)
	}
	seller += firstPersonID
	category := firstCategoryID + int64(rnd.nextIntn(numCategories))
	initialBid := nextPrice(rnd)
	// The auction lasts on average until numInFlightAuctions more auctions
	// have been created.
	horizon := g.tl.timestamp(adjusted+g.p.auctionLookaheadEvent) - ts
	expires := ts + 1 + nextLongN(rnd, max(horizon*2, 1))
	buf := appendString(g.buf[:0], rnd, 20)
	nameEnd := len(buf)
	buf = appendString(buf, rnd, 100)
	descEnd := len(buf)
	reserve := initialBid + nextPrice(rnd)
	size := 8 + descEnd + 8 + 8 + 8 + 8 + 8 // name and description are buf[:descEnd]
	buf = appendExtra(buf, rnd, int32(size), g.p.avgAuctionSize)
	g.buf = buf
	s := string(buf)
	return &Auction{
		ID:          id,
		ItemName:    s[:nameEnd],
		Description: s[nameEnd:descEnd],
		InitialBid:  initialBid,
		Reserve:     reserve,
		DateTime:    ts,
		Expires:     expires,
		Seller:      seller,
		Category:    category,
		Extra:       s[descEnd:],
	}
}

// bid is Beam's BidGenerator.nextBid, drawing in the same order.
func (g *Generator) bid(eid int64, rnd *javaRandom, ts int64) *Bid {
	var auction int64
	if rnd.nextIntn(g.p.hotAuctions) > 0 {
		auction = (lastBase0AuctionID(eid) / hotAuctionRatio) * hotAuctionRatio
	} else {
		auction = g.randomAuction(eid, rnd)
	}
	auction += firstAuctionID
	var bidder int64
	if rnd.nextIntn(g.p.hotBidders) > 0 {
		// The second person of the block, so that hot bidders and hot
		// sellers differ.
		bidder = (lastBase0PersonID(eid)/hotBidderRatio)*hotBidderRatio + 1
	} else {
		bidder = g.randomPerson(eid, rnd)
	}
	bidder += firstPersonID
	price := nextPrice(rnd)
	buf := appendExtra(g.buf[:0], rnd, 8+8+8+8, g.p.avgBidSize)
	g.buf = buf
	return &Bid{
		Auction:  auction,
		Bidder:   bidder,
		Price:    price,
		DateTime: ts,
		Extra:    string(buf),
	}
}

// Stream is the whole event stream of a configuration: its
// cfg.NumEventGenerators generators interleaved round-robin, one event from
// each in turn (once the shorter ones are done, the last generator's
// remaining events follow). As all generators share one timeline, the
// k-th events of all of them have the same event time, so with a single
// rate and OutOfOrderGroupSize 1 the stream is in event-time order. This is
// the order of `sluice nexmark gen`'s event file.
type Stream struct {
	gens   []*Generator
	next   int   // generator of the next event
	offset int64 // events so far
	total  int64
}

// MaxStreamGenerators bounds NumEventGenerators for a Stream, which holds
// all of its generators.
const MaxStreamGenerators = 1 << 16

// NewStream returns the stream of cfg at offset 0, or an error for an
// invalid configuration.
func NewStream(cfg Config) (*Stream, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.NumEventGenerators > MaxStreamGenerators {
		return nil, fmt.Errorf("%w: numEventGenerators %d: a Stream interleaves at most %d generators",
			ErrInvalidConfig, cfg.NumEventGenerators, MaxStreamGenerators)
	}
	s := &Stream{gens: make([]*Generator, cfg.NumEventGenerators)}
	for i := range s.gens {
		g, err := NewGenerator(cfg, i, len(s.gens))
		if err != nil {
			return nil, err
		}
		s.gens[i] = g
		s.total += g.Len()
	}
	return s, nil
}

// Len returns the number of events of the stream in all.
func (s *Stream) Len() int64 { return s.total }

// Offset returns the number of events of the stream so far.
func (s *Stream) Offset() int64 { return s.offset }

// Next returns the next event of the stream, or false after the last one.
func (s *Stream) Next() (Event, bool) {
	for range s.gens {
		g := s.gens[s.next]
		if s.next++; s.next == len(s.gens) {
			s.next = 0
		}
		if ev, ok := g.Next(); ok {
			s.offset++
			return ev, true
		}
	}
	return Event{}, false
}

// All returns an iterator over the remaining events of the stream.
func (s *Stream) All() iter.Seq[Event] {
	return func(yield func(Event) bool) {
		for {
			ev, ok := s.Next()
			if !ok || !yield(ev) {
				return
			}
		}
	}
}

// SetOffset sets the position of the stream: the next event is the one at
// offset, in [0, Len()].
func (s *Stream) SetOffset(offset int64) error {
	if offset < 0 || offset > s.total {
		return fmt.Errorf("nexmark: stream offset %d: want 0 to %d", offset, s.total)
	}
	k := int64(len(s.gens))
	per := s.gens[0].Len() // every generator but the last has this many
	if offset <= k*per {
		full, rest := offset/k, offset%k
		for i, g := range s.gens {
			c := full
			if int64(i) < rest {
				c++
			}
			g.count = c
		}
		s.next = int(rest)
	} else {
		for _, g := range s.gens {
			g.count = per
		}
		s.gens[k-1].count = per + offset - k*per
		s.next = int(k - 1)
	}
	s.offset = offset
	return nil
}

// MaxOutOfOrderness returns how far the latest event time seen in c's stream
// may be ahead of the stream's watermark (Beam's: the least of its
// generators' Watermark): at every point of the stream, and of every
// subsequence of it (a source instance's share), the latest event time so far
// less MaxOutOfOrderness is at or before the watermark. So a Timestamps that
// allows this out-of-orderness (ParamsOf sets it) never puts its watermark
// ahead of the generator's, and no event is late that Beam does not call late;
// it lags the generator's watermark by at most this much.
//
// It is 0 with OutOfOrderGroupSize 1 (every generator's events are in time
// order, and the generators share one timeline). With groups of n events, an
// event is at most n−1 event numbers ahead of the start of its group, whose
// time is the watermark: with one rate that is ⌈(n−1)·delay/1000⌉ ms (delay:
// a generator's inter-event delay in µs), with a varying rate
// (n−1)·⌈delay/1000⌉ ms for the longest delay. c must be valid.
func (c Config) MaxOutOfOrderness() time.Duration {
	n := c.OutOfOrderGroupSize
	if n <= 1 {
		return 0
	}
	tl := newTimeline(c, 0)
	var ms int64
	if len(tl.delaysUs) == 1 {
		ms = ceilMul(n-1, tl.delaysUs[0], 1000)
	} else {
		ms = ceilMul(n-1, ceilDiv(slices.Max(tl.delaysUs), 1000), 1)
	}
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// RepeatsIDs reports whether c's stream may have an event id (so a person
// or an auction id) more than once. With OutOfOrderGroupSize n > 1, Beam's
// permutation of a generator's last group, when n does not divide its
// count, may reach past the generator's ids into the next generator's,
// which has them too; and with n a multiple of 953 the permutation is not
// one-to-one. Otherwise every id is unique. It may answer true when unsure
// (a last group of more than 2²⁰ events), never false wrongly.
func (c Config) RepeatsIDs() bool {
	n := c.OutOfOrderGroupSize
	if n <= 1 || c.NumEventGenerators <= 1 && n%953 != 0 {
		return false
	}
	if n%953 == 0 {
		return true
	}
	// Every generator but the last has total/k events; the last one's ids
	// may go past the end, where no generator has them.
	per := maxEvents(c) / int64(c.NumEventGenerators)
	r := per % n
	if r > 1<<20 {
		return true
	}
	for j := range r {
		if (j*953)%n >= r {
			return true
		}
	}
	return false
}

// ceilDiv is ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// ceilMul is ⌈a·b/d⌉ for a, b ≥ 0 and d > 0, saturating at math.MaxInt64.
func ceilMul(a, b, d int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(d) {
		return math.MaxInt64
	}
	q, r := bits.Div64(hi, lo, uint64(d))
	if r != 0 {
		q++
	}
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// Watermark returns a lower bound, in ms, of the event times of all the
// events of the stream not yet returned: the least of its generators'
// watermarks (math.MaxInt64 at the end).
func (s *Stream) Watermark() int64 {
	w := int64(math.MaxInt64)
	for _, g := range s.gens {
		w = min(w, g.Watermark())
	}
	return w
}
