package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/connectors/internal/servicetest"
	"github.com/sluicehq/sluice/connectors/jetstream"
	"github.com/sluicehq/sluice/connectors/postgres"
	"github.com/sluicehq/sluice/internal/crashtest"
	"github.com/sluicehq/sluice/operators"
)

// The crash test's child reads its job from these variables.
const (
	crashEnvDir    = "SLUICE_PGCRASH_DIR" // the child's store folder; set only in children
	crashEnvNATS   = "SLUICE_PGCRASH_NATS"
	crashEnvPG     = "SLUICE_PGCRASH_PG"
	crashEnvStream = "SLUICE_PGCRASH_STREAM"
	crashEnvTable  = "SLUICE_PGCRASH_TABLE"
)

type click struct {
	I int64  `json:"i"`
	K string `json:"k"`
}

func clickAt(i int64) click { return click{I: i, K: fmt.Sprintf("k%02d", i*7%23)} }

// crashTopology reads the stream, counts clicks per key over two instances
// (an update per click) and inserts every update as a row (key, n) of the
// table, with checkpoints every 50 ms.
func crashTopology(url, dsn, stream, table string) *operators.Topology {
	t := operators.NewTopology("pgcrash", operators.Checkpoints(50*time.Millisecond), operators.Capacity(256), operators.BatchSize(64))
	src := operators.Source(t, "clicks", jetstream.NewSource(jetstream.SourceConfig[click]{
		URL: url, Stream: stream, Consumer: "pgcrash-" + table, Bounded: true}))
	by := operators.KeyBy(src, "by-key", func(c click) string { return c.K }, operators.Parallelism(2))
	counts := operators.Count(by, "count")
	operators.Sink(counts, "store", postgres.NewSink(postgres.Config[operators.KV[string, int64]]{
		DSN: dsn, Name: "pgcrash/" + table, Table: table, Columns: []string{"key", "n"},
		Row: func(kv operators.KV[string, int64]) []any { return []any{kv.Key, kv.Value} },
	}))
	return t
}

