package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/samples/nexmark"
)

// flinkPerCore is Flink 1.11's published throughput per core (the
// nexmark/nexmark README), given as context only: it was measured on three
// machines with RocksDB state, exactly-once checkpoints every 3 minutes, in
// a steady state after a warm-up, from a generator inside the job; none of
// that is what runs here, so it is no baseline. q6 has no Flink figure.
var flinkPerCore = map[string]float64{
	"q0": 235_000, "q1": 228_000, "q2": 258_000, "q3": 198_000, "q4": 26_000,
	"q5": 26_000, "q7": 12_000, "q8": 135_000, "q9": 14_000, "q11": 40_000,
}

// nexmarkQuery is one query: run builds it over a source of the events into
// a collecting sink, runs it and checks its output against the model's;
// runLong builds it over a longer source (the events replayed in laps)
// into a counting sink and checks that it wrote laps times the results of
// one lap; model runs the single-goroutine reference model on the events.
type nexmarkQuery struct {
	name string
	// run checkpoints every cp when cp > 0.
	run func(ctx context.Context, e *env, evs []nexmark.Event, p nexmark.Params, par int, cp time.Duration) (nexmarkRun, error)
	// runLong's changelog, when not empty, is the memory state's changelog directory.
	runLong func(ctx context.Context, e *env, src operators.SourceConnector[nexmark.Event], p nexmark.Params, par int, cp time.Duration, changelog string) (nexmarkRun, error)
	model   func(evs []nexmark.Event) (time.Duration, int)
}

// nexmarkRun is what one run of a query's topology measured.
type nexmarkRun struct {
	d           time.Duration // from Run to the end of Wait
	results     int
	checkpoints int64 // completed, the final one included
	history     []operators.CompletedCheckpoint
}

// nexmarkCase builds a nexmarkQuery from the query's typed builder, its
// model, the canonical form its output is compared in (the tests' own:
// sorted, or the last update per key for q4 and q6) and equality.
func nexmarkCase[T any](name string, build func(operators.Stream[nexmark.Event], nexmark.Params) operators.Stream[T],
	model func([]nexmark.Event) []T, canon func([]T) []T, eq func(a, b T) bool) nexmarkQuery {
	var want []T // the model's output, kept from its timed run
	return nexmarkQuery{
		name: name,
		model: func(evs []nexmark.Event) (time.Duration, int) {
			start := time.Now()
			want = model(evs)
			return time.Since(start), len(want)
		},
		run: func(ctx context.Context, e *env, evs []nexmark.Event, p nexmark.Params, par int, cp time.Duration) (nexmarkRun, error) {
			col := operators.NewCollector[T]()
			r, err := runNexmark(ctx, e, name, operators.FromSlice(evs), p, par, cp, "", build, col)
			if err != nil {
				return r, err
			}
			r.results = col.Len()
			got, w := canon(col.Items()), canon(want)
			if len(w) == 0 {
				return nexmarkRun{}, fmt.Errorf("the model has no results: too few events to compare")
			}
			if !slices.EqualFunc(got, w, eq) {
				i := 0
				for i < len(got) && i < len(w) && eq(got[i], w[i]) {
					i++
				}
				return nexmarkRun{}, fmt.Errorf("output differs from the model: %d results, model %d, first difference at %d", len(got), len(w), i)
			}
			return r, nil
		},
		runLong: func(ctx context.Context, e *env, src operators.SourceConnector[nexmark.Event], p nexmark.Params, par int, cp time.Duration, changelog string) (nexmarkRun, error) {
			var written atomic.Int64
			r, err := runNexmark(ctx, e, name, src, p, par, cp, changelog, build, operators.SinkFunc(func(T) error { written.Add(1); return nil }))
			r.results = int(written.Load())
			return r, err
		},
	}
}

