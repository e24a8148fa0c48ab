package httpin_test

import (
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/connector"
	"github.com/sluicehq/sluice/connector/connectortest"
	"github.com/sluicehq/sluice/connectors/httpin"
)

// The HTTP ingress passes the connector conformance suite as a source that
// runs dry and waits without spinning until records are POSTed to it (not
// replayable: what was posted is gone after a crash, so checkpoints refuse
// it).
func TestConformance(t *testing.T) {
	var g *httpin.Ingress[event]
	postAll := func(t *testing.T, evs []event) {
		t.Helper()
		if len(evs) == 0 {
			return
		}
		ids := make([]string, len(evs))
		for i, e := range evs {
			ids[i] = e.ID
		}
		if resp, body := post(t, client(t), g.URL(), lines(ids...)); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST: %d %s", resp.StatusCode, body)
		}
	}
	connectortest.Source(t, connectortest.SourceCase[event]{
		Make: func(t *testing.T, recs []event) connector.Source[event] {
			g = start(t, httpin.Config[event]{Capacity: 64})
			postAll(t, recs)
			return g.Source()
		},
		// lines numbers the records of each POST from 0: one record a POST.
		Append: func(recs ...event) {
			for _, r := range recs {
				postAll(t, []event{r})
			}
		},
		Records:  []event{{ID: "a"}, {ID: "b"}, {ID: "c"}, {ID: "d"}},
		Features: connectortest.Waits,
	})
}
