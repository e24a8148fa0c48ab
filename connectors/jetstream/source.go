package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/operators"
)

// Defaults of SourceConfig's zero fields.
const (
	DefaultAckWait       = 10 * time.Minute
	DefaultMaxAckPending = 1 << 20
	DefaultPollWait      = 5 * time.Second
	// DefaultInactive is how long the server keeps the ephemeral consumer of
	// a source without a Consumer name once nobody pulls from it.
	DefaultInactive = 5 * time.Minute
)

// SourceConfig configures a JetStream source. Only Stream is required.
type SourceConfig[T any] struct {
	// URL of the NATS servers, comma-separated: nats://user:pass@host:4222.
	// Credentials may also come from Options. Default nats.DefaultURL.
	URL string
	// Stream is the name of the JetStream stream to read.
	Stream string
	// Subjects filters the stream. With parallelism 1, at most one subject
	// (several need a server that supports multiple filters, 2.10 or
	// later); nil reads the whole stream. With parallelism P > 1, exactly P
	// subjects: partition i reads Subjects[i] with a consumer of its own.
	Subjects []string
	// Consumer names the durable consumer of the source (partition i of P >
	// 1 uses Consumer-i). Its ack floor then shows, between runs, how far
	// completed checkpoints have acknowledged the stream. Default: an
	// ephemeral consumer per partition, which the server deletes
	// DefaultInactive after its reader goes away.
	Consumer string
	// StartSeq is where a partition that has no checkpoint starts: the
	// stream sequence of its first message. Default 1, the start of the
	// stream (a run from scratch replays the stream).
	StartSeq uint64
	// Bounded makes each partition end (io.EOF) once it has read the
	// messages that the stream holds when the partition opens. Default:
	// read without end, until the job is drained or stopped.
	Bounded bool
	// Decode turns a message's data into a record. Default: encoding/json
	// into a T. A decoding error fails the source with an error naming the
	// stream sequence and subject.
	Decode func(data []byte) (T, error)
	// AckNone makes the consumer acknowledge nothing: for jobs without
	// checkpoints, where no Ack would ever come. Default: the consumer
	// acknowledges explicitly, AckAll, once a checkpoint covers a message.
	AckNone bool
	// AckWait is how long the server waits for an acknowledgement before it
	// delivers a message again. Checkpoints must complete well within it;
	// the reader drops redeliveries of what it has read anyway. Default
	// DefaultAckWait.
	AckWait time.Duration
	// MaxAckPending bounds the messages read and not yet covered by a
	// completed checkpoint: reading pauses at the bound until the next
	// checkpoint completes. Default DefaultMaxAckPending.
	MaxAckPending int
	// PollWait is how long one pull of Wait lasts at the server before it
	// is renewed. Default DefaultPollWait.
	PollWait time.Duration
	// Options are extra connection options (credentials, TLS, a name).
	Options []nats.Option
}

// SourceStats are a source's counters, summed over its partitions.
type SourceStats struct {
	Read        int64 // messages read and handed to the job
	Redelivered int64 // redeliveries of messages already read, dropped
	Acks        int64 // acknowledgements sent (one per completed checkpoint and partition, at most)
	AckErrors   int64 // acknowledgements that failed (the next one covers them: AckAll)
	Recreated   int64 // consumers created again after the server lost them
	Expired     int64 // pulls of Wait that expired with nothing (Wait renews them)
}

// Source reads a JetStream stream. Create it with NewSource; it is an
// operators.SourceConnector whose readers are operators.Waiter and
// operators.Acker.
type Source[T any] struct {
	cfg SourceConfig[T]
	err error // invalid configuration, reported by Open

	read, redelivered, acks, ackErrors, recreated, expired atomic.Int64
}

// NewSource returns a source for cfg. An invalid configuration is reported
// by Err, and by Open when the job starts.
func NewSource[T any](cfg SourceConfig[T]) *Source[T] {
	s := &Source[T]{cfg: cfg}
	var errs []error
	if cfg.Stream == "" {
		errs = append(errs, errors.New("no stream name"))
	}
	if cfg.AckWait < 0 || cfg.MaxAckPending < 0 || cfg.PollWait < 0 {
		errs = append(errs, errors.New("negative AckWait, MaxAckPending or PollWait"))
	}
	if s.cfg.AckWait == 0 {
		s.cfg.AckWait = DefaultAckWait
	}
	if s.cfg.MaxAckPending == 0 {
		s.cfg.MaxAckPending = DefaultMaxAckPending
	}
	if s.cfg.PollWait == 0 {
		s.cfg.PollWait = DefaultPollWait
	}
	if s.cfg.StartSeq == 0 {
		s.cfg.StartSeq = 1
	}
	if s.cfg.Decode == nil {
		s.cfg.Decode = func(b []byte) (T, error) {
			var v T
			err := json.Unmarshal(b, &v)
			return v, err
		}
	}
	if len(errs) > 0 {
		s.err = fmt.Errorf("jetstream source %q at %s: %w", cfg.Stream, servers(cfg.URL), errors.Join(errs...))
	}
	return s
}

