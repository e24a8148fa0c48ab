package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	bolt "go.etcd.io/bbolt"
	"go.opentelemetry.io/otel/attribute"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/persistence"
	"github.com/sluicehq/sluice/supervision"
	"github.com/sluicehq/sluice/telemetry"
)

// ErrAborted is the outcome of a job that was stopped before it finished.
var ErrAborted = errors.New("operators: job stopped before it finished")

// Messages of the job actor and its instances within this process (the
// protocol between them is package wire). The ones that are not records are
// control messages: they never count against mailbox capacity.
type (
	startMsg struct{}
	tickMsg  struct{ waiter bool }
	// timerMsg runs a stage's timer function f in the instance's actor.
	timerMsg struct {
		id uint64
		f  func()
	}
	abortMsg struct{ cause error }
	cpTick struct{} // the checkpoint interval elapsed
	restartMsg struct{ gen int } // the restart backoff elapsed
)

func (*tickMsg) IsControl() bool     { return true }
func (*timerMsg) IsControl() bool    { return true }
func (*cpTick) IsControl() bool      { return true }
func (*startMsg) IsControl() bool    { return true }

// outputSpec is one output edge of an instance: how records are partitioned
// and the channels to the target instances (one for forward edges).
type outputSpec struct {
	part   partitionKind
	hasher any // func(T) uint64 for hash edges
	chans  []*outChan
}

// outChan is a channel from this instance to one receiver. When the
// receiver's mailbox blocks, it is credit-gated: records go out only as far
// as the receiver granted room. Under the other policies the sender is never
// slowed and the receiver's mailbox sheds or spills.
type outChan struct {
	target   *actor.PID
	channel  int  // receiver's input channel index
	credited bool // the receiver's policy is Block
	credits  int  // records the receiver can still take
	queue    []*actors.Envelope
	seq      uint64
	codec    mailbox.Codec // the receiver's, when it is in another process
	wseq     uint64        // messages sent to another process on this channel
	granted  int64         // records the receiver granted room for, in total (wire.Credit)
}

// inChan identifies the sender behind one input channel, to return credits.
type inChan struct {
	sender   *actor.PID
	out      int   // the sender's output channel index
	consumed int64 // records handled, in total: the credit granted back (wire.Credit)
}

type flusher interface{ flush() }

// emitter is the tail of a chain whose operator has consumers: it
// partitions records into per-target batches and hands full batches to the
// instance, which sends them as credits allow.
type emitter[T any] struct {
	in   *instance
	outs []*output[T]
	size int
	wm   int64           // the chain's event time: sent on every channel at the next flush when it advanced
	sent int64           // the last watermark sent
	tctx context.Context // the trace of the last traced batch pushed, for the envelopes it fills
}

type output[T any] struct {
	spec *outputSpec
	hash func(T) uint64
	bufs []batch[T]
	rr   int
}

func newEmitter[T any](specs []*outputSpec, in *instance) *emitter[T] {
	e := &emitter[T]{in: in, size: in.exec.topo.cfg.batchSize, wm: math.MinInt64, sent: math.MinInt64}
	for _, s := range specs {
		o := &output[T]{spec: s, bufs: make([]batch[T], len(s.chans))}
		if s.part == partHash {
			o.hash = s.hasher.(func(T) uint64)
		}
		e.outs = append(e.outs, o)
	}
	return e
}

func (e *emitter[T]) push(b *batch[T]) {
	if tr := e.in.tr; tr != nil {
		e.tctx = tr.ctx
	}
	for _, o := range e.outs {
		switch o.spec.part {
		case partForward:
			e.add(o, 0, b)
		case partRebalance:
			e.add(o, o.rr, b)
			o.rr = (o.rr + 1) % len(o.bufs)
		case partBroadcast:
			for t := range o.bufs {
				e.add(o, t, b)
			}
		case partHash:
			n := len(o.bufs)
			for i, v := range b.vs {
				t := instanceFor(o.hash(v), n)
				buf := &o.bufs[t]
				buf.vs = append(buf.vs, v)
				if b.ts != nil {
					buf.ts = append(buf.ts, b.ts[i])
				}
				if len(buf.vs) >= e.size {
					e.ship(o, t)
				}
			}
		}
	}
}

func (e *emitter[T]) add(o *output[T], t int, b *batch[T]) {
	buf := &o.bufs[t]
	buf.vs = append(buf.vs, b.vs...)
	if b.ts != nil {
		buf.ts = append(buf.ts, b.ts...)
	}
	if len(buf.vs) >= e.size {
		e.ship(o, t)
	}
}

// ship hands the target's buffer over in envelopes of at most one batch; the
// receiver owns them from then on.
func (e *emitter[T]) ship(o *output[T], t int) {
	buf := o.bufs[t]
	o.bufs[t] = batch[T]{}
	for start := 0; start < len(buf.vs); start += e.size {
		end := min(start+e.size, len(buf.vs))
		part := &batch[T]{vs: buf.vs[start:end:end]}
		if buf.ts != nil {
			part.ts = buf.ts[start:end:end]
		}
		env := &actors.Envelope{Kind: actors.Data, Count: end - start, Payload: part}
		if e.tctx != nil {
			env.Headers = telemetry.Inject(e.tctx, nil)
		}
		e.in.enqueue(o.spec.chans[t], env)
	}
}

func (e *emitter[T]) flush() {
	for _, o := range e.outs {
		for t := range o.bufs {
			if len(o.bufs[t].vs) > 0 {
				e.ship(o, t)
			}
		}
	}
	e.tctx = nil
	if e.wm > e.sent { // after the records it follows, on every channel
		e.sent = e.wm
		for _, o := range e.outs {
			for _, oc := range o.spec.chans {
				e.in.enqueue(oc, &actors.Envelope{Kind: actors.Watermark, Mark: e.wm})
			}
		}
		e.in.idleOut = false
		e.in.noteEventTime(e.wm)
	}
}

// watermark records the chain's new event time; flush sends it.
func (e *emitter[T]) watermark(wm int64) { e.wm = max(e.wm, wm) }

func (e *emitter[T]) finish() { e.flush() }

// opener is a stage with resources to open at start and release on abort.
type opener interface {
	open() error
	abort()
}

// instance is one parallel instance of a task: a protoactor actor.
type instance struct {
	exec *execution
	task int
	idx  int
	self *actor.PID

	src   sourceRunner
	head  inlet
	sinks []opener
	em    flusher

	outs     []*outChan
	ins      []inChan
	eosLeft  int
	mbCfg    mailbox.Config // this instance's input mailbox
	credited bool           // its policy is Block: senders hold credits

	num         int          // the instance's number within the job (for acks)
	gen         int          // the job generation: it grows with every restart
	states      []stateSlot  // stages whose state goes into checkpoints
	srcKey      string       // "source/instance": the key of its offset
	srcOffset   int64        // where the source starts (a restored offset)
	finishedIn  []bool       // input channels that delivered end-of-stream
	align       alignment    // the checkpoint barrier being aligned
	pendingAcks []pendingAck // a source's offsets at checkpoints not yet completed
	// Checkpoints of a job where some instances finished: want is the
	// latest checkpoint the job announced to this instance (answered when
	// its input ends before the barrier arrives), answered the latest it
	// acknowledged. finKey is the key of the marker that says, in a
	// checkpoint, that the instance had finished its input; restoredDone
	// that the checkpoint the job resumed from says so (the instance then
	// ends at once, without finishing its chain again). drainedEnd: its
	// input ended because the job was drained, not at the sources' end, so
	// its checkpoints carry no marker (a resumed job reads on).
	want, answered uint64
	finKey         string
	restoredDone   bool
	drainedEnd     bool

	// Event time: each input channel's watermark, whether it is idle, and
	// the instance's event time, the lowest over its active channels.
	inWm      []int64
	idleIn    []bool
	idleN     int
	curWm     int64
	idleOut   bool          // Idle was sent on every output and nothing since
	idleAfter time.Duration // a source's idle timeout, 0: never idle
	lastData  time.Time     // a source's last record
	idleTimer bool          // a timer will tick when the idle timeout passes
	timers    map[uint64]func() bool
	timerSeq  uint64
	evTime    atomic.Int64 // curWm or the chain's emitted watermark, for Stats
	tr        *tracer      // nil when tracing is off

	c        actor.Context
	stash    []*actors.Envelope
	blockedN int
	since    time.Time
	done     bool
	reported bool
	// The final checkpoint (jobs with checkpoints): finalAt is the last
	// checkpoint the instance answered after it finished, closed says its
	// sinks closed once a commit covered finalAt, and closeReported that the
	// job was told so (the second finished).
	finalAt       uint64
	closed        bool
	closeReported bool

	tickPending, waiting, draining, waiterActive bool

	mb           atomic.Pointer[mailbox.Mailbox]
	blocked      atomic.Int64 // nanoseconds without credit, past episodes
	blockedSince atomic.Int64 // start of the current episode (unix ns), 0 when not blocked
}

