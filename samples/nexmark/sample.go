package nexmark

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync/atomic"

	"github.com/sluicehq/sluice/operators"
)

// Sample is the nexmark program of the samples catalog: one query over the
// live generator or an event file, its results counted and, with --out,
// written as JSON lines. Create it with New.
//
//	events (source xS) -> the query's operators (keyed ones xP) -> out (file sink x1)
//	                                                             -> count (sink)
type Sample struct {
	cfg         Config
	query       string
	input       string
	out         string
	skip        bool
	parallelism int

	in      atomic.Int64 // events read
	results atomic.Int64
	file    *EventFile
	ran     string // the query of the last topology built
}

// New returns the sample with its default options: q0 over Beam's default
// stream (100 000 events from 100 generators), parallelism 4, results
// counted only.
func New() *Sample {
	return &Sample{cfg: DefaultConfig(), query: "q0", parallelism: 4}
}

// Name implements samples.Sample.
func (s *Sample) Name() string { return "nexmark" }

// Description implements samples.Sample.
func (s *Sample) Description() string {
	return "run a Nexmark query (" + strings.Join(Queries(), ", ") + ") over the live generator or an event file"
}

// Flags implements samples.Sample: --query, --input, --out,
// --skip-malformed and --parallelism, and every Beam knob of Config under its
// Beam name (--numEvents, --numEventGenerators, --firstEventRate,
// --windowSizeSec, ...), with --events and --generators as short names of
// the first two.
func (s *Sample) Flags(fs *flag.FlagSet) {
	fs.StringVar(&s.query, "query", s.query, "the query to run: "+strings.Join(Queries(), ", "))
	fs.StringVar(&s.input, "input", s.input, "event file to read (the format of 'sluice nexmark gen') instead of the live generator; give the generator knobs it was written with, which set the out-of-orderness the queries allow")
	fs.StringVar(&s.out, "out", s.out, "file to write the results to, one JSON object a line (default: count them only)")
	fs.BoolVar(&s.skip, "skip-malformed", s.skip, "skip and count the malformed lines of --input instead of failing")
	fs.IntVar(&s.parallelism, "parallelism", s.parallelism, "instances of the keyed operators, and of the generator source (at most one per generator)")
	s.cfg.RegisterFlags(fs)
}

// Topology implements samples.Sample: it checks the options and builds the
// query's topology.
func (s *Sample) Topology() (*operators.Topology, error) {
	if s.parallelism < 1 {
		return nil, fmt.Errorf("nexmark: --parallelism %d: want 1 or more", s.parallelism)
	}
	if err := s.cfg.Validate(); err != nil {
		return nil, err
	}
	s.in.Store(0)
	s.results.Store(0)
	s.file, s.ran = nil, ""
	t := operators.NewTopology("nexmark-" + s.query)
	var events operators.Stream[Event]
	if s.input != "" {
		s.file = FileSource(s.input, s.skip)
		// One instance: each instance of a file source parses every line.
		events = operators.Source(t, "events", countingSource{s.file, &s.in})
	} else {
		events = operators.Source(t, "events", countingSource{Source(s.cfg), &s.in},
			operators.Parallelism(min(s.parallelism, s.cfg.NumEventGenerators)))
	}
	results, err := Build(s.query, events, ParamsOf(s.cfg, s.parallelism))
	if err != nil {
		return nil, err
	}
	operators.Sink(results, "count", countingSink{&s.results})
	if s.out != "" {
		// With checkpoints (sluice run --checkpoints) the file sink is
		// exactly-once: a resumed run cuts the file back to its
		// checkpointed position. A run that starts afresh overwrites the
		// file, as a run without checkpoints always does.
		operators.Sink(results, "out", operators.File(s.out, func(line string) string { return line }, operators.FileOverwrite()),
			operators.Parallelism(1))
	}
	s.ran = s.query
	return t, nil
}

// Events returns the number of events the last run read.
func (s *Sample) Events() int64 { return s.in.Load() }

// Results returns the number of results of the last run.
func (s *Sample) Results() int64 { return s.results.Load() }

// Report implements samples.Sample: "q5: 100000 events in, 1234 results",
// where they went, and the malformed lines skipped.
func (s *Sample) Report(w io.Writer) error {
	if s.ran == "" {
		return errors.New("nexmark: no run to report")
	}
	fmt.Fprintf(w, "%s: %d events in, %d results", s.ran, s.Events(), s.Results())
	if s.out != "" {
		fmt.Fprintf(w, ", written to %s", s.out)
	}
	fmt.Fprintln(w)
	if s.file != nil && s.skip {
		fmt.Fprintf(w, "%d malformed lines skipped in %s\n", s.file.Skipped(), s.input)
	}
	return nil
}

// countingSource counts the records its readers read.
type countingSource struct {
	src operators.SourceConnector[Event]
	n   *atomic.Int64
}

func (c countingSource) Open(ctx context.Context, part, parts int, offset int64) (operators.Reader[Event], error) {
	r, err := c.src.Open(ctx, part, parts, offset)
	if err != nil {
		return nil, err
	}
	return countingReader{r, c.n}, nil
}

type countingReader struct {
	operators.Reader[Event]
	n *atomic.Int64
}

func (c countingReader) Read(buf []Event) (int, error) {
	k, err := c.Reader.Read(buf)
	c.n.Add(int64(k))
	return k, err
}

// countingSink counts the records it is given.
type countingSink struct{ n *atomic.Int64 }

func (c countingSink) Open(context.Context, int, int) (operators.Writer[string], error) {
	return c, nil
}

func (c countingSink) Write(rs []string) error { c.n.Add(int64(len(rs))); return nil }

func (c countingSink) Close() error { return nil }