// runNexmark runs a query's topology over src into sink, checkpointing
// every cp into a bbolt store when cp > 0 (with the memory state's
// changelog in directory changelog when not empty), and fails if a checkpoint
// failed or a record was late.
func runNexmark[T any](ctx context.Context, e *env, name string, src operators.SourceConnector[nexmark.Event], p nexmark.Params, par int, cp time.Duration, changelog string,
	build func(operators.Stream[nexmark.Event], nexmark.Params) operators.Stream[T], sink operators.SinkConnector[T]) (nexmarkRun, error) {
	cfg := actors.Config{Name: "nexmark-bench", Logger: e.log}
	var opts []operators.TopologyOption
	if cp > 0 { // checkpoints every cp into a bbolt store
		dir, err := os.MkdirTemp("", "sluice-nexmark-cp-")
		if err != nil {
			return nexmarkRun{}, err
		}
		defer os.RemoveAll(dir)
		cfg.Store = filepath.Join(dir, "store.db")
		opts = append(opts, operators.Checkpoints(cp))
	}
	if changelog != "" {
		opts = append(opts, operators.StateBackend(operators.MemoryState().Changelog(changelog)))
	}
	sys, err := actors.NewSystem(cfg)
	if err != nil {
		return nexmarkRun{}, err
	}
	defer sys.Stop(ctx)
	t := operators.NewTopology("nexmark-"+name, opts...)
	events := operators.Source(t, "events", src, operators.Parallelism(par))
	operators.Sink(build(events, p), "out", sink)
	run, d, err := runTimed(ctx, sys, t)
	if err != nil {
		return nexmarkRun{}, err
	}
	r := nexmarkRun{d: d}
	if cp > 0 {
		st := operators.CheckpointStatsOf(run)
		if st.Failed > 0 {
			return nexmarkRun{}, fmt.Errorf("%d checkpoints failed: %s", st.Failed, st.LastFailure)
		}
		r.checkpoints, r.history = st.Completed, st.History
	}
	for _, st := range run.Stats() {
		if st.Late > 0 {
			return nexmarkRun{}, fmt.Errorf("%d late records in %s", st.Late, st.Name)
		}
	}
	return r, nil
}

// lapped replays evs laps times: lap k is evs with every person, auction,
// seller and bidder id raised by k×idStride and every time (event times,
// auctions' expiry) by k×timeStride, so that no lap shares a key, a window
// or an auction with another and each writes what the first writes (its
// ids and times shifted). idStride is past the largest id and a multiple
// of skip (q2's AuctionSkip, so that q2 selects the same bids in every
// lap); timeStride is past the latest time (expiry included) by at least
// an hour and a whole number of hours (so windows and sessions fall alike
// in every lap). A shifted event is a copy: evs is not changed.
// (A record keeps its batch's copies alive until the last of them is
// dropped; a query that keeps one auction of a batch keeps the batch's.)
func lapped(evs []nexmark.Event, laps int, skip int64) operators.SourceConnector[nexmark.Event] {
	var maxID, minT, maxT int64 = 0, math.MaxInt64, math.MinInt64
	for _, ev := range evs {
		t := ev.Time()
		minT, maxT = min(minT, t), max(maxT, t)
		switch {
		case ev.Person != nil:
			maxID = max(maxID, ev.Person.ID)
		case ev.Auction != nil:
			maxID = max(maxID, ev.Auction.ID, ev.Auction.Seller)
			maxT = max(maxT, ev.Auction.Expires)
		case ev.Bid != nil:
			maxID = max(maxID, ev.Bid.Auction, ev.Bid.Bidder)
		}
	}
	skip = max(skip, 1)
	idStride := (maxID/skip + 1) * skip
	const hour = int64(time.Hour / time.Millisecond)
	timeStride := ((maxT-minT)/hour + 2) * hour
	return lapSource{evs: evs, total: int64(len(evs)) * int64(laps), idStride: idStride, timeStride: timeStride}
}

