package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
)

// batch is a run of records in columns: values, and event times when the
// stream carries them (nil otherwise).
type batch[T any] struct {
	vs []T
	ts []int64
}

// Retain keeps the records for which keep(i) is true (overflow policies
// shed records one at a time).
func (b *batch[T]) Retain(keep func(i int) bool) int {
	j := 0
	for i := range b.vs {
		if keep(i) {
			b.vs[j] = b.vs[i]
			if b.ts != nil {
				b.ts[j] = b.ts[i]
			}
			j++
		}
	}
	clear(b.vs[j:])
	b.vs = b.vs[:j]
	if b.ts != nil {
		b.ts = b.ts[:j]
	}
	return j
}

// pusher is one stage of a fused chain. push processes a batch the caller
// owns: the stage may modify it in place but must not keep it after
// returning. finish is called once at end of stream, after the last push:
// the stage emits what it still holds and calls its successor's finish.
//
// watermark says that event time has reached wm (Unix nanoseconds): no
// record with a time at or before wm follows. Stages that keep event-time
// state (windows, joins) act on it; the others pass it on.
type pusher[T any] interface {
	push(b *batch[T])
	watermark(wm int64)
	finish()
}

// inlet feeds the payload of a data envelope to the head of a chain.
type inlet interface {
	deliver(payload any)
	watermark(wm int64)
	finish()
}

type typedInlet[T any] struct{ head pusher[T] }

func (i *typedInlet[T]) deliver(p any)      { i.head.push(p.(*batch[T])) }
func (i *typedInlet[T]) watermark(wm int64) { i.head.watermark(wm) }
func (i *typedInlet[T]) finish()            { i.head.finish() }

// counters are one operator instance's statistics, read concurrently by Stats.
type counters struct {
	in, out atomic.Int64
	dead    atomic.Int64 // records given to the dead-letter store
	late    atomic.Int64 // records behind event time beyond the allowed lateness
	wm      atomic.Int64 // the stage's event time (Unix ns), 0 before the first watermark
}

// stageCtx is what a stage knows about where it runs.
type stageCtx struct {
	name     string // the operator's
	kind     string
	head     bool // the operator reads the task's mailbox
	instance int
	parts    int
	ctx      context.Context
	c        *counters
	batch    int
	restore  []byte          // the stage's state in the checkpoint the job resumes from
	restored bool            // restore is set (a stage's state may be empty)
	failures *failureHandler // the record-failure policy, nil: a panic fails the operator
	tr       *tracer         // the instance's tracer, nil when tracing is off
	// after runs f in the instance's actor once d has passed (processing-time
	// timers); now is the job's clock.
	after func(d time.Duration, f func())
	now   func() time.Time
	// finalCheckpoint: the job takes a final checkpoint after its input
	// ends, so a sink whose writer is a TwoPhaseWriter or a Checkpointer
	// stays open at end of stream until that checkpoint is committed.
	finalCheckpoint bool
	// panicErr is the error of user code that panicked (the job's kit).
	panicErr func(v any) error
}

// key names the stage's instance in checkpoints: "operator/instance".
func (sc *stageCtx) key() string { return sc.name + "/" + strconv.Itoa(sc.instance) }

// stateful is implemented by stages whose state belongs in checkpoints.
type stateful interface {
	snapshotState(checkpoint uint64) ([]byte, error)
}

// fail aborts the instance with err; the supervisor reports it as the
// operator's failure.
func (sc *stageCtx) fail(err error) {
	panic(&stageFailure{op: sc.name, err: err})
}

// attribute turns a panic in the stage's user code into a failure of this
// operator, so that a fused chain reports which of its operators failed. It
// is deferred once per batch.
func (sc *stageCtx) attribute() {
	if r := recover(); r != nil {
		if _, ok := r.(*stageFailure); ok {
			panic(r)
		}
		panic(&stageFailure{op: sc.name, err: sc.panicErr(r)})
	}
}

type stageFailure struct {
	op  string
	err error
}

