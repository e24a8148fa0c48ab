package postgres_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/connectors/jetstream"
	"github.com/sluicehq/sluice/connectors/postgres"
	"github.com/sluicehq/sluice/operators"
)

// Describe names a database for messages without its password.
func ExampleDescribe() {
	fmt.Println(postgres.Describe("postgres://app:s3cret@db.internal:5433/shop?sslmode=require"))
	fmt.Println(postgres.Describe("host=/run/postgresql dbname=shop user=app password=s3cret"))
	// Output:
	// db.internal:5433/shop as app
	// unix:/run/postgresql/shop as app
}

type pageView struct {
	Page string
	At   time.Time
}

// A job that counts page views from the JetStream stream VIEWS and keeps
// the count of every page in a table, page_views(page text primary key,
// views bigint), exactly once: each checkpoint's updates are upserted in
// one transaction with the sink's position.
func Example() {
	ctx := context.Background()
	sys, err := actors.NewSystem(actors.Config{Store: "views.db"})
	if err != nil {
		panic(err)
	}
	defer sys.Stop(ctx)

	t := operators.NewTopology("views", operators.Checkpoints(time.Second))
	views := operators.Source(t, "views", jetstream.NewSource(jetstream.SourceConfig[pageView]{
		URL: "nats://127.0.0.1:4222", Stream: "VIEWS"}))
	byPage := operators.KeyBy(views, "by-page", func(v pageView) string { return v.Page })
	counts := operators.Count(byPage, "count")
	operators.Sink(counts, "store", postgres.NewSink(postgres.Config[operators.KV[string, int64]]{
		DSN:     "postgres://app@127.0.0.1:5432/shop?sslmode=disable",
		Name:    "views/store",
		Table:   "page_views",
		Columns: []string{"page", "views"},
		Key:     []string{"page"},
		Row:     func(kv operators.KV[string, int64]) []any { return []any{kv.Key, kv.Value} },
	}))
	run, err := sys.Run(ctx, t)
	if err != nil {
		panic(err)
	}
	_ = run.Wait(ctx) // runs until drained: run.Drain(ctx)
}
