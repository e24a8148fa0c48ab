package operators

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/connector"
	"github.com/sluicehq/sluice/mailbox"
)

// The connector interfaces are defined in package connector, which
// connector packages import without the runtime; these are the same types.
type (
	// SourceConnector opens the partitions of a source (connector.Source).
	SourceConnector[T any] = connector.Source[T]
	// Reader reads one partition of a source (connector.Reader).
	Reader[T any] = connector.Reader[T]
	// Waiter is implemented by readers that can run dry (connector.Waiter).
	Waiter = connector.Waiter
	// Checkpointer is implemented by exactly-once writers (connector.Checkpointer).
	Checkpointer = connector.Checkpointer
	// TwoPhaseWriter is implemented by writers that commit with checkpoints (connector.TwoPhaseWriter).
	TwoPhaseWriter = connector.TwoPhaseWriter
	// Aborter is implemented by writers that discard on an early stop (connector.Aborter).
	Aborter = connector.Aborter
	// Acker is implemented by readers that acknowledge with checkpoints (connector.Acker).
	Acker = connector.Acker
	// TraceCarrier is implemented by readers whose records may carry a W3C
	// trace context (connector.TraceCarrier): see TraceParent.
	TraceCarrier = connector.TraceCarrier
	// TraceContext is the trace context one record arrived with (connector.TraceContext).
	TraceContext = connector.TraceContext
	// RestorableSink reopens a partition at a checkpointed position (connector.RestorableSink).
	RestorableSink[T any] = connector.RestorableSink[T]
	// SinkConnector opens the partitions of a sink (connector.Sink).
	SinkConnector[T any] = connector.Sink[T]
	// Writer writes records to one partition of a sink (connector.Writer).
	Writer[T any] = connector.Writer[T]
)

// ---- sources ----

type sliceSource[T any] struct{ xs []T }

// FromSlice reads the elements of xs in order. With parallelism P, instance
// i reads the elements whose index is i modulo P.
func FromSlice[T any](xs []T) SourceConnector[T] { return sliceSource[T]{xs} }

func (s sliceSource[T]) Open(_ context.Context, part, parts int, offset int64) (Reader[T], error) {
	return &genReader[T]{xs: s.xs, n: int64(len(s.xs)), part: part, parts: parts, next: offset}, nil
}

// Unbounded makes Generate produce records until the job is drained.
const Unbounded int64 = -1

type genSource[T any] struct {
	n  int64
	fn func(int64) T
}

// Generate produces the records fn(0), fn(1), ..., fn(n-1), or without end
// when n is Unbounded. fn must be deterministic: a replay from an offset
// produces the same records. With parallelism P, instance i produces the
// indices equal to i modulo P.
func Generate[T any](n int64, fn func(i int64) T) SourceConnector[T] { return genSource[T]{n, fn} }

func (g genSource[T]) Open(_ context.Context, part, parts int, offset int64) (Reader[T], error) {
	if g.fn == nil {
		return nil, errors.New("generate: nil function")
	}
	return &genReader[T]{fn: g.fn, n: g.n, part: part, parts: parts, next: offset}, nil
}

// genReader reads indices part, part+parts, ... below n; next counts the
// records this partition has read, which is its offset.
type genReader[T any] struct {
	fn          func(int64) T
	xs          []T // FromSlice's: copied without a call per element (fn nil)
	n           int64
	part, parts int
	next        int64
}

func (r *genReader[T]) Read(buf []T) (int, error) {
	first := int64(r.part) + r.next*int64(r.parts)
	k := len(buf)
	if r.n >= 0 {
		if first >= r.n {
			return 0, io.EOF
		}
		k = int(min(int64(k), (r.n-first+int64(r.parts)-1)/int64(r.parts)))
	}
	fn, i, step := r.fn, first, int64(r.parts)
	if fn == nil {
		xs := r.xs
		for j := range buf[:k] {
			buf[j] = xs[i]
			i += step
		}
		r.next += int64(k)
		return k, nil
	}
	for j := range buf[:k] {
		buf[j] = fn(i)
		i += step
	}
	r.next += int64(k)
	return k, nil
}