// TestCrashChild is the child process of TestCrashJetStreamToPostgres: it
// runs the job to its end on the store in its folder, resuming from the
// store's last checkpoint. It is skipped unless the parent started it.
func TestCrashChild(t *testing.T) {
	dir, ok := crashtest.ChildEnv(crashEnvDir)
	if !ok {
		t.Skip("child of TestCrashJetStreamToPostgres")
	}
	ctx := context.Background()
	sys, err := actors.NewSystem(actors.Config{Name: "pgcrash-child", Store: filepath.Join(dir, "store.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop(ctx)
	top := crashTopology(os.Getenv(crashEnvNATS), os.Getenv(crashEnvPG), os.Getenv(crashEnvStream), os.Getenv(crashEnvTable))
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("STARTED")
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	st := operators.CheckpointStatsOf(run)
	fmt.Println("DONE")
	fmt.Printf("RESTORED %d COMPLETED %d\n", st.RestoredFrom, st.Completed)
}

// TestCrashJetStreamToPostgres publishes clicks to a fresh stream, runs
// the JetStream -> count -> PostgreSQL job once without interruption, then
// again into another table in a child process that it SIGKILLs at random
// points (the seed is printed; SLUICE_CRASH_SEED replays it) and restarts
// each time. The killed job's table must equal the uninterrupted one's,
// and both must hold every count update exactly once: no row lost or
// repeated.
func TestCrashJetStreamToPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: child processes")
	}
	url, dsn := servicetest.NATS(t), servicetest.PG(t)
	rng := crashtest.Seed(t, "SLUICE_CRASH_SEED")
	n := int64(80_000)
	if s := os.Getenv("SLUICE_PGCRASH_EVENTS"); s != "" {
		n, _ = strconv.ParseInt(s, 10, 64)
	}
	const wantKills = 12

	sfx := servicetest.Suffix()
	stream := "SLUICE_PGCRASH_" + sfx
	publishClicks(t, url, stream, "sluicepgcrash."+sfx, n)
	ref := "sluice_crash_ref_" + sfx
	createTables(t, dsn, ref)

	env := func(dir, table string) []string {
		return append([]string{}, crashEnvDir+"="+dir, crashEnvNATS+"="+url, crashEnvPG+"="+dsn,
			crashEnvStream+"="+stream, crashEnvTable+"="+table)
	}
	start := time.Now()
	_, done, took := runChild(t, env(t.TempDir(), ref), -1)
	if !done {
		t.Fatal("the uninterrupted run did not finish")
	}
	t.Logf("uninterrupted run: %d clicks in %v (%v in all)", n, took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	want := expectedRows(n)
	gotRef := tableRows(t, dsn, ref)
	if !slices.Equal(gotRef, want) {
		t.Fatalf("the uninterrupted run's table differs from the expected updates: %s", diff(gotRef, want))
	}

	// Kill points between 80 ms and 1/(2·wantKills) of the uninterrupted
	// run. A round runs the job to its end into a table of its own (and a
	// consumer of its own), killing it until wantKills kills have landed
	// in all; on a machine fast enough to finish the job before, another
	// round lands the rest, so the test holds at any speed.
	const lo = 80 * time.Millisecond
	hi := max(2*lo, took/(2*wantKills))
	kills, runs := 0, 0
	var gotOut []string
	for round := 1; kills < wantKills; round++ {
		if round > 10 {
			t.Fatalf("only %d kills landed in %d rounds: make the job longer (SLUICE_PGCRASH_EVENTS)", kills, round-1)
		}
		out := fmt.Sprintf("sluice_crash_out_%s_%d", sfx, round)
		createTables(t, dsn, out)
		dir := t.TempDir()
		for done := false; !done; runs++ {
			if runs > 100 {
				t.Fatalf("no end after %d runs and %d kills", runs, kills)
			}
			delay := time.Duration(-1)
			if kills < wantKills {
				delay = lo + time.Duration(rng.Int64N(int64(hi-lo)))
			}
			var killed bool
			killed, done, _ = runChild(t, env(dir, out), delay)
			if killed {
				kills++
				t.Logf("round %d run %d: killed %v after it started", round, runs+1, delay.Round(time.Millisecond))
			}
		}
		gotOut = tableRows(t, dsn, out)
		if !slices.Equal(gotOut, gotRef) {
			t.Fatalf("round %d: after %d kills the table differs from the uninterrupted run's: %s", round, kills, diff(gotOut, gotRef))
		}
	}
	t.Logf("%d kills in %d runs: %d rows, identical to the uninterrupted run, each count update once", kills, runs+1, len(gotOut))
}

// runChild runs the child with env; with a delay of 0 or more it SIGKILLs
// the child that long after it started its job, unless the job finished
// first. took is the time from STARTED to DONE.
func runChild(t *testing.T, env []string, delay time.Duration) (killed, done bool, took time.Duration) {
	t.Helper()
	r := crashtest.Child{Test: "TestCrashChild", Env: env}.Run(t, delay, func(line string) bool {
		if rest, ok := strings.CutPrefix(line, "RESTORED "); ok {
			t.Logf("run to the end: restored %s", strings.ToLower(rest))
		}
		return line == "STARTED"
	})
	return r.Killed, r.Done, r.Took
}

func publishClicks(t *testing.T, url, stream, subject string, n int64) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	js, err := natsjs.New(nc, natsjs.WithPublishAsyncMaxPending(4096))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: stream, Subjects: []string{subject}, Storage: natsjs.MemoryStorage}); err != nil {
		t.Fatalf("create stream %s: %v", stream, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, stream); err != nil {
			t.Errorf("delete stream %s: %v", stream, err)
		}
		nc.Close()
	})
	for i := range n {
		b, _ := json.Marshal(clickAt(i))
		if _, err := js.PublishAsync(subject, b); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("publishing the clicks took more than a minute")
	}
}

func createTables(t *testing.T, dsn string, tables ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for _, tb := range tables {
		if _, err := c.Exec(ctx, "CREATE TABLE "+tb+" (key text NOT NULL, n bigint NOT NULL)"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close(ctx)
		for _, tb := range tables {
			if _, err := c.Exec(ctx, "DROP TABLE "+tb); err != nil {
				t.Errorf("drop %s: %v", tb, err)
			}
			if err := postgres.Reset(ctx, dsn, "pgcrash/"+tb); err != nil {
				t.Error(err)
			}
		}
	})
}

// expectedRows is every count update of n clicks, as "key n", sorted.
func expectedRows(n int64) []string {
	counts := map[string]int64{}
	var rows []string
	for i := range n {
		k := clickAt(i).K
		counts[k]++
		rows = append(rows, fmt.Sprintf("%s %d", k, counts[k]))
	}
	slices.Sort(rows)
	return rows
}

func tableRows(t *testing.T, dsn, table string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	rs, err := c.Query(ctx, "SELECT key, n FROM "+table)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := pgx.CollectRows(rs, func(r pgx.CollectableRow) (string, error) {
		var k string
		var n int64
		err := r.Scan(&k, &n)
		return fmt.Sprintf("%s %d", k, n), err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(rows)
	return rows
}

// diff describes how two sorted row lists differ: counts and the first
// rows missing or extra.
func diff(got, want []string) string {
	var missing, extra []string
	i, j := 0, 0
	for i < len(got) || j < len(want) {
		switch {
		case j == len(want) || i < len(got) && got[i] < want[j]:
			extra = append(extra, got[i])
			i++
		case i == len(got) || want[j] < got[i]:
			missing = append(missing, want[j])
			j++
		default:
			i++
			j++
		}
	}
	return fmt.Sprintf("%d rows, want %d; %d missing (first: %v), %d extra or repeated (first: %v)",
		len(got), len(want), len(missing), missing[:min(5, len(missing))], len(extra), extra[:min(5, len(extra))])
}