// lapSource is lapped's source: partition part of parts reads the indices
// part, part+parts, ... below total, index i being evs[i mod len(evs)] in
// lap i / len(evs). A Read copies the shifted people, auctions and bids
// into one array of each kind, so that the copies cost an allocation a
// batch, not one an event (which made the source most of a query's CPU).
type lapSource struct {
	evs                         []nexmark.Event
	total, idStride, timeStride int64
}

func (s lapSource) Open(_ context.Context, part, parts int, offset int64) (operators.Reader[nexmark.Event], error) {
	return &lapReader{s: s, part: int64(part), parts: int64(parts), next: offset}, nil
}

type lapReader struct {
	s                 lapSource
	part, parts, next int64
}

func (r *lapReader) Offset() int64 { return r.next }
func (r *lapReader) Close() error  { return nil }

func (r *lapReader) Read(buf []nexmark.Event) (int, error) {
	first := r.part + r.next*r.parts
	if first >= r.s.total {
		return 0, io.EOF
	}
	k := int(min(int64(len(buf)), (r.s.total-first+r.parts-1)/r.parts))
	n := int64(len(r.s.evs))
	var people, auctions, bids int
	for j, i := 0, first; j < k; j, i = j+1, i+r.parts {
		if i < n {
			continue // the first lap is evs as they are
		}
		switch ev := r.s.evs[i%n]; {
		case ev.Person != nil:
			people++
		case ev.Auction != nil:
			auctions++
		case ev.Bid != nil:
			bids++
		}
	}
	ps, as, bs := make([]nexmark.Person, people), make([]nexmark.Auction, auctions), make([]nexmark.Bid, bids)
	for j, i := 0, first; j < k; j, i = j+1, i+r.parts {
		ev, lap := r.s.evs[i%n], i/n
		if lap == 0 {
			buf[j] = ev
			continue
		}
		di, dt := lap*r.s.idStride, lap*r.s.timeStride
		switch {
		case ev.Person != nil:
			x := &ps[len(ps)-people]
			people--
			*x = *ev.Person
			x.ID += di
			x.DateTime += dt
			buf[j] = nexmark.Event{Person: x}
		case ev.Auction != nil:
			x := &as[len(as)-auctions]
			auctions--
			*x = *ev.Auction
			x.ID += di
			x.Seller += di
			x.DateTime += dt
			x.Expires += dt
			buf[j] = nexmark.Event{Auction: x}
		case ev.Bid != nil:
			x := &bs[len(bs)-bids]
			bids--
			*x = *ev.Bid
			x.Auction += di
			x.Bidder += di
			x.DateTime += dt
			buf[j] = nexmark.Event{Bid: x}
		default:
			buf[j] = ev
		}
	}
	r.next += int64(k)
	return k, nil
}

// cpuPer is the process's CPU nanoseconds per event.
func cpuPer(cpu time.Duration, events float64) float64 { return float64(cpu.Nanoseconds()) / events }

// durationsOf is the sorted durations of completed checkpoints.
func durationsOf(hs []operators.CompletedCheckpoint) []time.Duration {
	ds := make([]time.Duration, len(hs))
	for i, h := range hs {
		ds[i] = h.Duration
	}
	slices.Sort(ds)
	return ds
}

func same[T comparable](a, b T) bool { return a == b }

// nexmarkInterval is the checkpoint interval of a run of n events whose
// best rate without checkpoints is rate: a tenth of that run, within
// [10 ms, 1 s] (rounded to the millisecond).
func nexmarkInterval(rate float64, n int) time.Duration {
	d := time.Second
	if rate > 0 {
		d = time.Duration(float64(n) / rate / 10 * float64(time.Second))
	}
	return min(max(d, 10*time.Millisecond), time.Second).Round(time.Millisecond)
}