// Err reports an invalid configuration (nil if it is valid).
func (s *Source[T]) Err() error { return s.err }

// Stats returns the source's counters.
func (s *Source[T]) Stats() SourceStats {
	return SourceStats{Read: s.read.Load(), Redelivered: s.redelivered.Load(), Acks: s.acks.Load(),
		AckErrors: s.ackErrors.Load(), Recreated: s.recreated.Load(), Expired: s.expired.Load()}
}

// ConsumerName is the name of the consumer that partition part of parts
// reads with, when SourceConfig.Consumer is set ("" otherwise).
func (s *Source[T]) ConsumerName(part, parts int) string {
	if s.cfg.Consumer == "" {
		return ""
	}
	if parts > 1 {
		return s.cfg.Consumer + "-" + strconv.Itoa(part)
	}
	return s.cfg.Consumer
}

func (s *Source[T]) where() string {
	return fmt.Sprintf("jetstream source: stream %q at %s", s.cfg.Stream, servers(s.cfg.URL))
}

// Open implements operators.SourceConnector: it connects, and creates the
// partition's consumer so that it delivers from offset (the stream sequence
// a checkpoint recorded), or from StartSeq when offset is 0.
func (s *Source[T]) Open(ctx context.Context, part, parts int, offset int64) (operators.Reader[T], error) {
	if s.err != nil {
		return nil, s.err
	}
	if offset < 0 {
		return nil, fmt.Errorf("%s: partition %d: negative offset %d", s.where(), part, offset)
	}
	var filters []string
	switch {
	case parts == 1:
		filters = s.cfg.Subjects
	case len(s.cfg.Subjects) == parts:
		filters = s.cfg.Subjects[part : part+1]
	default:
		return nil, fmt.Errorf("%s: parallelism %d needs one subject per partition in Subjects, not %d", s.where(), parts, len(s.cfg.Subjects))
	}
	nc, err := connect(s.cfg.URL, "sluice jetstream source "+s.cfg.Stream, s.cfg.Options)
	if err != nil {
		return nil, fmt.Errorf("%s: connect: %w", s.where(), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("%s: %w", s.where(), err)
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &reader[T]{s: s, nc: nc, js: js, part: part, filters: filters, ctx: rctx, cancel: cancel,
		name: s.ConsumerName(part, parts), next: uint64(offset)}
	if r.name == "" {
		r.name = "sluice_" + nats.NewInbox()[len(nats.InboxPrefix):] // unique, a valid consumer name
		r.ephemeral = true
	}
	octx, ocancel := context.WithTimeout(ctx, 10*time.Second)
	defer ocancel()
	if s.cfg.Bounded {
		st, err := js.Stream(octx, s.cfg.Stream)
		if err == nil {
			var info *jetstream.StreamInfo
			info, err = st.Info(octx)
			if err == nil {
				r.end = info.State.LastSeq
			}
		}
		if err != nil {
			r.closeConn()
			return nil, fmt.Errorf("%s: partition %d: %w", s.where(), part, err)
		}
	}
	if err := r.createConsumer(octx, true); err != nil {
		r.closeConn()
		return nil, err
	}
	return r, nil
}

// reader reads one partition. Read, Offset, Ack and Close come from the
// job's instance, one at a time; Wait runs on a goroutine of its own and
// may overlap them, so the messages it pulls go to held under mu, and
// fetchMu keeps pulls from overlapping (two pulls in flight could deliver
// out of order).
type reader[T any] struct {
	s         *Source[T]
	nc        *nats.Conn
	js        jetstream.JetStream
	part      int
	filters   []string
	name      string
	ephemeral bool
	ctx       context.Context // ends at Close
	cancel    context.CancelFunc

	fetchMu sync.Mutex
	cons    jetstream.Consumer // replaced under fetchMu

	mu     sync.Mutex
	held   []jetstream.Msg // pulled by Wait, not yet read
	closed bool

	pause time.Duration // Wait's pause after a failed pull; Wait's own (one Wait at a time)

	// Owned by the instance's goroutine.
	next    uint64 // the stream sequence to read next; 0: from StartSeq, nothing read
	end     uint64 // Bounded: the stream's last sequence when the partition opened
	eof     bool   // Bounded: a message past end arrived
	last    jetstream.Msg
	lastSeq uint64
	tcs     []operators.TraceContext // of the last Read
	marks   []mark                   // offsets handed out at barriers, with the message to acknowledge them
}

type mark struct {
	offset int64
	msg    jetstream.Msg
}

// maxMarks bounds the offsets kept for acknowledgement: a mark dropped
// early is covered by a later one (AckAll acknowledges everything before the
// message acknowledged).
const maxMarks = 64

func (r *reader[T]) where() string {
	return fmt.Sprintf("%s: partition %d (consumer %q)", r.s.where(), r.part, r.name)
}

// createConsumer (re)creates the consumer so that it delivers from the next
// sequence to read. A durable consumer left by an earlier run is deleted
// first: its start position cannot be changed, and the offset of the
// checkpoint, not the consumer's state, says where the job resumes.
func (r *reader[T]) createConsumer(ctx context.Context, first bool) error {
	cfg := r.s.cfg
	start := r.next
	if start == 0 {
		start = cfg.StartSeq
	}
	cc := jetstream.ConsumerConfig{
		Name:          r.name,
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   start,
		AckPolicy:     jetstream.AckAllPolicy,
		AckWait:       cfg.AckWait,
		MaxAckPending: cfg.MaxAckPending,
		MaxDeliver:    -1,
	}
	if cfg.AckNone {
		cc.AckPolicy, cc.AckWait, cc.MaxAckPending = jetstream.AckNonePolicy, 0, 0
	}
	if r.ephemeral {
		cc.InactiveThreshold = DefaultInactive
	} else {
		cc.Durable = r.name
	}
	switch len(r.filters) {
	case 0:
	case 1:
		cc.FilterSubject = r.filters[0]
	default:
		cc.FilterSubjects = r.filters
	}
	if !r.ephemeral || !first {
		if err := r.js.DeleteConsumer(ctx, cfg.Stream, r.name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("%s: delete the consumer left by an earlier run: %w", r.where(), err)
		}
	}
	c, err := r.js.CreateConsumer(ctx, cfg.Stream, cc)
	if err != nil {
		return fmt.Errorf("%s: create consumer at stream sequence %d: %w", r.where(), start, err)
	}
	r.cons = c
	return nil
}

// lostConsumer says whether err means the server no longer has the
// consumer (deleted, or an ephemeral one that expired).
func lostConsumer(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) ||
		errors.Is(err, nats.ErrNoResponders)
}

// transient says whether err will likely pass by itself: the connection is
// being re-established, or the server was slow to answer.
func transient(err error) bool {
	return errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, jetstream.ErrNoHeartbeat)
}