// RescaleOffsets implements connector.OffsetRescaler: see rescaleStrided.
func (s sliceSource[T]) RescaleOffsets(offsets []int64, parts int) ([]int64, error) {
	return rescaleStrided(offsets, parts)
}

// RescaleOffsets implements connector.OffsetRescaler: see rescaleStrided.
func (g genSource[T]) RescaleOffsets(offsets []int64, parts int) ([]int64, error) {
	return rescaleStrided(offsets, parts)
}

// rescaleStrided redistributes the offsets of a source whose partition i of
// P reads the indices i, i+P, i+2P, ...: possible when what the partitions
// read together is a prefix 0..m-1 of the sequence (each read its share of
// it), as when every partition is at its end or a source of parallelism 1
// is split; then partition j of parts starts at its share of m.
func rescaleStrided(offsets []int64, parts int) ([]int64, error) {
	if parts < 1 || len(offsets) < 1 {
		return nil, fmt.Errorf("rescale from %d to %d partitions", len(offsets), parts)
	}
	share := func(m int64, j, p int) int64 { return max(0, (m-int64(j)+int64(p)-1)/int64(p)) }
	var m int64
	for _, o := range offsets {
		if o < 0 {
			return nil, fmt.Errorf("offset %d", o)
		}
		m += o
	}
	for i, o := range offsets {
		if o != share(m, i, len(offsets)) {
			return nil, fmt.Errorf("its %d partitions read %v records, not together the first %d of the sequence: "+
				"a strided source rescales only when they did (at parallelism 1, or at their end)", len(offsets), offsets, m)
		}
	}
	out := make([]int64, parts)
	for j := range out {
		out[j] = share(m, j, parts)
	}
	return out, nil
}

func (r *genReader[T]) Offset() int64 { return r.next }
func (r *genReader[T]) Close() error  { return nil }

type fileLines struct{ path string }

// FileLines reads the lines of a text file, without their line endings. Its
// offset is a byte position, so a replay resumes at the next line. It runs
// with parallelism 1.
func FileLines(path string) SourceConnector[string] { return fileLines{path} }

func (f fileLines) Open(_ context.Context, part, parts int, offset int64) (Reader[string], error) {
	if parts != 1 {
		return nil, fmt.Errorf("file %s: a file source runs with parallelism 1, not %d", f.path, parts)
	}
	fh, err := os.Open(f.path)
	if err != nil {
		return nil, err
	}
	if _, err := fh.Seek(offset, io.SeekStart); err != nil {
		fh.Close()
		return nil, fmt.Errorf("file %s: seek to %d: %w", f.path, offset, err)
	}
	return &lineReader{f: fh, r: bufio.NewReaderSize(fh, 64<<10), off: offset, path: f.path}, nil
}

type lineReader struct {
	f    *os.File
	r    *bufio.Reader
	off  int64
	path string
}

func (l *lineReader) Read(buf []string) (int, error) {
	k := 0
	for k < len(buf) {
		line, err := l.r.ReadString('\n')
		if len(line) > 0 {
			l.off += int64(len(line))
			line = strings.TrimSuffix(line, "\n")
			buf[k] = strings.TrimSuffix(line, "\r")
			k++
		}
		if err == io.EOF {
			if k == 0 {
				return 0, io.EOF
			}
			return k, nil
		}
		if err != nil {
			return k, fmt.Errorf("file %s at byte %d: %w", l.path, l.off, err)
		}
	}
	return k, nil
}

func (l *lineReader) Offset() int64 { return l.off }
func (l *lineReader) Close() error  { return l.f.Close() }

type chanSource[T any] struct{ ch <-chan T }

// FromChannel reads records from ch until it is closed. It is not
// replayable (records read before a failure are gone) and runs with
// parallelism 1. The channel's sender owns it and closes it to end the
// stream; draining the job also ends it.
func FromChannel[T any](ch <-chan T) SourceConnector[T] { return chanSource[T]{ch} }

func (chanSource[T]) notReplayable() {}

func (c chanSource[T]) Open(_ context.Context, part, parts int, _ int64) (Reader[T], error) {
	if parts != 1 {
		return nil, fmt.Errorf("channel source runs with parallelism 1, not %d", parts)
	}
	return &chanReader[T]{ch: c.ch}, nil
}