// stateSlot is a stage whose state is checkpointed, under its key.
type stateSlot struct {
	key string
	st  stateful
}

// alignment tracks a checkpoint barrier across the input channels: once a
// channel delivered the barrier, what it sends next is held until every
// channel has delivered it (or ended), so that the state recorded is the
// state after exactly the records before the barrier.
type alignment struct {
	id   uint64 // 0: not aligning
	seen []bool
	held []*actors.Envelope
}

func (in *instance) Receive(c actor.Context) {
	in.c = c
	switch m := c.Message().(type) {
	case *actors.Envelope:
		in.stash = append(in.stash, m)
		in.drain()
	case *wire.Barrier:
		switch {
		case m.ID <= in.answered: // it came through the inputs first
		case in.done:
			in.finalBarrier(m.ID)
		case in.src != nil:
			in.sourceBarrier(m.ID)
		default: // the barrier follows on the inputs, or they end first
			in.want = max(in.want, m.ID)
		}
	case *wire.Committed:
		in.committed(m)
	case *wire.Credit:
		in.onCredit(m)
	case *tickMsg:
		if m.waiter {
			in.waiterActive = false
		}
		in.step()
	case *timerMsg:
		if _, ok := in.timers[m.id]; ok {
			delete(in.timers, m.id)
			m.f()
			in.em.flush()
			in.maybeReport()
		}
	case *startMsg:
		in.start()
	case *wire.Drain:
		if in.src != nil && !in.done {
			in.draining = true
			in.scheduleTick()
		}
	case *inboxFailure:
		panic(m.err)
	case *actor.Stopping:
		in.release()
	}
}

// drain handles stashed envelopes in order while the instance can send.
func (in *instance) drain() {
	for in.blockedN == 0 && len(in.stash) > 0 {
		env := in.stash[0]
		in.stash[0] = nil
		in.stash = in.stash[1:]
		if in.align.id != 0 && in.align.seen[env.Channel] {
			in.align.held = append(in.align.held, env)
			continue
		}
		in.handle(env)
	}
}

// onBarrier: channel ch delivered the barrier of checkpoint id.
func (in *instance) onBarrier(ch int, id uint64) {
	if in.align.id == 0 {
		in.align = alignment{id: id, seen: make([]bool, len(in.ins))}
	}
	in.align.seen[ch] = true
	in.maybeAligned()
}

// maybeAligned completes the alignment once every channel delivered the
// barrier or ended: the chain's state is recorded, the barrier goes on to
// every output, the job gets the acknowledgement, and the held envelopes
// are handled next.
func (in *instance) maybeAligned() {
	if in.align.id == 0 {
		return
	}
	for i, seen := range in.align.seen {
		if !seen && !in.finishedIn[i] {
			return
		}
	}
	id, held := in.align.id, in.align.held
	in.align = alignment{}
	in.answered = max(in.answered, id)
	in.em.flush()
	states := in.snapshot(id)
	for _, oc := range in.outs {
		in.enqueue(oc, &actors.Envelope{Kind: actors.Barrier, Mark: int64(id)})
	}
	in.tell(in.exec.jobPID, &wire.Ack{Gen: in.gen, ID: id, Instance: in.num, States: states})
	in.stash = append(held, in.stash...)
}

// sourceBarrier starts checkpoint id at a source: its offset and chain state
// are recorded, and the barrier follows the records emitted so far.
func (in *instance) sourceBarrier(id uint64) {
	in.answered = id
	in.em.flush()
	states := in.snapshot(id)
	for _, oc := range in.outs {
		in.enqueue(oc, &actors.Envelope{Kind: actors.Barrier, Mark: int64(id)})
	}
	off := in.src.offset()
	in.pendingAcks = append(in.pendingAcks, pendingAck{id, off})
	in.tell(in.exec.jobPID, &wire.Ack{Gen: in.gen, ID: id, Instance: in.num, States: states,
		Offsets: map[string]int64{in.srcKey: off}})
}

// finalBarrier answers checkpoint id in an instance that has finished its
// input: its state is final (aggregations have emitted, windows fired) and
// its outputs have ended, so it records its state and, for a source, its
// offset at the end, sends no barrier on, and acknowledges. Its sinks stay
// open until a commit covers id (see committed). Every instance that has
// finished answers periodic checkpoints this way while other sources run,
// and the final checkpoint once all have finished. The cut is consistent:
// everything the instance will ever send is already on its way before the
// barrier would have been, so its consumers count the ended channel as
// aligned. Unless a drain ended its input, the checkpoint also records that
// the instance finished (finKey), so that a job restored from it ends the
// instance at once instead of finishing its chain a second time.
func (in *instance) finalBarrier(id uint64) {
	in.answered = id
	states := in.snapshot(id)
	offsets := map[string]int64{}
	if in.src != nil {
		off := in.src.offset()
		in.pendingAcks = append(in.pendingAcks, pendingAck{id, off})
		offsets[in.srcKey] = off
	}
	if !in.drainedEnd {
		offsets[in.finKey] = 1
	}
	in.finalAt = id
	in.tell(in.exec.jobPID, &wire.Ack{Gen: in.gen, ID: id, Instance: in.num, States: states, Offsets: offsets})
}

type pendingAck struct {
	id     uint64
	offset int64
}

// committed carries out what a completed checkpoint asks: two-phase sinks
// commit, and the source acknowledges what the checkpoint covers. A
// finished instance whose final state the checkpoint covers then closes its
// sinks, which have nothing left to commit, and tells the job.
func (in *instance) committed(m *wire.Committed) {
	if m.Gen != in.gen {
		return
	}
	for _, s := range in.sinks {
		if c, ok := s.(interface{ commit(uint64) }); ok {
			c.commit(m.ID)
		}
	}
	if in.src != nil {
		n := 0
		for n < len(in.pendingAcks) && in.pendingAcks[n].id <= m.ID {
			n++
		}
		if n > 0 {
			off := in.pendingAcks[n-1].offset
			in.pendingAcks = in.pendingAcks[n:]
			if err := in.src.ack(off); err != nil {
				panic(err)
			}
		}
	}
	if in.done && in.finalAt != 0 && m.ID >= in.finalAt && !in.closed {
		for _, s := range in.sinks {
			if c, ok := s.(interface{ closeFinal() }); ok {
				c.closeFinal() // a failure panics: the job hears of it, not of a close
			}
		}
		in.closed = true
		in.maybeReport()
	}
}

// snapshot records the state of the chain's stateful stages.
func (in *instance) snapshot(id uint64) map[string][]byte {
	states := make(map[string][]byte, len(in.states))
	for _, s := range in.states {
		b, err := s.st.snapshotState(id)
		if err != nil {
			panic(&stageFailure{op: s.key, err: fmt.Errorf("checkpoint: %w", err)})
		}
		if b != nil {
			states[s.key] = b
		}
	}
	return states
}

func (in *instance) start() {
	for _, s := range in.sinks {
		if err := s.open(); err != nil {
			panic(err)
		}
	}
	if in.src != nil {
		if err := in.src.open(in.srcOffset); err != nil {
			panic(err)
		}
		if in.restoredDone { // at its end already: nothing to read again
			in.endOfInput()
			return
		}
		in.scheduleTick()
	}
	if in.src == nil && in.eosLeft == 0 {
		in.endOfInput()
	}
}

