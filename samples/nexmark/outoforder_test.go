package nexmark

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
)

// oooCase is a stream of the out-of-order tests.
type oooCase struct {
	events int64
	gens   int
	group  int64
	rate   int
	// persons and auctions are the numbers of person and auction ids that
	// repeat in the stream.
	persons, auctions int
}

func (c oooCase) String() string {
	return fmt.Sprintf("group%d-gens%d-events%d-rate%d", c.group, c.gens, c.events, c.rate)
}

func (c oooCase) config() Config {
	cfg := DefaultConfig()
	cfg.NumEvents = c.events
	cfg.NumEventGenerators = c.gens
	cfg.OutOfOrderGroupSize = c.group
	cfg.FirstEventRate, cfg.NextEventRate = c.rate, c.rate
	return cfg
}

// oooCases are the streams every query is checked on: in order, in groups
// of 10 that divide every generator's count, in groups of 7, 10, 12 and 100
// that do not, with one and with several generators, at a sparse and at
// Beam's dense rate. When a group size does not divide a generator's count,
// the permutation of its last group may reach past the generator's ids into
// the next generator's, so that ids repeat (as in Beam): the cases with
// repeats say how many person and auction ids repeat. (Groups of 7 are in
// order: 953 = 1 mod 7.)
var oooCases = []oooCase{
	{events: 10_000, gens: 4, group: 1, rate: 1000},
	{events: 10_000, gens: 4, group: 10, rate: 1000},  // 2 500 a generator
	{events: 10_000, gens: 4, group: 7, rate: 1000},   // 2 500 % 7 = 1
	{events: 10_000, gens: 1, group: 10, rate: 1000},  // one generator
	{events: 10_000, gens: 5, group: 10, rate: 10000}, // dense: several events a ms
	{events: 10_003, gens: 2, group: 100, rate: 10000},
	{events: 10_000, gens: 6, group: 10, rate: 1000, persons: 0, auctions: 1},
	{events: 10_000, gens: 4, group: 12, rate: 1000, persons: 0, auctions: 3},
	{events: 10_003, gens: 3, group: 100, rate: 1000, persons: 1, auctions: 1},
	// Many short timelines: auctions last longer than a generator's
	// timeline, so both copies of a repeated auction are open together.
	{events: 10_000, gens: 10, group: 12, rate: 1000, persons: 0, auctions: 9},
}

// oooRepeats counts the person and auction ids that occur more than once.
func oooRepeats(evs []Event) (persons, auctions int) {
	p, a := map[int64]int{}, map[int64]int{}
	for _, e := range evs {
		switch {
		case e.Person != nil:
			if p[e.Person.ID]++; p[e.Person.ID] == 2 {
				persons++
			}
		case e.Auction != nil:
			if a[e.Auction.ID]++; a[e.Auction.ID] == 2 {
				auctions++
			}
		}
	}
	return persons, auctions
}

// TestQueryOutOfOrder runs every query at once on each of oooCases, from
// events held in memory read by 2 source instances (and, where ids repeat,
// from the live generator too), with the keyed operators in 2 instances, and
// compares each query's output with its model; no operator may see a late
// record.
func TestQueryOutOfOrder(t *testing.T) {
	for _, c := range oooCases {
		t.Run(c.String(), func(t *testing.T) {
			cfg := c.config()
			evs := queryEvents(t, cfg)
			if p, a := oooRepeats(evs); p != c.persons || a != c.auctions {
				t.Fatalf("%d person and %d auction ids repeat, want %d and %d", p, a, c.persons, c.auctions)
			}
			top := operators.NewTopology(t.Name())
			events := operators.Source(top, "events", operators.FromSlice(evs), operators.Parallelism(2))
			out := addAllQueries(events, ParamsOf(cfg, 2))
			queryRun(t, top)
			out.check(t, evs)
			if c.persons+c.auctions == 0 || c.gens < 2 {
				return
			}
			// The live source: each instance reads its own generators.
			t.Run("live", func(t *testing.T) {
				top := operators.NewTopology(t.Name())
				out := addAllQueries(operators.Source(top, "events", Source(cfg), operators.Parallelism(2)), ParamsOf(cfg, 2))
				queryRun(t, top)
				out.check(t, evs)
			})
		})
	}
}

