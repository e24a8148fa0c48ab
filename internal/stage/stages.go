package stage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/connector"
	"github.com/sluicehq/sluice/internal/state"
)

// Batch is a run of records in columns: values, and event times when the
// stream carries them (nil otherwise).
type Batch[T any] struct {
	Vs []T
	Ts []int64
	// Tr are the sampled records of the batch, in order (nil: none, the
	// rule; see Mark).
	Tr []Mark
	// Gone are the sampled records an overflow policy or load shedding
	// took out of the batch (Retain), for the receiver to trace.
	Gone []Mark
	// Own says that the arrays of Vs and Ts are the callee's to keep: the
	// caller of Push will neither read nor write them again. A callee that
	// keeps them (an emitter shipping them without a copy) sets Vs and Ts
	// to nil before it returns, so that the caller knows to make new ones.
	// False (the zero value) is the safe default: the callee copies what it
	// keeps. A stage that passes a Batch on with a slice of its own in Vs
	// or Ts (one it reuses) clears Own first.
	Own bool
	// sh is the envelope the batch travels in when an emitter shipped it
	// (its b is this batch), to go back to the emitter once handled
	// (Release); nil otherwise.
	sh *shipped[T]
}

// Marks are the batch's sampled records and those shed from it (the
// engine traces drops through it).
func (b *Batch[T]) Marks() (tr, gone []Mark) { return b.Tr, b.Gone }

// Forget forgets the sampled records shed from the batch, once traced.
func (b *Batch[T]) Forget() { b.Gone = nil }

// Retain keeps the records for which keep(i) is true (overflow policies
// shed records one at a time).
func (b *Batch[T]) Retain(keep func(i int) bool) int {
	if len(b.Tr) > 0 {
		return b.retainMarked(keep, true)
	}
	j := 0
	for i := range b.Vs {
		if keep(i) {
			b.Vs[j] = b.Vs[i]
			if b.Ts != nil {
				b.Ts[j] = b.Ts[i]
			}
			j++
		}
	}
	clear(b.Vs[j:])
	b.Vs = b.Vs[:j]
	if b.Ts != nil {
		b.Ts = b.Ts[:j]
	}
	return j
}

// Pusher is one stage of a fused chain. push processes a Batch the caller
// owns: the stage may modify it in place but must not keep it after
// returning. finish is called once at end of stream, after the last push:
// the stage emits what it still holds and calls its successor's finish.
//
// watermark says that event time has reached wm (Unix nanoseconds): no
// record with a time at or before wm follows. Stages that keep event-time
// state (windows, joins) act on it; the others pass it on.
type Pusher[T any] interface {
	Push(b *Batch[T])
	Watermark(wm int64)
	Finish()
}

// Inlet feeds the payload of a data envelope to the head of a chain.
type Inlet interface {
	Deliver(payload any)
	Watermark(wm int64)
	Finish()
}

type TypedInlet[T any] struct{ head Pusher[T] }

// Deliver pushes the records of a data envelope, which are the receiving
// instance's alone (the sender gave them up when it sent them, a decoder
// made them): the chain may keep their arrays (Batch.Own).
func (i *TypedInlet[T]) Deliver(p any) {
	b := p.(*Batch[T])
	b.Own = true
	i.head.Push(b)
}
func (i *TypedInlet[T]) Watermark(wm int64) { i.head.Watermark(wm) }
func (i *TypedInlet[T]) Finish()            { i.head.Finish() }

// Counters are one operator instance's statistics, read concurrently by Stats.
type Counters struct {
	In, Out atomic.Int64
	Dead    atomic.Int64 // records given to the dead-letter store
	Late    atomic.Int64 // records behind event time beyond the allowed lateness
	Wm      atomic.Int64 // the stage's event time (Unix ns), 0 before the first watermark
	// BadTrace counts the trace contexts a source's records arrived with
	// that were refused (malformed, over the size bound).
	BadTrace atomic.Int64
}

