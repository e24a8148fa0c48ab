package nexmark

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strings"
)

// RateShape is the shape of the event rate over time when FirstEventRate and
// NextEventRate differ (Beam's NexmarkUtils.RateShape).
type RateShape string

// The rate shapes.
const (
	// RateShapeSine cycles through 10 rates on a cosine from FirstEventRate
	// to NextEventRate and back, each for RatePeriodSec/10 seconds.
	RateShapeSine RateShape = "SINE"
	// RateShapeSquare alternates FirstEventRate and NextEventRate, each for
	// RatePeriodSec/2 seconds.
	RateShapeSquare RateShape = "SQUARE"
)

// RateUnit is the unit of FirstEventRate and NextEventRate (Beam's
// NexmarkUtils.RateUnit).
type RateUnit string

// The rate units.
const (
	PerSecond RateUnit = "PER_SECOND"
	PerMinute RateUnit = "PER_MINUTE"
)

// usPerUnit is the number of microseconds in one unit.
func (u RateUnit) usPerUnit() int64 {
	if u == PerMinute {
		return 60_000_000
	}
	return 1_000_000
}

// Config holds the Nexmark knobs, named and defaulted as in Beam's
// NexmarkConfiguration. Start from DefaultConfig: the zero Config is not
// valid. The generator uses the knobs down to OutOfOrderGroupSize; the
// others parameterise the queries.
//
// Beam knobs left out because they would make the stream depend on the wall
// clock: useWallclockEventTime (the base time is always
// 2015-07-15T00:00:00Z), isRateLimited, probDelayedEvent and
// occasionalDelaySec (events are produced as fast as they are consumed, with
// their synthetic event time, and none is delayed behind the watermark).
// Beam query knobs left out because sluice's queries are defined otherwise:
// maxAuctionsWaitingTime (q3 is the regular unbounded join, which forgets
// nothing), maxLogEvents (q11 emits each session once, when it closes, with
// no early firings), fanout (the hot-key fanout of Beam's combiners; q7
// spreads each window over a fixed number of partial maxima instead), and
// q11's allowed lateness of occasionalDelaySec/2 (no event is late).
type Config struct {
	// NumEvents is the number of events of the whole stream, over all
	// generators. 0 means as many as Beam allows without overflow:
	// MaxInt64 / (50 × the largest average event size). Default 100 000.
	NumEvents int64
	// NumEventGenerators is the number of generators, each on its own
	// timeline with its own share of the ids (Beam's split). It multiplies
	// each generator's inter-event delay, so the overall rate is unchanged.
	// Default 100, as in Beam; the event time of the stream then advances
	// in steps of 100 events.
	NumEventGenerators int
	// RateShape is the shape of the rate when FirstEventRate differs from
	// NextEventRate. Default SINE.
	RateShape RateShape
	// FirstEventRate is the overall initial event rate, in RateUnit.
	// Default 10 000.
	FirstEventRate int
	// NextEventRate is the overall rate the shape moves to. Default 10 000.
	NextEventRate int
	// RateUnit is the unit of the rates. Default PER_SECOND.
	RateUnit RateUnit
	// RatePeriodSec is the period of the rate shape, in seconds. Default 600.
	RatePeriodSec int
	// AvgPersonByteSize is the average size a person is padded to with
	// its extra field. Default 200.
	AvgPersonByteSize int
	// AvgAuctionByteSize is the same for auctions. Default 500.
	AvgAuctionByteSize int
	// AvgBidByteSize is the same for bids. Default 100.
	AvgBidByteSize int
	// HotAuctionRatio: a bid goes to the hot auction with probability
	// 1 − 1/HotAuctionRatio. Default 2.
	HotAuctionRatio int
	// HotSellersRatio: an auction comes from the hot seller with
	// probability 1 − 1/HotSellersRatio. Default 4.
	HotSellersRatio int
	// HotBiddersRatio: a bid comes from the hot bidder with probability
	// 1 − 1/HotBiddersRatio. Default 4.
	HotBiddersRatio int
	// NumInFlightAuctions is the number of recent auctions a bid may go
	// to (plus 10 not yet created); it also sets the average auction
	// length. Default 100.
	NumInFlightAuctions int
	// NumActivePeople is the number of recent persons a bid or auction
	// may come from (plus 10 not yet created). Default 1000.
	NumActivePeople int
	// OutOfOrderGroupSize: each group of that many events of a generator is
	// permuted; 1 keeps events in order. Default 1.
	OutOfOrderGroupSize int64

	// WindowSizeSec is the window size of q3, q5, q7, q8 and q11 (the
	// session gap). Default 10.
	WindowSizeSec int64
	// WindowPeriodSec is the period of q5's sliding windows. Default 5.
	WindowPeriodSec int64
	// WatermarkHoldbackSec holds the watermark back by that many seconds.
	// Default 0.
	WatermarkHoldbackSec int64
	// AuctionSkip: q2 selects bids of auctions whose id is a multiple of
	// it. Default 123.
	AuctionSkip int
}