// take turns m into the record *dst and advances the offset; it returns
// false for a message to skip (a redelivery, or past the end of a bounded
// partition).
func (r *reader[T]) take(m jetstream.Msg, buf []T, k int) (bool, error) {
	meta, err := m.Metadata()
	if err != nil {
		return false, fmt.Errorf("%s: message on %q: %w", r.where(), m.Subject(), err)
	}
	seq := meta.Sequence.Stream
	if seq < r.next {
		r.s.redelivered.Add(1)
		return false, nil
	}
	if r.s.cfg.Bounded && seq > r.end {
		r.eof = true
		return false, nil
	}
	v, err := r.s.cfg.Decode(m.Data())
	if err != nil {
		return false, fmt.Errorf("%s: stream sequence %d, subject %q: decode: %w", r.where(), seq, m.Subject(), err)
	}
	buf[k] = v
	r.next, r.last, r.lastSeq = seq+1, m, seq
	if tc, ok := traceContext(m.Headers()); ok {
		tc.Index = k
		r.tcs = append(r.tcs, tc)
	}
	return true, nil
}

// Read implements operators.Reader: it hands over what Wait pulled, then
// pulls at most the rest of buf with a no-wait request, so it never asks the
// server for more than buf holds.
func (r *reader[T]) Read(buf []T) (int, error) {
	r.tcs = r.tcs[:0]
	if len(buf) == 0 {
		return 0, nil
	}
	r.mu.Lock()
	held := r.held
	r.held = nil
	r.mu.Unlock()
	k := 0
	for i, m := range held {
		if k == len(buf) {
			r.mu.Lock()
			r.held = append(held[i:], r.held...)
			r.mu.Unlock()
			break
		}
		ok, err := r.take(m, buf, k)
		if err != nil {
			return k, err
		}
		if ok {
			k++
		}
	}
	if k < len(buf) && !r.done() && r.fetchMu.TryLock() {
		n, err := r.pull(buf, k)
		k += n
		if err == nil && k == 0 && r.s.cfg.Bounded && !r.done() {
			// Nothing came: the end may lie beyond messages that the filter
			// leaves out. No Wait pulls meanwhile (fetchMu is held), so
			// nothing is in flight between the server and held.
			if p, perr := r.pending(); perr == nil && p == 0 {
				r.eof = true
			}
		}
		r.fetchMu.Unlock()
		if err != nil {
			r.s.read.Add(int64(k))
			return k, err
		}
	}
	r.s.read.Add(int64(k))
	if k == 0 && r.done() {
		r.mu.Lock()
		empty := len(r.held) == 0
		r.mu.Unlock()
		if empty {
			return 0, io.EOF
		}
	}
	return k, nil
}