func nexmarkQueries() []nexmarkQuery {
	return []nexmarkQuery{
		nexmarkCase("q0", nexmark.BuildQ0, nexmark.ModelQ0, nexmark.SortedEvents,
			func(a, b nexmark.Event) bool { return nexmark.CompareEvents(a, b) == 0 }),
		nexmarkCase("q1", nexmark.BuildQ1, nexmark.ModelQ1, nexmark.Sorted[nexmark.Q1], same[nexmark.Q1]),
		nexmarkCase("q2", nexmark.BuildQ2, nexmark.ModelQ2, nexmark.Sorted[nexmark.Q2], same[nexmark.Q2]),
		nexmarkCase("q3", nexmark.BuildQ3, nexmark.ModelQ3, nexmark.Sorted[nexmark.Q3], same[nexmark.Q3]),
		nexmarkCase("q4", nexmark.BuildQ4, nexmark.ModelQ4, nexmark.LastPerKeyQ4, same[nexmark.Q4]),
		nexmarkCase("q5", nexmark.BuildQ5, nexmark.ModelQ5, nexmark.Sorted[nexmark.Q5], same[nexmark.Q5]),
		nexmarkCase("q6", nexmark.BuildQ6, nexmark.ModelQ6, nexmark.LastPerKeyQ6, same[nexmark.Q6]),
		nexmarkCase("q7", nexmark.BuildQ7, nexmark.ModelQ7, nexmark.Sorted[nexmark.Q7], same[nexmark.Q7]),
		nexmarkCase("q8", nexmark.BuildQ8, nexmark.ModelQ8, nexmark.Sorted[nexmark.Q8], same[nexmark.Q8]),
		nexmarkCase("q9", nexmark.BuildQ9, nexmark.ModelQ9, nexmark.Sorted[nexmark.Q9], same[nexmark.Q9]),
		nexmarkCase("q11", nexmark.BuildQ11, nexmark.ModelQ11, nexmark.Sorted[nexmark.Q11], same[nexmark.Q11]),
	}
}