// TestMaxOutOfOrderness checks Config.MaxOutOfOrderness against the
// generator's own (Beam's) watermark: after every event of the stream, the
// latest event time so far less it is at or before the stream's watermark;
// and with one rate whose delay is whole ms it is no larger than it must be.
func TestMaxOutOfOrderness(t *testing.T) {
	// Varying rates over 100 000 events from 2 generators: several cycles
	// through every rate step.
	sine := DefaultConfig()
	sine.NumEvents, sine.NumEventGenerators = 100_000, 2
	sine.FirstEventRate, sine.NextEventRate, sine.RatePeriodSec = 10_000, 1_000, 10
	square := sine
	square.RateShape = RateShapeSquare
	tests := []struct {
		name  string
		cfg   Config
		group int64
		tight bool
	}{
		{"in order", oooCase{events: 20_000, gens: 4, group: 1, rate: 1000}.config(), 1, true},
		{"groups of 10, 4 generators", oooCase{events: 20_000, gens: 4, group: 10, rate: 1000}.config(), 10, true},
		{"groups of 12, 3 generators", oooCase{events: 20_003, gens: 3, group: 12, rate: 1000}.config(), 12, true},
		{"groups of 100, dense", oooCase{events: 20_000, gens: 5, group: 100, rate: 10000}.config(), 100, false},
		{"groups of 10, sine", sine, 10, false},
		{"groups of 33, square", square, 33, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.OutOfOrderGroupSize = tt.group
			lag := cfg.MaxOutOfOrderness().Milliseconds()
			s := mustStream(t, cfg)
			latest, worst := int64(math.MinInt64), int64(0)
			for ev := range s.All() {
				latest = max(latest, ev.Time())
				wm := s.Watermark()
				if wm == math.MaxInt64 {
					break
				}
				if latest-lag > wm {
					t.Fatalf("after event %d: latest time %d less %d ms is ahead of the generator's watermark %d", s.Offset(), latest, lag, wm)
				}
				worst = max(worst, latest-wm)
			}
			if tt.tight && worst != lag {
				t.Errorf("MaxOutOfOrderness %d ms, but the stream is at most %d ms ahead of its watermark", lag, worst)
			}
			t.Logf("MaxOutOfOrderness %d ms, the stream at most %d ms ahead", lag, worst)
		})
	}
}

// TestQueryRepeatedIDs: of the copies of an auction id the earliest counts,
// even when a later copy arrives first (within the out-of-orderness) or
// after the first has closed; q3 joins each auction once with the first
// person of its seller.
func TestQueryRepeatedIDs(t *testing.T) {
	const s = 1000 // ms
	in := []Event{
		modelP(7, "Fay", "Bend", "OR", 0),
		modelA(1, 7, 10, 1500, 5000, 1), // a later copy, first to arrive
		modelB(1, 20, 100, 1200),        // valid for the first copy only
		modelA(1, 8, 11, 1000, 3000, 1), // the first copy
		modelB(1, 21, 50, 1100),
		modelP(7, "Fay", "Bend", "OR", 900), // the person again
		modelB(1, 22, 70, 4000),             // valid for the later copy only
		modelA(2, 7, 10, 2000, 2500, 1),
		modelB(2, 23, 10, 2100),
		modelA(2, 7, 10, 9*s, 20*s, 1), // a copy after the first closed
		modelB(2, 24, 999, 10*s),
		modelB(3, 25, 1, 30*s), // event time moves on
	}
	top := operators.NewTopology(t.Name())
	events := operators.Source(top, "events", operators.FromSlice(in))
	p := Params{Parallelism: 2, OutOfOrderness: time.Second}
	out := &queryOutputs{
		q3: collectInto(BuildQ3(events, p), "q3.out"),
		q4: collectInto(BuildQ4(events, p), "q4.out"),
		q6: collectInto(BuildQ6(events, p), "q6.out"),
		q9: collectInto(BuildQ9(events, p), "q9.out"),
	}
	queryRun(t, top)
	if want := []Q9{{Auction: 1, Bidder: 20, Price: 100, DateTime: 1200}, {Auction: 2, Bidder: 23, Price: 10, DateTime: 2100}}; !slices.Equal(ModelQ9(in), want) {
		t.Fatalf("ModelQ9 = %+v, want %+v", ModelQ9(in), want)
	}
	queryCompare(t, Sorted(out.q9.Items()), ModelQ9(in))
	queryCompare(t, LastPerKeyQ4(out.q4.Items()), ModelQ4(in))
	queryCompare(t, LastPerKeyQ6(out.q6.Items()), ModelQ6(in))
	queryCompare(t, Sorted(out.q6.Items()), Sorted(ModelQ6Updates(in)))
	queryCompare(t, Sorted(out.q3.Items()), []Q3{{"Fay", "Bend", "OR", 1}, {"Fay", "Bend", "OR", 2}})
}

