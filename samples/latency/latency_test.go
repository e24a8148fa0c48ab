package latency_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/samples/internal/sampletest"
	"github.com/sluicehq/sluice/samples/latency"
)

// The experiment in a synctest bubble: the clock is fake and moves only
// when every goroutine waits, so the slow operator's capacity is exactly
// 1/Cost and the outcome does not depend on the machine's speed.
func TestLatencyTargetHolds(t *testing.T) {
	cfg := latency.DefaultConfig()
	cfg.Overload, cfg.Calm = 10*time.Second, 6*time.Second
	outs := runBubble(t, cfg)
	if by := outcome(t, outs, "target").ShedBy; by["latency-sampled"] == 0 || by["latency-dropped"] != 0 {
		t.Errorf("target: shed %v, want sampling only", by)
	}
	checkOutcomes(t, cfg, outs)
}

// With the slow operator Selective, the target drops whole batches at the
// source instead of sampling, and holds the same latency.
func TestLatencyTargetSelective(t *testing.T) {
	cfg := latency.DefaultConfig()
	cfg.Overload, cfg.Calm, cfg.Selective = 10*time.Second, 6*time.Second, true
	outs := runBubble(t, cfg)
	if by := outcome(t, outs, "target").ShedBy; by["latency-dropped"] == 0 || by["latency-sampled"] != 0 {
		t.Errorf("target: shed %v, want whole batches dropped only", by)
	}
	if w := outcome(t, outs, "target").Windows; w != 0 {
		t.Errorf("%d key-windows marked approximate, though nothing was sampled", w)
	}
	checkOutcomes(t, cfg, outs)
}

// The approximate counts of the sample's own run hold the truth within
// their reported 95 % interval in at least 93 % of its key-windows, for
// each of 20 seeds (10 with the work exact, 10 with it jittered as on a
// loaded machine; 3 and 3 under the race detector: seedsPerJitter), each
// run 420 key-windows: 20 keys in windows of a second through 20 s of
// overload, under a rate the controller moves as it
// goes (each record scaled by the rate it was kept with). Windows claiming
// to be exact but wrong, and key-windows never emitted (sampling kept none
// of their records), count as misses. A run of 420 key-windows at the
// intervals' 95 % has a standard deviation of about 1 % in its coverage;
// when written the 20 runs covered 93.8–98.3 % (95.8 % pooled), every miss
// a window marked approximate with the truth just outside its interval.
func TestEstimatesCoverAcrossSeeds(t *testing.T) {
	if testing.Short() {
		t.Skip("20 runs of the sample")
	}
	var windows, covered int
	for _, jitter := range []float64{0, 0.4} {
		for seed := uint64(1); seed <= seedsPerJitter; seed++ {
			cfg := latency.DefaultConfig()
			cfg.Overload, cfg.Calm, cfg.Jitter, cfg.Seed = 20*time.Second, time.Second, jitter, seed
			cfg.Policies = []string{"target"}
			o := outcome(t, runBubbleQuiet(t, cfg), "target")
			windows += o.Windows
			covered += int(math.Round(o.Covered * float64(o.Windows)))
			msg := fmt.Sprintf("jitter %.1f seed %2d: %d key-windows, the truth within the 95 %% interval in %.1f %% (misses: %d outside, %d unmarked, %d never emitted; mean error %.1f %%)",
				jitter, seed, o.Windows, 100*o.Covered, o.Outside, o.Unmarked, o.Missing, 100*o.MeanError)
			if o.Windows < 400 || o.Covered < 0.93 {
				t.Errorf("%s: want >= 400 key-windows, >= 93 %%", msg)
			} else {
				t.Log(msg)
			}
		}
	}
	if p := float64(covered) / float64(windows); p < 0.94 {
		t.Errorf("pooled: %.1f %% of %d key-windows, want >= 94 %%", 100*p, windows)
	} else {
		t.Logf("pooled: %.1f %% of %d key-windows", 100*p, windows)
	}
}

func outcome(t *testing.T, outs []latency.Outcome, policy string) latency.Outcome {
	t.Helper()
	for _, o := range outs {
		if o.Policy == policy {
			return o
		}
	}
	t.Fatalf("no outcome for %s", policy)
	return latency.Outcome{}
}

// runBubble runs the experiment in a synctest bubble and logs its report.
func runBubble(t *testing.T, cfg latency.Config) []latency.Outcome {
	outs := runBubbleQuiet(t, cfg)
	var b strings.Builder
	latency.Print(&b, cfg, outs)
	t.Log("\n" + b.String())
	return outs
}

// runBubbleQuiet runs the experiment in a synctest bubble.
func runBubbleQuiet(t *testing.T, cfg latency.Config) []latency.Outcome {
	var outs []latency.Outcome
	synctest.Test(t, func(t *testing.T) {
		sys, err := actors.NewSystem(actors.Config{Name: "latency"})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		outs, err = latency.Run(ctx, sys, cfg)
		if err := sys.Stop(ctx); err != nil {
			t.Error(err)
		}
		// A message that reached an actor while the system stopped is a
		// dead letter, and protoactor's dead-letter throttle then starts a
		// goroutine that waits one period (1 s) on a ticker. A bubble may
		// not end with it still blocked (CI saw "deadlock: main bubble
		// goroutine has exited but blocked goroutines remain"), so move the
		// fake clock past that period: a deadline, not a wait for an event
		// (the throttle's goroutine signals nothing); in the bubble the
		// timer fires at once, once every other goroutine is blocked.
		<-time.After(2 * time.Second)
		synctest.Wait()
		if err != nil {
			t.Fatal(err)
		}
	})
	return outs
}