func (in *instance) handle(env *actors.Envelope) {
	switch env.Kind {
	case actors.Data:
		if in.idleN > 0 && in.idleIn[env.Channel] {
			in.idleIn[env.Channel] = false
			in.idleN--
		}
		if env.Count == 0 { // every record was shed by the overflow policy
			return
		}
		var start time.Time
		if in.exec.metrics != nil {
			start = time.Now()
		}
		if in.tr != nil && env.Headers != nil {
			done := in.tr.receive(env.Headers)
			in.head.deliver(env.Payload)
			in.em.flush()
			done()
		} else {
			in.head.deliver(env.Payload)
		}
		if in.exec.metrics != nil {
			in.exec.metrics.batchDone(in, time.Since(start))
		}
		in.em.flush()
		if in.credited {
			in.grant(env)
		}
	case actors.EndOfStream:
		in.eosLeft--
		in.finishedIn[env.Channel] = true
		if env.Mark == eosDrained {
			in.drainedEnd = true
		}
		in.maybeAligned()
		if in.eosLeft == 0 {
			in.endOfInput()
		} else {
			in.advance()
		}
	case actors.Barrier:
		in.onBarrier(env.Channel, uint64(env.Mark))
	case actors.Watermark:
		ch := env.Channel
		if in.idleIn[ch] {
			in.idleIn[ch] = false
			in.idleN--
		}
		if env.Mark > in.inWm[ch] {
			in.inWm[ch] = env.Mark
			in.advance()
		}
	case actors.Idle:
		if !in.idleIn[env.Channel] {
			in.idleIn[env.Channel] = true
			in.idleN++
			in.advance()
		}
	}
}

// advance recomputes the instance's event time, the lowest watermark of its
// active input channels (the ones neither ended nor idle), and passes it
// through the chain when it moved forward. It never goes back: a channel
// that becomes active again behind it holds it only from then on. When
// every open channel is idle, the instance tells its consumers it is idle.
func (in *instance) advance() {
	if in.done {
		return
	}
	low, active, open := int64(math.MaxInt64), false, false
	for i, wm := range in.inWm {
		if in.finishedIn[i] {
			continue
		}
		open = true
		if in.idleIn[i] {
			continue
		}
		active = true
		low = min(low, wm)
	}
	if !active {
		if open {
			in.goIdle()
		}
		return
	}
	if low > in.curWm {
		in.curWm = low
		in.noteEventTime(low)
		in.head.watermark(low)
		in.em.flush()
	}
}

// goIdle tells every consumer that this instance has nothing for a while.
func (in *instance) goIdle() {
	if in.idleOut {
		return
	}
	in.em.flush()
	in.idleOut = true
	for _, oc := range in.outs {
		in.enqueue(oc, &actors.Envelope{Kind: actors.Idle})
	}
}

func (in *instance) noteEventTime(wm int64) {
	if wm > in.evTime.Load() {
		in.evTime.Store(wm)
	}
}

// checkIdle marks a source that has read nothing for its idle timeout as
// idle, or arms a timer that looks again when the timeout will have passed.
func (in *instance) checkIdle() {
	if in.idleAfter <= 0 || in.idleOut || in.idleTimer {
		return
	}
	quiet := in.exec.topo.cfg.now().Sub(in.lastData)
	if quiet >= in.idleAfter {
		in.goIdle()
		return
	}
	in.idleTimer = true
	in.afterFunc(in.idleAfter-quiet, func() {
		in.idleTimer = false
		in.scheduleTick()
	})
}

// afterFunc runs f in the instance's actor once d has passed, unless the
// instance stops first. Stages use it for processing-time timers.
func (in *instance) afterFunc(d time.Duration, f func()) {
	if in.timers == nil {
		in.timers = make(map[uint64]func() bool)
	}
	in.timerSeq++
	id := in.timerSeq
	root, self := in.exec.root, in.self
	in.timers[id] = in.exec.topo.cfg.after(d, func() { root.Send(self, &timerMsg{id: id, f: f}) })
}

// eosDrained is the Mark of an end-of-stream that a drain caused.
const eosDrained = 1

// endOfInput finishes the chain (aggregations emit, sinks flush) and sends
// end-of-stream on every output. An instance that the restored checkpoint
// says had finished does not finish its chain again (its aggregations
// emitted before the checkpoint); only its sinks learn that the stream
// ended. A checkpoint announced to the instance that did not reach it
// through its inputs is answered now.
func (in *instance) endOfInput() {
	if in.done {
		return
	}
	switch {
	case in.restoredDone:
		for _, s := range in.sinks {
			if e, ok := s.(interface{ endRestored() }); ok {
				e.endRestored()
			}
		}
	case in.src != nil:
		in.src.finish()
	default:
		in.head.finish()
	}
	in.em.flush()
	var mark int64
	if in.drainedEnd {
		mark = eosDrained
	}
	for _, oc := range in.outs {
		in.enqueue(oc, &actors.Envelope{Kind: actors.EndOfStream, Mark: mark})
	}
	in.done = true
	in.maybeReport()
	if in.want > in.answered {
		in.finalBarrier(in.want)
	}
}

// maybeReport tells the job that the instance finished its input, once
// everything it sent is out; in a job with checkpoints it reports finished a
// second time once its sinks closed after the final checkpoint.
func (in *instance) maybeReport() {
	if in.done && in.blockedN == 0 && !in.reported {
		in.reported = true
		in.tell(in.exec.jobPID, in.finishedMsg())
	}
	if in.reported && in.closed && !in.closeReported {
		in.closeReported = true
		in.tell(in.exec.jobPID, in.finishedMsg())
	}
}

// finishedMsg reports the instance finished; from another process, with
// its final counters (the job actor reads those of its own process).
func (in *instance) finishedMsg() *wire.Finished {
	f := &wire.Finished{Task: in.task, Instance: in.idx, Gen: in.gen}
	if x := in.exec; !x.local(x.jobPID) {
		s := x.instanceStats(in)
		s.Final = true
		f.Stats = &s
	}
	return f
}

func (in *instance) enqueue(oc *outChan, env *actors.Envelope) {
	env.Channel = oc.channel
	env.Seq = oc.seq
	oc.seq += uint64(env.Count)
	if !oc.credited || len(oc.queue) == 0 && (env.Kind != actors.Data || oc.credits >= env.Count) {
		oc.credits -= env.Count
		in.send(oc, env)
		return
	}
	if len(oc.queue) == 0 {
		in.blockedN++
		if in.blockedN == 1 {
			in.since = time.Now()
			in.blockedSince.Store(in.since.UnixNano())
		}
	}
	oc.queue = append(oc.queue, env)
}

// onCredit adds the room a receiver granted: m.Total counts every record
// granted on the channel since it opened, so an older total adds nothing.
func (in *instance) onCredit(m *wire.Credit) {
	if m.Out < 0 || m.Out >= len(in.outs) {
		return
	}
	oc := in.outs[m.Out]
	if m.Total <= oc.granted {
		return
	}
	oc.credits += int(m.Total - oc.granted)
	oc.granted = m.Total
	if len(oc.queue) == 0 {
		return
	}
	for len(oc.queue) > 0 {
		env := oc.queue[0]
		if env.Kind == actors.Data && oc.credits < env.Count {
			return
		}
		oc.credits -= env.Count
		in.send(oc, env)
		oc.queue[0] = nil
		oc.queue = oc.queue[1:]
	}
	oc.queue = nil
	in.blockedN--
	if in.blockedN > 0 {
		return
	}
	in.blocked.Add(int64(time.Since(in.since)))
	in.blockedSince.Store(0)
	in.drain()
	if in.blockedN == 0 && in.waiting {
		in.waiting = false
		in.scheduleTick()
	}
	in.maybeReport()
}

func (in *instance) scheduleTick() {
	if !in.tickPending {
		in.tickPending = true
		in.c.Send(in.self, &tickMsg{})
	}
}

