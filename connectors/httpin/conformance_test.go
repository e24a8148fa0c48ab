package httpin_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/connector"
	"github.com/sluicehq/sluice/connector/connectortest"
	"github.com/sluicehq/sluice/connectors/httpin"
)

// The HTTP ingress passes the connector conformance suite as a source that
// runs dry and waits without spinning (not replayable: what was posted is
// gone after a crash, so checkpoints refuse it).
func TestConformanceSource(t *testing.T) {
	var g *httpin.Ingress[event]
	postAll := func(t *testing.T, evs []event) {
		ids := make([]string, len(evs))
		for i, e := range evs {
			ids[i] = e.ID
		}
		if resp, body := post(t, client(t), g.URL(), lines(ids...)); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST: %d %s", resp.StatusCode, body)
		}
	}
	events := func(from, to int) []event {
		var out []event
		for i := from; i < to; i++ {
			out = append(out, event{ID: "e" + strconv.Itoa(i), N: i - from}) // lines numbers each post from 0
		}
		return out
	}
	connectortest.TestSource(t, connectortest.SourceCase[event]{
		New: func(t *testing.T) (connector.Source[event], []event) {
			g = start(t, httpin.Config[event]{Capacity: 64})
			want := events(0, 8)
			postAll(t, want)
			return g.Source(), want
		},
		Publish:  postAll,
		More:     events(8, 11),
		Features: connectortest.SourceFeatures{Waits: true},
	})
}