// DefaultConfig returns Beam's default configuration.
func DefaultConfig() Config {
	return Config{
		NumEvents:            100_000,
		NumEventGenerators:   100,
		RateShape:            RateShapeSine,
		FirstEventRate:       10_000,
		NextEventRate:        10_000,
		RateUnit:             PerSecond,
		RatePeriodSec:        600,
		AvgPersonByteSize:    200,
		AvgAuctionByteSize:   500,
		AvgBidByteSize:       100,
		HotAuctionRatio:      2,
		HotSellersRatio:      4,
		HotBiddersRatio:      4,
		NumInFlightAuctions:  100,
		NumActivePeople:      1000,
		OutOfOrderGroupSize:  1,
		WindowSizeSec:        10,
		WindowPeriodSec:      5,
		WatermarkHoldbackSec: 0,
		AuctionSkip:          123,
	}
}

// ErrInvalidConfig is wrapped by every error of Config.Validate.
var ErrInvalidConfig = errors.New("nexmark: invalid configuration")

// Validate checks every knob and returns an error naming the first invalid
// one by its Beam name, wrapping ErrInvalidConfig. Knobs that are Java ints
// in Beam must fit in 32 bits, so that the arithmetic is Beam's.
func (c Config) Validate() error {
	bad := func(knob string, v any, want string) error {
		return fmt.Errorf("%w: %s %v: %s", ErrInvalidConfig, knob, v, want)
	}
	ints := []struct {
		knob string
		v    int
		min  int
	}{
		{"numEventGenerators", c.NumEventGenerators, 1},
		{"firstEventRate", c.FirstEventRate, 1},
		{"nextEventRate", c.NextEventRate, 1},
		{"ratePeriodSec", c.RatePeriodSec, 1},
		{"avgPersonByteSize", c.AvgPersonByteSize, 1},
		{"avgAuctionByteSize", c.AvgAuctionByteSize, 1},
		{"avgBidByteSize", c.AvgBidByteSize, 1},
		{"hotAuctionRatio", c.HotAuctionRatio, 1},
		{"hotSellersRatio", c.HotSellersRatio, 1},
		{"hotBiddersRatio", c.HotBiddersRatio, 1},
		{"numInFlightAuctions", c.NumInFlightAuctions, 0},
		{"numActivePeople", c.NumActivePeople, 0},
		{"auctionSkip", c.AuctionSkip, 1},
	}
	if c.NumEvents < 0 {
		return bad("numEvents", c.NumEvents, "want 0 (as many as possible) or more")
	}
	for _, k := range ints {
		if k.v < k.min || k.v > math.MaxInt32 {
			return bad(k.knob, k.v, fmt.Sprintf("want %d to %d", k.min, math.MaxInt32))
		}
	}
	if c.RateShape != RateShapeSine && c.RateShape != RateShapeSquare {
		return bad("rateShape", fmt.Sprintf("%q", c.RateShape), "want SINE or SQUARE")
	}
	if c.RateUnit != PerSecond && c.RateUnit != PerMinute {
		return bad("rateUnit", fmt.Sprintf("%q", c.RateUnit), "want PER_SECOND or PER_MINUTE")
	}
	for _, k := range []struct {
		knob string
		v    int64
		min  int64
	}{
		{"outOfOrderGroupSize", c.OutOfOrderGroupSize, 1},
		{"windowSizeSec", c.WindowSizeSec, 1},
		{"windowPeriodSec", c.WindowPeriodSec, 1},
		{"watermarkHoldbackSec", c.WatermarkHoldbackSec, 0},
	} {
		if k.v < k.min {
			return bad(k.knob, k.v, fmt.Sprintf("want %d or more", k.min))
		}
	}
	if c.FirstEventRate != c.NextEventRate {
		// A varying rate divides by each step's delay and by the events
		// per epoch, which must not be zero.
		tl := newTimeline(c, 0)
		for _, d := range tl.delaysUs {
			if d <= 0 {
				return bad("firstEventRate/nextEventRate", fmt.Sprintf("%d/%d", c.FirstEventRate, c.NextEventRate),
					"a varying rate needs at least one whole microsecond between a generator's events; lower the rates")
			}
		}
		if tl.eventsPerEpoch <= 0 {
			return bad("ratePeriodSec", c.RatePeriodSec, "too short for even one event per rate step")
		}
	}
	return nil
}