// TraceContexts implements operators.TraceCarrier: the traceparent and
// tracestate headers of the messages the last Read returned.
func (r *reader[T]) TraceContexts() []operators.TraceContext { return r.tcs }

// Bounds of the trace context headers kept per message. A longer value is
// kept cut to one byte over the runtime's bound, so that the runtime still
// refuses it (a cut traceparent must not become a valid one).
const (
	maxTraceParent = 256 + 1
	maxTraceState  = 512 + 1
)

// traceContext reads a message's W3C trace context, as received, from its
// "traceparent" and "tracestate" headers (or their canonical spellings, as
// net/http writes them): several traceparent values are joined with commas,
// which the runtime refuses.
func traceContext(h nats.Header) (operators.TraceContext, bool) {
	get := func(k, canon string, n int) string {
		vs := h[k]
		if len(vs) == 0 {
			vs = h[canon]
		}
		s := strings.Join(vs, ",")
		if len(s) > n {
			s = s[:n]
		}
		return s
	}
	if len(h) == 0 {
		return operators.TraceContext{}, false
	}
	tp := get("traceparent", "Traceparent", maxTraceParent)
	if tp == "" {
		return operators.TraceContext{}, false
	}
	return operators.TraceContext{TraceParent: tp, TraceState: get("tracestate", "Tracestate", maxTraceState)}, true
}

// done says whether a bounded partition has read everything up to its end.
func (r *reader[T]) done() bool {
	return r.s.cfg.Bounded && (r.eof || r.end == 0 || r.next > r.end)
}

// pending asks the server how many messages the consumer has not yet
// delivered. fetchMu is held.
func (r *reader[T]) pending() (uint64, error) {
	ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
	defer cancel()
	info, err := r.cons.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.NumPending, nil
}

// pull fetches up to len(buf) messages that are available now. fetchMu is
// held.
func (r *reader[T]) pull(buf []T, from int) (int, error) {
	batch, err := r.cons.FetchNoWait(len(buf) - from)
	if err != nil {
		return 0, r.fetchFailed(err)
	}
	k := from
	for m := range batch.Messages() {
		if k == len(buf) { // cannot happen: the server sends at most what buf has room for
			break
		}
		ok, err := r.take(m, buf, k)
		if err != nil {
			return k - from, err
		}
		if ok {
			k++
		}
	}
	if err := batch.Error(); err != nil {
		return k - from, r.fetchFailed(err)
	}
	return k - from, nil
}

// fetchFailed recreates a consumer that the server lost (at the next
// sequence to read, so nothing is skipped or read twice) and reports any
// other error. fetchMu is held.
func (r *reader[T]) fetchFailed(err error) error {
	if transient(err) {
		return nil // nothing now: Wait pauses, and the next Read tries again
	}
	if !lostConsumer(err) {
		return fmt.Errorf("%s: pull: %w", r.where(), err)
	}
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	if cerr := r.createConsumer(ctx, false); cerr != nil {
		return fmt.Errorf("%s: the consumer is gone (%v), and: %w", r.where(), err, cerr)
	}
	r.s.recreated.Add(1)
	return nil
}

// errClosed ends a Wait on a closed reader.
var errClosed = errors.New("jetstream source: reader closed")