// Ctx is what a stage knows about where it runs.
type Ctx struct {
	Name      string // the operator's
	Kind      string
	Head      bool   // the operator reads the task's mailbox
	Prev      string // the operator before it in its fused chain ("" for the head)
	marks     []Mark // the sampled records of the batch being pushed, while its spans are open
	tc        *stageTrace
	Instance  int
	Parts     int
	Context   context.Context
	C         *Counters
	BatchSize int
	Restore   []byte          // the stage's state in the checkpoint the job resumes from
	Restored  bool            // restore is set (a stage's state may be empty)
	Failures  *FailureHandler // the record-failure policy, nil: a panic fails the operator
	Tracer    *Tracer         // the instance's Tracer, nil when tracing is off
	// SourceKey, on a source whose output a KeyBy reads directly, is that
	// key-by's func(T) string (graph.Node.KeyString): a tracer sampling by
	// key tests it at the source, so that the record's trace starts there.
	SourceKey any
	// After runs f in the instance's actor once d has passed (processing-time
	// timers), unless stop is called first (in the actor); Now is the job's
	// clock.
	After func(d time.Duration, f func()) (stop func())
	Now   func() time.Time
	// finalCheckpoint: the job takes a final checkpoint after its input
	// ends, so a sink whose writer is a TwoPhaseWriter or a connector.Checkpointer
	// stays open at end of stream until that checkpoint is committed.
	FinalCheckpoint bool
	// panicErr is the error of user code that panicked (the job's kit).
	PanicErr func(v any) error
	// Late is a windowed stage's late records' stream (a Pusher of its
	// input type), nil when nobody takes them (LateRecords).
	Late any
	// StateTTL: a keyed stage forgets a key's state once the key has seen
	// no record for this many nanoseconds of processing time (0: never).
	StateTTL int64
	// Ingested, when set, is told a source's batch's ingestion time (unix
	// ns) that the reader reports (connector.IngestionTimer), before the
	// batch is pushed.
	Ingested func(unixNano int64)
	// State is the topology's state backend (memory unless Dir is set;
	// Dir is the job's directory).
	State state.Spec
	// Keep, when set, is the probability that a record of the batch being
	// handled survived the load shedding upstream (1: nothing was shed):
	// approximate aggregations scale by its inverse.
	Keep func() float64
	// Blocked says whether an output of the instance waits for credits
	// (nil: never); Resume has the instance call f once none waits. A
	// stage whose Finish emits more than its receivers have room for
	// (EmitAtEnd over a large state) emits until blocked, hands the rest
	// to Resume and returns: its instance ends its stream only after the
	// last f (which finishes the rest of the chain) returns without
	// calling Resume again. Without them the outputs would queue every
	// result in memory until Finish returned.
	Blocked func() bool
	Resume  func(f func())
	// Arrays lends the arrays of batches that sinks have written back to
	// the job's sources (nil: none are lent).
	Arrays *Arrays
}

// KeepRate is sc.Keep() or 1 without it.
func (sc *Ctx) KeepRate() float64 {
	if sc.Keep == nil {
		return 1
	}
	return sc.Keep()
}

// key names the stage's instance in checkpoints: "operator/instance".
func (sc *Ctx) Key() string { return sc.Name + "/" + strconv.Itoa(sc.Instance) }

// Stateful is implemented by stages whose state belongs in checkpoints.
type Stateful interface {
	SnapshotState(checkpoint uint64) ([]byte, error)
}

// fail aborts the instance with err; the supervisor reports it as the
// operator's failure.
func (sc *Ctx) fail(err error) {
	panic(&Failure{op: sc.Name, err: err})
}

// attribute turns a panic in the stage's user code into a failure of this
// operator, so that a fused chain reports which of its operators failed. It
// is deferred once per Batch.
func (sc *Ctx) attribute() {
	if r := recover(); r != nil {
		sc.rethrow(r)
	}
}

// rethrow panics again with r as a failure of this operator, unless r is
// some operator's failure already.
func (sc *Ctx) rethrow(r any) {
	if _, ok := r.(*Failure); ok {
		panic(r)
	}
	panic(&Failure{op: sc.Name, err: sc.PanicErr(r)})
}

type Failure struct {
	op  string
	err error
}

func (f *Failure) Error() string { return f.op + ": " + f.err.Error() }

type MapStage[In, Out any] struct {
	f    func(In) Out
	next Pusher[Out]
	sc   *Ctx
	out  Batch[Out]
	// filter is next when it is a filter (fused with the map in one
	// actor): an owned batch is then mapped and filtered in one pass over
	// its records (pushFiltered) instead of two.
	filter *FilterStage[Out]
}

func (s *MapStage[In, Out]) Push(b *Batch[In]) {
	defer s.sc.attribute()
	if end := s.sc.Pass(b.Tr, b.Ts); end != nil {
		defer end()
	}
	n := len(b.Vs)
	s.sc.C.In.Add(int64(n))
	if s.sc.Failures != nil {
		s.guarded(b)
		return
	}
	if same, ok := any(b).(*Batch[Out]); ok && b.Own {
		// The input is the stage's to change and of the output's type: its
		// records are mapped where they are, and it goes on as it came
		// (owned: the next stage may keep its arrays).
		if f := s.filter; f != nil && f.sc.Failures == nil && len(b.Tr) == 0 && b.Ts == nil {
			s.pushFiltered(b, same, f)
			return
		}
		mapInto(s.f, b.Vs, same.Vs)
		s.sc.C.Out.Add(int64(n))
		s.next.Push(same)
		return
	}
	out := s.out.Vs
	if cap(out) < n { // first, or the previous output was kept downstream
		out = make([]Out, n, max(n, s.sc.BatchSize))
	}
	out = out[:n]
	mapInto(s.f, b.Vs, out)
	// The output's array is the stage's own: the next stage may keep it
	// (then it is nil after Push, and the next batch gets a new one), but
	// the times are the input's, so only when those were given away too.
	s.out.Vs, s.out.Ts, s.out.Tr, s.out.Own = out, b.Ts, b.Tr, b.Ts == nil || b.Own
	s.sc.C.Out.Add(int64(n))
	s.next.Push(&s.out)
}