// nexmarkLong runs q over the events replayed in laps (lapped) for about
// 4 s at -scale 1 in -rounds rotated rounds: once without checkpoints, once with checkpoints every
// second (a quarter of the run at other scales) into a bbolt store with the
// memory state written whole, and once the same with the memory state's
// changelog (incremental checkpoints, as a job with growing state would
// run). Each run is checked to have written laps×oneLap results (oneLap:
// the short run's results, equal to the model's) with no late record.
// The laps come from a short calibration run of the lapped source (whose
// copies cost more than reading the slice: rate, the short runs' best
// events/s, only sizes the calibration). Checkpoints every second over a
// steady run are what the 2 M events alone (well under a second) cannot
// show.
func nexmarkLong(ctx context.Context, e *env, q nexmarkQuery, evs []nexmark.Event, p nexmark.Params, par int, rate float64, oneLap int) ([]Result, error) {
	target := max(time.Duration(float64(4*time.Second)*e.scale), 200*time.Millisecond)
	cp := (target / 4).Round(time.Millisecond)
	n := len(evs)
	skip := p.AuctionSkip
	if skip == 0 {
		skip = nexmark.DefaultAuctionSkip
	}
	lapsFor := func(rate float64, d time.Duration) int { return max(1, int(math.Ceil(rate*d.Seconds()/float64(n)))) }
	type config struct {
		cp        time.Duration
		changelog bool
	}
	runLapped := func(laps int, c config) (nexmarkRun, error) {
		runtime.GC()
		var dir string
		if c.changelog {
			var err error
			if dir, err = os.MkdirTemp("", "sluice-nexmark-changelog-"); err != nil {
				return nexmarkRun{}, err
			}
			defer os.RemoveAll(dir)
		}
		r, err := q.runLong(ctx, e, lapped(evs, laps, skip), p, par, c.cp, dir)
		if err != nil {
			return r, fmt.Errorf("nexmark %s, %d laps (checkpoints every %v, changelog %v): %w", q.name, laps, c.cp, c.changelog, err)
		}
		if r.results != laps*oneLap {
			return r, fmt.Errorf("nexmark %s, %d laps (checkpoints every %v, changelog %v): %d results, want %d (%d a lap)", q.name, laps, c.cp, c.changelog, r.results, laps*oneLap, oneLap)
		}
		return r, nil
	}
	cal := lapsFor(rate, target/40)
	r0, err := runLapped(cal, config{})
	if err != nil {
		return nil, err
	}
	laps := lapsFor(float64(n*cal)/r0.d.Seconds(), target)
	total := float64(n) * float64(laps)
	// Rounds of the three, rotated (round r starts with config r mod 3):
	// the machine's speed drifts over tens of seconds, and the best run of
	// each counts, with its CPU time.
	configs := []config{{}, {cp: cp}, {cp: cp, changelog: true}}
	var runs [3]nexmarkRun
	var cpus [3]time.Duration
	var walls [3][]time.Duration
	for r := range max(e.rounds, 1) {
		for j := range configs {
			i := (r + j) % len(configs)
			cpu0 := cpuTime()
			res, err := runLapped(laps, configs[i])
			if err != nil {
				return nil, err
			}
			walls[i] = append(walls[i], res.d.Round(time.Millisecond))
			if runs[i].d == 0 || res.d < runs[i].d {
				runs[i], cpus[i] = res, cpuTime()-cpu0
			}
		}
	}
	none := Result{Name: "nexmark/" + q.name + "/long-none", Value: total / runs[0].d.Seconds(), Unit: "events/s",
		Note: fmt.Sprintf("the %d events replayed %d times (ids and times shifted a lap, events copied as they are read; laps from a %d-lap calibration run), no checkpoints: best of %d rounds (runs of %v), %.0f CPU-ns an event; %d results, %d a lap as the model's",
			n, laps, cal, len(walls[0]), walls[0], cpuPer(cpus[0], total), runs[0].results, oneLap)}
	with := func(i int, name, how string) Result {
		r := runs[i]
		ds := durationsOf(r.history)
		at := func(q int) time.Duration {
			if len(ds) == 0 {
				return 0
			}
			return ds[min(len(ds)-1, len(ds)*q/100)].Round(time.Millisecond)
		}
		var bytes int64
		for _, h := range r.history {
			bytes += h.Size
		}
		if len(r.history) > 0 {
			bytes /= int64(len(r.history))
		}
		return Result{Name: "nexmark/" + q.name + "/" + name, Value: total / r.d.Seconds(), Unit: "events/s",
			Note: fmt.Sprintf("the same %d laps with checkpoints every %v into a bbolt store, %s: best of %d rounds rotated with the runs without (runs of %v), %.0f CPU-ns an event; in the best, %d completed (the final one included), duration p50 %v, p99 %v, slowest %v, %d bytes a checkpoint in the store on average (of the newest %d); results checked as without (aim >= 0.9x)",
				laps, cp, how, len(walls[i]), walls[i], cpuPer(cpus[i], total), r.checkpoints, at(50), at(99), at(100), bytes, len(r.history))}.against(none)
	}
	return []Result{none,
		with(1, "checkpoints-1s-vs-none", "memory state written whole"),
		with(2, "checkpoints-1s-changelog-vs-none", "memory state with its changelog (incremental: the changed keys go to files beside the store, not counted in its bytes)")}, nil
}

