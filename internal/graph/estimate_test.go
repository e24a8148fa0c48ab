package graph

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
)

// The interval of an estimate holds the true count in about 95 % of
// windows, also where the Wald interval (Sum ± 1.96·sqrt(Var)) does not: few
// records kept at a low rate, a rate that changed within the window, a
// window mostly unsampled. Windows of which no record was kept emit
// nothing and count as misses. Deterministic (seeded).
func TestEstimateIntervalCoverage(t *testing.T) {
	type seg struct {
		n int     // records
		p float64 // each kept with probability p
	}
	for _, c := range []struct {
		name string
		segs []seg
		min  float64 // the least coverage accepted
		wald float64 // Wald's coverage is at most this (the case shows what the score interval fixes), 0: not checked
	}{
		{"150 at 30 %", []seg{{150, 0.3}}, 0.94, 0},
		{"45 at 30 %", []seg{{45, 0.3}}, 0.935, 0},
		{"30 at 10 %", []seg{{30, 0.1}}, 0.92, 0.85}, // 4.2 % of windows keep none
		{"1000 at 1 %", []seg{{1000, 0.01}}, 0.94, 0.93},
		{"100 unsampled, 20 at 20 %", []seg{{100, 1}, {20, 0.2}}, 0.94, 0.935},
		{"75 at 30 %, 75 at 60 %", []seg{{75, 0.3}, {75, 0.6}}, 0.94, 0},
		{"10 at 5 %, 140 at 50 %", []seg{{10, 0.05}, {140, 0.5}}, 0.925, 0.925},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := rand.New(rand.NewPCG(23, 7))
			const trials = 20_000
			truth := 0
			for _, s := range c.segs {
				truth += s.n
			}
			in, wald := 0, 0
			for range trials {
				var e Estimate
				for _, s := range c.segs {
					for range s.n {
						if g.Float64() < s.p {
							e = e.add(1, s.p)
						}
					}
				}
				if e.Seen == 0 {
					continue // no window emitted: a miss
				}
				if lo, hi := e.Interval(1.96); lo <= float64(truth) && float64(truth) <= hi {
					in++
				}
				if math.Abs(e.Sum-float64(truth)) <= 1.96*math.Sqrt(e.Var) {
					wald++
				}
			}
			cov, wcov := float64(in)/trials, float64(wald)/trials
			t.Logf("coverage %.2f %% (Wald %.2f %%)", 100*cov, 100*wcov)
			if cov < c.min || cov > 0.985 {
				t.Errorf("the interval holds the truth in %.2f %% of %d windows, want %.1f–98.5 %%", 100*cov, trials, 100*c.min)
			}
			if c.wald > 0 && wcov > c.wald {
				t.Errorf("Wald's interval holds it in %.2f %%: the case does not show the correction", 100*wcov)
			}
		})
	}
}

func TestEstimateIntervalEdges(t *testing.T) {
	// Nothing sampled: exact.
	var e Estimate
	for range 5 {
		e = e.add(2, 1)
	}
	if lo, hi := e.Interval(1.96); lo != 10 || hi != 10 || e.Approx {
		t.Errorf("unsampled: [%v, %v] approx %v, want [10, 10] exact", lo, hi, e.Approx)
	}
	// One record kept at 10 %: estimate 10, the interval no lower than the
	// one record seen, and wider above than below.
	e = Estimate{}.add(1, 0.1)
	lo, hi := e.Interval(1.96)
	if e.Sum != 10 || lo < 1 || lo >= e.Sum || hi-e.Sum <= e.Sum-lo || !e.Approx {
		t.Errorf("one at 10 %%: sum %v, [%v, %v]", e.Sum, lo, hi)
	}
	// Negative values: Wald's, symmetric.
	e = Estimate{}.add(-3, 0.5).add(1, 0.5)
	lo, hi = e.Interval(1.96)
	if h := 1.96 * math.Sqrt(e.Var); math.Abs(lo-(e.Sum-h)) > 1e-9 || math.Abs(hi-(e.Sum+h)) > 1e-9 {
		t.Errorf("negative values: [%v, %v], want %v ± %v", lo, hi, e.Sum, h)
	}
	// Merging is adding.
	a, b := Estimate{}.add(1, 0.5), Estimate{}.add(2, 0.25).add(1, 1)
	m := a.merge(b)
	w := a.add(2, 0.25).add(1, 1)
	if m != w {
		t.Errorf("merge %+v, want %+v", m, w)
	}
}

