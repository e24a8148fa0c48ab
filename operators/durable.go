package operators

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/durablelog"
	"github.com/sluicehq/sluice/internal/msgpacksafe"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/mailbox"
)

// DurableIngress is the door into a checkpointed topology from an
// application: Send returns once its record is durable in a bbolt-backed
// log, and the topology reads the log as a replayable source, so a job
// restored from a checkpoint reads again from the checkpoint's offset and
// every record Send acknowledged is counted exactly once, across crashes.
// Records are trimmed from the log once a completed checkpoint covers them.
//
// Concurrent Sends share one transaction (group commit, one fsync); one
// sender that wants throughput sends batches with SendBatch. Send waits
// while Capacity records are unread by the topology (back-pressure from
// the topology reaches the application), honouring its context; TrySend
// fails at once with an error wrapping mailbox.ErrFull. Close ends the
// stream durably: the job, and a job restarted later, ends after its last
// record. A record is msgpack-encoded and decoded with sluice's bounded
// decoder. It runs with parallelism 1.
//
//	in, err := operators.NewDurableIngress[Order](sys, "orders", operators.DurableIngressConfig{})
//	src := operators.Source(t, "orders", in)
//	... operators.Start(ctx, sys, t, operators.Checkpoints(time.Second)) ...
//	err = in.Send(ctx, order) // durable when it returns nil
type DurableIngress[T any] struct {
	name string
	log  *durablelog.Log
	file *store.File // a file of its own (DurableIngressConfig.File), else nil
}

// DurableIngressConfig configures a DurableIngress.
type DurableIngressConfig struct {
	// Capacity is how many records may be sent and not yet read by the
	// topology before Send waits (default 4096).
	Capacity int
	// File is a store file of its own for the log; default the system's
	// store (actors.Config.Store). Release closes it.
	File string
}

// NewDurableIngress opens the durable ingress name in sys's store (or in
// cfg.File), with the records sent before and not yet trimmed: a process
// restarted after a crash opens it again under the same name.
func NewDurableIngress[T any](sys *actors.System, name string, cfg DurableIngressConfig) (*DurableIngress[T], error) {
	d := &DurableIngress[T]{name: name}
	db, err := func() (*bolt.DB, error) {
		if cfg.File == "" {
			return sys.DB()
		}
		f, err := store.Open(cfg.File)
		if err != nil {
			return nil, err
		}
		d.file = f
		return f.DB, nil
	}()
	if err != nil {
		return nil, fmt.Errorf("operators: durable ingress %q: %w", name, err)
	}
	capacity := cfg.Capacity
	if capacity <= 0 {
		capacity = 4096
	}
	if d.log, err = durablelog.Open(db, name, capacity); err != nil {
		d.Release()
		return nil, fmt.Errorf("operators: %w", err)
	}
	return d, nil
}

// Send appends v and returns once it is durable, waiting for room until
// ctx ends.
func (d *DurableIngress[T]) Send(ctx context.Context, v T) error {
	return d.SendBatch(ctx, []T{v})
}

// SendBatch appends vs, in order, in one transaction and returns once they
// are durable, waiting for room until ctx ends.
func (d *DurableIngress[T]) SendBatch(ctx context.Context, vs []T) error {
	recs, err := d.encode(vs)
	if err != nil {
		return err
	}
	_, err = d.log.Append(ctx, recs)
	return d.wrap(err)
}

// TrySend appends v if there is room and returns once it is durable; it
// fails at once with an error wrapping mailbox.ErrFull if there is none.
func (d *DurableIngress[T]) TrySend(v T) error {
	recs, err := d.encode([]T{v})
	if err != nil {
		return err
	}
	_, err = d.log.TryAppend(recs)
	return d.wrap(err)
}

// Close ends the stream after the records sent so far, durably.
func (d *DurableIngress[T]) Close() error { return d.wrap(d.log.Close()) }

// Release closes the ingress's own store file (DurableIngressConfig.File)
// once the job that reads it has ended; without one it does nothing.
func (d *DurableIngress[T]) Release() error {
	if d.file == nil {
		return nil
	}
	err := d.file.DB.Close()
	d.file = nil
	return err
}

// DurableIngressStats are a durable ingress's positions: the records kept
// are [First, Next), Read is where the topology reads.
type DurableIngressStats struct {
	First, Next, Read int64
	Closed            bool
}

// Stats returns the ingress's positions now.
func (d *DurableIngress[T]) Stats() DurableIngressStats {
	s := d.log.Stats()
	return DurableIngressStats{First: s.First, Next: s.Next, Read: s.Read, Closed: s.Closed}
}

// ErrDurableIngressClosed is returned by Send after Close.
var ErrDurableIngressClosed = durablelog.ErrClosed

func (d *DurableIngress[T]) encode(vs []T) ([][]byte, error) {
	// One encoder and one buffer for the batch; each record is its slice of
	// it (the log keeps them until its commit, which Append waits for).
	var buf bytes.Buffer
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(&buf)
	ends := make([]int, len(vs))
	for i := range vs {
		if err := enc.Encode(&vs[i]); err != nil {
			return nil, fmt.Errorf("operators: durable ingress %q: encode: %w", d.name, err)
		}
		ends[i] = buf.Len()
	}
	all := buf.Bytes()
	recs := make([][]byte, len(vs))
	start := 0
	for i, end := range ends {
		recs[i] = all[start:end:end]
		start = end
	}
	return recs, nil
}

func (d *DurableIngress[T]) wrap(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, durablelog.ErrFull):
		return fmt.Errorf("operators: %w: %w", err, mailbox.ErrFull)
	}
	return fmt.Errorf("operators: %w", err)
}

// Open implements SourceConnector: the reader starts at offset (0 or a
// checkpoint's), acknowledges (trims) what completed checkpoints cover and
// waits for records without spinning.
func (d *DurableIngress[T]) Open(_ context.Context, part, parts int, offset int64) (Reader[T], error) {
	if parts != 1 {
		return nil, fmt.Errorf("durable ingress %q runs with parallelism 1, not %d", d.name, parts)
	}
	if offset == 0 { // a fresh job reads what is kept
		offset = d.log.Stats().First
	}
	r, err := d.log.Reader(offset)
	if err != nil {
		return nil, err
	}
	return &durableReader[T]{d: d, r: r, lim: msgpacksafe.Limits{Source: "durable ingress " + d.name}}, nil
}

type durableReader[T any] struct {
	d   *DurableIngress[T]
	r   *durablelog.Reader
	buf [][]byte
	lim msgpacksafe.Limits
}

func (r *durableReader[T]) Read(buf []T) (int, error) {
	if cap(r.buf) < len(buf) {
		r.buf = make([][]byte, len(buf))
	}
	at := r.r.Offset()
	n, err := r.r.Read(r.buf[:len(buf)])
	for i := 0; i < n; i++ {
		var v T
		if derr := msgpacksafe.Decode(r.buf[i], &v, r.lim); derr != nil {
			return 0, fmt.Errorf("record %d: %w", at+int64(i), derr)
		}
		buf[i] = v
		r.buf[i] = nil
	}
	return n, err
}

func (r *durableReader[T]) Offset() int64                  { return r.r.Offset() }
func (r *durableReader[T]) Wait(ctx context.Context) error { return r.r.Wait(ctx) }
func (r *durableReader[T]) Close() error                   { return nil }

// Ack implements Acker: a completed checkpoint covers the records before
// offset, which the log drops.
func (r *durableReader[T]) Ack(_ context.Context, offset int64) error { return r.d.log.Trim(offset) }
