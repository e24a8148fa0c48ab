package jetstream_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/connector"
	"github.com/sluicehq/sluice/connector/connectortest"
	"github.com/sluicehq/sluice/connectors/jetstream"
)

// The JetStream source passes the connector conformance suite against the
// real server: every message once and in order, replay from an offset (a
// stream sequence), waiting without spinning for new messages, and
// acknowledgement of what a checkpoint covers. A bounded source (reading
// up to the stream's last message at its start) ends with io.EOF.
func TestConformanceSource(t *testing.T) {
	var f *fixture
	want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	t.Run("Unbounded", func(t *testing.T) {
		connectortest.TestSource(t, connectortest.SourceCase[int]{
			New: func(t *testing.T) (connector.Source[int], []int) {
				f = newFixture(t)
				f.publish(t, f.subject+".x", 0, 10)
				return jetstream.NewSource(jetstream.SourceConfig[int]{URL: f.url, Stream: f.stream, PollWait: 200 * time.Millisecond}), want
			},
			Publish: func(t *testing.T, more []int) {
				f.publish(t, f.subject+".x", more[0], more[len(more)-1]+1)
			},
			More:     []int{10, 11, 12},
			Features: connectortest.SourceFeatures{Replay: true, Waits: true, Acks: true},
		})
	})
	t.Run("Bounded", func(t *testing.T) {
		connectortest.TestSource(t, connectortest.SourceCase[int]{
			New: func(t *testing.T) (connector.Source[int], []int) {
				f = newFixture(t)
				f.publish(t, f.subject+".x", 0, 10)
				return jetstream.NewSource(jetstream.SourceConfig[int]{URL: f.url, Stream: f.stream, Bounded: true}), want
			},
			Features: connectortest.SourceFeatures{Bounded: true, Replay: true, Acks: true},
		})
	})
}

// The JetStream sink passes the suite: what it writes and closes is in the
// stream, once.
func TestConformanceSink(t *testing.T) {
	var f *fixture
	connectortest.TestSink(t, connectortest.SinkCase[int]{
		New: func(t *testing.T) connector.Sink[int] {
			f = newFixture(t)
			return jetstream.NewSink(jetstream.SinkConfig[int]{URL: f.url, Subject: f.subject + ".x", Name: "conformance-" + f.stream})
		},
		Visible: func(t *testing.T) []int {
			n := int(f.count(t))
			if n == 0 {
				return nil
			}
			src := jetstream.NewSource(jetstream.SourceConfig[int]{URL: f.url, Stream: f.stream, Bounded: true})
			r, err := src.Open(t.Context(), 0, 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			got := make([]int, 0, n)
			buf := make([]int, n)
			for len(got) < n {
				k, err := r.Read(buf)
				if err != nil {
					t.Fatalf("reading the stream back after %d of %d: %v", len(got), n, err)
				}
				got = append(got, buf[:k]...)
			}
			return got
		},
		Records: []int{11, 22, 33, 44, 55, 66},
	})
}