// sourceBatchesPerTick is how many batches a source reads per tick message.
const sourceBatchesPerTick = 16

// readTick reads up to sourceBatchesPerTick batches and pushes them through
// the chain, in one trace when the sampler keeps it (the unit of sampling:
// starting a span for every small batch would cost more than tracing is
// worth). The span ends even when an operator of the chain panics.
func (in *instance) readTick() (n int, err error) {
	if in.tr != nil {
		end := in.tr.root(in.src.stage())
		read := 0
		defer func() { end(read) }()
		for range sourceBatchesPerTick {
			n, err = in.src.step()
			read += n
			in.em.flush()
			if n == 0 || err != nil || in.blockedN > 0 {
				break
			}
		}
		return n, err
	}
	for range sourceBatchesPerTick {
		n, err = in.src.step()
		in.em.flush()
		if n == 0 || err != nil || in.blockedN > 0 {
			break
		}
	}
	return n, err
}

// step reads batches from the source and pushes it through the chain.
func (in *instance) step() {
	in.tickPending = false
	if in.done {
		return
	}
	if in.blockedN > 0 {
		in.waiting = true
		return
	}
	if in.draining {
		in.drainedEnd = true
		in.endOfInput()
		return
	}
	// Several batches per tick: the tick is a message through the mailbox,
	// which costs more than a batch of cheap records. Control messages
	// (credits, drain) still interleave between ticks.
	n, err := in.readTick()
	switch {
	case errors.Is(err, io.EOF):
		in.endOfInput()
	case err != nil:
		panic(err)
	case n > 0:
		if in.idleAfter > 0 {
			in.lastData = in.exec.topo.cfg.now()
			in.idleOut = false
		}
		in.scheduleTick()
	default:
		in.checkIdle()
		w := in.src.waiter()
		if w == nil {
			in.scheduleTick()
			return
		}
		if in.waiterActive {
			return
		}
		in.waiterActive = true
		ctx, root, self := in.exec.ctx, in.exec.root, in.self
		go func() { // owned by the job: ends when data arrives or the job ends
			if w.Wait(ctx) == nil {
				root.Send(self, &tickMsg{waiter: true})
			}
		}()
	}
}

func (in *instance) release() {
	for _, stop := range in.timers {
		stop()
	}
	in.timers = nil
	if in.src != nil {
		_ = in.src.close()
	}
	// Sinks still open (the job stopped early, or before its final
	// checkpoint was committed) are aborted; closed ones are left alone.
	for _, s := range in.sinks {
		s.abort()
	}
}

// nopFlusher is the emitter of a chain that ends in a sink.
type nopFlusher struct{}

func (nopFlusher) flush() {}

// execution is a running topology: the actors.Execution of a Topology.
type execution struct {
	topo   *Topology
	plan   *Plan
	sys    *actors.System
	root   *actor.RootContext
	ctx    context.Context
	cancel context.CancelFunc

	jobPID    *actor.PID
	gen       int             // incremented by every restart
	dist      Distributor     // nil: every instance runs in this process
	placement []string        // distributed: the address of every instance, by number
	hosts     map[string]bool // distributed: the other processes of the generation
	jobParent string          // the id of the actor that parents the instances here
	instMu    sync.RWMutex    // guards instances against Stats during a restart
	instances [][]*instance
	byID      map[string]*instance
	counters  map[*node][]*counters
	launched  chan error

	// The latest counters reported by instances in other processes, of
	// every generation: a generation's counts stay in the job's totals
	// after it is replaced, as the shared counters of local instances do.
	statsMu     sync.Mutex
	remoteStats map[statsKey]*wire.InstanceStats

	done     chan struct{}
	mu       sync.Mutex
	err      error
	finished int

	cpStore     persistence.CheckpointStore // nil: no checkpoints
	deadLetters supervision.DeadLetterStore
	restored    *persistence.Checkpoint // the checkpoint the job resumed from
	cpStats     CheckpointStats
	cpStatsMu   sync.Mutex
	metrics     *jobMetrics // nil without a MeterProvider
}

// CheckpointStats describe a job's checkpoints.
type CheckpointStats struct {
	Completed    int64         // checkpoints completed in this run
	Failed       int64         // checkpoints whose store failed
	LastID       uint64        // the newest completed checkpoint
	LastDuration time.Duration // from injecting its barriers to stored
	LastTime     time.Time
	RestoredFrom uint64 // the checkpoint this run resumed from, 0 if none
	// Restarts counts RestartOnFailure's restarts of the job, and
	// RestartDelays the backoff before each.
	Restarts      int
	RestartDelays []time.Duration
}

func (x *execution) noteRestart(d time.Duration) {
	x.cpStatsMu.Lock()
	x.cpStats.Restarts++
	x.cpStats.RestartDelays = append(x.cpStats.RestartDelays, d)
	x.cpStatsMu.Unlock()
}

// CheckpointStatsOf reports the checkpoints of a topology's run (zero
// statistics for another kind of job).
func CheckpointStatsOf(run *actors.Run) CheckpointStats {
	if x, ok := run.Execution().(*execution); ok {
		return x.Checkpoints()
	}
	return CheckpointStats{}
}

// Checkpoints reports the job's checkpoints and restarts.
func (x *execution) Checkpoints() CheckpointStats {
	x.cpStatsMu.Lock()
	defer x.cpStatsMu.Unlock()
	st := x.cpStats
	st.RestartDelays = slices.Clone(st.RestartDelays)
	return st
}

// Start implements actors.Job: it validates the topology, spawns one actor
// per task instance under a job actor that supervises them, and starts the
// sources.
func (t *Topology) Start(ctx context.Context, sys *actors.System) (actors.Execution, error) {
	plan, err := t.Plan()
	if err != nil {
		return nil, err
	}
	x := &execution{topo: t, plan: plan, sys: sys, root: sys.Root(),
		done: make(chan struct{}), launched: make(chan error, 1),
		byID: make(map[string]*instance), counters: make(map[*node][]*counters)}
	x.ctx, x.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if t.cfg.cpInterval > 0 {
		if err := x.openCheckpoints(ctx); err != nil {
			x.cancel()
			return nil, fmt.Errorf("operators: start %q: %w", t.name, err)
		}
	}
	if err := x.openDeadLetters(); err != nil {
		x.cancel()
		return nil, fmt.Errorf("operators: start %q: %w", t.name, err)
	}
	if x.metrics, err = newJobMetrics(x); err != nil {
		x.cancel()
		return nil, fmt.Errorf("operators: start %q: metrics: %w", t.name, err)
	}
	props := actor.PropsFromProducer(func() actor.Actor { return &jobActor{x: x} },
		actor.WithSupervisor(&failFast{x: x}), actor.WithGuardian(&jobGuardian{x: x}))
	if x.dist = t.cfg.dist; x.dist != nil {
		x.root, props = x.dist.Root(), x.dist.Props(props)
	}
	pid, err := x.root.SpawnNamed(props, fmt.Sprintf("job-%s-%d", t.name, jobSeq.Add(1)))
	if err != nil {
		x.cancel()
		return nil, fmt.Errorf("operators: start %q: %w", t.name, err)
	}
	select {
	case err := <-x.launched: // the job actor has set x.jobPID
		if err != nil {
			<-x.done
			return nil, fmt.Errorf("operators: start %q: %w", t.name, err)
		}
	case <-ctx.Done():
		x.root.Send(pid, &abortMsg{})
		<-x.done
		return nil, fmt.Errorf("operators: start %q: %w", t.name, context.Cause(ctx))
	}
	return x, nil
}

var jobSeq atomic.Int64 // unique job actor names within the process

func (x *execution) Done() <-chan struct{} { return x.done }

func (x *execution) Err() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.err
}

func (x *execution) Drain() { x.tell(&wire.Drain{}) }
func (x *execution) Abort() { x.tell(&abortMsg{}) }

