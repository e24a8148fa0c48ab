package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/samples/nexmark"
)

func TestNexmarkGen(t *testing.T) {
	args := []string{"nexmark", "gen", "--events", "20000", "--generators", "8", "--hotAuctionRatio", "3"}
	first, _, err := execute(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	second, _, err := execute(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	if first != second {
		t.Fatal("two runs with the same flags wrote different files")
	}
	if n := strings.Count(first, "\n"); n != 20000 {
		t.Fatalf("%d lines, want 20000", n)
	}
	// The file reads back as the stream of the same configuration.
	cfg := nexmark.DefaultConfig()
	cfg.NumEvents, cfg.NumEventGenerators, cfg.HotAuctionRatio = 20000, 8, 3
	s, err := nexmark.NewStream(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := nexmark.NewReader(strings.NewReader(first), nexmark.ReaderOptions{})
	for i := range 20000 {
		got, err := r.Next()
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		want, _ := s.Next()
		if !bytes.Equal(nexmark.AppendJSON(nil, got), nexmark.AppendJSON(nil, want)) {
			t.Fatalf("line %d differs from the stream's event %d", i+1, i)
		}
	}
	// Beam's long names are the same knobs.
	long, _, err := execute(t, "nexmark", "gen", "--numEvents", "20000", "--numEventGenerators", "8", "--hotAuctionRatio", "3")
	if err != nil || long != first {
		t.Fatalf("--numEvents/--numEventGenerators differ from --events/--generators (%v)", err)
	}
}

func TestNexmarkGenInvalidKnobs(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--generators", "0"}, "numEventGenerators 0"},
		{[]string{"--events", "-5"}, "numEvents -5"},
		{[]string{"--hotBiddersRatio", "0"}, "hotBiddersRatio 0"},
		{[]string{"--rateShape", "ZIPF"}, "want SINE or SQUARE"},
		{[]string{"--numEvnets", "5"}, "unknown flag: --numEvnets"},
	} {
		out, _, err := execute(t, append([]string{"nexmark", "gen"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("gen %v: %v, want an error containing %q", c.args, err, c.want)
		}
		if out != "" {
			t.Errorf("gen %v wrote %d bytes despite the error", c.args, len(out))
		}
	}
}

func TestNexmarkGenStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	cfg := nexmark.DefaultConfig()
	cfg.NumEvents = 0 // practically endless
	if err := writeEvents(ctx, &out, cfg); !errors.Is(err, context.Canceled) {
		t.Fatalf("writeEvents = %v, want context.Canceled", err)
	}
}
