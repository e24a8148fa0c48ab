package clickstream_test

import (
	"flag"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/operators/optest"
	"github.com/sluicehq/sluice/samples/clickstream"
	"github.com/sluicehq/sluice/samples/internal/sampletest"
)

func TestMain(m *testing.M) { sampletest.VerifyTestMain(m) }

// run runs the sample's topology to its end, as `sluice run` does, and
// returns the statistics of its operators by name.
func run(t *testing.T, s *clickstream.Sample) map[string]actors.OperatorStats {
	t.Helper()
	return sampletest.Run(t, s.Topology)
}

// The sample, run small under several configurations, equals the direct
// computation: every user's sessions in the order they were emitted, the
// late clicks, and the window operator's Late count.
func TestSampleMatchesDirectComputation(t *testing.T) {
	cases := []struct {
		name string
		args []string
	}{
		{"defaults-small", []string{"--clicks", "3000", "--users", "20"}},
		{"no-lateness", []string{"--clicks", "3000", "--users", "30", "--seed", "7", "--lateness", "0s", "--late-fraction", "0.05"}},
		{"short-gap-in-order", []string{"--clicks", "2000", "--users", "5", "--seed", "3", "--gap", "5s", "--out-of-order", "0s", "--parallelism", "3"}},
		{"many-late", []string{"--clicks", "2000", "--users", "10", "--seed", "11", "--late-fraction", "0.3", "--lateness", "20s", "--gap", "10s"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := clickstream.New()
			fs := flag.NewFlagSet("clickstream", flag.ContinueOnError)
			s.Flags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			stats := run(t, s)
			cfg := s.Config()
			exp := clickstream.Expect(s.Clicks(), cfg.OutOfOrder, cfg.Gap, cfg.Lateness)
			if err := s.Check(); err != nil {
				t.Fatal(err)
			}
			if got := stats["sessions"].Late; got != int64(len(exp.Late)) {
				t.Errorf("OperatorStats.Late = %d, the direct computation %d", got, len(exp.Late))
			}
			if len(s.Late()) != len(exp.Late) {
				t.Errorf("late output: %d clicks, the direct computation %d", len(s.Late()), len(exp.Late))
			}
			if int64(len(s.Clicks())) != cfg.Clicks {
				t.Fatalf("%d clicks generated, want %d", len(s.Clicks()), cfg.Clicks)
			}
			// Every click is in exactly one final session, or late.
			seen := make(map[int64]int, cfg.Clicks)
			for _, x := range clickstream.Final(s.Results()) {
				for _, seq := range x.Clicks {
					seen[seq]++
				}
			}
			for _, c := range s.Late() {
				seen[c.Seq]++
			}
			for _, c := range s.Clicks() {
				if seen[c.Seq] != 1 {
					t.Fatalf("click %d is in %d final sessions or the late output, want 1", c.Seq, seen[c.Seq])
				}
			}
			var out strings.Builder
			if err := s.Report(&out); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d late, %d behind the watermark but placed, %d results\n%s", tc.name, len(exp.Late), exp.Behind, len(exp.Results), out.String())
		})
	}
}

// The configurations above exercise every case of the semantics.
func TestGeneratedStreamHasEveryCase(t *testing.T) {
	cfg := clickstream.DefaultConfig()
	cfg.Clicks, cfg.Users = 3000, 20
	clicks := clickstream.Generate(cfg)
	exp := clickstream.Expect(clicks, cfg.OutOfOrder, cfg.Gap, cfg.Lateness)
	updates := len(exp.Results) - len(clickstream.Final(exp.Results))
	if len(exp.Late) == 0 || exp.Behind == 0 || exp.OutOfOrder == 0 || updates == 0 {
		t.Fatalf("late %d, behind the watermark but placed %d, out of order %d, updated sessions %d: want each > 0",
			len(exp.Late), exp.Behind, exp.OutOfOrder, updates)
	}
	if !reflect.DeepEqual(clicks, clickstream.Generate(cfg)) {
		t.Fatal("Generate is not deterministic")
	}
	cfg.Seed++
	if reflect.DeepEqual(clicks, clickstream.Generate(cfg)) {
		t.Fatal("Generate ignores its seed")
	}
	for i := 1; i < len(clicks); i++ {
		a, b := clicks[i-1], clicks[i]
		if b.At.Add(b.Delay).Before(a.At.Add(a.Delay)) {
			t.Fatalf("clicks %d and %d not in arrival order", a.Seq, b.Seq)
		}
	}
}