// Abort stops a run now, as Run.Stop does without waiting, with cause as
// its outcome (wrapping ErrAborted): for a runner that stops a job for a
// reason of its own, such as a coordinator that was fenced. It does not
// wait; a run of another kind is stopped with ErrAborted.
func Abort(run *actors.Run, cause error) {
	if x, ok := run.Execution().(*execution); ok {
		x.tell(&abortMsg{cause: cause})
		return
	}
	run.Execution().Abort()
}

// tell sends msg to the job actor unless the job has already ended.
func (x *execution) tell(msg any) {
	select {
	case <-x.done:
	default:
		x.root.Send(x.jobPID, msg)
	}
}

// setErr records the job's outcome; the first error wins.
func (x *execution) setErr(err error) {
	x.mu.Lock()
	if x.err == nil {
		x.err = err
	}
	x.mu.Unlock()
}

// Stats implements actors.Execution. A distributed job's statistics cover
// its instances in every process: the counters of records (in, out, dead
// letters, late) are totals over every generation, as in one process, from
// the shared counters of this process's instances and the latest reports of
// the others (wire.Stats, wire.Finished); the mailboxes, blocked time and
// watermarks are those of the current generation's instances, reported up
// to hostStatsInterval ago when they run in another process.
func (x *execution) Stats() []actors.OperatorStats {
	x.instMu.RLock()
	defer x.instMu.RUnlock()
	x.statsMu.Lock()
	defer x.statsMu.Unlock()
	var out []actors.OperatorStats
	for id, chain := range x.plan.chains {
		for pos, n := range chain {
			st := actors.OperatorStats{Name: n.name, Kind: n.kind, Task: id, Parallelism: x.plan.par[n]}
			for _, c := range x.counters[n] {
				st.In += c.in.Load()
				st.Out += c.out.Load()
				st.DeadLettered += c.dead.Load()
				st.Late += c.late.Load()
			}
			for k, r := range x.remoteStats {
				if k.task == id {
					o := r.Ops[pos]
					st.In += o.In
					st.Out += o.Out
					st.DeadLettered += o.DeadLettered
					st.Late += o.Late
				}
			}
			if pos == 0 && id < len(x.instances) {
				for _, in := range x.instances[id] {
					if x.local(in.self) {
						s := x.instanceStats(in)
						addInstanceStats(&st, &s)
					} else if r := x.remoteStats[statsKey{in.gen, id, in.idx}]; r != nil {
						addInstanceStats(&st, r)
					}
				}
			}
			out = append(out, st)
		}
	}
	return out
}

// addInstanceStats adds what an instance says of its mailbox, blocked time
// and event time to the statistics of its task's first operator.
func addInstanceStats(st *actors.OperatorStats, s *wire.InstanceStats) {
	if s.Policy != "" {
		st.Policy = s.Policy
		st.Capacity += s.Capacity
		st.Queued += s.Depth
		st.QueueHighWater = max(st.QueueHighWater, s.HighWater)
		st.Spilled += s.Spilled
		st.SpillPending += s.SpillPending
		for i, d := range s.Dropped {
			if d == 0 {
				continue
			}
			st.Dropped += d
			if st.DroppedBy == nil {
				st.DroppedBy = map[string]int64{}
			}
			st.DroppedBy[mailbox.Reason(i).String()] += d
		}
	}
	if wm := s.Watermark; wm != 0 && (st.Watermark.IsZero() || time.Unix(0, wm).Before(st.Watermark)) {
		st.Watermark = time.Unix(0, wm)
	}
	st.Blocked += time.Duration(s.Blocked)
	if s.Backpressured {
		st.Backpressured++
	}
}

// openDeadLetters finds the dead-letter store when an operator needs one.
func (x *execution) openDeadLetters() error {
	need := false
	for _, n := range x.topo.nodes {
		need = need || n.recordAttempts > 0
	}
	if !need {
		return nil
	}
	x.deadLetters = x.topo.cfg.deadLetters
	if x.deadLetters != nil {
		return nil
	}
	db, err := x.sys.DB()
	if err != nil {
		return fmt.Errorf("dead letters: %w", err)
	}
	x.deadLetters, err = supervision.NewBoltDeadLetters(db)
	if err != nil {
		return fmt.Errorf("dead letters: %w", err)
	}
	return nil
}

// openCheckpoints finds the checkpoint store and the checkpoint to resume
// from.
func (x *execution) openCheckpoints(ctx context.Context) error {
	x.cpStore = x.topo.cfg.cpStore
	if x.cpStore == nil {
		db, err := x.sys.DB()
		if err != nil {
			return fmt.Errorf("checkpoints: %w", err)
		}
		x.cpStore, err = defaultCheckpointStore(db)
		if err != nil {
			return fmt.Errorf("checkpoints: %w", err)
		}
	}
	cp, ok, err := x.cpStore.Latest(ctx, x.topo.name)
	if err != nil {
		return fmt.Errorf("checkpoints: load the latest: %w", err)
	}
	if ok {
		x.restored = &cp
		x.cpStats.RestoredFrom = cp.ID
		x.sys.Logger().Info("restoring from checkpoint", "job", x.topo.name, "checkpoint", cp.ID,
			"states", len(cp.States), "offsets", len(cp.Offsets))
	}
	return nil
}

// Plan returns the physical plan the job runs.
func (x *execution) Plan() *Plan { return x.plan }

