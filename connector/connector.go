// Package connector defines what sources and sinks implement to take part in
// a sluice job: a Source opens a Reader per partition, a Sink opens a Writer
// per partition, and optional interfaces add what exactly-once needs
// (Checkpointer, TwoPhaseWriter with RestorableSink, Acker, Aborter) and
// waiting without spinning (Waiter).
//
// Connector packages import this package only, not the runtime; package
// operators names the same interfaces (operators.SourceConnector is
// connector.Source) for the topology API.
//
// A minimal source over a slice:
//
//	type slice struct{ xs []int }
//
//	func (s slice) Open(_ context.Context, part, parts int, offset int64) (connector.Reader[int], error) {
//		return &reader{xs: s.xs, next: int(offset)}, nil
//	}
//
// whose Reader fills buf from xs[next:] and returns 0, io.EOF at the end.
package connector

import (
	"context"
	"time"
)

// SourceConnector opens the partitions of a source. A source with
// parallelism P opens partitions 0..P-1, one per instance.
type Source[T any] interface {
	// Open opens partition part of parts, positioned at offset: 0 for the
	// beginning, or a value that Reader.Offset returned earlier.
	Open(ctx context.Context, part, parts int, offset int64) (Reader[T], error)
}

// Reader reads one partition of a source. Its methods are called from one
// goroutine at a time.
type Reader[T any] interface {
	// Read fills buf from its start and returns how many records it read. It
	// returns 0, io.EOF at the end of the partition, and 0, nil when nothing
	// is available now (implement Waiter then). It must not block for long.
	Read(buf []T) (int, error)
	// Offset is the position after the last record read: reopening at it
	// continues exactly there (replay after a failure).
	Offset() int64
	Close() error
}

// Waiter is implemented by readers of sources that can run dry for a while
// (a channel, a network connection). Wait blocks until Read may return
// records again, or ctx ends.
type Waiter interface {
	Wait(ctx context.Context) error
}

// IngestionTimer is implemented by readers that know when the records they
// return arrived at the system's edge (a message's publish time, a request's
// arrival): IngestedAt is the time the oldest record of the last Read
// arrived. The job measures end-to-end latency from it (DESIGN.md, Latency
// and shedding); without it, from the moment the source read the batch, so
// the time records waited outside before they were read is not seen.
type IngestionTimer interface {
	IngestedAt() time.Time
}

// Checkpointer is implemented by Writers whose position belongs in a
// checkpoint (exactly-once sinks). Checkpoint must make everything written
// so far durable enough to be restored, and return the position.
type Checkpointer interface {
	Checkpoint() ([]byte, error)
}

// TwoPhaseWriter is implemented by Writers that commit to an external
// system only when a checkpoint completes (a database transaction, a
// broker's publish), as Flink's two-phase commit sinks do. At a checkpoint's
// barrier PreCommit stages everything written since the previous one under
// the checkpoint's id and returns what must be recorded in the checkpoint to
// finish the commit later; once every operator has recorded its state and
// the checkpoint is complete, Commit makes it visible. After a crash the
// job restores the last completed checkpoint and opens the sink with
// RestorableSink.OpenAt and the PreCommit bytes of that checkpoint: the
// writer must finish that commit if it had not happened (idempotently, e.g.
// by keeping the last committed id in the same transaction), and discard
// anything staged after it.
//
// At the end of the stream (the sources ended or the job was drained) a job
// with checkpoints takes a final checkpoint before closing its sinks: the
// last records are pre-committed and committed under its id like any
// others, and Close follows with nothing left to commit. Close must still
// commit what it holds, for a job without checkpoints (there is no other
// commit then) and for a writer closed without a final checkpoint. When a
// job stops early, Abort (if implemented) is called instead of Close.
type TwoPhaseWriter interface {
	PreCommit(checkpoint uint64) ([]byte, error)
	Commit(ctx context.Context, checkpoint uint64) error
}

// Aborter is implemented by Writers that must not commit when the job
// stops early (it fails, restarts or is stopped): the runtime calls Abort
// instead of Close, and the writer discards what no checkpoint covers.
type Aborter interface {
	Abort() error
}

// Acker is implemented by Readers of sources that acknowledge records to
// their origin (a broker) only once a completed checkpoint covers them.
// Ack(offset) says that every record before offset is covered: offset is
// what Offset returned at the checkpoint's barrier.
type Acker interface {
	Ack(ctx context.Context, offset int64) error
}

// RestorableSink is implemented by Sinks whose Writers are
// Checkpointers or TwoPhaseWriters: OpenAt reopens a partition at a
// checkpointed position.
type RestorableSink[T any] interface {
	OpenAt(ctx context.Context, part, parts int, state []byte) (Writer[T], error)
}

// SinkConnector opens the partitions of a sink, one per instance.
type Sink[T any] interface {
	Open(ctx context.Context, part, parts int) (Writer[T], error)
}

// Writer writes records to one partition of a sink. Close is called at end
// of stream and must flush; it is also called when the job stops early
// (unless the writer is an Aborter). In a job with checkpoints, the Close of
// a TwoPhaseWriter or Checkpointer waits for the final checkpoint, which
// records and commits its last records first.
type Writer[T any] interface {
	Write(records []T) error
	Close() error
}

// OffsetRescaler is implemented by sources whose partitions' offsets can be
// redistributed over another number of partitions, so that a job restored
// from a savepoint (or checkpoint) may run the source at another
// parallelism. RescaleOffsets gets the offset of every old partition (its
// Reader.Offset, 0 for one never read) and returns those of parts new
// partitions, each to be passed to Open, that read exactly the records the
// old partitions had not read; or an error saying why it cannot. A source
// without it keeps its parallelism: a restore at another one is refused.
type OffsetRescaler interface {
	RescaleOffsets(offsets []int64, parts int) ([]int64, error)
}

// StateRescaler is implemented by sinks whose per-partition checkpointed
// state (a Checkpointer's) can be redistributed over another number of
// partitions, so that a job restored from a savepoint (or checkpoint) may
// run the sink at another parallelism. RescaleStates gets the state of
// every old partition (nil for one that recorded none) and returns those of
// parts new partitions, each passed to the new partition's OpenAt; or an
// error saying why it cannot. A sink with state and without it keeps its
// parallelism: a restore at another one is refused.
type StateRescaler interface {
	RescaleStates(states [][]byte, parts int) ([][]byte, error)
}

// TraceCarrier is implemented by readers whose records may arrive with a
// W3C trace context (an HTTP request's traceparent header, a message's
// headers). TraceContexts returns those of the records of the last Read
// that carry one, in increasing order of Index; it is valid until the next
// Read. The runtime reads it only when the topology samples by parent
// (operators.TraceParent) and decodes each on its checked path: a reader
// passes the header values on as they came, without parsing them.
type TraceCarrier interface {
	TraceContexts() []TraceContext
}

// TraceContext is the trace context one record arrived with.
type TraceContext struct {
	Index       int    // the record's index in the buffer of the last Read
	TraceParent string // the traceparent header's value, as received
	TraceState  string // the tracestate header's value, "" if none
}
