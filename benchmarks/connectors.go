package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/connectors/jetstream"
	"github.com/sluicehq/sluice/connectors/postgres"
	"github.com/sluicehq/sluice/operators"
)

// benchEvent is what the connectors benchmark moves from JetStream to
// PostgreSQL.
type benchEvent struct {
	I int64  `json:"i"`
	K string `json:"k"`
}

// benchConnectors measures JetStream -> topology -> PostgreSQL (with
// checkpoints: exactly-once) against a hand-written loop in the same run: a
// plain nats.go pull consumer that decodes, COPYs every 5000 rows in a
// transaction and acknowledges them. Both read the same stream of n
// messages into an empty table. It needs NATS with JetStream and
// PostgreSQL, at SLUICE_NATS_URL and SLUICE_PG_DSN or the local defaults
// (.ci/services starts them); without them it reports nothing.
func benchConnectors(ctx context.Context, e *env) ([]Result, error) {
	natsURL, dsn := "nats://127.0.0.1:4222", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	if u := os.Getenv("SLUICE_NATS_URL"); u != "" {
		natsURL = u
	}
	if d := os.Getenv("SLUICE_PG_DSN"); d != "" {
		dsn = d
	}
	if err := reachable(ctx, natsURL, dsn); err != nil {
		fmt.Fprintf(os.Stderr, "# connectors skipped: %v (start the servers with .ci/services)\n", err)
		return nil, nil
	}
	n := e.n(200_000)
	id := strconv.FormatInt(time.Now().UnixNano(), 36)
	stream, subject, table := "SLUICE_BENCH_"+id, "sluice.bench."+id, "sluice_bench_"+id

	nc, err := nats.Connect(natsURL)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := natsjs.New(nc, natsjs.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return nil, err
	}
	if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: stream, Subjects: []string{subject}, Storage: natsjs.MemoryStorage}); err != nil {
		return nil, fmt.Errorf("create stream %s: %w", stream, err)
	}
	defer js.DeleteStream(context.WithoutCancel(ctx), stream)
	for i := range int64(n) {
		b, _ := json.Marshal(benchEvent{I: i, K: "k" + strconv.FormatInt(i%1000, 10)})
		if _, err := js.PublishAsync(subject, b); err != nil {
			return nil, err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(2 * time.Minute):
		return nil, fmt.Errorf("publishing %d messages took more than 2 minutes", n)
	}

	pg, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer pg.Close(context.WithoutCancel(ctx))
	if _, err := pg.Exec(ctx, "CREATE TABLE "+table+" (i bigint NOT NULL, k text NOT NULL)"); err != nil {
		return nil, err
	}
	defer pg.Exec(context.WithoutCancel(ctx), "DROP TABLE "+table)
	fresh := func() error {
		_, err := pg.Exec(ctx, "TRUNCATE "+table)
		return err
	}
	check := func(what string) error {
		var rows, distinct int64
		if err := pg.QueryRow(ctx, "SELECT count(*), count(DISTINCT i) FROM "+table).Scan(&rows, &distinct); err != nil {
			return err
		}
		if rows != int64(n) || distinct != int64(n) {
			return fmt.Errorf("connectors %s: %d rows (%d distinct), want %d", what, rows, distinct, n)
		}
		return nil
	}

	rounds := min(e.rounds, 2) // each round moves every message through both servers
	plain, err := best(rounds, n, func() (time.Duration, error) {
		if err := fresh(); err != nil {
			return 0, err
		}
		start := time.Now()
		if err := plainLoop(ctx, js, stream, pg, table, n); err != nil {
			return 0, err
		}
		d := time.Since(start)
		return d, check("plain loop")
	})
	if err != nil {
		return nil, err
	}
	var cps int64
	run := 0
	sluice, err := best(rounds, n, func() (time.Duration, error) {
		if err := fresh(); err != nil {
			return 0, err
		}
		run++
		sink := "bench/" + id + "/" + strconv.Itoa(run)
		defer postgres.Reset(context.WithoutCancel(ctx), dsn, sink)
		sys, err := actors.NewSystem(actors.Config{Name: "connectors-bench"})
		if err != nil {
			return 0, err
		}
		defer sys.Stop(ctx)
		t := operators.NewTopology("connectors-bench", operators.Checkpoints(time.Second))
		src := operators.Source(t, "events", jetstream.NewSource(jetstream.SourceConfig[benchEvent]{URL: natsURL, Stream: stream, Bounded: true}))
		operators.Sink(src, "store", postgres.NewSink(postgres.Config[benchEvent]{DSN: dsn, Name: sink, Table: table,
			Columns: []string{"i", "k"}, Row: func(ev benchEvent) []any { return []any{ev.I, ev.K} }}))
		r, d, err := runTimed(ctx, sys, t)
		if err != nil {
			return 0, err
		}
		cps = operators.CheckpointStatsOf(r).Completed
		return d, check("sluice")
	})
	if err != nil {
		return nil, err
	}
	base := Result{Name: "connectors/plain-nats-pgx", Value: plain, Unit: "records/s",
		Note: fmt.Sprintf("nats.go pull consumer, pgx COPY + ack every 5000 rows, %d messages", n)}
	return []Result{base,
		Result{Name: "connectors/sluice-jetstream-postgres", Value: sluice, Unit: "records/s",
			Note: fmt.Sprintf("jetstream source -> postgres sink, checkpoints every second, exactly-once; checkpoints completed in the last round: %d", cps)}.against(base),
	}, nil
}

// plainLoop is the baseline: what one would write by hand without sluice.
func plainLoop(ctx context.Context, js natsjs.JetStream, stream string, pg *pgx.Conn, table string, n int) error {
	cons, err := js.CreateConsumer(ctx, stream, natsjs.ConsumerConfig{AckPolicy: natsjs.AckAllPolicy, MaxAckPending: -1})
	if err != nil {
		return err
	}
	defer js.DeleteConsumer(context.WithoutCancel(ctx), stream, cons.CachedInfo().Name)
	rows := make([][]any, 0, 5000)
	var last natsjs.Msg
	flush := func() error {
		if len(rows) == 0 {
			return nil
		}
		err := pgx.BeginFunc(ctx, pg, func(tx pgx.Tx) error {
			_, err := tx.CopyFrom(ctx, pgx.Identifier{table}, []string{"i", "k"}, pgx.CopyFromRows(rows))
			return err
		})
		if err != nil {
			return err
		}
		rows = rows[:0]
		return last.DoubleAck(ctx)
	}
	for got := 0; got < n; {
		batch, err := cons.Fetch(1000, natsjs.FetchMaxWait(time.Second))
		if err != nil {
			return err
		}
		for m := range batch.Messages() {
			var ev benchEvent
			if err := json.Unmarshal(m.Data(), &ev); err != nil {
				return err
			}
			rows = append(rows, []any{ev.I, ev.K})
			last = m
			got++
			if len(rows) == cap(rows) {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if err := batch.Error(); err != nil {
			return err
		}
	}
	return flush()
}

// reachable checks that something answers at the NATS URL and that the
// database accepts a connection.
func reachable(ctx context.Context, natsURL, dsn string) error {
	host := "127.0.0.1:4222"
	if u, err := url.Parse(natsURL); err == nil && u.Host != "" {
		host = u.Host
	}
	c, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		return fmt.Errorf("NATS at %s: %w", host, err)
	}
	c.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pg, err := pgx.Connect(cctx, dsn)
	if err != nil {
		return fmt.Errorf("PostgreSQL at %s: %w", postgres.Describe(dsn), err)
	}
	pg.Close(cctx)
	return nil
}