// build wires every instance: channels, credits, stages. It runs before any
// instance is spawned, so instances start fully formed.
func (x *execution) build() error {
	x.instMu.Lock()
	defer x.instMu.Unlock()
	p, cfg := x.plan, x.topo.cfg
	x.instances = make([][]*instance, len(p.chains))
	if x.jobParent == "" {
		x.jobParent = x.jobPID.Id
	}
	nums := 0
	for id, chain := range p.chains {
		par := p.par[chain[0]]
		for i := 0; i < par; i++ {
			name := "t" + strconv.Itoa(id) + "." + strconv.Itoa(i)
			if x.gen > 0 {
				name += "g" + strconv.Itoa(x.gen)
			}
			addr, parent := x.jobPID.Address, x.jobPID.Id
			if x.placement != nil && x.placement[nums] != addr {
				addr, parent = x.placement[nums], remoteParent(x.jobPID, x.gen)
			}
			nums++
			in := &instance{exec: x, task: id, idx: i, gen: x.gen, self: actor.NewPID(addr, parent+"/"+name)}
			x.instances[id] = append(x.instances[id], in)
			x.byID[in.self.Id] = in
		}
		for _, n := range chain {
			if x.counters[n] != nil {
				continue // counts go on across restarts
			}
			cs := make([]*counters, par)
			for i := range cs {
				cs[i] = new(counters)
			}
			x.counters[n] = cs
		}
	}
	// Input channels of every receiver: one per (edge, sender instance that
	// sends to it). Window: the receiver's capacity shared by its channels.
	type key struct{ task, edge, from, to int }
	chanOf := make(map[key]int)
	for id := range p.chains {
		for _, recv := range x.instances[id] {
			for ei, e := range p.ins[id] {
				for _, snd := range x.instances[e.from] {
					if e.part == partForward && snd.idx != recv.idx {
						continue
					}
					chanOf[key{id, ei, snd.idx, recv.idx}] = len(recv.ins)
					recv.ins = append(recv.ins, inChan{sender: snd.self})
				}
			}
			recv.eosLeft = len(recv.ins)
			recv.mbCfg = mailbox.Block(cfg.capacity)
			if head := p.chains[id][0]; head.input != nil {
				recv.mbCfg = *head.input
			}
			recv.credited = recv.mbCfg.Overflow == mailbox.OverflowBlock
			if recv.credited { // room for every channel's window
				recv.mbCfg.Capacity = max(recv.mbCfg.Capacity, cfg.batchSize*len(recv.ins))
			}
		}
	}
	window := func(recv *instance) int { return max(cfg.batchSize, recv.mbCfg.Capacity/max(1, len(recv.ins))) }
	// Output channels and emitters.
	specsOf := make([][]*outputSpec, len(x.instances))
	for id := range p.chains {
		specsOf[id] = make([]*outputSpec, len(x.instances[id]))
	}
	outSpecs := func(snd *instance) []*outputSpec {
		var specs []*outputSpec
		for _, e := range p.outs[snd.task] {
			ei := e.index
			spec := &outputSpec{part: e.part}
			if e.via != nil {
				spec.hasher = e.via.hasher
			}
			for _, recv := range x.instances[e.to] {
				if e.part == partForward && snd.idx != recv.idx {
					continue
				}
				ci := chanOf[key{e.to, ei, snd.idx, recv.idx}]
				oc := &outChan{target: recv.self, channel: ci, credits: window(recv), credited: recv.credited}
				if !x.local(recv.self) && x.local(snd.self) {
					oc.codec = p.chains[e.to][0].newCodec()
				}
				recv.ins[ci].out = len(snd.outs)
				snd.outs = append(snd.outs, oc)
				spec.chans = append(spec.chans, oc)
			}
			specs = append(specs, spec)
		}
		return specs
	}
	num := 0
	for id, chain := range p.chains {
		for _, in := range x.instances[id] {
			in.num = num
			num++
			if !x.local(in.self) { // wired for its senders, built where it runs
				if tail := chain[len(chain)-1]; tail.role != roleSink {
					outSpecs(in)
				}
				continue
			}
			in.tr = newTracer(x, in)
			in.finishedIn = make([]bool, len(in.ins))
			in.inWm = make([]int64, len(in.ins))
			for i := range in.inWm {
				in.inWm[i] = math.MinInt64
			}
			in.idleIn = make([]bool, len(in.ins))
			in.curWm = math.MinInt64
			in.idleAfter = chain[0].idleAfter
			in.lastData = cfg.now()
			in.finKey = chain[0].name + "/" + strconv.Itoa(in.idx) + "#finished"
			in.restoredDone = x.restored != nil && x.restored.Offsets[in.finKey] != 0
			if chain[0].role == roleSource {
				in.srcKey = chain[0].name + "/" + strconv.Itoa(in.idx)
				if x.restored != nil {
					in.srcOffset = x.restored.Offsets[in.srcKey]
				}
			}
			tail := chain[len(chain)-1]
			var next any
			if tail.role == roleSink {
				in.em = nopFlusher{}
			} else {
				next, in.em = tail.newEmitter(outSpecs(in), in)
			}
			for pos := len(chain) - 1; pos >= 0; pos-- {
				n := chain[pos]
				sc := &stageCtx{node: n, instance: in.idx, parts: p.par[n], ctx: x.ctx, c: x.counters[n][in.idx], batch: cfg.batchSize, tr: in.tr,
					after: in.afterFunc, now: cfg.now, finalCheckpoint: x.topo.cfg.cpInterval > 0}
				if x.restored != nil {
					sc.restore, sc.restored = x.restored.States[sc.key()]
				}
				if n.recordAttempts > 0 {
					sc.failures = &failureHandler{sc: sc, attempts: n.recordAttempts, store: x.deadLetters, job: x.topo.name}
				}
				if n.role == roleSource {
					in.src = n.newSource(next, sc)
					continue
				}
				next = n.newStage(next, sc)
				if st, ok := next.(stateful); ok && x.topo.cfg.cpInterval > 0 {
					in.states = append([]stateSlot{{key: sc.key(), st: st}}, in.states...)
				}
				if r, ok := next.(interface{ restoreState([]byte) error }); ok && sc.restored {
					if err := r.restoreState(sc.restore); err != nil {
						return fmt.Errorf("operator %q instance %d: restore from checkpoint %d: %w", n.name, in.idx, x.restored.ID, err)
					}
				}
				if o, ok := next.(opener); ok {
					in.sinks = append(in.sinks, o)
				}
				if pos == 0 {
					in.head = n.newInlet(next)
				}
			}
		}
	}
	return nil
}

// jobActor supervises the instances of one execution and drives the
// checkpoint coordinator.
type jobActor struct {
	x     *execution
	total int
	cs    coordState
	timer func() bool // stops the checkpoint interval's timer
	// savepoints waiting for a checkpoint at or after their id
	savepoints []savepointWait
	started    map[uint64]time.Time // when each checkpoint's barriers went out

	// The end of a job with checkpoints: every instance reports finished
	// twice, when its input ended and when its sinks closed after the final
	// checkpoint (reported holds who reported once; closed counts the
	// second reports, out of instances).
	reported  map[[2]int]bool // by task and instance index
	closed    int
	instances int
	finalDone bool // the final checkpoint completed

	// restarts
	budget     *supervision.Budget
	restarts   int
	restarting bool
	drained    bool // Drain was asked: the job keeps its last checkpoint
	alive      int  // instances of the stopped generation not yet terminated
	timerDone  bool // the restart backoff elapsed
	stopTimer  func() bool

	// distributed
	unwatch   func()          // stops watching for lost processes
	waitHosts map[string]bool // processes whose instances are stopping
}

func (j *jobActor) Receive(c actor.Context) {
	x := j.x
	switch m := c.Message().(type) {
	case *actor.Started:
		x.jobPID = c.Self()
		if x.dist != nil {
			root, pid := x.root, c.Self()
			j.unwatch = x.dist.Watch(func(addr string) { root.Send(pid, &hostLost{addr: addr}) })
		}
		err := j.launch(c)
		x.launched <- err
		if err != nil {
			x.setErr(err)
			c.Stop(c.Self())
			return
		}
		if x.cpStore != nil {
			j.cs = coordState{Instances: j.total}
			if x.restored != nil {
				j.cs.Completed = x.restored.ID
			}
			j.started = map[uint64]time.Time{}
			j.arm()
		}
	case *cpTick:
		j.feed(c, evTick{})
		j.arm()
	case *savepointTick:
		j.feed(c, evTick{})
	case *savepointMsg:
		if x.cpStore == nil {
			m.reply <- savepointResult{err: errors.New("operators: savepoint: the job takes no checkpoints (use the Checkpoints option)")}
			return
		}
		if j.cs.Stopping {
			m.reply <- savepointResult{err: errors.New("operators: savepoint: the job is finishing")}
			return
		}
		min := j.cs.Next
		if min == 0 {
			min = j.cs.Completed + 1
		}
		j.savepoints = append(j.savepoints, savepointWait{min: min, reply: m.reply})
		j.feed(c, evTick{})
	case *wire.Ack:
		if m.Gen == x.gen {
			j.feed(c, evAck{ID: m.ID, Instance: m.Instance, States: m.States, Offsets: m.Offsets})
		}
	case *wire.Stats:
		x.onStats(m)
	case *wire.Finished:
		x.noteStats(m.Gen, m.Stats)
		if m.Gen != x.gen || j.restarting {
			return
		}
		if x.cpStore == nil {
			j.total--
			if j.total == 0 {
				c.Stop(c.Self())
			}
			return
		}
		key := [2]int{m.Task, m.Instance}
		if j.reported[key] { // its sinks closed after the final checkpoint
			j.closed++
			j.maybeEnd(c)
			return
		}
		j.reported[key] = true
		j.total--
		if j.total == 0 {
			// Every instance finished its input and nothing is in flight:
			// take the final checkpoint, which commits the sinks' tail.
			j.feed(c, evFinal{})
		}
	case *wire.Failed:
		j.onFailure(c, m)
	case *actor.Terminated:
		if j.restarting {
			if in := x.byID[m.Who.Id]; in != nil && in.gen == x.gen {
				j.alive--
				j.maybeRelaunch(c)
			}
		}
	case *wire.Stopped:
		if j.restarting && m.Gen == x.gen && j.waitHosts[m.Address] {
			delete(j.waitHosts, m.Address)
			j.alive--
			j.maybeRelaunch(c)
		}
	case *hostLost:
		switch {
		case j.restarting && j.waitHosts[m.addr]:
			delete(j.waitHosts, m.addr)
			j.alive--
			j.maybeRelaunch(c)
		case !j.restarting && x.hosts[m.addr]:
			j.restart(c, fmt.Errorf("operators: topology %q: the process at %s, which runs instances of it, left or its connection broke", x.topo.name, m.addr), m.addr)
		}
	case *restartMsg:
		if j.restarting && m.gen == x.gen {
			j.timerDone = true
			j.maybeRelaunch(c)
		}
	case *wire.Drain:
		j.drained = true
		if x.cpStore != nil {
			j.feed(c, evStopping{})
		}
		for id, chain := range x.plan.chains {
			if chain[0].role == roleSource {
				for _, in := range x.instances[id] {
					x.tellFrom(c, in.self, &wire.Drain{})
				}
			}
		}
	case *abortMsg:
		if m.cause != nil {
			x.setErr(fmt.Errorf("%w: %w", x.topo.kit.Aborted, m.cause))
		} else {
			x.setErr(x.topo.kit.Aborted)
		}
		c.Stop(c.Self())
	case *actor.Stopped:
		if x.dist != nil {
			j.unwatch()
			x.stopHosts(nil)
		}
		x.metrics.close()
		if j.timer != nil {
			j.timer()
		}
		j.endSavepoints(j.x.topo.kit.Aborted)
		if j.stopTimer != nil {
			j.stopTimer()
		}
		x.cancel()
		close(x.done)
	}
}

