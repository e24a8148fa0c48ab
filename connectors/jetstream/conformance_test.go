package jetstream_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/connector"
	"github.com/sluicehq/sluice/connector/connectortest"
	"github.com/sluicehq/sluice/connectors/jetstream"
)

// TestConformance runs the connector conformance suite against the source
// and a real NATS JetStream server.
func TestConformance(t *testing.T) {
	var f *fixture
	publish := func(t *testing.T, vs ...int) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, v := range vs {
			if _, err := f.js.Publish(ctx, f.subject+".x", []byte(strconv.Itoa(v))); err != nil {
				t.Fatal(err)
			}
		}
	}
	connectortest.Source(t, connectortest.SourceCase[int]{
		Make: func(t *testing.T, recs []int) connector.Source[int] {
			f = newFixture(t)
			publish(t, recs...)
			cfg := jetstream.SourceConfig[int]{URL: f.url, Stream: f.stream, Consumer: "conformance", Bounded: recs != nil}
			if recs == nil {
				cfg.PollWait = 200 * time.Millisecond
			}
			src := jetstream.NewSource(cfg)
			if err := src.Err(); err != nil {
				t.Fatal(err)
			}
			return src
		},
		Append:   func(vs ...int) { publish(t, vs...) },
		Records:  []int{3, 1, 4, 1, 5, 9, 2, 6},
		Features: connectortest.Replayable | connectortest.Bounded | connectortest.Waits,
	})
}