type chanReader[T any] struct {
	ch     <-chan T
	mu     sync.Mutex
	held   []T // received by Wait, not yet read
	closed bool
	n      int64
}

func (c *chanReader[T]) Read(buf []T) (int, error) {
	c.mu.Lock()
	k := copy(buf, c.held)
	c.held = c.held[k:]
	closed := c.closed
	c.mu.Unlock()
	for !closed && k < len(buf) {
		select {
		case v, ok := <-c.ch:
			if !ok {
				closed = true
				c.mu.Lock()
				c.closed = true
				c.mu.Unlock()
				continue
			}
			buf[k] = v
			k++
		default:
			c.n += int64(k)
			return k, nil
		}
	}
	c.n += int64(k)
	if k == 0 && closed {
		return 0, io.EOF
	}
	return k, nil
}

func (c *chanReader[T]) Wait(ctx context.Context) error {
	select {
	case v, ok := <-c.ch:
		c.mu.Lock()
		if ok {
			c.held = append(c.held, v)
		} else {
			c.closed = true
		}
		c.mu.Unlock()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *chanReader[T]) Offset() int64 { return c.n }
func (c *chanReader[T]) Close() error  { return nil }

// ---- sinks ----

type funcSink[T any] struct{ f func(T) error }

// SinkFunc calls f for every record. With parallelism P, f is called from P
// goroutines at once; each call for one instance follows the previous one.
func SinkFunc[T any](f func(T) error) SinkConnector[T] { return funcSink[T]{f} }

func (s funcSink[T]) Open(context.Context, int, int) (Writer[T], error) {
	if s.f == nil {
		return nil, errors.New("sink function is nil")
	}
	return s, nil
}

func (s funcSink[T]) Write(rs []T) error {
	for _, r := range rs {
		if err := s.f(r); err != nil {
			return err
		}
	}
	return nil
}

func (s funcSink[T]) Close() error { return nil }

// KeepsNoRecords says that Write keeps no records' slice: f gets copies
// (stage.KeepsNoRecords).
func (funcSink[T]) KeepsNoRecords() {}

// Format renders a record as one line of text for the text sinks.
type Format[T any] func(T) string

func formatOrDefault[T any](f Format[T]) Format[T] {
	if f != nil {
		return f
	}
	return func(v T) string { return fmt.Sprint(v) }
}

type linesSink[T any] struct {
	w      io.Writer
	mu     *sync.Mutex
	format Format[T]
}

// Lines writes one line per record to w, formatted by format (fmt.Sprint
// when nil). Instances share w; each batch is written whole.
func Lines[T any](w io.Writer, format Format[T]) SinkConnector[T] {
	return linesSink[T]{w: w, mu: new(sync.Mutex), format: formatOrDefault(format)}
}

// Stdout writes one line per record to standard output with fmt.Sprint.
func Stdout[T any]() SinkConnector[T] { return Lines[T](os.Stdout, nil) }

func (s linesSink[T]) Open(context.Context, int, int) (Writer[T], error) { return s, nil }

func (s linesSink[T]) Write(rs []T) error {
	var sb strings.Builder
	for _, r := range rs {
		sb.WriteString(s.format(r))
		sb.WriteByte('\n')
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := io.WriteString(s.w, sb.String())
	return err
}

func (s linesSink[T]) Close() error { return nil }

// Collector keeps every record it receives in memory, for tests and small
// jobs. It is safe for concurrent use; use it as a SinkConnector.
type Collector[T any] struct {
	mu sync.Mutex
	// chunks hold the records in arrival order: each is filled to its
	// capacity, then a larger one follows. A record is copied once as it
	// arrives and once by Items, where one growing slice copied the whole
	// output again at every growth (a third of a pass-through query's CPU
	// at 500 000 records, with the GC's scanning of the copies).
	chunks [][]T
	n      int
}

// maxCollectorChunk bounds the records of one of a Collector's chunks.
const maxCollectorChunk = 1 << 16

// NewCollector returns an empty collector.
func NewCollector[T any]() *Collector[T] { return &Collector[T]{} }

// Open implements SinkConnector.
func (c *Collector[T]) Open(context.Context, int, int) (Writer[T], error) {
	return collectorWriter[T]{c}, nil
}

// Items returns a copy of the records received so far, in arrival order
// (records from different instances interleave).
func (c *Collector[T]) Items() []T {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 {
		return nil
	}
	out := make([]T, 0, c.n)
	for _, ch := range c.chunks {
		out = append(out, ch...)
	}
	return out
}

// Len returns the number of records received so far.
func (c *Collector[T]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// add appends rs, filling the last chunk before starting another.
func (c *Collector[T]) add(rs []T) {
	c.n += len(rs)
	for len(rs) > 0 {
		if k := len(c.chunks); k > 0 {
			last := &c.chunks[k-1]
			m := min(len(rs), cap(*last)-len(*last))
			*last = append(*last, rs[:m]...)
			if rs = rs[m:]; len(rs) == 0 {
				return
			}
		}
		size := 256
		if k := len(c.chunks); k > 0 {
			size = min(2*cap(c.chunks[k-1]), maxCollectorChunk)
		}
		c.chunks = append(c.chunks, make([]T, 0, max(size, min(len(rs), maxCollectorChunk))))
	}
}

type collectorWriter[T any] struct{ c *Collector[T] }

func (w collectorWriter[T]) Write(rs []T) error {
	w.c.mu.Lock()
	w.c.add(rs)
	w.c.mu.Unlock()
	return nil
}

func (w collectorWriter[T]) Close() error { return nil }

// Ingress is a source that an application feeds from its own goroutines:
// the door into a topology from outside. Send waits while the ingress is
// full (its capacity, plus what back-pressure lets into the topology),
// honouring its context; TrySend fails at once with an error wrapping
// mailbox.ErrFull. Close ends the stream after the records already sent. It
// runs with parallelism 1 and is not replayable.
type Ingress[T any] struct {
	ch       chan T
	mu       sync.RWMutex
	closed   chan struct{} // Close was called
	gone     chan struct{} // the job stopped reading
	inflight atomic.Int64  // Sends that passed the closed check
	once     sync.Once
	goneOnce sync.Once
}

// NewIngress returns an ingress that buffers up to capacity records.
func NewIngress[T any](capacity int) *Ingress[T] {
	return &Ingress[T]{ch: make(chan T, max(capacity, 0)), closed: make(chan struct{}), gone: make(chan struct{})}
}

// ErrIngressClosed is returned by Send and TrySend after Close, or once the
// job that read the ingress has ended.
var ErrIngressClosed = errors.New("operators: ingress closed")

func (in *Ingress[T]) enter() bool {
	in.mu.RLock()
	defer in.mu.RUnlock()
	select {
	case <-in.closed:
		return false
	case <-in.gone:
		return false
	default:
		in.inflight.Add(1)
		return true
	}
}

// Send hands v to the topology, waiting for room until ctx ends.
func (in *Ingress[T]) Send(ctx context.Context, v T) error {
	if !in.enter() {
		return ErrIngressClosed
	}
	defer in.inflight.Add(-1)
	select {
	case in.ch <- v:
		return nil
	case <-in.gone:
		return ErrIngressClosed
	case <-ctx.Done():
		return fmt.Errorf("operators: ingress send: %w", context.Cause(ctx))
	}
}

// TrySend hands v to the topology if there is room, and returns an error
// wrapping mailbox.ErrFull otherwise.
func (in *Ingress[T]) TrySend(v T) error {
	if !in.enter() {
		return ErrIngressClosed
	}
	defer in.inflight.Add(-1)
	select {
	case in.ch <- v:
		return nil
	default:
		return fmt.Errorf("operators: ingress: %w", mailbox.ErrFull)
	}
}

// Len is the number of records waiting in the ingress's buffer.
func (in *Ingress[T]) Len() int { return len(in.ch) }

// Close ends the stream once the records sent so far are read.
func (in *Ingress[T]) Close() {
	in.once.Do(func() {
		in.mu.Lock()
		close(in.closed)
		in.mu.Unlock()
	})
}

func (*Ingress[T]) notReplayable() {}

// Open implements SourceConnector.
func (in *Ingress[T]) Open(_ context.Context, part, parts int, _ int64) (Reader[T], error) {
	if parts != 1 {
		return nil, fmt.Errorf("ingress runs with parallelism 1, not %d", parts)
	}
	return &ingressReader[T]{in: in}, nil
}

type ingressReader[T any] struct {
	in   *Ingress[T]
	held []T
	n    int64
	mu   sync.Mutex
}

func (r *ingressReader[T]) Read(buf []T) (int, error) {
	r.mu.Lock()
	k := copy(buf, r.held)
	r.held = r.held[k:]
	r.mu.Unlock()
	for k < len(buf) {
		select {
		case v := <-r.in.ch:
			buf[k] = v
			k++
			continue
		default:
		}
		break
	}
	r.n += int64(k)
	if k > 0 {
		return k, nil
	}
	select {
	case <-r.in.closed:
		// Every Send that got in has finished: what they sent is in ch.
		if r.in.inflight.Load() == 0 && len(r.in.ch) == 0 {
			return 0, io.EOF
		}
	default:
	}
	return 0, nil
}

func (r *ingressReader[T]) Wait(ctx context.Context) error {
	select {
	case v := <-r.in.ch:
		r.mu.Lock()
		r.held = append(r.held, v)
		r.mu.Unlock()
		return nil
	case <-r.in.closed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *ingressReader[T]) Offset() int64 { return r.n }

// Close tells waiting senders that nobody will read any more.
func (r *ingressReader[T]) Close() error {
	r.in.goneOnce.Do(func() { close(r.in.gone) })
	return nil
}

// Log is an in-memory, append-only log of records that a topology reads as
// a replayable source: like a broker's topic, it keeps every record, so a
// job restored from a checkpoint reads again from the checkpoint's offset.
// An application (or a test) appends with Append and ends the stream with
// Close; readers wait for records without spinning. Instance i of n reads
// the records i, i+n, i+2n, ... It is safe for concurrent use.
type Log[T any] struct {
	mu     sync.Mutex
	recs   []T
	closed bool
	grew   chan struct{} // closed and replaced when records arrive or the log closes
}

// NewLog returns an empty log.
func NewLog[T any]() *Log[T] { return &Log[T]{grew: make(chan struct{})} }

// Append adds records to the end of the log.
func (l *Log[T]) Append(vs ...T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		panic("operators: Append to a closed Log")
	}
	l.recs = append(l.recs, vs...)
	close(l.grew)
	l.grew = make(chan struct{})
}

// Close ends the log: readers reach the end of the stream after its last
// record.
func (l *Log[T]) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.grew)
	}
}