func checkOutcomes(t *testing.T, cfg latency.Config, outs []latency.Outcome) {
	t.Helper()
	by := map[string]latency.Outcome{}
	for _, o := range outs {
		by[o.Policy] = o
	}
	block, target := by["block"], by["target"]
	capacity := cfg.Rate()
	p99At := func(o latency.Outcome, at time.Duration) time.Duration {
		for _, s := range o.Seconds {
			if s.At >= at {
				return s.P99
			}
		}
		t.Fatalf("%s: no second at %v", o.Policy, at)
		return 0
	}
	// Under Block the p99 grows through the overload.
	if early, late := p99At(block, 2*time.Second), p99At(block, cfg.Overload); late < 2*early || late < 4*cfg.Target {
		t.Errorf("block: p99 %v at 2s and %v at %v: it should grow through the overload", early, late, cfg.Overload)
	}
	// Under the target, from 5 s to the end of the overload, every
	// second's p99 stays within 1.2x the target.
	for _, s := range target.Seconds {
		if s.At >= 5*time.Second && s.At <= cfg.Overload && s.P99 > cfg.Target*6/5 {
			t.Errorf("target: p99 %v at %v, over 1.2x the target %v", s.P99, s.At, cfg.Target)
		}
	}
	// It sheds during the overload, processes at least 0.9x the capacity
	// then (counted from the start to the last second within the
	// overload), and stops shedding within 5 s of the load falling to
	// 0.5x.
	if target.Shed == 0 {
		t.Error("target: nothing shed at 3x the capacity")
	}
	var shedAtCalm int64 = -1
	for _, s := range target.Seconds {
		if s.At >= cfg.Overload+5*time.Second && shedAtCalm < 0 {
			shedAtCalm = s.Shed
			if s.Keep != 1 {
				t.Errorf("target: keeps %.2f at %v, 5 s after the load fell", s.Keep, s.At)
			}
		}
	}
	if last := target.Seconds[len(target.Seconds)-1]; shedAtCalm >= 0 && last.Shed != shedAtCalm {
		t.Errorf("target: shed %d records after %v, when the load had fallen", last.Shed-shedAtCalm, cfg.Overload+5*time.Second)
	}
	if rate := target.OverloadThroughput(cfg.Overload); rate < 0.9*capacity {
		t.Errorf("target: processed %.0f records/s during the overload, want >= 0.9x the capacity %.0f", rate, capacity)
	}
	if !cfg.Selective && (target.Windows < 200 || target.Covered < 0.9) {
		t.Errorf("target: %d approximate key-windows, %.1f %% within their bounds; want >= 200, >= 90 %%", target.Windows, 100*target.Covered)
	}
}

func TestMain(m *testing.M) { sampletest.VerifyTestMain(m) }

// seedConfig is the overload on a simulated clock that varies the slow
// operator's work as a loaded machine's timers do (Jitter 0.4: a mean
// capacity of 833 records/s, as the real-clock runs measured).
func seedConfig(seed uint64) latency.Config {
	cfg := latency.DefaultConfig()
	cfg.Overload, cfg.Calm, cfg.Jitter, cfg.Seed = 10*time.Second, time.Second, 0.4, seed
	cfg.Policies = []string{"target"}
	return cfg
}

// Under LatencyTarget(200ms) at 3x the capacity, every second's p99 from
// the 5th on is within 1.2x the target, and at least 0.9x the mean
// capacity is processed during the overload, for each of ten seeds (the
// jitter of the work and the shedding's random numbers; three under the
// race detector: seedsPerJitter). When written:
// 254–378 ms in the first second, 106–295 ms in the second, at most 90 ms
// from the third on.
func TestLatencyTargetReachedBy5s(t *testing.T) {
	for seed := uint64(1); seed <= seedsPerJitter; seed++ {
		cfg := seedConfig(seed)
		target := outcome(t, runBubbleQuiet(t, cfg), "target")
		var row strings.Builder
		for _, s := range target.Seconds {
			if s.At > cfg.Overload+cfg.Overload/100 {
				break
			}
			fmt.Fprintf(&row, " %v:%v/%.2f", s.At.Round(time.Second), s.P99.Round(time.Millisecond), s.Keep)
			if s.At >= 5*time.Second && s.P99 > cfg.Target*6/5 {
				t.Errorf("seed %d: p99 %v at %v, over 1.2x the target %v", seed, s.P99, s.At, cfg.Target)
			}
		}
		thr := target.OverloadThroughput(cfg.Overload)
		if thr < 0.9*cfg.Rate() {
			t.Errorf("seed %d: %.0f records/s processed during the overload, want >= 0.9x the mean capacity %.0f", seed, thr, cfg.Rate())
		}
		t.Logf("seed %2d: p99/keep%s; %.0f records/s (%.2fx the mean capacity)", seed, row.String(), thr, thr/cfg.Rate())
	}
}
