// Package jetstreamtopg is the sample that counts click events per page and
// time window, from a NATS JetStream stream into a PostgreSQL table,
// exactly once.
//
//	clicks (jetstream) -> window (map) ==hash by (window, page)==> count x P -> store (postgres upsert)
//
// When the job starts it publishes --events deterministic clicks to a fresh
// stream, then reads it back. A Map puts every click in its tumbling window
// (window start = ts - ts % size), a keyed Count over (window, page) emits
// the new count after every click, and the PostgreSQL sink upserts it into
// a table keyed by (window_start, page), in one transaction per completed
// checkpoint. A replay after a failure repeats the upserts of the same
// counts, so the table ends with the exact count of every window, however
// often the job is interrupted. (Event-time windows in operators will make
// the Map and the Count one operator; this sample does not need them.)
//
// It needs a NATS server with JetStream (--nats) and a PostgreSQL database
// (--pg); it owns the table --table, which it drops and creates when the
// job starts. The report compares the table with counts computed directly
// from the generated clicks.
package jetstreamtopg

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/connectors/jetstream"
	"github.com/sluicehq/sluice/connectors/postgres"
	"github.com/sluicehq/sluice/operators"
)

// Click is one event: a page viewed at a time (Unix milliseconds).
type Click struct {
	Seq  int64  `json:"seq"`
	Page string `json:"page"`
	TS   int64  `json:"ts"`
}

// Window is the key of a count: a page in the window that starts at Start
// (Unix milliseconds).
type Window struct {
	Start int64
	Page  string
}

// epoch is the time of the first generated click: 2026-01-01T00:00:00Z.
const epoch = 1767225600000

// ClickAt returns generated click i of seed: a page drawn from pages pages
// with a skewed distribution, 10 ms after click i-1 with up to 500 ms of
// jitter either way (clicks arrive a little out of order).
func ClickAt(seed uint64, pages int, i int64) Click {
	r := rand.New(rand.NewPCG(seed, uint64(i)))
	p := int(float64(pages) * r.Float64() * r.Float64()) // skewed towards page 0
	return Click{Seq: i, Page: "/page/" + strconv.Itoa(p), TS: epoch + i*10 + r.Int64N(1001) - 500}
}

// WindowOf is the window of a click for windows of size milliseconds.
func WindowOf(c Click, size int64) Window { return Window{Start: c.TS - c.TS%size, Page: c.Page} }

// Expected counts the clicks of every window directly, without sluice.
func Expected(seed uint64, pages int, events, size int64) map[Window]int64 {
	m := map[Window]int64{}
	for i := range events {
		m[WindowOf(ClickAt(seed, pages, i), size)]++
	}
	return m
}

// Sample is the jetstreamtopg program. Create it with New.
type Sample struct {
	natsURL     string
	pgDSN       string
	events      int64
	window      time.Duration
	pages       int
	seed        uint64
	parallelism int
	checkpoint  time.Duration
	table       string
	keepStream  bool
	top         int

	stream, subject, sink string
	prepare               sync.Once
	prepErr               error
}

// New returns the sample with its default options.
func New() *Sample {
	return &Sample{natsURL: "nats://127.0.0.1:4222", pgDSN: "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
		events: 100_000, window: 10 * time.Second, pages: 50, seed: 1, parallelism: 2, checkpoint: 200 * time.Millisecond,
		table: "sluice_click_windows", top: 5}
}

// Name implements samples.Sample.
func (s *Sample) Name() string { return "jetstreamtopg" }

// Description implements samples.Sample.
func (s *Sample) Description() string {
	return "count clicks per page and window from a JetStream stream into PostgreSQL, exactly once"
}

// Flags implements samples.Sample.
func (s *Sample) Flags(fs *flag.FlagSet) {
	fs.StringVar(&s.natsURL, "nats", s.natsURL, "NATS server URL (JetStream enabled)")
	fs.StringVar(&s.pgDSN, "pg", s.pgDSN, "PostgreSQL DSN")
	fs.Int64Var(&s.events, "events", s.events, "clicks to publish and count")
	fs.DurationVar(&s.window, "window", s.window, "window size")
	fs.IntVar(&s.pages, "pages", s.pages, "distinct pages")
	fs.Uint64Var(&s.seed, "seed", s.seed, "seed of the generated clicks")
	fs.IntVar(&s.parallelism, "parallelism", s.parallelism, "instances of the counting operator and the sink")
	fs.DurationVar(&s.checkpoint, "checkpoint", s.checkpoint, "checkpoint interval (each completed checkpoint commits to PostgreSQL)")
	fs.StringVar(&s.table, "table", s.table, "table of the counts (dropped and created when the job starts)")
	fs.BoolVar(&s.keepStream, "keep-stream", s.keepStream, "keep the stream after the report (default: delete it)")
	fs.IntVar(&s.top, "top", s.top, "how many of the busiest windows to print")
}

