package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/connectors/internal/servicetest"
	"github.com/sluicehq/sluice/connectors/postgres"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/persistence"
	"github.com/sluicehq/sluice/supervision"
)

type rec struct {
	ID int64
	V  string
}

// db is a fresh table (id bigint, v text) and a sink name, both dropped
// when the test ends.
type db struct {
	dsn, table, name string
	conn             *pgx.Conn
}

func newDB(t *testing.T, key bool) *db {
	t.Helper()
	dsn := servicetest.PG(t)
	sfx := servicetest.Suffix()
	d := &db{dsn: dsn, table: "sluice_t_" + sfx, name: "test/" + sfx}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	d.conn = c
	pk := ""
	if key {
		pk = " PRIMARY KEY"
	}
	if _, err := c.Exec(ctx, fmt.Sprintf("CREATE TABLE %s (id bigint%s, v text)", d.table, pk)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := c.Exec(ctx, "DROP TABLE "+d.table); err != nil {
			t.Errorf("drop %s: %v", d.table, err)
		}
		if err := postgres.Reset(ctx, dsn, d.name); err != nil {
			t.Error(err)
		}
		c.Close(ctx)
	})
	return d
}

func (d *db) sink(t *testing.T, key bool) *postgres.Sink[rec] {
	cfg := postgres.Config[rec]{DSN: d.dsn, Name: d.name, Table: d.table, Columns: []string{"id", "v"},
		Row:     func(r rec) []any { return []any{r.ID, r.V} },
		Backoff: supervision.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond}}
	if key {
		cfg.Key = []string{"id"}
	}
	s := postgres.NewSink(cfg)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return s
}