// RegisterFlags registers one flag per knob on fs, named as in Beam
// (--numEvents, --firstEventRate, --hotAuctionRatio, ...), with c's values
// as defaults; parsing fs sets c. --events and --generators are short
// aliases of --numEvents and --numEventGenerators. Cobra commands add fs
// with AddGoFlagSet. Call Validate after parsing.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Int64Var(&c.NumEvents, "numEvents", c.NumEvents, "number of events of the whole stream (0: as many as possible)")
	fs.Int64Var(&c.NumEvents, "events", c.NumEvents, "alias of --numEvents")
	fs.IntVar(&c.NumEventGenerators, "numEventGenerators", c.NumEventGenerators, "number of generators, each on its own timeline with its own ids")
	fs.IntVar(&c.NumEventGenerators, "generators", c.NumEventGenerators, "alias of --numEventGenerators")
	fs.Func("rateShape", fmt.Sprintf("shape of the rate when the rates differ: SINE or SQUARE (default %s)", c.RateShape), func(s string) error {
		v := RateShape(strings.ToUpper(s))
		if v != RateShapeSine && v != RateShapeSquare {
			return errors.New("want SINE or SQUARE")
		}
		c.RateShape = v
		return nil
	})
	fs.IntVar(&c.FirstEventRate, "firstEventRate", c.FirstEventRate, "overall initial event rate, in rateUnit")
	fs.IntVar(&c.NextEventRate, "nextEventRate", c.NextEventRate, "overall rate the rate shape moves to, in rateUnit")
	fs.Func("rateUnit", fmt.Sprintf("unit of the rates: PER_SECOND or PER_MINUTE (default %s)", c.RateUnit), func(s string) error {
		v := RateUnit(strings.ToUpper(s))
		if v != PerSecond && v != PerMinute {
			return errors.New("want PER_SECOND or PER_MINUTE")
		}
		c.RateUnit = v
		return nil
	})
	fs.IntVar(&c.RatePeriodSec, "ratePeriodSec", c.RatePeriodSec, "period of the rate shape, in seconds")
	fs.IntVar(&c.AvgPersonByteSize, "avgPersonByteSize", c.AvgPersonByteSize, "average size of a person, reached by padding")
	fs.IntVar(&c.AvgAuctionByteSize, "avgAuctionByteSize", c.AvgAuctionByteSize, "average size of an auction, reached by padding")
	fs.IntVar(&c.AvgBidByteSize, "avgBidByteSize", c.AvgBidByteSize, "average size of a bid, reached by padding")
	fs.IntVar(&c.HotAuctionRatio, "hotAuctionRatio", c.HotAuctionRatio, "a bid goes to the hot auction with probability 1-1/ratio")
	fs.IntVar(&c.HotSellersRatio, "hotSellersRatio", c.HotSellersRatio, "an auction comes from the hot seller with probability 1-1/ratio")
	fs.IntVar(&c.HotBiddersRatio, "hotBiddersRatio", c.HotBiddersRatio, "a bid comes from the hot bidder with probability 1-1/ratio")
	fs.IntVar(&c.NumInFlightAuctions, "numInFlightAuctions", c.NumInFlightAuctions, "recent auctions a bid may go to")
	fs.IntVar(&c.NumActivePeople, "numActivePeople", c.NumActivePeople, "recent persons a bid or auction may come from")
	fs.Int64Var(&c.OutOfOrderGroupSize, "outOfOrderGroupSize", c.OutOfOrderGroupSize, "events permuted in groups of this size (1: in order)")
	fs.Int64Var(&c.WindowSizeSec, "windowSizeSec", c.WindowSizeSec, "window size of the windowed queries, in seconds")
	fs.Int64Var(&c.WindowPeriodSec, "windowPeriodSec", c.WindowPeriodSec, "period of q5's sliding windows, in seconds")
	fs.Int64Var(&c.WatermarkHoldbackSec, "watermarkHoldbackSec", c.WatermarkHoldbackSec, "seconds the watermark is held back")
	fs.IntVar(&c.AuctionSkip, "auctionSkip", c.AuctionSkip, "q2 selects bids of auctions whose id is a multiple of this")
}