// A window's estimate checkpointed before the interval's fields (Sampled,
// Kept, Raw, Neg) existed restores through the state's decode path with
// those fields zero, and its interval is then Wald's, Sum ± z·sqrt(Var):
// no error, no panic, and no interval narrower than the state supports.
func TestEstimateRestoresOldState(t *testing.T) {
	type oldEstimate struct { // Estimate before the score interval (454e22b)
		Seen   int64
		Sum    float64
		Var    float64
		Approx bool
	}
	type pane struct { // as a window stage's checkpoint holds its accumulators
		Accs []oldEstimate `msgpack:"a"`
	}
	old := oldEstimate{Seen: 30, Sum: 300, Var: 2700, Approx: true}
	b, err := msgpack.Marshal(&pane{Accs: []oldEstimate{old}})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Accs []Estimate `msgpack:"a"`
	}
	if err := msgpacksafe.Decode(b, &got, msgpacksafe.Limits{Source: "window state", Factor: 32}); err != nil {
		t.Fatalf("decoding an old estimate: %v", err)
	}
	if len(got.Accs) != 1 {
		t.Fatalf("%d estimates restored, want 1", len(got.Accs))
	}
	e := got.Accs[0]
	if e.Seen != old.Seen || e.Sum != old.Sum || e.Var != old.Var || !e.Approx || e.Sampled != 0 || e.Kept != 0 || e.Raw != 0 || e.Neg {
		t.Fatalf("restored %+v from %+v", e, old)
	}
	lo, hi := e.Interval(1.96)
	h := 1.96 * math.Sqrt(old.Var)
	if math.Abs(lo-(old.Sum-h)) > 1e-9 || math.Abs(hi-(old.Sum+h)) > 1e-9 {
		t.Errorf("interval [%v, %v], want Wald's %v ± %v", lo, hi, old.Sum, h)
	}
	// Records added after the restore make it a score interval again,
	// over the records it knows were sampled.
	e = e.add(1, 0.1)
	if lo2, hi2 := e.Interval(1.96); !(lo2 < e.Sum && e.Sum < hi2) {
		t.Errorf("after a record: sum %v outside [%v, %v]", e.Sum, lo2, hi2)
	}
}

// A key whose kept records all came at keep 1 in a window that saw others
// sampled at 0.25 may have lost records to the shedding: unseen marks it
// approximate and raises its upper bound by the records that all go
// unkept with 5 % probability, ln(0.05)/ln(0.75) ≈ 10.4 (of the largest
// value seen for a sum); a key with sampled records is left as it is.
func TestEstimateUnseen(t *testing.T) {
	var e Estimate
	for range 3 {
		e = e.add(1, 1)
	}
	if lo, hi := e.Interval(1.96); e.Approx || lo != 3 || hi != 3 {
		t.Fatalf("exact count: approx %v [%v, %v]", e.Approx, lo, hi)
	}
	u := e.unseen(0.25)
	lo, hi := u.Interval(1.96)
	if want := 3 + math.Log(0.05)/math.Log(0.75); !u.Approx || lo != 3 || math.Abs(hi-want) > 1e-9 {
		t.Fatalf("unseen(0.25): approx %v [%v, %v], want approximate [3, %v]", u.Approx, lo, hi, want)
	}
	var s Estimate
	s = s.add(5, 1).add(2, 1)
	if _, hi := s.unseen(0.5).Interval(1.96); math.Abs(hi-(7+5*math.Log(0.05)/math.Log(0.5))) > 1e-9 {
		t.Fatalf("a sum's unseen bound %v, want 7 + 5 × %v", hi, math.Log(0.05)/math.Log(0.5))
	}
	sampled := e.add(1, 0.25)
	if got := sampled.unseen(0.25); got.Unseen != 0 || got != sampled {
		t.Fatalf("a key with a sampled record changed: %+v", got)
	}
	if got := e.unseen(1); got.Approx {
		t.Fatal("keep 1 marked approximate")
	}
}