// pushFiltered maps owned batch in (same is in seen as the output type) and
// filters it with the next stage, f, in one pass, then pushes what is kept
// to the stage after f: what Push and f.Push would do one after the other
// for a batch without sampled records or times. A panic of the filter's
// function (or one from after it that is no stage's failure yet) is the
// filter's failure, as it would be in f.Push.
func (s *MapStage[In, Out]) pushFiltered(in *Batch[In], b *Batch[Out], f *FilterStage[Out]) {
	n := len(b.Vs)
	var inKeep bool
	defer func() {
		if inKeep {
			if r := recover(); r != nil {
				f.sc.rethrow(r)
			}
		}
	}()
	j := mapKeepInPlace(s.f, f.keep, in.Vs, b.Vs, &inKeep)
	s.sc.C.Out.Add(int64(n))
	f.sc.C.In.Add(int64(n))
	b.Vs = b.Vs[:j]
	if j == 0 {
		return
	}
	f.sc.C.Out.Add(int64(j))
	inKeep = true // what the filter's push would have put down to it
	f.next.Push(b)
}

func (s *MapStage[In, Out]) Watermark(wm int64) { s.next.Watermark(wm) }

func (s *MapStage[In, Out]) Finish() { s.next.Finish() }

// The record loops of the fast paths live in functions without defers, so
// that the compiler keeps them tight (the stages defer their failure
// attribution and tracing once per Batch).

func mapInto[In, Out any](f func(In) Out, vs []In, out []Out) {
	for i, v := range vs {
		out[i] = f(v)
	}
}