// maybeEnd stops a job with checkpoints once its final checkpoint completed
// and every instance closed its sinks. A job that ran to its end clears its
// checkpoints (the next run starts afresh); a drained one keeps them, the
// final checkpoint last, to resume from.
func (j *jobActor) maybeEnd(c actor.Context) {
	x := j.x
	if !j.finalDone || j.closed < j.instances {
		return
	}
	if !j.drained {
		if err := x.cpStore.Clear(x.ctx, x.topo.name); err != nil {
			x.sys.Logger().Error("clear checkpoints", "job", x.topo.name, "err", err)
		}
	}
	c.Stop(c.Self())
}

type (
	savepointMsg  struct{ reply chan savepointResult }
	savepointTick struct{} // start a checkpoint for waiting savepoints
	savepointWait struct {
		min   uint64 // the first checkpoint id that started after the request
		reply chan savepointResult
	}
	savepointResult struct {
		id  uint64
		err error
	}
)

// savepointDone answers the savepoints that checkpoint id covers, and
// starts another checkpoint for those waiting for a later one.
func (j *jobActor) savepointDone(c actor.Context, id uint64) {
	kept := j.savepoints[:0]
	for _, w := range j.savepoints {
		if id >= w.min {
			w.reply <- savepointResult{id: id}
		} else {
			kept = append(kept, w)
		}
	}
	j.savepoints = kept
	if len(kept) > 0 {
		c.Send(c.Self(), &savepointTick{})
	}
}

func (j *jobActor) endSavepoints(err error) {
	for _, w := range j.savepoints {
		w.reply <- savepointResult{err: err}
	}
	j.savepoints = nil
}