// Len returns the number of records appended so far.
func (l *Log[T]) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.recs)
}

// RescaleOffsets implements connector.OffsetRescaler (see FromSlice).
func (l *Log[T]) RescaleOffsets(offsets []int64, parts int) ([]int64, error) {
	return rescaleStrided(offsets, parts)
}

// Open implements SourceConnector.
func (l *Log[T]) Open(_ context.Context, part, parts int, offset int64) (Reader[T], error) {
	if offset < 0 {
		return nil, fmt.Errorf("log: negative offset %d", offset)
	}
	return &logReader[T]{l: l, part: part, parts: parts, taken: offset}, nil
}

type logReader[T any] struct {
	l           *Log[T]
	part, parts int
	taken       int64 // records of this instance read
}

func (r *logReader[T]) Read(buf []T) (int, error) {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	n := 0
	for n < len(buf) {
		i := int(r.taken)*r.parts + r.part
		if i >= len(r.l.recs) {
			break
		}
		buf[n] = r.l.recs[i]
		n++
		r.taken++
	}
	if n == 0 && r.l.closed {
		return 0, io.EOF
	}
	return n, nil
}

// Wait implements Waiter.
func (r *logReader[T]) Wait(ctx context.Context) error {
	r.l.mu.Lock()
	if r.l.closed || int(r.taken)*r.parts+r.part < len(r.l.recs) {
		r.l.mu.Unlock()
		return nil
	}
	grew := r.l.grew
	r.l.mu.Unlock()
	select {
	case <-grew:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *logReader[T]) Offset() int64 { return r.taken }
func (r *logReader[T]) Close() error  { return nil }