// Configure sets the options without flags (for tests and embedding).
func (s *Sample) Configure(natsURL, pgDSN, table string, events int64, window time.Duration, parallelism int) {
	s.natsURL, s.pgDSN, s.table, s.events, s.window, s.parallelism = natsURL, pgDSN, table, events, window, parallelism
}

// Stream is the name of the stream the job publishes to and reads (set by
// Topology).
func (s *Sample) Stream() string { return s.stream }

// Topology implements samples.Sample. It does no I/O: the stream and the
// table are made when the job opens its source and sink.
func (s *Sample) Topology() (*operators.Topology, error) {
	switch {
	case s.events < 0 || s.pages < 1 || s.parallelism < 1:
		return nil, errors.New("jetstreamtopg: -events must not be negative, -pages and -parallelism must be positive")
	case s.window < time.Millisecond:
		return nil, errors.New("jetstreamtopg: -window must be at least 1ms")
	case s.checkpoint <= 0:
		return nil, errors.New("jetstreamtopg: -checkpoint must be positive")
	}
	id := strconv.FormatInt(time.Now().UnixNano(), 36)
	s.stream, s.subject, s.sink = "SLUICE_CLICKS_"+id, "sluice.clicks."+id, "jetstreamtopg/"+id
	s.prepare, s.prepErr = sync.Once{}, nil
	size := s.window.Milliseconds()

	t := operators.NewTopology("jetstreamtopg", operators.Checkpoints(s.checkpoint))
	src := &preparedSource{s: s, src: jetstream.NewSource(jetstream.SourceConfig[Click]{
		URL: s.natsURL, Stream: s.stream, Bounded: true})}
	clicks := operators.Source(t, "clicks", src)
	windows := operators.Map(clicks, "window", func(c Click) Window { return WindowOf(c, size) })
	byWindow := operators.KeyBy(windows, "by-window", func(w Window) Window { return w }, operators.Parallelism(s.parallelism))
	counts := operators.Count(byWindow, "count") // an update per click
	sink := &preparedSink{s: s, sink: postgres.NewSink(postgres.Config[operators.KV[Window, int64]]{
		DSN: s.pgDSN, Name: s.sink, Table: s.table,
		Columns: []string{"window_start", "page", "clicks"},
		Key:     []string{"window_start", "page"},
		Row: func(kv operators.KV[Window, int64]) []any {
			return []any{time.UnixMilli(kv.Key.Start).UTC(), kv.Key.Page, kv.Value}
		},
	})}
	operators.Sink(counts, "store", sink)
	return t, nil
}

// prepareOnce publishes the clicks to a fresh stream and creates the table,
// once per Topology.
func (s *Sample) prepareOnce(ctx context.Context) error {
	s.prepare.Do(func() { s.prepErr = s.setUp(ctx) })
	return s.prepErr
}