// benchNexmark generates the events once (Beam's default configuration:
// 10 000 events/s of event time over 100 generators), holds them in memory,
// and runs every query on them three ways: as a topology read by parallel
// source instances with parallel keyed operators, the same topology with
// periodic checkpoints into a bbolt store, and as the query's
// single-goroutine reference model (the one the tests compare with). Each
// topology's output is checked against its model's; a difference fails the
// benchmark. The ratio is sluice's events/s over the model's, on the same
// events: what running on every core buys over one goroutine; and the
// checkpointed runs' over the runs without. The checkpoint interval is
// scaled to the run (at 2 M events most queries run for well under a
// second, so checkpoints every second took only the final one, at the end
// of the input): a tenth of the best run without checkpoints so far, within
// [10 ms, 1 s], so a run takes about ten besides the final one; the note
// gives the intervals and the checkpoints each run completed.
func benchNexmark(ctx context.Context, e *env) ([]Result, error) {
	n := e.n(2_000_000)
	cores := runtime.GOMAXPROCS(0)
	cfg := nexmark.DefaultConfig()
	cfg.NumEvents = int64(n)
	par := cores
	st, err := nexmark.NewStream(cfg)
	if err != nil {
		return nil, err
	}
	evs := make([]nexmark.Event, 0, n)
	for ev := range st.All() {
		evs = append(evs, ev)
	}
	p := nexmark.ParamsOf(cfg, par)
	var out []Result
	for _, q := range nexmarkQueries() {
		if e.cases != nil && !e.cases.MatchString(q.name) {
			continue
		}
		var results, modelResults int
		// Every round runs the model, then sluice without and with
		// checkpoints, alternating which of the two comes first (the first
		// run is one without, r = 0, i = 0: it sets the interval); the best
		// of each counts. The model and sluice's runs, a few hundred
		// milliseconds each, so sample the same states of the machine.
		var model, rate, cpRate float64
		var perRound []float64 // sluice without checkpoints ÷ the model, round by round
		var checkpoints []int64
		var intervals []time.Duration
		for r := range max(e.rounds, 1) {
			runtime.GC()
			d, k := q.model(evs)
			roundModel := float64(n) / d.Seconds()
			model, modelResults = max(model, roundModel), k
			for i := range 2 {
				var cp time.Duration
				if (r+i)%2 == 1 {
					cp = nexmarkInterval(rate, n)
				}
				runtime.GC()
				res, err := q.run(ctx, e, evs, p, par, cp)
				if err != nil {
					return nil, fmt.Errorf("nexmark %s (checkpoints every %v): %w", q.name, cp, err)
				}
				v := float64(n) / res.d.Seconds()
				if cp > 0 {
					cpRate = max(cpRate, v)
					checkpoints = append(checkpoints, res.checkpoints)
					intervals = append(intervals, cp)
				} else {
					rate = max(rate, v)
					results = res.results
					perRound = append(perRound, v/roundModel)
				}
			}
		}
		base := Result{Name: "nexmark/" + q.name + "/base-model", Value: model, Unit: "events/s",
			Note: fmt.Sprintf("the query's single-goroutine reference model on the same %d in-memory events, %d results", n, modelResults)}
		out = append(out, base, Result{Name: "nexmark/" + q.name + "/sluice-vs-model", Value: rate, Unit: "events/s",
			Note: fmt.Sprintf("%d in-memory events, %d source instances, keyed parallelism %d, %d cores, %d results equal to the model's (aim >= 0.5x)",
				n, par, par, cores, results)}.against(base).spread(perRound))
		plain := out[len(out)-1]
		out = append(out, Result{Name: "nexmark/" + q.name + "/checkpoints-frequent-vs-none", Value: cpRate, Unit: "events/s",
			Note: fmt.Sprintf("context, stricter than every second: the same runs with checkpoints every %v (a tenth of the run without, 10 ms to 1 s) into a bbolt store (memory state), output checked; checkpoints completed per run, the final one included: %v; best of %d against the best of %d without",
				intervals, checkpoints, len(checkpoints), len(checkpoints))}.against(plain))
		long, err := nexmarkLong(ctx, e, q, evs, p, par, rate, results)
		if err != nil {
			return nil, err
		}
		out = append(out, long...)
		if f, ok := flinkPerCore[q.name]; ok {
			out = append(out, Result{Name: "nexmark/" + q.name + "/context-flink-1.11-per-core", Value: f, Unit: "events/s/core",
				Note: fmt.Sprintf("published, not measured here (3 machines, RocksDB, exactly-once checkpoints every 3 min, steady state); sluice here: %.0f events/s/core", rate/float64(cores))})
		}
	}
	return out, nil
}