// Wait implements operators.Waiter: it pulls one message, waiting at the
// server up to PollWait at a time, until one arrives, ctx ends or the
// reader closes. The message waits in held for the next Read.
func (r *reader[T]) Wait(ctx context.Context) error {
	for {
		r.mu.Lock()
		n, closed := len(r.held), r.closed
		r.mu.Unlock()
		switch {
		case n > 0:
			return nil
		case closed:
			return errClosed
		case ctx.Err() != nil:
			return ctx.Err()
		}
		got, err := r.waitPull(ctx)
		if err == nil {
			r.pause = 0
		}
		if len(got) > 0 {
			r.mu.Lock()
			r.held = append(r.held, got...)
			r.mu.Unlock()
			return nil
		}
		if err == nil {
			r.s.expired.Add(1)
			continue // the pull expired: renew it
		}
		if ctx.Err() != nil || r.ctx.Err() != nil {
			continue // reported at the top of the loop
		}
		// Let Read see the error (it recreates a lost consumer, waits out a
		// reconnection, or fails), after a pause that grows while errors
		// persist, so that they do not spin.
		r.pause = min(max(2*r.pause, 50*time.Millisecond), time.Second)
		t := time.NewTimer(r.pause)
		select {
		case <-t.C:
		case <-ctx.Done():
		case <-r.ctx.Done():
		}
		t.Stop()
		return nil
	}
}

// waitPull is one pull of a single message that waits at the server.
func (r *reader[T]) waitPull(ctx context.Context) ([]jetstream.Msg, error) {
	r.fetchMu.Lock()
	defer r.fetchMu.Unlock()
	fctx, cancel := context.WithTimeout(ctx, r.s.cfg.PollWait)
	defer cancel()
	stop := context.AfterFunc(r.ctx, cancel)
	defer stop()
	batch, err := r.cons.Fetch(1, jetstream.FetchContext(fctx))
	if err != nil {
		return nil, err
	}
	var got []jetstream.Msg
	for m := range batch.Messages() {
		got = append(got, m)
	}
	err = batch.Error()
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		err = nil // the pull's own time was up
	}
	return got, err
}

// Offset implements operators.Reader: the stream sequence of the next
// message to read (0 before the first message of a partition that started
// without an offset). The runtime asks for it at every checkpoint barrier;
// the reader remembers the message that the offset would acknowledge.
func (r *reader[T]) Offset() int64 {
	off := int64(r.next)
	if r.last != nil && r.lastSeq+1 == r.next && (len(r.marks) == 0 || r.marks[len(r.marks)-1].offset != off) {
		if len(r.marks) == maxMarks {
			r.marks = append(r.marks[:0], r.marks[1:]...)
		}
		r.marks = append(r.marks, mark{offset: off, msg: r.last})
	}
	return off
}

// Ack implements operators.Acker: a completed checkpoint covers every
// message before offset, so the last message read before it is
// acknowledged, which (AckAll) acknowledges all before it too. A failed
// acknowledgement is counted (AckErrors) and not an error of the job: the
// checkpoint, not the acknowledgement, says where a restore resumes, and
// the next acknowledgement covers this one.
func (r *reader[T]) Ack(ctx context.Context, offset int64) error {
	if r.s.cfg.AckNone {
		return nil
	}
	i := -1
	for j, m := range r.marks {
		if m.offset <= offset {
			i = j
		}
	}
	if i < 0 {
		return nil
	}
	m := r.marks[i].msg
	r.marks = append(r.marks[:0], r.marks[i+1:]...)
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := m.DoubleAck(actx); err != nil {
		r.s.ackErrors.Add(1)
		return nil
	}
	r.s.acks.Add(1)
	return nil
}

// Close implements operators.Reader: it ends a Wait in progress and closes
// the connection. An ephemeral consumer is deleted; a durable one stays,
// with its ack floor at the last completed checkpoint.
func (r *reader[T]) Close() error {
	r.mu.Lock()
	r.closed = true
	r.held = nil
	r.mu.Unlock()
	r.cancel()
	r.fetchMu.Lock() // a pull in flight ends now that r.ctx is done
	defer r.fetchMu.Unlock()
	if r.ephemeral && !r.nc.IsClosed() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = r.js.DeleteConsumer(ctx, r.s.cfg.Stream, r.name) // else it expires
		cancel()
	}
	r.closeConn()
	return nil
}

func (r *reader[T]) closeConn() {
	r.cancel()
	r.nc.Close()
}