func (f *stageFailure) Error() string { return f.op + ": " + f.err.Error() }

type mapStage[In, Out any] struct {
	f    func(In) Out
	next pusher[Out]
	sc   *stageCtx
	out  batch[Out]
}

func (s *mapStage[In, Out]) push(b *batch[In]) {
	defer s.sc.attribute()
	if end := s.sc.traced(len(b.vs)); end != nil {
		defer end()
	}
	n := len(b.vs)
	s.sc.c.in.Add(int64(n))
	if s.sc.failures != nil {
		s.guarded(b)
		return
	}
	out := s.out.vs
	if cap(out) < n {
		out = make([]Out, n, max(n, s.sc.batch))
	}
	out = out[:n]
	mapInto(s.f, b.vs, out)
	s.out.vs, s.out.ts = out, b.ts
	s.sc.c.out.Add(int64(n))
	s.next.push(&s.out)
}

func (s *mapStage[In, Out]) watermark(wm int64) { s.next.watermark(wm) }

func (s *mapStage[In, Out]) finish() { s.next.finish() }

// The record loops of the fast paths live in functions without defers, so
// that the compiler keeps them tight (the stages defer their failure
// attribution and tracing once per batch).

func mapInto[In, Out any](f func(In) Out, vs []In, out []Out) {
	for i, v := range vs {
		out[i] = f(v)
	}
}

// keepInPlace moves the values keep accepts to the front of vs and returns
// how many there are.
func keepInPlace[T any](keep func(T) bool, vs []T) int {
	j := 0
	for _, v := range vs {
		if keep(v) {
			vs[j] = v
			j++
		}
	}
	return j
}

type filterStage[T any] struct {
	keep func(T) bool
	next pusher[T]
	sc   *stageCtx
}

func (s *filterStage[T]) push(b *batch[T]) {
	defer s.sc.attribute()
	if end := s.sc.traced(len(b.vs)); end != nil {
		defer end()
	}
	s.sc.c.in.Add(int64(len(b.vs)))
	if s.sc.failures != nil {
		s.guarded(b)
		return
	}
	j := 0
	if b.ts == nil {
		j = keepInPlace(s.keep, b.vs)
	} else {
		for i, v := range b.vs {
			if s.keep(v) {
				b.vs[j], b.ts[j] = v, b.ts[i]
				j++
			}
		}
		b.ts = b.ts[:j]
	}
	b.vs = b.vs[:j]
	if j == 0 {
		return
	}
	s.sc.c.out.Add(int64(j))
	s.next.push(b)
}

func (s *filterStage[T]) watermark(wm int64) { s.next.watermark(wm) }

func (s *filterStage[T]) finish() { s.next.finish() }

type flatMapStage[In, Out any] struct {
	f    func(In) []Out
	next pusher[Out]
	sc   *stageCtx
	out  batch[Out]
}

func (s *flatMapStage[In, Out]) push(b *batch[In]) {
	defer s.sc.attribute()
	if end := s.sc.traced(len(b.vs)); end != nil {
		defer end()
	}
	s.sc.c.in.Add(int64(len(b.vs)))
	s.out.vs, s.out.ts = s.out.vs[:0], s.out.ts[:0]
	if s.sc.failures != nil {
		for i := 0; i < len(b.vs); {
			i = s.guardedFrom(b, i)
		}
	} else {
		for i, v := range b.vs {
			s.emit(b, i, s.f(v))
		}
	}
	s.flush(b.ts != nil)
}

// emit adds the outputs of input record i.
func (s *flatMapStage[In, Out]) emit(b *batch[In], i int, outs []Out) {
	s.out.vs = append(s.out.vs, outs...)
	if b.ts != nil {
		for range outs {
			s.out.ts = append(s.out.ts, b.ts[i])
		}
	}
	if len(s.out.vs) >= s.sc.batch { // keep the batch bounded however much f expands
		s.flush(b.ts != nil)
	}
}

