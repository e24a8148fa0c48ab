package jetstreamtopg_test

import (
	"context"
	"flag"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/actors/actortest"
	"github.com/sluicehq/sluice/samples/jetstreamtopg"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, actortest.LeakOptions()...) }

// TestSample runs the sample end to end against the local servers: the
// table must hold the direct count of every window.
func TestSample(t *testing.T) {
	url, dsn := services(t)
	table := "sluice_sample_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	s := jetstreamtopg.New()
	fs := flag.NewFlagSet("jetstreamtopg", flag.ContinueOnError)
	s.Flags(fs)
	if err := fs.Parse([]string{"--nats", url, "--pg", dsn, "--events", "20000", "--table", table, "--window", "5s", "--checkpoint", "50ms"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), dsn)
		if err == nil {
			c.Exec(context.Background(), "DROP TABLE IF EXISTS "+table)
			c.Close(context.Background())
		}
	})
	top, err := s.Topology()
	if err != nil {
		t.Fatal(err)
	}
	sys, err := actors.NewSystem(actors.Config{Name: "sample"})
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
	got, err := s.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := jetstreamtopg.Expected(1, 50, 20000, 5000)
	if len(got) != len(want) {
		t.Fatalf("%d windows in the table, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("window %v: %d clicks, want %d", k, got[k], v)
		}
	}
	var out strings.Builder
	if err := s.Report(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "every window's count equals the direct count of the 20000 clicks") {
		t.Fatalf("report:\n%s", out.String())
	}
	t.Logf("report:\n%s", out.String())
}

// services finds the servers as connectors/internal/servicetest does: it
// skips when one is down, or fails under SLUICE_REQUIRE_SERVICES=1.
func services(t *testing.T) (natsURL, pgDSN string) {
	t.Helper()
	natsURL, pgDSN = "nats://127.0.0.1:4222", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	if u := os.Getenv("SLUICE_NATS_URL"); u != "" {
		natsURL = u
	}
	if d := os.Getenv("SLUICE_PG_DSN"); d != "" {
		pgDSN = d
	}
	fail := t.Skipf
	if os.Getenv("SLUICE_REQUIRE_SERVICES") == "1" {
		fail = t.Fatalf
	}
	host := strings.TrimPrefix(natsURL, "nats://")
	if i := strings.LastIndex(host, "@"); i >= 0 {
		host = host[i+1:]
	}
	if c, err := net.DialTimeout("tcp", host, 2*time.Second); err != nil {
		fail("NATS at %s is unreachable (%v); start it with .ci/services", host, err)
	} else {
		c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, pgDSN)
	if err != nil {
		fail("PostgreSQL is unreachable (%v); start it with .ci/services", err)
	}
	c.Close(ctx)
	return natsURL, pgDSN
}