func (s *Sample) setUp(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.pgDSN)
	if err != nil {
		return fmt.Errorf("jetstreamtopg: PostgreSQL at %s: %w", postgres.Describe(s.pgDSN), err)
	}
	defer conn.Close(ctx)
	tbl := pgx.Identifier{s.table}.Sanitize()
	for _, q := range []string{
		"DROP TABLE IF EXISTS " + tbl,
		"CREATE TABLE " + tbl + " (window_start timestamptz NOT NULL, page text NOT NULL, clicks bigint NOT NULL, PRIMARY KEY (window_start, page))",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("jetstreamtopg: table %s: %w", s.table, err)
		}
	}
	nc, err := nats.Connect(s.natsURL)
	if err != nil {
		return fmt.Errorf("jetstreamtopg: NATS: %w", err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc, natsjs.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return err
	}
	if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: s.stream, Subjects: []string{s.subject}}); err != nil {
		return fmt.Errorf("jetstreamtopg: create stream %s: %w", s.stream, err)
	}
	for i := range s.events {
		b, _ := json.Marshal(ClickAt(s.seed, s.pages, i))
		if _, err := js.PublishAsync(s.subject, b); err != nil {
			return fmt.Errorf("jetstreamtopg: publish click %d: %w", i, err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return fmt.Errorf("jetstreamtopg: publish %d clicks: %w", s.events, ctx.Err())
	}
	return nil
}

type preparedSource struct {
	s   *Sample
	src *jetstream.Source[Click]
}

func (p *preparedSource) Open(ctx context.Context, part, parts int, offset int64) (operators.Reader[Click], error) {
	if err := p.s.prepareOnce(ctx); err != nil {
		return nil, err
	}
	return p.src.Open(ctx, part, parts, offset)
}

type preparedSink struct {
	s    *Sample
	sink *postgres.Sink[operators.KV[Window, int64]]
}

func (p *preparedSink) Open(ctx context.Context, part, parts int) (operators.Writer[operators.KV[Window, int64]], error) {
	if err := p.s.prepareOnce(ctx); err != nil {
		return nil, err
	}
	return p.sink.Open(ctx, part, parts)
}

func (p *preparedSink) OpenAt(ctx context.Context, part, parts int, state []byte) (operators.Writer[operators.KV[Window, int64]], error) {
	if err := p.s.prepareOnce(ctx); err != nil {
		return nil, err
	}
	return p.sink.OpenAt(ctx, part, parts, state)
}

// Counts reads the table: the count of every window.
func (s *Sample) Counts(ctx context.Context) (map[Window]int64, error) {
	conn, err := pgx.Connect(ctx, s.pgDSN)
	if err != nil {
		return nil, fmt.Errorf("jetstreamtopg: PostgreSQL at %s: %w", postgres.Describe(s.pgDSN), err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT window_start, page, clicks FROM "+pgx.Identifier{s.table}.Sanitize())
	if err != nil {
		return nil, fmt.Errorf("jetstreamtopg: table %s: %w", s.table, err)
	}
	defer rows.Close()
	m := map[Window]int64{}
	for rows.Next() {
		var start time.Time
		var page string
		var n int64
		if err := rows.Scan(&start, &page, &n); err != nil {
			return nil, err
		}
		m[Window{Start: start.UnixMilli(), Page: page}] = n
	}
	return m, rows.Err()
}

// Report implements samples.Sample: the table against the direct count, the
// busiest windows, and the stream deleted unless -keep-stream.
func (s *Sample) Report(w io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := s.Counts(ctx)
	if err != nil {
		return err
	}
	want := Expected(s.seed, s.pages, s.events, s.window.Milliseconds())
	var total int64
	wrong := 0
	for k, v := range want {
		if got[k] != v {
			wrong++
		}
	}
	for k, v := range got {
		total += v
		if _, ok := want[k]; !ok {
			wrong++
		}
	}
	fmt.Fprintf(w, "%d clicks in %d windows of %v (%d pages) in table %s\n", total, len(got), s.window, s.pages, s.table)
	if wrong == 0 {
		fmt.Fprintf(w, "every window's count equals the direct count of the %d clicks published\n", s.events)
	} else {
		fmt.Fprintf(w, "%d windows differ from the direct count of the %d clicks published\n", wrong, s.events)
	}
	type entry struct {
		w Window
		n int64
	}
	var es []entry
	for k, v := range got {
		es = append(es, entry{k, v})
	}
	slices.SortFunc(es, func(a, b entry) int {
		if c := cmp.Compare(b.n, a.n); c != 0 {
			return c
		}
		if c := cmp.Compare(a.w.Start, b.w.Start); c != 0 {
			return c
		}
		return cmp.Compare(a.w.Page, b.w.Page)
	})
	for i, e := range es[:min(s.top, len(es))] {
		fmt.Fprintf(w, "%4d  %s  %-12s %d\n", i+1, time.UnixMilli(e.w.Start).UTC().Format(time.RFC3339), e.w.Page, e.n)
	}
	if !s.keepStream && s.stream != "" {
		if err := s.deleteStream(ctx); err != nil {
			return err
		}
	}
	if wrong > 0 {
		return fmt.Errorf("jetstreamtopg: %d windows differ from the expected counts", wrong)
	}
	return nil
}

func (s *Sample) deleteStream(ctx context.Context) error {
	nc, err := nats.Connect(s.natsURL)
	if err != nil {
		return fmt.Errorf("jetstreamtopg: NATS: %w", err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return err
	}
	if err := js.DeleteStream(ctx, s.stream); err != nil && !errors.Is(err, natsjs.ErrStreamNotFound) {
		return fmt.Errorf("jetstreamtopg: delete stream %s: %w", s.stream, err)
	}
	return postgres.Reset(ctx, s.pgDSN, s.sink)
}