func (s *flatMapStage[In, Out]) flush(timed bool) {
	if len(s.out.vs) == 0 {
		return
	}
	if !timed {
		s.out.ts = nil
	}
	s.sc.c.out.Add(int64(len(s.out.vs)))
	s.next.push(&s.out)
	s.out.vs, s.out.ts = s.out.vs[:0], s.out.ts[:0]
}

func (s *flatMapStage[In, Out]) watermark(wm int64) { s.next.watermark(wm) }

func (s *flatMapStage[In, Out]) finish() { s.next.finish() }

// keyedStage keeps one accumulator per key, in memory.
// maxLinks bounds the links of an aggregate's span.
const maxLinks = 128

// keyedState is the checkpointed form of a keyed stage: its entries in
// first-seen order.
type keyedState[K comparable, A any] struct {
	Keys []K `msgpack:"k"`
	Accs []A `msgpack:"a"`
}

func (s *keyedStage[K, T, A, O]) snapshotState(uint64) ([]byte, error) {
	st := keyedState[K, A]{Keys: s.order, Accs: make([]A, len(s.order))}
	for i, k := range s.order {
		st.Accs[i] = s.state[k]
	}
	b, err := msgpack.Marshal(&st)
	if err != nil {
		return nil, fmt.Errorf("encode state of %d keys: %w", len(s.order), err)
	}
	return b, nil
}

func (s *keyedStage[K, T, A, O]) restoreState(b []byte) error {
	var st keyedState[K, A]
	if err := msgpacksafe.Check(b); err != nil {
		return err
	}
	if err := msgpack.Unmarshal(b, &st); err != nil {
		return err
	}
	if len(st.Keys) != len(st.Accs) {
		return fmt.Errorf("%d keys but %d values", len(st.Keys), len(st.Accs))
	}
	s.order = st.Keys
	s.state = make(map[K]A, len(st.Keys))
	for i, k := range st.Keys {
		s.state[k] = st.Accs[i]
	}
	return nil
}

type keyedStage[K comparable, T, A, O any] struct {
	links []trace.Link // the traced inputs of the results not yet emitted (EmitAtEnd)
	key   func(T) K
	step  func(acc A, seen bool, v T) A
	kv    func(K, A) O // the result of a key
	emit  EmitMode
	next  pusher[O]
	sc    *stageCtx
	state map[K]A
	order []K // keys in first-seen order, so that EmitAtEnd is deterministic
	out   batch[O]
}

func (s *keyedStage[K, T, A, O]) push(b *batch[T]) {
	defer s.sc.attribute()
	if end := s.sc.traced(len(b.vs)); end != nil {
		defer end()
	}
	s.sc.c.in.Add(int64(len(b.vs)))
	s.out.vs = s.out.vs[:0]
	if tr := s.sc.tr; tr != nil && tr.ctx != nil && s.emit == EmitAtEnd && len(s.links) < maxLinks {
		s.links = append(s.links, trace.LinkFromContext(tr.ctx))
	}
	if s.sc.failures != nil {
		for i := 0; i < len(b.vs); {
			i = s.guardedFrom(b, i)
		}
	} else {
		for _, v := range b.vs {
			s.fold(v)
		}
	}
	if len(s.out.vs) > 0 {
		s.out.ts = nil
		if len(s.out.vs) == len(b.vs) { // one update per record: same event times
			s.out.ts = b.ts
		}
		s.sc.c.out.Add(int64(len(s.out.vs)))
		s.next.push(&s.out)
	}
}

// fold adds one record to its key's accumulator.
func (s *keyedStage[K, T, A, O]) fold(v T) {
	k := s.key(v)
	acc, seen := s.state[k]
	acc = s.step(acc, seen, v) // may panic: nothing changed yet
	if !seen {
		s.order = append(s.order, k)
	}
	s.state[k] = acc
	if s.emit == EmitUpdates {
		s.out.vs = append(s.out.vs, s.kv(k, acc))
	}
}

func (s *keyedStage[K, T, A, O]) watermark(wm int64) { s.next.watermark(wm) }