// TestQueryDeterministic runs q9 three times on the same out-of-order events
// (groups of 12, ids repeating), read by 2 source instances into 2
// instances of each keyed operator: the three outputs are the same, and the
// model's.
func TestQueryDeterministic(t *testing.T) {
	cfg := oooCase{events: 20_000, gens: 10, group: 12, rate: 1000}.config()
	evs := queryEvents(t, cfg)
	if !cfg.RepeatsIDs() {
		t.Fatal("the stream repeats no id")
	}
	want := ModelQ9(evs)
	var runs [][]Q9
	for range 3 {
		top := operators.NewTopology(t.Name())
		out := collectInto(BuildQ9(operators.Source(top, "events", operators.FromSlice(evs), operators.Parallelism(2)), ParamsOf(cfg, 2)), "out")
		queryRun(t, top)
		runs = append(runs, Sorted(out.Items()))
	}
	for i, got := range runs {
		if !slices.Equal(got, runs[0]) {
			t.Errorf("run %d differs from run 0", i)
		}
		queryCompare(t, got, want)
	}
}

// TestQueryNoLateEvent: on out-of-order streams, with ParamsOf's
// out-of-orderness (the generator's own) no operator of q4–q9 and q11 sees
// a late event; with none allowed (the watermark rebuilt from the latest
// event time alone), some do, so the count can see them.
func TestQueryNoLateEvent(t *testing.T) {
	cfg := oooCase{events: 20_000, gens: 2, group: 100, rate: 1000}.config()
	evs := queryEvents(t, cfg)
	late := func(p Params) (n int64) {
		top := operators.NewTopology(t.Name())
		events := operators.Source(top, "events", operators.FromSlice(evs), operators.Parallelism(2))
		addAllQueries(events, p)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sys, err := actors.NewSystem(actors.Config{Name: t.Name()})
		if err != nil {
			t.Fatal(err)
		}
		defer sys.Stop(ctx)
		run, err := sys.Run(ctx, top)
		if err != nil {
			t.Fatal(err)
		}
		if err := run.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		for _, st := range run.Stats() {
			n += st.Late
		}
		return n
	}
	p := ParamsOf(cfg, 2)
	if n := late(p); n != 0 {
		t.Errorf("%d late events with the generator's out-of-orderness %v", n, p.OutOfOrderness)
	}
	p.OutOfOrderness = 0
	if n := late(p); n == 0 {
		t.Error("no late event without out-of-orderness: the test cannot see late events")
	}
}

// TestRepeatsIDs checks Config.RepeatsIDs against the event ids of every
// generator of small streams.
func TestRepeatsIDs(t *testing.T) {
	var with, without int
	for _, gens := range []int{1, 2, 3, 10} {
		for _, group := range []int64{1, 2, 7, 10, 12, 100, 953, 1906} {
			for _, events := range []int64{1000, 1003, 4000} {
				cfg := DefaultConfig()
				cfg.NumEvents, cfg.NumEventGenerators, cfg.OutOfOrderGroupSize = events, gens, group
				seen := map[int64]bool{}
				repeats := false
				for g := range gens {
					gen := mustGenerator(t, cfg, g, gens)
					for range gen.Len() {
						id := gen.NextEventID()
						repeats = repeats || seen[id]
						seen[id] = true
						gen.Next()
					}
				}
				if got := cfg.RepeatsIDs(); got != repeats {
					t.Errorf("%d generators, groups of %d, %d events: RepeatsIDs() = %v, want %v", gens, group, events, got, repeats)
				}
				if repeats {
					with++
				} else {
					without++
				}
			}
		}
	}
	if with < 10 || without < 10 {
		t.Errorf("%d streams with repeated ids, %d without: too few of one kind", with, without)
	}
	t.Logf("%d streams with repeated ids, %d without", with, without)
}