// Savepoint takes a checkpoint of the running job now, outside its
// interval, and returns its id once it is complete: the state of every
// operator after every record read before the call, durable in the job's
// checkpoint store. A job of the same name started later resumes from it.
// The job must have been started with Checkpoints.
func Savepoint(ctx context.Context, run *actors.Run) (uint64, error) {
	x, ok := run.Execution().(*execution)
	if !ok {
		return 0, errors.New("operators: savepoint: not a topology's run")
	}
	reply := make(chan savepointResult, 1)
	x.tell(&savepointMsg{reply: reply})
	select {
	case r := <-reply:
		return r.id, r.err
	case <-x.done:
		select {
		case r := <-reply:
			return r.id, r.err
		default:
		}
		return 0, fmt.Errorf("operators: savepoint: the job ended: %w", x.topo.kit.Aborted)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// onFailure handles a failed instance: the job stops with the operator's
// error, or, with RestartOnFailure and budget left, restarts from its last
// completed checkpoint after the backoff's delay.
func (j *jobActor) onFailure(c actor.Context, m *wire.Failed) {
	x := j.x
	remote := m.Reason == nil // from another process: Gen says which generation
	in := x.byID[m.ID]
	if in != nil && in.gen != x.gen || remote && m.Gen != x.gen || j.restarting {
		return // a failure of a generation being replaced
	}
	reason := m.Reason
	if remote {
		reason = &stageFailure{op: m.Operator, err: errors.New(m.Message)}
	}
	j.restart(c, x.operatorError(actor.NewPID(m.Address, m.ID), reason), "")
}

// restart stops the generation and restarts the job after the backoff, or
// stops it with err when it may not restart. lost is a process that left,
// whose instances are not waited for.
func (j *jobActor) restart(c actor.Context, err error, lost string) {
	x := j.x
	rp := x.topo.cfg.restart
	if rp == nil {
		x.setErr(err)
		c.Stop(c.Self())
		return
	}
	if j.budget == nil {
		j.budget, _ = supervision.NewBudget(rp.budget, rp.within)
	}
	if j.budget == nil || !j.budget.Allow(time.Now()) {
		x.setErr(fmt.Errorf("operators: topology %q: %d restarts within %v spent, giving up: %w", x.topo.name, rp.budget, rp.within, err))
		c.Stop(c.Self())
		return
	}
	j.restarts++
	delay := rp.backoff.Delay(j.restarts)
	x.noteRestart(delay)
	x.traceEvent("sluice.job", "restart", attribute.Int("sluice.restart", j.restarts),
		attribute.String("sluice.delay", delay.String()), attribute.String("error", err.Error()))
	x.sys.Logger().Warn("operator failed; restarting the job from its last checkpoint", "job", x.topo.name,
		"err", err, "restart", j.restarts, "delay", delay)
	j.restarting, j.timerDone, j.alive = true, false, 0
	if j.timer != nil {
		j.timer()
	}
	x.instMu.RLock()
	for _, insts := range x.instances {
		for _, in := range insts {
			if x.local(in.self) {
				c.Stop(in.self)
				j.alive++
			}
		}
	}
	x.instMu.RUnlock()
	if x.dist != nil {
		j.waitHosts = x.stopHosts(map[string]bool{lost: true})
		j.alive += len(j.waitHosts)
	}
	root, pid, gen := x.root, x.jobPID, x.gen
	j.stopTimer = x.topo.cfg.after(delay, func() { root.Send(pid, &restartMsg{gen: gen}) })
}

// maybeRelaunch starts the next generation once the old one has stopped and
// the backoff has elapsed.
func (j *jobActor) maybeRelaunch(c actor.Context) {
	x := j.x
	if !j.restarting || j.alive > 0 || !j.timerDone {
		return
	}
	j.restarting = false
	x.gen++
	if x.cpStore != nil {
		cp, ok, err := x.cpStore.Latest(x.ctx, x.topo.name)
		if err != nil {
			x.setErr(fmt.Errorf("operators: topology %q: restart: load the latest checkpoint: %w", x.topo.name, err))
			c.Stop(c.Self())
			return
		}
		x.restored = nil
		if ok {
			x.restored = &cp
		}
	}
	j.total = 0
	if err := j.launch(c); err != nil {
		err = fmt.Errorf("operators: topology %q: restart: %w", x.topo.name, err)
		if x.dist != nil { // a process may have left while it was deployed to
			j.restart(c, err, "")
			return
		}
		x.setErr(err)
		c.Stop(c.Self())
		return
	}
	if x.cpStore != nil {
		j.cs = coordState{Instances: j.total}
		if x.restored != nil {
			j.cs.Completed = x.restored.ID
			x.cpStatsMu.Lock()
			x.cpStats.RestoredFrom = x.restored.ID
			x.cpStatsMu.Unlock()
		}
		j.started = map[uint64]time.Time{}
		j.arm()
	}
}

// arm schedules the next checkpoint tick.
func (j *jobActor) arm() {
	if j.cs.Stopping {
		return
	}
	root, pid := j.x.root, j.x.jobPID
	j.timer = j.x.topo.cfg.cpAfter(j.x.topo.cfg.cpInterval, func() { root.Send(pid, &cpTick{}) })
}

// feed steps the coordinator and carries out its actions.
func (j *jobActor) feed(c actor.Context, ev any) {
	x := j.x
	var acts []any
	j.cs, acts = step(j.cs, ev)
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		switch a := a.(type) {
		case actInject:
			// Every instance hears of the checkpoint: running sources
			// start it, finished instances answer it (see barrierMsg).
			j.started[a.ID] = time.Now()
			for _, insts := range x.instances {
				for _, in := range insts {
					x.tellFrom(c, in.self, &wire.Barrier{ID: a.ID})
				}
			}
		case actAbandoned:
			delete(j.started, a.ID)
			x.sys.Logger().Debug("checkpoint abandoned for the final checkpoint", "job", x.topo.name, "checkpoint", a.ID)
		case actStore:
			err := x.cpStore.Complete(x.ctx, x.topo.name, persistence.Checkpoint{
				ID: a.ID, Time: time.Now(), States: a.States, Offsets: a.Offsets})
			var more []any
			j.cs, more = step(j.cs, evStored{ID: a.ID, Err: err})
			acts = append(acts, more...)
		case actCompleted:
			d := time.Since(j.started[a.ID])
			delete(j.started, a.ID)
			x.cpStatsMu.Lock()
			x.cpStats.Completed++
			x.cpStats.LastID, x.cpStats.LastDuration, x.cpStats.LastTime = a.ID, d, time.Now()
			x.cpStatsMu.Unlock()
			x.metrics.checkpointDone(d)
			j.savepointDone(c, a.ID)
			for _, insts := range x.instances {
				for _, in := range insts {
					x.tellFrom(c, in.self, &wire.Committed{Gen: x.gen, ID: a.ID})
				}
			}
			x.sys.Logger().Debug("checkpoint completed", "job", x.topo.name, "checkpoint", a.ID, "duration", d, "final", a.Final)
			if a.Final {
				j.finalDone = true
				j.maybeEnd(c)
			}
		case actFailed:
			delete(j.started, a.ID)
			j.endSavepoints(fmt.Errorf("operators: savepoint: checkpoint %d failed: %w", a.ID, a.Err))
			x.cpStatsMu.Lock()
			x.cpStats.Failed++
			x.cpStatsMu.Unlock()
			x.sys.Logger().Error("checkpoint failed", "job", x.topo.name, "checkpoint", a.ID, "err", a.Err, "final", a.Final)
			if a.Final {
				// Without it the sinks' tail can only be committed outside any
				// checkpoint: abort them instead (Aborter discards) and fail,
				// or restart, from the last completed checkpoint.
				since := "the start"
				if j.cs.Completed > 0 {
					since = "checkpoint " + strconv.FormatUint(j.cs.Completed, 10)
				}
				j.restart(c, fmt.Errorf("operators: topology %q: final checkpoint %d: %w (the sinks' records since %s are not committed)",
					x.topo.name, a.ID, a.Err, since), "")
			}
		}
	}
}

func (j *jobActor) launch(c actor.Context) (err error) {
	x := j.x
	defer func() { // a panic while building must reach Start as an error, not hang it
		if r := recover(); r != nil {
			err = fmt.Errorf("operators: launching job %q: %v", x.topo.name, r)
		}
	}()
	x.place()
	if err := x.build(); err != nil {
		return err
	}
	j.reported, j.closed, j.finalDone = map[[2]int]bool{}, 0, false
	defer func() { j.instances = j.total }()
	for _, insts := range x.instances {
		for _, in := range insts {
			j.total++
			if !x.local(in.self) {
				continue
			}
			if err := x.spawn(c, in, x.jobPID.Id); err != nil {
				return err
			}
		}
	}
	if x.dist != nil { // the other processes spawn and start theirs before any source starts
		if err := x.deploy(); err != nil {
			return err
		}
	}
	// Start consumers before their producers: an instance's start must be
	// queued before the first record reaches it.
	for id := len(x.instances) - 1; id >= 0; id-- {
		for _, in := range x.instances[id] {
			if x.local(in.self) {
				c.Send(in.self, &startMsg{})
			}
		}
	}
	return nil
}

// mailboxFor completes an instance's mailbox configuration: overflow
// episodes and spill errors go to the log, and a spill gets the system's
// store, a queue of its own and a codec for the operator's input type.
func (x *execution) mailboxFor(in *instance) (mailbox.Config, error) {
	cfg := in.mbCfg
	head := x.plan.chains[in.task][0]
	log := x.sys.Logger().With("job", x.topo.name, "operator", head.name, "instance", in.idx, "policy", cfg.Overflow.String())
	cfg.OnOverflow = func(e mailbox.Episode) {
		attrs := []any{"depth", e.Depth, "spilled", e.Spilled, "overfilled", e.Overfilled}
		for _, r := range mailbox.Reasons() {
			if e.Dropped[r] > 0 {
				attrs = append(attrs, "dropped_"+r.String(), e.Dropped[r])
			}
		}
		event := "overflow-ended"
		if e.Started {
			event = "overflow-started"
			log.Warn("mailbox overflow started", attrs...)
		} else {
			log.Info("mailbox overflow ended", attrs...)
		}
		var dropped int64
		for _, d := range e.Dropped {
			dropped += d
		}
		x.traceEvent("sluice.mailbox", event, attribute.String("sluice.operator", head.name), attribute.Int("sluice.instance", in.idx),
			attribute.String("sluice.mailbox.policy", cfg.Overflow.String()), attribute.Int64("sluice.dropped", dropped),
			attribute.Int64("sluice.spilled", e.Spilled), attribute.Int("sluice.queue.depth", e.Depth))
	}
	cfg.OnError = func(err error) { log.Error("mailbox spill", "err", err) }
	if cfg.Overflow == mailbox.OverflowSpill {
		st, err := x.sys.SpillStore()
		if err != nil {
			return cfg, fmt.Errorf("operator %q: spill: %w", head.name, err)
		}
		opts := mailbox.SpillOptions{}
		if cfg.Spill != nil {
			opts = *cfg.Spill
		}
		opts.Store, opts.Codec, opts.Keep = st, head.newCodec(), false
		opts.Queue = fmt.Sprintf("%s/%s.%d", x.jobPID.Id, head.name, in.idx)
		cfg.Spill = &opts
	}
	return cfg, nil
}

// operatorError is the error of the failed instance child: the operator
// that failed, the instance and the cause.
func (x *execution) operatorError(child *actor.PID, reason any) error {
	op, instance, err := x.failureOf(child, reason)
	return x.topo.kit.Operator(x.topo.name, op, instance, err)
}

// failureOf names the operator and instance of a failure and its cause.
func (x *execution) failureOf(child *actor.PID, reason any) (op string, instance int, err error) {
	op = child.Id
	if in := x.byID[child.Id]; in != nil {
		op, instance = x.plan.Tasks[in.task].Name(), in.idx
	}
	switch r := reason.(type) {
	case *stageFailure:
		op, err = r.op, r.err
	case error:
		err = r
	default:
		err = x.topo.kit.Panic(r)
	}
	return op, instance, err
}

// failFast is the supervision of this foundation: the first failure of any
// instance stops the job with an error that names the operator. (Restarts,
// backoff and dead letters come with the supervision package.)
type failFast struct{ x *execution }

func (f *failFast) HandleFailure(_ *actor.ActorSystem, _ actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason, _ any) {
	if reason == nil {
		reason = errors.New("failed without a reason")
	}
	f.x.root.Send(f.x.jobPID, &wire.Failed{Gen: -1, Address: child.Address, ID: child.Id, Reason: reason})
}

// jobGuardian handles a failure of the job actor itself (a bug in sluice):
// it records the reason and stops the job.
type jobGuardian struct{ x *execution }

func (g *jobGuardian) HandleFailure(_ *actor.ActorSystem, _ actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason, _ any) {
	g.x.setErr(fmt.Errorf("operators: topology %q: job actor failed: %v", g.x.topo.name, reason))
	g.x.root.Stop(child)
}

// defaultCheckpointStore keeps checkpoints in the system's store.
func defaultCheckpointStore(db *bolt.DB) (persistence.CheckpointStore, error) {
	return persistence.NewBoltCheckpointStore(db)
}
