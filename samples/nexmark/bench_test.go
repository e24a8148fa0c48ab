package nexmark

import (
	"io"
	"testing"
)

// BenchmarkGenerator measures one generator (the unit a source actor runs)
// over the default mix: 2 % persons, 6 % auctions, 92 % bids.
func BenchmarkGenerator(b *testing.B) {
	cfg := DefaultConfig()
	cfg.NumEvents = 0 // practically endless
	g := mustGenerator(b, cfg, 0, cfg.NumEventGenerators)
	var bids int
	b.ReportAllocs()
	for b.Loop() {
		ev, ok := g.Next()
		if !ok {
			b.Fatal("generator ran out")
		}
		if ev.Bid != nil {
			bids++
		}
	}
	if bids == 0 {
		b.Fatal("no bids generated")
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkGeneratorKinds measures each kind of event on its own.
func BenchmarkGeneratorKinds(b *testing.B) {
	for _, c := range []struct {
		name   string
		offset int64 // an event id of that kind, with one generator
	}{{"person", 50}, {"auction", 51}, {"bid", 54}} {
		b.Run(c.name, func(b *testing.B) {
			g := mustGenerator(b, oneGeneratorConfig(0), 0, 1)
			b.ReportAllocs()
			for b.Loop() {
				if err := g.SetOffset(c.offset); err != nil {
					b.Fatal(err)
				}
				if ev, _ := g.Next(); eventKind(ev) != c.name {
					b.Fatalf("event %d is a %s", c.offset, eventKind(ev))
				}
			}
		})
	}
}

// BenchmarkEventFileWrite measures the generator writing the event file, as
// `sluice nexmark gen` does, with io.Discard as the file.
func BenchmarkEventFileWrite(b *testing.B) {
	cfg := DefaultConfig()
	cfg.NumEvents = 0
	s := mustStream(b, cfg)
	w := NewWriter(io.Discard)
	b.ReportAllocs()
	for b.Loop() {
		ev, _ := s.Next()
		if err := w.Write(ev); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