func (s *keyedStage[K, T, A, O]) finish() {
	defer s.sc.attribute()
	if tr := s.sc.tr; tr != nil && len(s.links) > 0 {
		// The results are built from many inputs: their span links to the
		// inputs' spans rather than nesting under one of them.
		ctx, span := tr.t.Start(tr.base, s.sc.name, trace.WithNewRoot(), trace.WithLinks(s.links...),
			trace.WithAttributes(tr.attrs(s.sc, len(s.order))...))
		tr.ctx = ctx
		defer func() { span.End(); tr.ctx = nil }()
		s.links = nil
	}
	if s.emit == EmitAtEnd {
		s.out.ts = nil
		for i := 0; i < len(s.order); i += s.sc.batch {
			s.out.vs = s.out.vs[:0]
			for _, k := range s.order[i:min(i+s.sc.batch, len(s.order))] {
				s.out.vs = append(s.out.vs, s.kv(k, s.state[k]))
			}
			s.sc.c.out.Add(int64(len(s.out.vs)))
			s.next.push(&s.out)
		}
	}
	s.next.finish()
}

type sinkStage[T any] struct {
	conn SinkConnector[T]
	w    Writer[T]
	sc   *stageCtx
	// ended: end of stream reached a writer kept open for the final
	// checkpoint (see closeFinal). last is the state recorded at the last
	// checkpoint, answered again for a checkpoint after the writer closed.
	ended bool
	last  []byte
}

func (s *sinkStage[T]) open() error {
	var w Writer[T]
	var err error
	if r, ok := s.conn.(RestorableSink[T]); ok && s.sc.restored {
		w, err = r.OpenAt(s.sc.ctx, s.sc.instance, s.sc.parts, s.sc.restore)
	} else {
		w, err = s.conn.Open(s.sc.ctx, s.sc.instance, s.sc.parts)
	}
	if err != nil {
		return &stageFailure{op: s.sc.name, err: fmt.Errorf("open: %w", err)}
	}
	s.w = w
	return nil
}

func (s *sinkStage[T]) push(b *batch[T]) {
	defer s.sc.attribute()
	if end := s.sc.traced(len(b.vs)); end != nil {
		defer end()
	}
	s.sc.c.in.Add(int64(len(b.vs)))
	if err := s.w.Write(b.vs); err != nil {
		s.sc.fail(fmt.Errorf("write: %w", err))
	}
}

func (s *sinkStage[T]) watermark(int64) {}

// finish is the end of the stream. A writer whose position belongs in
// checkpoints (TwoPhaseWriter, Checkpointer) stays open when the job takes a
// final checkpoint: that checkpoint records it (PreCommit) and commits it,
// and closeFinal closes it afterwards with nothing left to commit. Other
// writers, and every writer of a job without checkpoints, close now: Close
// flushes and, for a two-phase writer, commits what it holds.
func (s *sinkStage[T]) finish() {
	if s.sc.finalCheckpoint && s.w != nil {
		switch s.w.(type) {
		case TwoPhaseWriter, Checkpointer:
			s.ended = true
			return
		}
	}
	s.close()
}

// endRestored is the end of the stream in an instance that had finished
// before the checkpoint the job was restored from: nothing more will be
// written, and the writer ends as at finish.
func (s *sinkStage[T]) endRestored() { s.finish() }

// closeFinal closes a writer kept open for the final checkpoint, once that
// checkpoint has been committed.
func (s *sinkStage[T]) closeFinal() {
	if s.ended {
		s.ended = false
		s.close()
	}
}

func (s *sinkStage[T]) close() {
	w := s.w
	s.w = nil
	if w != nil {
		if err := w.Close(); err != nil {
			s.sc.fail(fmt.Errorf("close: %w", err))
		}
	}
}