// mapKeepInPlace maps each value of vs with f and keeps those keep
// accepts at the front of out, which is vs's array seen as the output type
// (In and Out are one type); it returns how many there are. *inKeep is true
// while keep runs, so that a panic is put down to the right stage.
func mapKeepInPlace[In, Out any](f func(In) Out, keep func(Out) bool, vs []In, out []Out, inKeep *bool) int {
	j := 0
	for _, v := range vs {
		w := f(v)
		*inKeep = true
		if keep(w) {
			out[j] = w
			j++
		}
		*inKeep = false
	}
	return j
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

type FilterStage[T any] struct {
	keep func(T) bool
	next Pusher[T]
	sc   *Ctx
}

func (s *FilterStage[T]) Push(b *Batch[T]) {
	defer s.sc.attribute()
	if end := s.sc.Pass(b.Tr, b.Ts); end != nil {
		defer end()
	}
	s.sc.C.In.Add(int64(len(b.Vs)))
	if s.sc.Failures != nil {
		b.Tr = nil // the guarded loop moves records: their traces end here
		s.guarded(b)
		return
	}
	j := 0
	if len(b.Tr) > 0 {
		j = b.retainMarked(func(i int) bool { return s.keep(b.Vs[i]) }, false)
	} else if b.Ts == nil {
		j = keepInPlace(s.keep, b.Vs)
	} else {
		for i, v := range b.Vs {
			if s.keep(v) {
				b.Vs[j], b.Ts[j] = v, b.Ts[i]
				j++
			}
		}
		b.Ts = b.Ts[:j]
	}
	b.Vs = b.Vs[:j]
	if j == 0 {
		return
	}
	s.sc.C.Out.Add(int64(j))
	s.next.Push(b)
}

func (s *FilterStage[T]) Watermark(wm int64) { s.next.Watermark(wm) }

func (s *FilterStage[T]) Finish() { s.next.Finish() }

type FlatMapStage[In, Out any] struct {
	f     func(In) []Out
	next  Pusher[Out]
	sc    *Ctx
	out   Batch[Out]
	marks []Mark // the input's, while it is pushed
	mi    int
}

func (s *FlatMapStage[In, Out]) Push(b *Batch[In]) {
	defer s.sc.attribute()
	if end := s.sc.Pass(b.Tr, b.Ts); end != nil {
		defer end()
	}
	s.sc.C.In.Add(int64(len(b.Vs)))
	s.out.Vs, s.out.Ts, s.out.Tr = s.out.Vs[:0], s.out.Ts[:0], nil
	s.marks, s.mi = b.Tr, 0
	if s.sc.Failures != nil {
		for i := 0; i < len(b.Vs); {
			i = s.guardedFrom(b, i)
		}
	} else {
		for i, v := range b.Vs {
			s.emit(b, i, s.f(v))
		}
	}
	s.flush(b.Ts != nil)
}

// emit adds the outputs of input record i.
func (s *FlatMapStage[In, Out]) emit(b *Batch[In], i int, outs []Out) {
	if len(s.marks) > 0 {
		for s.mi < len(s.marks) && int(s.marks[s.mi].I) < i {
			s.mi++
		}
		if s.mi < len(s.marks) && int(s.marks[s.mi].I) == i {
			m := s.marks[s.mi]
			for k := range outs { // every output of a sampled record stays in its trace
				m.I = int32(len(s.out.Vs) + k)
				s.out.Tr = append(s.out.Tr, m)
			}
		}
	}
	s.out.Vs = append(s.out.Vs, outs...)
	if b.Ts != nil {
		for range outs {
			s.out.Ts = append(s.out.Ts, b.Ts[i])
		}
	}
	if len(s.out.Vs) >= s.sc.BatchSize { // keep the Batch bounded however much f expands
		s.flush(b.Ts != nil)
	}
}

func (s *FlatMapStage[In, Out]) flush(timed bool) {
	if len(s.out.Vs) == 0 {
		return
	}
	if !timed {
		s.out.Ts = nil
	}
	s.sc.C.Out.Add(int64(len(s.out.Vs)))
	s.next.Push(&s.out)
	s.out.Vs, s.out.Ts, s.out.Tr = s.out.Vs[:0], s.out.Ts[:0], nil
}

func (s *FlatMapStage[In, Out]) Watermark(wm int64) { s.next.Watermark(wm) }

func (s *FlatMapStage[In, Out]) Finish() { s.next.Finish() }

func (s *KeyedStage[K, T, A, O]) SnapshotState(id uint64) ([]byte, error) {
	if s.tab == nil {
		return nil, s.openErr
	}
	return s.tab.Snapshot(id)
}

// SnapshotStateLater is SnapshotState whose file, with the memory
// backend's changelog, is written and synced after it returns (see
// state.Mem.SnapshotLater): later says so, and durable is called once,
// from another goroutine, when it is durable or failed.
func (s *KeyedStage[K, T, A, O]) SnapshotStateLater(id uint64, durable func(error)) ([]byte, bool, error) {
	if s.tab == nil {
		return nil, false, s.openErr
	}
	if s.mem != nil {
		return s.mem.SnapshotLater(id, durable)
	}
	b, err := s.tab.Snapshot(id)
	return b, false, err
}

func (s *KeyedStage[K, T, A, O]) RestoreState(b []byte) error {
	if s.tab == nil {
		return s.openErr
	}
	if err := s.tab.Restore([][]byte{b}, 0, state.AllGroups); err != nil {
		return err
	}
	if s.mem != nil {
		s.ttl.restored(s.sc, slices.Values(s.mem.Order))
	}
	return nil
}

// RestoreKeyGroups implements KeyGroupRestorer: the keys of groups
// [lo, hi) from every state, in the order of the states, each in its
// first-seen order (memory) or key order (disk).
func (s *KeyedStage[K, T, A, O]) RestoreKeyGroups(states [][]byte, lo, hi int) error {
	if s.tab == nil {
		return s.openErr
	}
	if err := s.tab.Restore(states, lo, hi); err != nil {
		return err
	}
	if s.mem != nil {
		s.ttl.restored(s.sc, slices.Values(s.mem.Order))
	}
	return nil
}

// CommittedState tells the state backend that checkpoint id is complete.
func (s *KeyedStage[K, T, A, O]) CommittedState(id uint64) {
	if s.tab != nil {
		s.tab.Committed(id)
	}
}

// CloseState releases the state backend's files (the instance stops).
func (s *KeyedStage[K, T, A, O]) CloseState() error {
	s.stopEnd() // stopped while it emitted at the end
	if s.tab == nil {
		return nil
	}
	return s.tab.Close()
}

// KeyedStage keeps one accumulator per key in its state backend: mem (the
// memory backend, whose map the record loop uses directly) or tab.
type KeyedStage[K comparable, T, A, O any] struct {
	lend    lender[T]           // gives the batches read back (giveBack)
	contrib map[K]*contributors // the sampled inputs of the results not yet emitted (EmitAtEnd)
	key     func(T) K
	foldFn  func(acc A, seen bool, v T) A
	kv      func(K, A) O // the result of a key
	emit    EmitMode
	next    Pusher[O]
	sc      *Ctx
	mem     *state.Mem[K, A] // nil with the disk backend
	tab     state.Table[K, A]
	openErr error // the backend failed to open (tab nil)
	out     Batch[O]
	ttl     keyTTL[K] // StateTTL with the memory backend
	// StateTTL with the disk backend: the table keeps each value's time
	// and forgets it; a sweep (Expire) every TTL while it holds entries.
	disk     *state.Disk[K, A]
	expOut   Batch[O] // results of expired keys (EmitAtEnd) not yet pushed
	sweeping bool     // a sweep is scheduled
	ended    bool     // Finish: no more sweeps
	clk      msgClock // the disk table's time
	// endStop stops the pull of the table's entries that Finish emits
	// under EmitAtEnd while it runs (resumed across messages).
	endStop func()
}

// open opens the stage's state backend.
func (s *KeyedStage[K, T, A, O]) open() {
	h := HasherFor[K]()
	if !s.sc.State.Disk() {
		owns := func(k K, lo, hi int) bool { kg := KeyGroupOf(h(k)); return kg >= lo && kg < hi }
		if s.sc.State.Changelog == "" || !s.sc.FinalCheckpoint { // no changelog, or no checkpoints to take
			s.mem = state.NewMem[K, A](owns)
			s.tab = s.mem
			return
		}
		m, err := state.OpenChangelog[K, A](s.sc.State, s.sc.Name, s.sc.Instance, s.sc.Parts, owns)
		if err != nil {
			s.openErr = err
			return
		}
		s.mem, s.tab = m, m
		return
	}
	d, err := state.OpenDisk[K, A](s.sc.State, s.sc.Name, s.sc.Instance, s.sc.Parts, h, func(err error) { s.sc.fail(err) })
	if err != nil {
		s.openErr = err
		return
	}
	s.tab = d
	if s.sc.StateTTL > 0 {
		s.disk = d
		d.SetTTL(time.Duration(s.sc.StateTTL), s.clk.now, s.expiredOne)
	}
}

// expiredOne is the disk table's word that k's state (its result a)
// expired: under EmitAtEnd its result is emitted (pushExpired).
func (s *KeyedStage[K, T, A, O]) expiredOne(k K, a A) {
	delete(s.contrib, k)
	if s.emit != EmitAtEnd {
		return
	}
	s.expOut.Vs = append(s.expOut.Vs, s.kv(k, a))
	if len(s.expOut.Vs) == s.sc.BatchSize {
		s.pushExpired()
	}
}

func (s *KeyedStage[K, T, A, O]) pushExpired() {
	if len(s.expOut.Vs) == 0 {
		return
	}
	s.expOut.Ts, s.expOut.Tr = nil, nil
	s.sc.C.Out.Add(int64(len(s.expOut.Vs)))
	s.next.Push(&s.expOut)
	s.expOut.Vs = s.expOut.Vs[:0]
}

// sweepDisk removes the disk table's expired entries, and sweeps again a
// TTL later while entries are left.
func (s *KeyedStage[K, T, A, O]) sweepDisk() {
	defer s.sc.attribute()
	s.sweeping = false
	if s.ended {
		return
	}
	s.clk.tick(s.sc)
	left := s.disk.Expire()
	s.pushExpired()
	if left > 0 {
		s.armSweep()
	}
}

func (s *KeyedStage[K, T, A, O]) armSweep() {
	if !s.sweeping && !s.ended {
		s.sweeping = true
		s.sc.After(time.Duration(s.sc.StateTTL), s.sweepDisk)
	}
}

func (s *KeyedStage[K, T, A, O]) Push(b *Batch[T]) {
	defer s.sc.attribute()
	if end := passKeyed(s.sc, b, s.key); end != nil {
		defer end()
	}
	if s.tab == nil {
		s.sc.fail(s.openErr)
	}
	s.sc.C.In.Add(int64(len(b.Vs)))
	if s.disk != nil {
		s.clk.tick(s.sc)
	}
	s.out.Vs, s.out.Tr = s.out.Vs[:0], nil
	if len(b.Tr) > 0 && s.emit == EmitAtEnd {
		if s.contrib == nil {
			s.contrib = map[K]*contributors{}
		}
		for _, m := range b.Tr {
			k := s.key(b.Vs[m.I])
			c := s.contrib[k]
			if c == nil {
				c = &contributors{}
				s.contrib[k] = c
			}
			c.add(m)
		}
	}
	if s.sc.Failures != nil {
		for i := 0; i < len(b.Vs); {
			i = s.guardedFrom(b, i)
		}
	} else {
		for _, v := range b.Vs {
			s.fold(v)
		}
	}
	s.pushExpired()
	if len(s.out.Vs) > 0 {
		s.out.Ts = nil
		if len(s.out.Vs) == len(b.Vs) { // one update per record: same event times, same traces
			s.out.Ts, s.out.Tr = b.Ts, b.Tr
		}
		s.sc.C.Out.Add(int64(len(s.out.Vs)))
		s.next.Push(&s.out)
		s.out.Ts = nil // b's: the next stage copied them (s.out is not Own)
	}
	s.lend.giveBack(s.sc, b)
}

// fold adds one record to its key's accumulator.
func (s *KeyedStage[K, T, A, O]) fold(v T) {
	k := s.key(v)
	if s.disk != nil {
		s.armSweep()
	} else if s.sc.StateTTL > 0 {
		s.ttl.touch(s.sc, k, s.expire)
	}
	var acc A
	var seen bool
	if m := s.mem; m != nil {
		acc, seen = m.M[k]
		acc = s.foldFn(acc, seen, v) // may panic: nothing changed yet
		if !seen {
			m.Order = append(m.Order, k)
		}
		m.M[k] = acc
		m.Changed(k, seen)
	} else {
		acc, seen = s.tab.Get(k)
		acc = s.foldFn(acc, seen, v)
		s.tab.Put(k, acc, seen)
	}
	if s.emit == EmitUpdates {
		s.out.Vs = append(s.out.Vs, s.kv(k, acc))
	}
}

// expire forgets the keys whose state outlived the TTL; under EmitAtEnd
// their results are emitted first (the end of their state).
func (s *KeyedStage[K, T, A, O]) expire(gone map[K]bool) {
	defer s.sc.attribute()
	if s.emit == EmitAtEnd {
		s.out.Vs, s.out.Ts, s.out.Tr = s.out.Vs[:0], nil, nil
		for _, k := range s.mem.Order {
			if gone[k] {
				s.out.Vs = append(s.out.Vs, s.kv(k, s.mem.M[k]))
				if len(s.out.Vs) == s.sc.BatchSize {
					s.sc.C.Out.Add(int64(len(s.out.Vs)))
					s.next.Push(&s.out)
					s.out.Vs = s.out.Vs[:0]
				}
			}
		}
		if len(s.out.Vs) > 0 {
			s.sc.C.Out.Add(int64(len(s.out.Vs)))
			s.next.Push(&s.out)
			s.out.Vs = s.out.Vs[:0]
		}
	}
	for k := range gone {
		delete(s.contrib, k)
	}
	s.mem.DeleteAll(gone)
}

func (s *KeyedStage[K, T, A, O]) Watermark(wm int64) { s.next.Watermark(wm) }

func (s *KeyedStage[K, T, A, O]) Finish() {
	defer s.sc.attribute()
	s.ttl.stop()
	if s.disk != nil {
		s.ended = true
		s.clk.tick(s.sc)
		if s.emit == EmitAtEnd {
			// As the memory backend emits every key it holds at the end,
			// the expired ones not yet swept included, so here: the sweep
			// emits those, All the others.
			s.disk.Expire()
			s.pushExpired()
		}
	}
	if s.emit == EmitAtEnd && s.tab != nil {
		s.out.Ts = nil
		s.out.Vs, s.out.Tr = s.out.Vs[:0], nil
		next, stop := iter.Pull2(s.tab.All)
		s.endStop = stop
		s.emitEnd(next)
		return
	}
	s.next.Finish()
}

// emitEnd emits the results of EmitAtEnd that next yields, a batch at a
// time, until the outputs wait for credits (sc.Blocked): then it has the
// instance resume it once they have room (sc.Resume), so that what waits
// for the receivers is at most a batch a channel, however many keys the
// state holds. After the last result it finishes the rest of the chain.
func (s *KeyedStage[K, T, A, O]) emitEnd(next func() (K, A, bool)) {
	defer s.sc.attribute()
	var ends []func() // the results' spans end once the batches went on
	defer func() {
		for _, e := range ends {
			e()
		}
	}()
	push := func() {
		s.sc.C.Out.Add(int64(len(s.out.Vs)))
		s.next.Push(&s.out)
		s.out.Vs, s.out.Tr = s.out.Vs[:0], nil
	}
	for {
		k, a, ok := next()
		if !ok {
			break
		}
		if c := s.contrib[k]; c != nil && s.sc.Tracer != nil {
			// A result of sampled records: its span continues the
			// first one's trace and links to them all.
			m, end := s.sc.Tracer.emit(s.sc, c, KeyString(k))
			m.I = int32(len(s.out.Vs))
			s.out.Tr = append(s.out.Tr, m)
			ends = append(ends, end)
		}
		s.out.Vs = append(s.out.Vs, s.kv(k, a))
		if len(s.out.Vs) == s.sc.BatchSize {
			push()
			if s.sc.Blocked != nil && s.sc.Blocked() {
				s.sc.Resume(func() { s.emitEnd(next) })
				return
			}
		}
	}
	if len(s.out.Vs) > 0 {
		push()
	}
	s.stopEnd()
	s.next.Finish()
}

// stopEnd ends the pull of EmitAtEnd's entries (its iterator closed).
func (s *KeyedStage[K, T, A, O]) stopEnd() {
	if s.endStop != nil {
		s.endStop()
		s.endStop = nil
	}
}

type SinkStage[T any] struct {
	conn connector.Sink[T]
	w    connector.Writer[T]
	sc   *Ctx
	// lend: the stage heads its chain and its writer keeps no records
	// (KeepsNoRecords), so the arrays of the batches it wrote go back to
	// free, the sources' (looked up at the first batch: looked).
	lend, looked bool
	free         *freeArrays[T]
	// ended: end of stream reached a writer kept open for the final
	// checkpoint (see closeFinal). last is the state recorded at the last
	// checkpoint, answered again for a checkpoint after the writer closed.
	ended bool
	last  []byte
}

func (s *SinkStage[T]) Open() error {
	var w connector.Writer[T]
	var err error
	if r, ok := s.conn.(connector.RestorableSink[T]); ok && s.sc.Restored {
		w, err = r.OpenAt(s.sc.Context, s.sc.Instance, s.sc.Parts, s.sc.Restore)
	} else {
		w, err = s.conn.Open(s.sc.Context, s.sc.Instance, s.sc.Parts)
	}
	if err != nil {
		return &Failure{op: s.sc.Name, err: fmt.Errorf("open: %w", err)}
	}
	s.w = w
	_, keepsNone := w.(KeepsNoRecords)
	s.lend = keepsNone && s.sc.Head
	return nil
}

func (s *SinkStage[T]) Push(b *Batch[T]) {
	defer s.sc.attribute()
	if end := s.sc.Pass(b.Tr, b.Ts); end != nil {
		defer end()
	}
	s.sc.C.In.Add(int64(len(b.Vs)))
	if err := s.w.Write(b.Vs); err != nil {
		s.sc.fail(fmt.Errorf("write: %w", err))
		return
	}
	// A batch delivered to the instance is its own (Batch.Own): written,
	// its array serves a source again.
	if s.lend && b.Own && cap(b.Vs) == s.sc.BatchSize {
		if !s.looked {
			s.free, s.looked = arraysFor[T](s.sc.Arrays, s.sc.BatchSize, false), true
		}
		if s.free != nil {
			s.free.put(b.Vs)
			b.Vs = nil
		}
	}
}

func (s *SinkStage[T]) Watermark(int64) {}

// finish is the end of the stream. A writer whose position belongs in
// checkpoints (connector.TwoPhaseWriter, connector.Checkpointer) stays open when the job takes a
// final checkpoint: that checkpoint records it (PreCommit) and commits it,
// and closeFinal closes it afterwards with nothing left to commit. Other
// writers, and every writer of a job without checkpoints, close now: Close
// flushes and, for a two-phase writer, commits what it holds.
func (s *SinkStage[T]) Finish() {
	if s.sc.FinalCheckpoint && s.w != nil {
		switch s.w.(type) {
		case connector.TwoPhaseWriter, connector.Checkpointer:
			s.ended = true
			return
		}
	}
	s.Close()
}

// endRestored is the end of the stream in an instance that had finished
// before the checkpoint the job was restored from: nothing more will be
// written, and the writer ends as at finish.
func (s *SinkStage[T]) EndRestored() { s.Finish() }

// closeFinal closes a writer kept open for the final checkpoint, once that
// checkpoint has been committed.
func (s *SinkStage[T]) CloseFinal() {
	if s.ended {
		s.ended = false
		s.Close()
	}
}

func (s *SinkStage[T]) Close() {
	w := s.w
	s.w = nil
	if w != nil {
		if err := w.Close(); err != nil {
			s.sc.fail(fmt.Errorf("close: %w", err))
		}
	}
}

func (s *SinkStage[T]) SnapshotState(checkpoint uint64) ([]byte, error) {
	if s.w == nil {
		return s.last, nil // closed after a checkpoint covered everything it wrote
	}
	var b []byte
	var err error
	if tp, ok := s.w.(connector.TwoPhaseWriter); ok {
		b, err = tp.PreCommit(checkpoint)
	} else if c, ok := s.w.(connector.Checkpointer); ok {
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
func (s *SinkStage[T]) Commit(checkpoint uint64) {
	if tp, ok := s.w.(connector.TwoPhaseWriter); ok {
		if err := tp.Commit(s.sc.Context, checkpoint); err != nil {
			s.sc.fail(fmt.Errorf("commit checkpoint %d: %w", checkpoint, err))
		}
	}
}

// abort releases the writer without the end-of-stream guarantees: a
// writer with an Abort method (a two-phase sink) discards what no
// checkpoint covers instead of committing it. A writer kept open for a
// final checkpoint that never completed is aborted too.
func (s *SinkStage[T]) Abort() {
	if s.w == nil {
		return
	}
	if a, ok := s.w.(connector.Aborter); ok {
		_ = a.Abort()
	} else {
		_ = s.w.Close()
	}
	s.w, s.ended = nil, false
}

// SourceRunner is the head of a source task.
type SourceRunner interface {
	Open(offset int64) error
	Offset() int64
	Stage() *Ctx
	// step reads at most one Batch and pushes it; it returns io.EOF at the
	// end of the partition and (0, nil) when nothing is available now.
	Step() (int, error)
	Finish()
	Close() error
	Waiter() connector.Waiter
	Ack(offset int64) error
}

type SourceStage[T any] struct {
	conn connector.Source[T]
	r    connector.Reader[T]
	next Pusher[T]
	sc   *Ctx
	buf  Batch[T]
	free *freeArrays[T]         // the arrays the job's sinks wrote (Arrays), nil: none
	tcs  connector.TraceCarrier // the reader's, when the tracer samples by parent
}

func (s *SourceStage[T]) Offset() int64 { return s.r.Offset() }

func (s *SourceStage[T]) Stage() *Ctx { return s.sc }

func (s *SourceStage[T]) Open(offset int64) error {
	r, err := s.conn.Open(s.sc.Context, s.sc.Instance, s.sc.Parts, offset)
	if err != nil {
		return &Failure{op: s.sc.Name, err: fmt.Errorf("open: %w", err)}
	}
	s.r = r
	s.buf.Vs = make([]T, s.sc.BatchSize)
	s.tcs = nil
	if s.sc.Tracer != nil {
		s.sc.Tracer.OpenSource(s.sc)
		if s.sc.Tracer.Parents() {
			s.tcs, _ = r.(connector.TraceCarrier)
		}
	}
	return nil
}

func (s *SourceStage[T]) Step() (int, error) {
	defer s.sc.attribute()
	if cap(s.buf.Vs) < s.sc.BatchSize { // the previous batch's array was kept downstream
		s.buf.Vs = nil
		if s.free != nil {
			s.buf.Vs = s.free.get()
		}
		if cap(s.buf.Vs) < s.sc.BatchSize {
			s.buf.Vs = make([]T, s.sc.BatchSize)
		}
	}
	s.buf.Vs = s.buf.Vs[:s.sc.BatchSize]
	n, err := s.r.Read(s.buf.Vs)
	if n > 0 {
		if it, ok := s.r.(connector.IngestionTimer); ok && s.sc.Ingested != nil {
			if at := it.IngestedAt(); !at.IsZero() {
				s.sc.Ingested(at.UnixNano())
			}
		}
		// The next stage may keep the array (the next Step makes a new
		// one), unless sampling reads the records after the push.
		s.buf.Vs, s.buf.Ts, s.buf.Tr, s.buf.Own = s.buf.Vs[:n], nil, nil, s.sc.Tracer == nil
		s.sc.C.Out.Add(int64(n))
		if tr := s.sc.Tracer; tr != nil {
			var end func()
			var tcs []connector.TraceContext
			if s.tcs != nil {
				tcs = s.tcs.TraceContexts()
			}
			var keyOf func(int) string
			if k, ok := s.sc.SourceKey.(func(T) string); ok && tr.Keys() {
				keyOf = func(i int) string { return k(s.buf.Vs[i]) }
			}
			s.buf.Tr, end = tr.Source(s.sc, n, nil, tcs, keyOf)
			if end != nil {
				defer end()
			}
		}
		s.next.Push(&s.buf)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return n, &Failure{op: s.sc.Name, err: fmt.Errorf("read: %w", err)}
	}
	return n, err
}

func (s *SourceStage[T]) Finish() { s.next.Finish() }

func (s *SourceStage[T]) Close() error {
	if s.r == nil {
		return nil
	}
	err := s.r.Close()
	s.r = nil
	return err
}

// ack tells the reader that a completed checkpoint covers every record
// before offset.
func (s *SourceStage[T]) Ack(offset int64) error {
	if a, ok := s.r.(connector.Acker); ok && s.r != nil {
		if err := a.Ack(s.sc.Context, offset); err != nil {
			return &Failure{op: s.sc.Name, err: fmt.Errorf("ack offset %d: %w", offset, err)}
		}
	}
	return nil
}

func (s *SourceStage[T]) Waiter() connector.Waiter {
	w, _ := s.r.(connector.Waiter)
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

// retainMarked is Retain for a batch with sampled records: their marks
// follow them, and those of records not kept go.
func (b *Batch[T]) retainMarked(keep func(i int) bool, record bool) int {
	j, m, w := 0, 0, 0
	for i := range b.Vs {
		k := keep(i)
		for m < len(b.Tr) && int(b.Tr[m].I) < i {
			m++
		}
		if m < len(b.Tr) && int(b.Tr[m].I) == i {
			if k {
				mk := b.Tr[m]
				mk.I = int32(j)
				b.Tr[w] = mk
				w++
			} else if record {
				b.Gone = append(b.Gone, b.Tr[m])
			}
			m++
		}
		if k {
			b.Vs[j] = b.Vs[i]
			if b.Ts != nil {
				b.Ts[j] = b.Ts[i]
			}
			j++
		}
	}
	clear(b.Vs[j:])
	b.Vs = b.Vs[:j]
	if b.Ts != nil {
		b.Ts = b.Ts[:j]
	}
	b.Tr = b.Tr[:w]
	if w == 0 {
		b.Tr = nil
	}
	return j
}
