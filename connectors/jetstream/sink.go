package jetstream

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/supervision"
)

// Defaults of SinkConfig's zero fields.
const (
	DefaultMaxPending     = 1024
	DefaultPublishTimeout = 5 * time.Second
)

// SinkConfig configures a JetStream sink. Name and one of Subject and
// SubjectOf are required.
type SinkConfig[T any] struct {
	// URL of the NATS servers, as for SourceConfig.URL.
	URL string
	// Subject every record is published to, unless SubjectOf is set.
	Subject string
	// SubjectOf gives each record's subject.
	SubjectOf func(T) string
	// Name is the prefix of every message's Nats-Msg-Id, typically
	// "topology/operator": the id of a record is NAME/PARTITION/SEQ (see
	// MsgID). It must be stable across runs of the job and unique among the
	// publishers of a stream.
	Name string
	// Encode turns a record into a message's data. Default encoding/json.
	// An encoding error fails the sink.
	Encode func(T) ([]byte, error)
	// MaxPending bounds the publishes waiting for their acknowledgement;
	// Write waits for the oldest when it is reached. Default
	// DefaultMaxPending.
	MaxPending int
	// Timeout bounds the wait for one publish's acknowledgement. Default
	// DefaultPublishTimeout.
	Timeout time.Duration
	// Attempts bounds the attempts to publish a record whose asynchronous
	// publish failed (the failed one not counted); Backoff spaces them. The
	// same Nats-Msg-Id is sent every time. Default
	// supervision.DefaultMaxAttempts, and supervision's default backoff.
	Attempts int
	Backoff  supervision.Backoff
	// Options are extra connection options (credentials, TLS).
	Options []nats.Option
}

// SinkStats are a sink's counters, summed over its partitions.
type SinkStats struct {
	Published  int64 // acknowledged as new messages
	Duplicates int64 // acknowledged as duplicates: the stream already had the id
	Retries    int64 // publishes sent again after a failure
	Failures   int64 // records that could not be published: each failed the sink
}

// Sink publishes records to JetStream. Create it with NewSink; it is an
// operators.SinkConnector and operators.RestorableSink whose writers are
// operators.Checkpointer.
type Sink[T any] struct {
	cfg     SinkConfig[T]
	retryer *supervision.Retryer
	err     error

	published, duplicates, retries, failures atomic.Int64
}

// NewSink returns a sink for cfg. An invalid configuration is reported by
// Err, and by Open when the job starts.
func NewSink[T any](cfg SinkConfig[T]) *Sink[T] {
	s := &Sink[T]{cfg: cfg}
	var errs []error
	if cfg.Name == "" {
		errs = append(errs, errors.New("no Name: the Nats-Msg-Id prefix is required"))
	}
	if cfg.Subject == "" && cfg.SubjectOf == nil {
		errs = append(errs, errors.New("no Subject or SubjectOf"))
	}
	if cfg.MaxPending < 0 || cfg.Timeout < 0 {
		errs = append(errs, errors.New("negative MaxPending or Timeout"))
	}
	if s.cfg.MaxPending == 0 {
		s.cfg.MaxPending = DefaultMaxPending
	}
	if s.cfg.Timeout == 0 {
		s.cfg.Timeout = DefaultPublishTimeout
	}
	if s.cfg.Attempts == 0 {
		s.cfg.Attempts = supervision.DefaultMaxAttempts
	}
	if s.cfg.Encode == nil {
		s.cfg.Encode = func(v T) ([]byte, error) { return json.Marshal(v) }
	}
	r, err := supervision.NewRetryer(supervision.WithMaxAttempts(s.cfg.Attempts), supervision.WithRetryBackoff(s.cfg.Backoff),
		supervision.WithOnRetry(func(int, time.Duration, error) { s.retries.Add(1) }))
	if err != nil {
		errs = append(errs, err)
	}
	s.retryer = r
	if len(errs) > 0 {
		s.err = fmt.Errorf("%s: %w", s.where(), errors.Join(errs...))
	}
	return s
}

func (s *Sink[T]) where() string {
	subj := s.cfg.Subject
	if subj == "" {
		subj = "(per record)"
	}
	return fmt.Sprintf("jetstream sink %q: subject %s at %s", s.cfg.Name, subj, servers(s.cfg.URL))
}

// Err reports an invalid configuration (nil if it is valid).
func (s *Sink[T]) Err() error { return s.err }

// Stats returns the sink's counters.
func (s *Sink[T]) Stats() SinkStats {
	return SinkStats{Published: s.published.Load(), Duplicates: s.duplicates.Load(),
		Retries: s.retries.Load(), Failures: s.failures.Load()}
}

// MsgID is the Nats-Msg-Id of the record with sequence number seq in
// partition part of a sink named name: NAME/PART/SEQ, the format of
// operators.IdempotencyKey.
func MsgID(name string, part int, seq uint64) string {
	return operators.IdempotencyKey(name, part, seq)
}

// Open implements operators.SinkConnector: the partition numbers its
// records from 0.
func (s *Sink[T]) Open(ctx context.Context, part, parts int) (operators.Writer[T], error) {
	return s.open(ctx, part, 0)
}

// OpenAt implements operators.RestorableSink: the partition goes on
// numbering its records from the sequence number of the checkpoint, so the
// records replayed after a restore get the ids they had before and the
// stream drops them as duplicates.
func (s *Sink[T]) OpenAt(ctx context.Context, part, parts int, state []byte) (operators.Writer[T], error) {
	if len(state) != 8 {
		return nil, fmt.Errorf("%s: partition %d: checkpointed state of %d bytes, want 8", s.where(), part, len(state))
	}
	return s.open(ctx, part, binary.BigEndian.Uint64(state))
}