// rows returns the table's rows as "id=v", sorted.
func (d *db) rows(t *testing.T) []string {
	t.Helper()
	rs, err := d.conn.Query(context.Background(), "SELECT id, v FROM "+d.table)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rs, func(r pgx.CollectableRow) (string, error) {
		var id int64
		var v string
		err := r.Scan(&id, &v)
		return fmt.Sprintf("%d=%s", id, v), err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func recs(from, to int) []rec {
	var rs []rec
	for i := from; i < to; i++ {
		rs = append(rs, rec{int64(i), fmt.Sprint("v", i)})
	}
	return rs
}

func want(from, to int) []string {
	var out []string
	for _, r := range recs(from, to) {
		out = append(out, fmt.Sprintf("%d=%s", r.ID, r.V))
	}
	slices.Sort(out)
	return out
}

func check(t *testing.T, d *db, wantRows []string) {
	t.Helper()
	if got := d.rows(t); !slices.Equal(got, wantRows) {
		t.Fatalf("table has %d rows %v\nwant %d rows %v", len(got), got, len(wantRows), wantRows)
	}
}

func tpw(t *testing.T, w operators.Writer[rec]) operators.TwoPhaseWriter {
	t.Helper()
	tp, ok := w.(operators.TwoPhaseWriter)
	if !ok {
		t.Fatalf("%T is not a TwoPhaseWriter", w)
	}
	return tp
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestCommitIdempotent: rows appear at Commit, not before, and a second
// Commit of the same checkpoint writes nothing.
func TestCommitIdempotent(t *testing.T) {
	d := newDB(t, false)
	s := d.sink(t, false)
	ctx := context.Background()
	w, err := s.Open(ctx, 0, 1)
	must(t, err)
	must(t, w.Write(recs(0, 3)))
	_, err = tpw(t, w).PreCommit(1)
	must(t, err)
	check(t, d, nil) // staged, not visible
	must(t, tpw(t, w).Commit(ctx, 1))
	check(t, d, want(0, 3))
	must(t, tpw(t, w).Commit(ctx, 1))
	check(t, d, want(0, 3))
	must(t, w.Write(recs(3, 5)))
	_, err = tpw(t, w).PreCommit(2)
	must(t, err)
	must(t, tpw(t, w).Commit(ctx, 2))
	must(t, tpw(t, w).Commit(ctx, 2))
	must(t, w.Close())
	check(t, d, want(0, 5))
	pos, err := postgres.Positions(ctx, d.dsn, d.name)
	must(t, err)
	if len(pos) != 1 || pos[0].Checkpoint != 2 || pos[0].Records != 5 {
		t.Fatalf("positions %+v, want partition 0 at checkpoint 2, 5 records", pos)
	}
	if st := s.Stats(); st.Commits != 2 || st.Rows != 5 {
		t.Fatalf("stats %+v: want 2 commits of 5 rows", st)
	}
}

// TestOpenAtAfterCrashBeforeCommit: the job crashes after PreCommit(2)
// and before Commit(2) (the checkpoint completed); the restore commits the
// staged rows once, however often it is repeated, and the replayed records
// after the checkpoint are written once.
func TestOpenAtAfterCrashBeforeCommit(t *testing.T) {
	d := newDB(t, false)
	s := d.sink(t, false)
	ctx := context.Background()
	w, err := s.Open(ctx, 0, 1)
	must(t, err)
	must(t, w.Write(recs(0, 5)))
	_, err = tpw(t, w).PreCommit(1)
	must(t, err)
	must(t, tpw(t, w).Commit(ctx, 1))
	must(t, w.Write(recs(5, 9)))
	s2, err := tpw(t, w).PreCommit(2)
	must(t, err)
	must(t, w.Write(recs(9, 11))) // after the barrier: lost in the crash, replayed
	w.(interface{ Abort() error }).Abort()
	check(t, d, want(0, 5))

	for range 2 { // the restore itself may crash after its commit: again
		w, err = s.OpenAt(ctx, 0, 1, s2)
		must(t, err)
		check(t, d, want(0, 9))
		w.(interface{ Abort() error }).Abort()
	}
	w, err = s.OpenAt(ctx, 0, 1, s2)
	must(t, err)
	must(t, w.Write(recs(9, 12))) // the replay, and one new record
	_, err = tpw(t, w).PreCommit(3)
	must(t, err)
	must(t, tpw(t, w).Commit(ctx, 3))
	must(t, w.Close())
	check(t, d, want(0, 12))
	if st := s.Stats(); st.SkippedRows != 8 {
		t.Errorf("stats %+v: want 8 rows skipped (4 by each repeated restore)", st)
	}
}

// TestCloseThenReplay: the rows Close commits at the end of the stream are
// not written again by a restore from the last checkpoint that replays
// them (a crash before the job forgot its checkpoints), nor by a run from
// scratch over the same input; after Reset they are.
func TestCloseThenReplay(t *testing.T) {
	d := newDB(t, false)
	s := d.sink(t, false)
	ctx := context.Background()
	w, err := s.Open(ctx, 0, 1)
	must(t, err)
	must(t, w.Write(recs(0, 3)))
	s1, err := tpw(t, w).PreCommit(1)
	must(t, err)
	must(t, tpw(t, w).Commit(ctx, 1))
	must(t, w.Write(recs(3, 5)))
	must(t, w.Close())
	check(t, d, want(0, 5))

	w, err = s.OpenAt(ctx, 0, 1, s1)
	must(t, err)
	must(t, w.Write(recs(3, 5)))
	must(t, w.Close())
	check(t, d, want(0, 5))

	w, err = s.Open(ctx, 0, 1) // from scratch
	must(t, err)
	must(t, w.Write(recs(0, 6)))
	must(t, w.Close())
	check(t, d, want(0, 6))

	must(t, postgres.Reset(ctx, d.dsn, d.name))
	w, err = s.Open(ctx, 0, 1)
	must(t, err)
	must(t, w.Write(recs(0, 1)))
	must(t, w.Close())
	check(t, d, append(want(0, 1), want(0, 6)...))
}

// TestUpsert: with Key, the last row of a key wins, and a replay changes
// nothing.
func TestUpsert(t *testing.T) {
	d := newDB(t, true)
	s := d.sink(t, true)
	ctx := context.Background()
	w, err := s.Open(ctx, 0, 1)
	must(t, err)
	must(t, w.Write([]rec{{1, "a"}, {2, "b"}, {1, "c"}}))
	s1, err := tpw(t, w).PreCommit(1)
	must(t, err)
	must(t, tpw(t, w).Commit(ctx, 1))
	check(t, d, []string{"1=c", "2=b"})
	must(t, w.Write([]rec{{2, "d"}, {3, "e"}}))
	_, err = tpw(t, w).PreCommit(2)
	must(t, err)
	w.(interface{ Abort() error }).Abort()
	w, err = s.OpenAt(ctx, 0, 1, s1)
	must(t, err)
	must(t, w.Write([]rec{{2, "d"}, {3, "e"}}))
	must(t, w.Close())
	check(t, d, []string{"1=c", "2=d", "3=e"})
}

// TestCommitRetriesLostConnection: the server ends the sink's connection
// between two commits; the next commit connects again and succeeds.
func TestCommitRetriesLostConnection(t *testing.T) {
	d := newDB(t, false)
	s := d.sink(t, false)
	ctx := context.Background()
	w, err := s.Open(ctx, 0, 1)
	must(t, err)
	must(t, w.Write(recs(0, 2)))
	_, err = tpw(t, w).PreCommit(1)
	must(t, err)
	var n int
	err = d.conn.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", "sluice "+d.name).Scan(&n)
	must(t, err)
	if n != 1 {
		t.Fatalf("terminated %d connections of the sink, want 1", n)
	}
	must(t, tpw(t, w).Commit(ctx, 1))
	must(t, w.Close())
	check(t, d, want(0, 2))
	if st := s.Stats(); st.Failures < 1 || st.Retries < 1 || st.Connects < 2 {
		t.Fatalf("stats %+v: want a failed attempt, a retry and a second connection", st)
	}
}

// TestUnreachable: a server that does not answer fails Open after the
// retries, with an error that names the host and not the password.
func TestUnreachable(t *testing.T) {
	s := postgres.NewSink(postgres.Config[rec]{
		DSN:  "postgres://sluiceuser:s3cr3tpw@127.0.0.1:1/nowhere?sslmode=disable&connect_timeout=2",
		Name: "unreachable", Table: "t", Columns: []string{"id"}, Row: func(r rec) []any { return []any{r.ID} },
		Attempts: 3, Backoff: supervision.Backoff{Initial: time.Millisecond, Max: 2 * time.Millisecond},
	})
	_, err := s.Open(context.Background(), 0, 1)
	if err == nil {
		t.Fatal("Open succeeded against a closed port")
	}
	msg := err.Error()
	if !strings.Contains(msg, "127.0.0.1:1") || !strings.Contains(msg, `"unreachable"`) || strings.Contains(msg, "s3cr3tpw") {
		t.Fatalf("error %q: want the sink and the host, without the password", msg)
	}
	if !errors.Is(err, supervision.ErrAttemptsExhausted) {
		t.Errorf("error %q: want the retries exhausted", msg)
	}
	if st := s.Stats(); st.Failures != 3 || st.Retries != 2 {
		t.Errorf("stats %+v: want 3 failed attempts and 2 retries", st)
	}
	t.Logf("error: %v", err)

	bad := postgres.NewSink(postgres.Config[rec]{DSN: "postgres://u:s3cr3tpw@[::1", Name: "x", Table: "t", Columns: []string{"id"}, Row: func(rec) []any { return nil }})
	if err := bad.Err(); err == nil || strings.Contains(err.Error(), "s3cr3tpw") {
		t.Fatalf("unparsable DSN: %v", err)
	}
}

// TestMaxPendingRows: rows beyond the bound fail the sink with an error
// that says what to do.
func TestMaxPendingRows(t *testing.T) {
	d := newDB(t, false)
	cfg := postgres.Config[rec]{DSN: d.dsn, Name: d.name, Table: d.table, Columns: []string{"id", "v"},
		Row: func(r rec) []any { return []any{r.ID, r.V} }, MaxPendingRows: 10}
	s := postgres.NewSink(cfg)
	w, err := s.Open(context.Background(), 0, 1)
	must(t, err)
	defer w.Close()
	must(t, w.Write(recs(0, 8)))
	err = w.Write(recs(8, 12))
	if err == nil || !strings.Contains(err.Error(), "MaxPendingRows (10)") {
		t.Fatalf("12 rows pending of 10: %v", err)
	}
}

// TestFlushRows: without checkpoints, FlushRows commits as records come,
// and a rerun from scratch over the same input writes nothing twice.
func TestFlushRows(t *testing.T) {
	d := newDB(t, false)
	cfg := postgres.Config[rec]{DSN: d.dsn, Name: d.name, Table: d.table, Columns: []string{"id", "v"},
		Row: func(r rec) []any { return []any{r.ID, r.V} }, FlushRows: 3}
	s := postgres.NewSink(cfg)
	ctx := context.Background()
	w, err := s.Open(ctx, 0, 1)
	must(t, err)
	must(t, w.Write(recs(0, 2)))
	check(t, d, nil)
	must(t, w.Write(recs(2, 4)))
	check(t, d, want(0, 4))
	must(t, w.Write(recs(4, 5)))
	w.(interface{ Abort() error }).Abort() // a crash: record 4 was not flushed

	w, err = s.Open(ctx, 0, 1) // the job again, from scratch
	must(t, err)
	must(t, w.Write(recs(0, 4)))
	check(t, d, want(0, 4))
	must(t, w.Write(recs(4, 6)))
	must(t, w.Close())
	check(t, d, want(0, 6))
	if st := s.Stats(); st.Commits != 2 || st.SkippedRows != 4 || st.Rows != 6 {
		t.Fatalf("stats %+v: want 2 commits of 6 rows in all, 4 rows skipped", st)
	}
}

// TestRestartInProcess: a checkpointed job with RestartOnFailure whose
// operator fails once midway restarts from its last checkpoint; the table
// gets every record once (the rows committed when the failed run's writer
// was closed are skipped by position in the replay).
func TestRestartInProcess(t *testing.T) {
	d := newDB(t, false)
	const n = 5000
	var failed atomic.Bool
	top := operators.NewTopology("pg-restart", operators.Checkpoints(20*time.Millisecond), operators.BatchSize(32), operators.Capacity(128),
		operators.CheckpointStore(persistence.NewMemoryCheckpointStore()),
		operators.RestartOnFailure(supervision.Backoff{Initial: time.Millisecond, Max: time.Millisecond}, 3, time.Minute))
	src := operators.Source(top, "numbers", operators.Generate(n, func(i int64) int64 { return i }))
	recsOut := operators.Map(src, "fail-once", func(i int64) rec {
		if i == 2*n/3 && !failed.Swap(true) {
			panic("injected failure")
		}
		return rec{i, fmt.Sprint("v", i)}
	})
	s := d.sink(t, false)
	operators.Sink(recsOut, "store", s)
	sys, err := actors.NewSystem(actors.Config{Name: "pg-restart"})
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer sys.Stop(ctx)
	run, err := sys.Run(ctx, top)
	must(t, err)
	must(t, run.Wait(ctx))
	if st := operators.CheckpointStatsOf(run); st.Restarts != 1 {
		t.Fatalf("%d restarts, want 1", st.Restarts)
	}
	check(t, d, want(0, n))
	t.Logf("stats %+v", s.Stats())
}
