package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/connector"
	"github.com/sluicehq/sluice/connector/connectortest"
)

// TestConformance runs the connector conformance suite against the sink
// and a real PostgreSQL server.
func TestConformance(t *testing.T) {
	connectortest.Sink(t, connectortest.SinkCase[rec]{
		Make: func(t *testing.T) (connector.Sink[rec], func() []rec) {
			d := newDB(t, false)
			read := func() []rec {
				rs, err := d.conn.Query(context.Background(), "SELECT id, v FROM "+d.table+" ORDER BY id")
				if err != nil {
					t.Fatal(err)
				}
				out, err := pgx.CollectRows(rs, pgx.RowToStructByPos[rec])
				if err != nil {
					t.Fatal(err)
				}
				return out
			}
			return d.sink(t, false), read
		},
		Records:  recs(0, 6),
		Features: connectortest.TwoPhase,
	})
}
