package postgres_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/connector"
	"github.com/sluicehq/sluice/connector/connectortest"
	"github.com/sluicehq/sluice/connectors/internal/servicetest"
	"github.com/sluicehq/sluice/connectors/postgres"
)

type row struct {
	Key string
	N   int64
}

// The PostgreSQL sink passes the connector conformance suite against the
// real server, as a two-phase sink: nothing visible before its commit,
// commits idempotent, a restore after a crash before the commit finishes
// it and one after the commit adds nothing twice, and Abort leaves only
// what a checkpoint committed.
func TestConformanceSink(t *testing.T) {
	dsn := servicetest.PG(t)
	var table string
	n := 0
	connectortest.TestSink(t, connectortest.SinkCase[row]{
		New: func(t *testing.T) connector.Sink[row] {
			n++
			table = fmt.Sprintf("sluice_conf_%s_%d", servicetest.Suffix(), n)
			createTables(t, dsn, table)
			return postgres.NewSink(postgres.Config[row]{DSN: dsn, Name: "conformance/" + table, Table: table,
				Columns: []string{"key", "n"}, Row: func(r row) []any { return []any{r.Key, r.N} }})
		},
		Visible: func(t *testing.T) []row {
			var got []row
			for _, l := range tableRows(t, dsn, table) { // "key n", sorted
				k, v, _ := strings.Cut(l, " ")
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("row %q", l)
				}
				got = append(got, row{k, n})
			}
			slices.SortFunc(got, func(a, b row) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
			return got
		},
		Records:   []row{{"a", 1}, {"b", 2}, {"c", 3}, {"d", 4}, {"e", 5}, {"f", 6}, {"g", 7}},
		Unordered: true,
		Features:  connectortest.SinkFeatures{TwoPhase: true, Abort: true},
	})
}