// A hand-made case through the harness, a checkpoint and a crash: a
// session fires, a click within the allowed lateness updates it, a click
// past it goes to the late output, and a click behind the watermark that
// falls into an open session simply joins it.
func TestSessionsThroughCrash(t *testing.T) {
	late := operators.NewCollector[clickstream.Click]()
	h := optest.New(t, func(in operators.Stream[clickstream.Click]) operators.Stream[clickstream.Session] {
		return clickstream.Sessionize(in, 0, 30*time.Second, time.Minute, late, 1)
	})
	at := func(sec int) time.Time { return clickstream.Epoch.Add(time.Duration(sec) * time.Second) }
	click := func(seq int64, user, page string, sec int) clickstream.Click {
		return clickstream.Click{Seq: seq, User: user, Page: page, At: at(sec)}
	}
	var clicks []clickstream.Click
	push := func(c clickstream.Click) {
		clicks = append(clicks, c)
		h.PushAt(c, c.At)
	}
	push(click(0, "ann", "/", 0))
	push(click(1, "ann", "/cart", 10))
	push(click(2, "bob", "/", 20))
	h.Checkpoint()
	push(click(3, "ann", "/", 80)) // watermark 80s: ann's [0s, 40s) and bob's [20s, 50s) fire
	h = h.Restart()
	h.Sync()
	push(click(4, "ann", "/help", 15))  // within the allowed lateness: ann's [0s, 45s) at once, 3 clicks
	push(click(5, "bob", "/cart", 200)) // watermark 200s: the fired sessions are dropped
	push(click(6, "bob", "/", 5))       // past the allowed lateness: late
	push(click(7, "bob", "/help", 190)) // behind the watermark, in bob's open session
	got := h.Finish()

	want := clickstream.Expect(clicks, 0, 30*time.Second, time.Minute)
	// The crash replays what followed the checkpoint: the sessions fired
	// before the crash may come twice (at-least-once output).
	g := clickstream.ByUser(got)
	for u, list := range g {
		g[u] = slices.CompactFunc(list, func(a, b clickstream.Session) bool { return reflect.DeepEqual(a, b) })
	}
	if w := clickstream.ByUser(want.Results); !reflect.DeepEqual(g, w) {
		t.Fatalf("sessions\n got %+v\nwant %+v", g, w)
	}
	if len(want.Late) != 1 || want.Late[0].Seq != 6 || want.Behind != 2 {
		t.Fatalf("direct computation: late %+v, behind %d", want.Late, want.Behind)
	}
	if n := h.Stats("sessions").Late; n != 1 {
		t.Errorf("Late = %d, want 1", n)
	}
	if l := late.Items(); len(l) == 0 || l[len(l)-1].Seq != 6 {
		t.Errorf("late output %+v, want click 6", l)
	}
}

func TestConfigValidated(t *testing.T) {
	s := clickstream.New()
	cfg := clickstream.DefaultConfig()
	cfg.Users, cfg.Gap, cfg.LateFraction = 0, time.Millisecond, 2
	s.Configure(cfg, 0, 5)
	_, err := s.Topology()
	if err == nil {
		t.Fatal("Topology accepted an invalid configuration")
	}
	for _, want := range []string{"users 0", "gap 1ms", "late fraction 2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}
