package fraud_test

import (
	"flag"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/samples/fraud"
	"github.com/sluicehq/sluice/samples/internal/sampletest"
)

func TestMain(m *testing.M) { sampletest.VerifyTestMain(m) }

// run runs the sample's topology to its end, as `sluice run` does, and
// returns the statistics of its operators by name.
func run(t *testing.T, s *fraud.Sample) map[string]actors.OperatorStats {
	t.Helper()
	return sampletest.Run(t, s.Topology)
}

// The sample, run small, raises exactly the alerts of the nested loops,
// among them every planted case, and no record is late for the joins.
func TestSampleMatchesNestedLoops(t *testing.T) {
	cases := []struct {
		name string
		args []string
	}{
		{"small", []string{"--cards", "100", "--transactions", "4000"}},
		{"one-instance", []string{"--cards", "50", "--transactions", "3000", "--seed", "5", "--parallelism", "1", "--stolen", "10", "--trips", "10"}},
		{"tight-rules", []string{"--cards", "30", "--transactions", "3000", "--seed", "9", "--after", "5m", "--travel-window", "10m", "--distance", "300", "--parallelism", "3"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := fraud.New()
			fs := flag.NewFlagSet("fraud", flag.ContinueOnError)
			s.Flags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			stats := run(t, s)
			if err := s.Check(); err != nil {
				t.Fatal(err)
			}
			cfg, d := s.Config(), s.Data()
			if want := cfg.Stolen; len(d.Reports) != want {
				t.Fatalf("%d reports, want %d", len(d.Reports), want)
			}
			if len(d.Planted) < cfg.Stolen+cfg.Trips {
				t.Fatalf("%d planted cases, want at least %d", len(d.Planted), cfg.Stolen+cfg.Trips)
			}
			if missed := fraud.Missed(d.Planted, s.Alerts()); len(missed) > 0 {
				t.Fatalf("missed %+v", missed)
			}
			for _, op := range []string{"after-stolen", "travel"} {
				if st := stats[op]; st.Late != 0 || st.In == 0 {
					t.Errorf("%s: %d records in, %d late; want some in, none late", op, st.In, st.Late)
				}
			}
			var out strings.Builder
			if err := s.Report(&out); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s:\n%s", tc.name, out.String())
		})
	}
}

// The alerts the nested loops compute on a hand-made stream.
func TestExpectedByHand(t *testing.T) {
	at := func(min int) time.Time { return fraud.Epoch.Add(time.Duration(min) * time.Minute) }
	d := fraud.Data{
		Reports: []fraud.Stolen{{ID: 1, Card: "c1", At: at(10)}},
		Txs: []fraud.Tx{
			{ID: 1, Card: "c1", At: at(5), City: "Paris"},      // before the report
			{ID: 2, Card: "c1", At: at(10), City: "Paris"},     // at the report: stolen
			{ID: 3, Card: "c1", At: at(40), City: "Brussels"},  // at its end (30m): stolen; 264 km
			{ID: 4, Card: "c1", At: at(41), City: "Tokyo"},     // after it; far from 1, 2, 3 within 1h
			{ID: 5, Card: "c2", At: at(20), City: "Paris"},     // another card
			{ID: 6, Card: "c2", At: at(81), City: "New York"},  // 61m later: no alert
			{ID: 7, Card: "c2", At: at(100), City: "New York"}, // same city
		},
	}
	cfg := fraud.Config{After: 30 * time.Minute, TravelWindow: time.Hour, DistanceKm: 500}
	var got []string
	for _, a := range fraud.Expected(d, cfg) {
		got = append(got, a.Kind+" "+a.Card+" "+string(rune('0'+a.Tx))+"<-"+string(rune('0'+a.Cause)))
	}
	want := []string{"stolen-card c1 2<-1", "stolen-card c1 3<-1", "impossible-travel c1 4<-1", "impossible-travel c1 4<-2", "impossible-travel c1 4<-3"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("alerts\n got %q\nwant %q", got, want)
	}
}

func TestGenerateIsDeterministic(t *testing.T) {
	cfg := fraud.DefaultConfig()
	cfg.Transactions = 2000
	a, b := fraud.Generate(cfg), fraud.Generate(cfg)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("Generate is not deterministic")
	}
	cfg.Seed++
	if reflect.DeepEqual(a, fraud.Generate(cfg)) {
		t.Fatal("Generate ignores its seed")
	}
	for _, tx := range a.Txs {
		if tx.Delay < 0 || tx.Delay > fraud.MaxDelay {
			t.Fatalf("tx %d delayed by %v, beyond MaxDelay", tx.ID, tx.Delay)
		}
	}
}

func TestConfigValidated(t *testing.T) {
	cfg := fraud.DefaultConfig()
	cfg.Cards, cfg.TravelWindow, cfg.DistanceKm = 0, time.Second, -1
	s := fraud.New()
	s.Configure(cfg, 1, 1)
	_, err := s.Topology()
	if err == nil {
		t.Fatal("Topology accepted an invalid configuration")
	}
	for _, want := range []string{"cards 0", "travel window 1s", "distance -1 km"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}