func (s *Sink[T]) open(ctx context.Context, part int, seq uint64) (operators.Writer[T], error) {
	if s.err != nil {
		return nil, s.err
	}
	nc, err := connect(s.cfg.URL, "sluice jetstream sink "+s.cfg.Name, s.cfg.Options)
	if err != nil {
		return nil, fmt.Errorf("%s: connect: %w", s.where(), err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(2*s.cfg.MaxPending),
		jetstream.WithPublishAsyncTimeout(s.cfg.Timeout))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("%s: %w", s.where(), err)
	}
	if s.cfg.Subject != "" {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := js.StreamNameBySubject(octx, s.cfg.Subject)
		cancel()
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("%s: partition %d: find the stream that captures the subject: %w", s.where(), part, err)
		}
	}
	return &sinkWriter[T]{s: s, ctx: ctx, nc: nc, js: js, part: part, seq: seq}, nil
}

type sinkWriter[T any] struct {
	s       *Sink[T]
	ctx     context.Context
	nc      *nats.Conn
	js      jetstream.JetStream
	part    int
	seq     uint64                   // the sequence number of the next record
	pending []jetstream.PubAckFuture // in publish order
}

// Write publishes the records asynchronously, each with its Nats-Msg-Id; it
// waits only when MaxPending publishes are unacknowledged.
func (w *sinkWriter[T]) Write(records []T) error {
	cfg := &w.s.cfg
	for _, r := range records {
		id := MsgID(cfg.Name, w.part, w.seq)
		w.seq++ // used up even if the record fails, as the HTTP sink does
		data, err := cfg.Encode(r)
		if err != nil {
			w.s.failures.Add(1)
			return fmt.Errorf("%s: record %s: encode %T: %w", w.s.where(), id, r, err)
		}
		subj := cfg.Subject
		if cfg.SubjectOf != nil {
			subj = cfg.SubjectOf(r)
		}
		msg := &nats.Msg{Subject: subj, Data: data, Header: nats.Header{jetstream.MsgIDHeader: []string{id}}}
		if err := w.reap(len(w.pending) >= cfg.MaxPending); err != nil {
			return err
		}
		f, err := w.js.PublishMsgAsync(msg)
		if err != nil {
			if err := w.retry(msg, err); err != nil {
				return err
			}
			continue
		}
		w.pending = append(w.pending, f)
	}
	return w.reap(false)
}

// reap settles the acknowledged publishes at the front of the queue; with
// wait, it waits for the first one at least.
func (w *sinkWriter[T]) reap(wait bool) error {
	n := 0
	defer func() { w.pending = append(w.pending[:0], w.pending[n:]...) }()
	for n < len(w.pending) {
		f := w.pending[n]
		var ack *jetstream.PubAck
		var err error
		if wait {
			t := time.NewTimer(w.s.cfg.Timeout + time.Second) // the future's own timeout comes first
			select {
			case ack = <-f.Ok():
			case err = <-f.Err():
			case <-t.C:
				err = jetstream.ErrAsyncPublishTimeout
			case <-w.ctx.Done():
				t.Stop()
				return fmt.Errorf("%s: %w", w.s.where(), context.Cause(w.ctx))
			}
			t.Stop()
			wait = false
		} else {
			select {
			case ack = <-f.Ok():
			case err = <-f.Err():
			default:
				return nil
			}
		}
		n++
		if err != nil {
			if err := w.retry(f.Msg(), err); err != nil {
				return err
			}
			continue
		}
		w.count(ack)
	}
	return nil
}

func (w *sinkWriter[T]) count(ack *jetstream.PubAck) {
	if ack.Duplicate {
		w.s.duplicates.Add(1)
	} else {
		w.s.published.Add(1)
	}
}

// retry publishes msg again, synchronously, under the sink's retry policy:
// its Nats-Msg-Id makes a publish that did reach the stream harmless.
func (w *sinkWriter[T]) retry(msg *nats.Msg, first error) error {
	attempt := 0
	err := w.s.retryer.Do(w.ctx, func(ctx context.Context) error {
		attempt++
		if attempt == 1 {
			return first // the asynchronous publish was the first attempt
		}
		actx, cancel := context.WithTimeout(ctx, w.s.cfg.Timeout)
		defer cancel()
		ack, err := w.js.PublishMsg(actx, msg)
		if err != nil {
			return err
		}
		w.count(ack)
		return nil
	})
	if err != nil {
		w.s.failures.Add(1)
		return fmt.Errorf("%s: publish %s: %w", w.s.where(), msg.Header.Get(jetstream.MsgIDHeader), err)
	}
	return nil
}

// flush waits until every publish so far is acknowledged.
func (w *sinkWriter[T]) flush() error {
	for len(w.pending) > 0 {
		if err := w.reap(true); err != nil {
			return err
		}
	}
	return nil
}

// Checkpoint implements operators.Checkpointer: every record written so far
// is in the stream; the state is the sequence number of the next record.
func (w *sinkWriter[T]) Checkpoint() ([]byte, error) {
	if err := w.flush(); err != nil {
		return nil, err
	}
	return binary.BigEndian.AppendUint64(nil, w.seq), nil
}

// Close waits for the publishes in flight and closes the connection.
func (w *sinkWriter[T]) Close() error {
	err := w.flush()
	w.nc.Close()
	return err
}

// Abort closes the connection without waiting for the publishes in flight:
// a restore publishes them again under the same ids.
func (w *sinkWriter[T]) Abort() error {
	w.nc.Close()
	return nil
}