func (s *sinkStage[T]) snapshotState(checkpoint uint64) ([]byte, error) {
	if s.w == nil {
		return s.last, nil // closed after a checkpoint covered everything it wrote
	}
	var b []byte
	var err error
	if tp, ok := s.w.(TwoPhaseWriter); ok {
		b, err = tp.PreCommit(checkpoint)
	} else if c, ok := s.w.(Checkpointer); ok {
		b, err = c.Checkpoint()
	} else {
		return nil, nil // at-least-once: nothing to record
	}
	if err == nil {
		s.last = b
	}
	return b, err
}

// commit finishes the two-phase commit of a completed checkpoint.
func (s *sinkStage[T]) commit(checkpoint uint64) {
	if tp, ok := s.w.(TwoPhaseWriter); ok {
		if err := tp.Commit(s.sc.ctx, checkpoint); err != nil {
			s.sc.fail(fmt.Errorf("commit checkpoint %d: %w", checkpoint, err))
		}
	}
}

// abort releases the writer without the end-of-stream guarantees: a
// writer with an Abort method (a two-phase sink) discards what no
// checkpoint covers instead of committing it. A writer kept open for a
// final checkpoint that never completed is aborted too.
func (s *sinkStage[T]) abort() {
	if s.w == nil {
		return
	}
	if a, ok := s.w.(Aborter); ok {
		_ = a.Abort()
	} else {
		_ = s.w.Close()
	}
	s.w, s.ended = nil, false
}

// sourceRunner is the head of a source task.
type sourceRunner interface {
	open(offset int64) error
	offset() int64
	stage() *stageCtx
	// step reads at most one batch and pushes it; it returns io.EOF at the
	// end of the partition and (0, nil) when nothing is available now.
	step() (int, error)
	finish()
	close() error
	waiter() Waiter
	ack(offset int64) error
}

type sourceStage[T any] struct {
	conn SourceConnector[T]
	r    Reader[T]
	next pusher[T]
	sc   *stageCtx
	buf  batch[T]
}

func (s *sourceStage[T]) offset() int64 { return s.r.Offset() }

func (s *sourceStage[T]) stage() *stageCtx { return s.sc }

func (s *sourceStage[T]) open(offset int64) error {
	r, err := s.conn.Open(s.sc.ctx, s.sc.instance, s.sc.parts, offset)
	if err != nil {
		return &stageFailure{op: s.sc.name, err: fmt.Errorf("open: %w", err)}
	}
	s.r = r
	s.buf.vs = make([]T, s.sc.batch)
	return nil
}

func (s *sourceStage[T]) step() (int, error) {
	defer s.sc.attribute()
	s.buf.vs = s.buf.vs[:s.sc.batch]
	n, err := s.r.Read(s.buf.vs)
	if n > 0 {
		s.buf.vs, s.buf.ts = s.buf.vs[:n], nil
		s.sc.c.out.Add(int64(n))
		s.next.push(&s.buf) // in the trace the instance started for this tick, if any
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return n, &stageFailure{op: s.sc.name, err: fmt.Errorf("read: %w", err)}
	}
	return n, err
}

func (s *sourceStage[T]) finish() { s.next.finish() }

func (s *sourceStage[T]) close() error {
	if s.r == nil {
		return nil
	}
	err := s.r.Close()
	s.r = nil
	return err
}

// ack tells the reader that a completed checkpoint covers every record
// before offset.
func (s *sourceStage[T]) ack(offset int64) error {
	if a, ok := s.r.(Acker); ok && s.r != nil {
		if err := a.Ack(s.sc.ctx, offset); err != nil {
			return &stageFailure{op: s.sc.name, err: fmt.Errorf("ack offset %d: %w", offset, err)}
		}
	}
	return nil
}

func (s *sourceStage[T]) waiter() Waiter {
	w, _ := s.r.(Waiter)
	return w
}

// EmitMode says when a per-key aggregation emits.
type EmitMode uint8

const (
	// EmitUpdates emits the key's new value after every record (a changelog).
	EmitUpdates EmitMode = iota
	// EmitAtEnd emits every key's final value once, at end of stream.
	EmitAtEnd
)
