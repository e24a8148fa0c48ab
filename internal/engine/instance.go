package engine

import (
	"errors"
	"fmt"
	"io"
	"math"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/stage"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/mailbox"
	"go.opentelemetry.io/otel/metric"
)

// opener is a stage with resources to open at start and release on abort.
type opener interface {
	Open() error
	Abort()
}

// instance is one parallel instance of a task: a protoactor actor.
type instance struct {
	exec *execution
	task int
	idx  int
	self *actor.PID

	src   stage.SourceRunner
	head  stage.Inlet
	sinks []opener
	// closers are the stages whose state backend holds files (closed
	// when the instance stops).
	closers []interface{ CloseState() error }
	em      stage.Flusher
	// outputs are the instance's output edges, whose channels its
	// emitter sends on (see Enqueue).
	outputs []*outputSpec
	// lateOutputs are the edges of the late records of the chain's
	// window, which its late emitter sends on (see lateSender).
	lateOutputs []*outputSpec

	outs     []*outChan
	ins      []inChan
	eosLeft  int
	mbCfg    mailbox.Config // this instance's input mailbox
	credited bool           // its policy is Block: senders hold credits

	num        int         // the instance's number within the job (for acks)
	gen        int         // the job generation: it grows with every restart
	states     []stateSlot // stages whose state goes into checkpoints
	srcKey     string      // "source/instance": the key of its offset
	srcOffset  int64       // where the source starts (a restored offset)
	finishedIn []bool      // input channels that delivered end-of-stream
	align      alignment   // the checkpoint barrier being aligned
	// Unaligned checkpoints (unaligned.go): ua is the one being taken,
	// switchedTo the newest checkpoint the job switched to unaligned,
	// nextIn by input channel the sequence after the records processed,
	// replay the restored in-flight records still to process (replaying
	// while one is), codec the envelope codec of the chain's input.
	ua         *unalignedCp
	switchedTo uint64
	nextIn     []uint64
	replay     []*actors.Envelope
	replaying  bool
	codec      mailbox.Codec
	spillPins  []spillPin // the spill ranges of checkpoints not yet superseded (spillref.go)
	// started: start ran; early are the job's barriers that overtook it.
	started     bool
	early       []*wire.Barrier
	pendingAcks []pendingAck // a source's offsets at checkpoints not yet completed
	// writing: the checkpoints whose state some stage still writes after
	// its snapshot (SnapshotStateLater); their acknowledgement waits.
	writing map[uint64]*writing
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
	// suspending: the drain asked of this source is a suspension (a stop
	// with a savepoint); suspendedEnd: its input ended so, and the chain
	// keeps its state instead of finishing (only sinks flush).
	suspending, suspendedEnd bool

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
	evTime    atomic.Int64                  // curWm or the chain's emitted watermark, for Stats
	tr        *stage.Tracer                 // nil when tracing is off
	headSC    *stage.Ctx                    // the chain head's, for the traces of records shed at its input
	episode   atomic.Pointer[stage.Episode] // the overflow episode of its mailbox under way, when traced

	c     actor.Context
	stash []*actors.Envelope
	// stashBuf backs stash whenever it is empty again: drain takes from the
	// front, so without it every envelope stashed would grow a new array.
	stashBuf [8]*actors.Envelope
	holding  bool         // its mailbox is held (holdInput)
	stashed  atomic.Int64 // len(stash) after the last drain, for InstanceStats
	blockedN int
	// cont goes on with the chain's Finish once no output waits for
	// credits (stage.Ctx.Resume); finishing: the end of input is under
	// way, the stream ends (endOfStream) after the last cont.
	cont      func()
	finishing bool
	since     time.Time
	done      bool
	reported  bool
	// The final checkpoint (jobs with checkpoints): finalAt is the last
	// checkpoint the instance answered after it finished, closed says its
	// sinks closed once a commit covered finalAt, and closeReported that the
	// job was told so (the second finished).
	finalAt       uint64
	closed        bool
	closeReported bool

	tickPending, waiting, draining, waiterActive bool
	// tick is the tick the instance sends itself (scheduleTick): one value,
	// never changed, so that ticking allocates nothing.
	tick tickMsg

	// Latency (DESIGN.md, Latency and shedding): lat is nil when the
	// topology measures none. curBorn and curKeep are the ingestion time and
	// the keep probability of the envelope being handled, which the
	// envelopes it sends inherit; sentAt is the time they are stamped with
	// as sent (the start of the batch's handling); sinkTail: the chain ends
	// in a sink, whose end-to-end latency the instance records. lastEnd is
	// when the handling of the previous batch ended, in run lastRun of the
	// mailbox (0: nothing to carry over; see batchStart).
	//
	// One batch in latEvery is timed (Config.LatencyEvery): a source
	// times its every step, but stamps one in latEvery as sent, chosen
	// at random (pickTimed, latRand); a batch that arrives stamped is
	// timed, and so are the batches its handling sends; what an instance
	// makes outside a batch's handling (a timer's, a window's output) is
	// always stamped. untimed: the batch or step being handled is not
	// stamped, and what it sends goes unstamped.
	lat      *instLatency
	curBorn  int64
	curKeep  float64
	sentAt   int64
	sinkTail bool
	lastEnd  int64
	lastRun  uint64
	latEvery uint64
	latRand  uint64
	untimed  bool
	shedRand uint64 // the state of the shedding's random numbers (splitmix64)
	// the attributes of its OpenTelemetry measurements, made once
	mAttrs, mSinkAttrs metric.MeasurementOption
	paused             bool      // a source paused through the control plane (PauseSource)
	ctl                *liveGate // a live change of the input's policy (control.go), nil before any

	mb           atomic.Pointer[mailbox.Mailbox]
	blocked      atomic.Int64 // nanoseconds without credit, past episodes
	blockedSince atomic.Int64 // start of the current episode (unix ns), 0 when not blocked
}

// stateSlot is a stage whose state is checkpointed, under its key.
type stateSlot struct {
	key string
	st  stage.Stateful
}

// alignment tracks a checkpoint barrier across the input channels: once a
// channel delivered the barrier, what it sends next is held until every
// channel has delivered it (or ended), so that the state recorded is the
// state after exactly the records before the barrier.
type alignment struct {
	id   uint64 // 0: not aligning
	seen []bool
	seqs []uint64 // by channel: the sequence of its barrier, when seen
	held []*actors.Envelope
}

func (in *instance) Receive(c actor.Context) {
	in.c = c
	msg := c.Message()
	switch msg.(type) {
	case *actors.Envelope, *wire.Credit: // cheap but for the batches they lead to
	default: // work that is no batch's: the next batch reads the clock
		in.lastEnd = 0
	}
	switch m := msg.(type) {
	case *actors.Envelope:
		if m.Kind == actors.UnalignedBarrier && in.started { // it overtook the queue
			in.lastEnd = 0
			in.onUnalignedBarrier(m)
			in.drain()
			return
		}
		if in.ua != nil {
			in.lastEnd = 0 // recording what arrives is no batch's work
			in.uaArrived(m)
			in.uaMaybeDone()
		}
		in.stash = append(in.stash, m)
		in.drain()
	case *wire.Barrier:
		if !in.fromJob(c) {
			return
		}
		if !in.started { // it overtook the start (mailbox.Urgent)
			in.early = append(in.early, m)
			return
		}
		in.jobBarrier(m)
	case *wire.Committed:
		if in.fromJob(c) {
			in.committed(m)
		}
	case *wire.Credit:
		if in.fromReceiver(c, "credit", m.Out) {
			in.onCredit(m)
		}
	case *wire.Gate: // a receiver in another process changed its input (control.go)
		if in.fromReceiver(c, "gate", m.Out) {
			in.onGate(&gateMsg{out: m.Out, credited: m.Credited, window: m.Window, epoch: m.Epoch})
		}
	case *tickMsg:
		if m.waiter {
			in.waiterActive = false
		}
		in.step()
	case *timerMsg:
		if _, ok := in.timers[m.id]; ok {
			delete(in.timers, m.id)
			in.curBorn, in.curKeep, in.sentAt, in.untimed = 0, 0, 0, false
			m.f()
			in.em.Flush()
			in.maybeReport()
		}
	case *startMsg:
		in.start()
	case *replayMsg:
		in.drain()
	case *durableMsg:
		in.durable(m)
	case *wire.Drain:
		if !in.fromJob(c) {
			return
		}
		if in.src != nil && !in.done {
			in.draining = true
			in.suspending = in.suspending || m.Suspend
			in.scheduleTick()
		}
	case controlMsg:
		in.onControl(m)
	case *inboxFailure:
		panic(m.err)
	case *actor.Stopping:
		in.release()
	}
}

// drain handles stashed envelopes in order while the instance can send.
func (in *instance) drain() {
	if !in.started { // an urgent envelope that overtook the start waits for it
		return
	}
	defer in.holdInput()
	if in.blockedN == 0 && len(in.replay) > 0 { // restored in-flight records first
		// One batch per message, so that the job's barriers and commits
		// still reach the instance while it replays.
		env := in.replay[0]
		in.replay[0] = nil
		in.replay = in.replay[1:]
		in.replaying = true
		in.handle(env)
		in.replaying = false
		if len(in.replay) > 0 {
			in.c.Send(in.self, &replayMsg{})
			return
		}
	}
	for in.blockedN == 0 && len(in.replay) == 0 && len(in.stash) > 0 {
		env := in.stash[0]
		in.stash[0] = nil
		in.stash = in.stash[1:]
		if in.align.id != 0 && in.align.seen[env.Channel] {
			in.align.held = append(in.align.held, env)
			continue
		}
		in.handle(env)
	}
	if len(in.stash) == 0 {
		in.stash = in.stashBuf[:0]
	}
}

// holdInput holds the instance's mailbox (mailbox.HoldQueue) while its
// outputs are back-pressured and its stash holds stashBound envelopes or
// more, and lets it go again once it can send: without it the stash would
// take in everything the input holds, in memory, and a Spill input would
// never spill.
func (in *instance) holdInput() {
	in.stashed.Store(int64(len(in.stash)))
	hold := in.blockedN > 0 && len(in.stash) >= stashBound
	if hold == in.holding {
		return
	}
	if mb := in.mb.Load(); mb != nil {
		in.holding = hold
		mb.HoldQueue(hold)
	}
}

// stashBound is how many envelopes an instance whose outputs are
// back-pressured takes from its mailbox before it holds it.
const stashBound = 4

// onBarrier: channel ch delivered the barrier of checkpoint id, which
// followed the records before sequence seq.
func (in *instance) onBarrier(ch int, id, seq uint64) {
	switch {
	case id <= in.answered: // taken unaligned already
		return
	case in.ua != nil && in.ua.id == id:
		in.uaSeen(ch, seq, in.ua.recWm[ch]) // in order: the watermarks before it are recorded or processed
		in.uaMaybeDone()
		return
	case in.ua != nil && in.ua.id > id:
		return
	case in.switchedTo >= id: // switched to unaligned before any barrier came
		in.startUnaligned(id, ch, seq, in.inWm[ch]) // in order: the watermarks before it are processed
		return
	}
	if in.align.id == 0 {
		in.align = alignment{id: id, seen: make([]bool, len(in.ins)), seqs: make([]uint64, len(in.ins))}
	}
	in.align.seen[ch] = true
	in.align.seqs[ch] = seq
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
	in.em.Flush()
	states := in.snapshot(id)
	for _, oc := range in.outs {
		in.enqueue(oc, &actors.Envelope{Kind: actors.Barrier, Mark: int64(id)})
	}
	in.sendAck(ackOf(in, id, states, nil))
	in.stash = append(held, in.stash...)
}

func ackOf(in *instance, id uint64, states map[string][]byte, chans map[string][]byte) *wire.Ack {
	return &wire.Ack{Gen: in.gen, ID: id, Instance: in.num, States: states, Channels: chans}
}

// sourceBarrier starts checkpoint id at a source: its offset and chain state
// are recorded, and the barrier follows the records emitted so far (an
// unaligned one then overtakes them in the receivers' mailboxes).
func (in *instance) sourceBarrier(id uint64, unaligned bool) {
	in.answered = id
	in.em.Flush()
	states := in.snapshot(id)
	kind := actors.Barrier
	if unaligned {
		kind = actors.UnalignedBarrier
	}
	for _, oc := range in.outs {
		in.enqueue(oc, &actors.Envelope{Kind: kind, Mark: int64(id)})
	}
	off := in.src.Offset()
	in.pendingAcks = append(in.pendingAcks, pendingAck{id, off})
	in.sendAck(&wire.Ack{Gen: in.gen, ID: id, Instance: in.num, States: states,
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
		off := in.src.Offset()
		in.pendingAcks = append(in.pendingAcks, pendingAck{id, off})
		offsets[in.srcKey] = off
	}
	if !in.drainedEnd {
		offsets[in.finKey] = 1
	}
	in.finalAt = id
	in.sendAck(&wire.Ack{Gen: in.gen, ID: id, Instance: in.num, States: states, Offsets: offsets})
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
	in.unpinSpill(m.ID)
	for _, s := range in.sinks {
		if c, ok := s.(interface{ Commit(uint64) }); ok {
			c.Commit(m.ID)
		}
	}
	for _, s := range in.states {
		if c, ok := s.st.(interface{ CommittedState(uint64) }); ok {
			c.CommittedState(m.ID)
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
			if err := in.src.Ack(off); err != nil {
				panic(err)
			}
		}
	}
	if in.done && in.finalAt != 0 && m.ID >= in.finalAt && !in.closed {
		for _, s := range in.sinks {
			if c, ok := s.(interface{ CloseFinal() }); ok {
				c.CloseFinal() // a failure panics: the job hears of it, not of a close
			}
		}
		in.closed = true
		in.maybeReport()
	}
}

// laterState is a stage whose state may still be written after its
// snapshot returns (a keyed stage's memory table with a changelog): its
// durable is called once the write ends, from another goroutine.
type laterState interface {
	SnapshotStateLater(id uint64, durable func(error)) (b []byte, later bool, err error)
}

// writing is a checkpoint whose state is still being written by some of
// the chain's stages: left of them; ack, once the instance has it, is sent
// when none is left.
type writing struct {
	left int
	ack  *wire.Ack
}

// durableMsg: a stage's state of checkpoint id is written (err nil) or
// could not be.
type durableMsg struct {
	id  uint64
	key string
	err error
}

func (*durableMsg) IsControl() bool { return true }

// IsUrgent: the acknowledgement it may let go does not wait for the queue.
func (*durableMsg) IsUrgent() bool { return true }

// sendAck tells the job a checkpoint's acknowledgement, or keeps it until
// the chain's state of the checkpoint is written (durable).
func (in *instance) sendAck(a *wire.Ack) {
	if w := in.writing[a.ID]; w != nil {
		if w.left > 0 {
			w.ack = a
			return
		}
		delete(in.writing, a.ID)
	}
	in.tell(in.exec.jobPID, a)
}

// durable: a stage's state of a checkpoint is written. A failed write
// fails the instance as a failed snapshot does: the checkpoint is never
// acknowledged.
func (in *instance) durable(m *durableMsg) {
	if m.err != nil {
		panic(stage.NewFailure(m.key, fmt.Errorf("checkpoint: %w", m.err)))
	}
	w := in.writing[m.id]
	if w == nil {
		return
	}
	if w.left--; w.left == 0 && w.ack != nil {
		delete(in.writing, m.id)
		in.tell(in.exec.jobPID, w.ack)
	}
}

// snapshot records the state of the chain's stateful stages. A stage
// that writes its state after (laterState) holds the checkpoint's
// acknowledgement (sendAck) until durable.
func (in *instance) snapshot(id uint64) map[string][]byte {
	states := make(map[string][]byte, len(in.states))
	for _, s := range in.states {
		var b []byte
		var err error
		if ls, ok := s.st.(laterState); ok {
			root, self, key := in.exec.root, in.self, s.key
			var later bool
			b, later, err = ls.SnapshotStateLater(id, func(err error) { root.Send(self, &durableMsg{id: id, key: key, err: err}) })
			if later {
				if in.writing == nil {
					in.writing = map[uint64]*writing{}
				}
				w := in.writing[id]
				if w == nil {
					w = &writing{}
					in.writing[id] = w
				}
				w.left++
			}
		} else {
			b, err = s.st.SnapshotState(id)
		}
		if err != nil {
			panic(stage.NewFailure(s.key, fmt.Errorf("checkpoint: %w", err)))
		}
		if b != nil {
			states[s.key] = b
		}
	}
	return states
}

// jobBarrier: the job announced checkpoint m.ID (see wire.Barrier).
func (in *instance) jobBarrier(m *wire.Barrier) {
	switch {
	case m.ID <= in.answered: // it came through the inputs first
	case in.done:
		in.finalBarrier(m.ID)
	case in.src != nil:
		in.sourceBarrier(m.ID, m.Unaligned)
	case in.finishing: // answered once the chain has finished (endOfStream)
		in.want = max(in.want, m.ID)
	default: // the barrier follows on the inputs, or they end first
		in.want = max(in.want, m.ID)
		if m.Unaligned {
			in.switchUnaligned(m.ID)
			in.drain()
		}
	}
}

func (in *instance) start() {
	in.started = true
	defer func() { // the job's barriers that came before the start
		early := in.early
		in.early = nil
		for _, m := range early {
			in.jobBarrier(m)
		}
	}()
	for _, s := range in.sinks {
		if err := s.Open(); err != nil {
			panic(err)
		}
	}
	if in.src != nil {
		if err := in.src.Open(in.srcOffset); err != nil {
			panic(err)
		}
		if in.restoredDone { // at its end already: nothing to read again
			in.endOfInput()
			return
		}
		in.scheduleTick()
	}
	// Restored in-flight records first, then what came before the start
	// (an urgent barrier that overtook it).
	in.drain()
	if in.src == nil && in.eosLeft == 0 {
		in.endOfInput()
	}
}

func (in *instance) handle(env *actors.Envelope) {
	if env.Kind != actors.Data {
		in.lastEnd = 0 // a mark is no batch's work: the next batch reads the clock
	}
	switch env.Kind {
	case actors.Data:
		if in.idleN > 0 && in.idleIn[env.Channel] {
			in.idleIn[env.Channel] = false
			in.idleN--
		}
		if !in.replaying && env.Channel < len(in.nextIn) {
			in.nextIn[env.Channel] = env.Seq + uint64(env.Count)
		}
		if env.Count == 0 { // every record was shed by the overflow policy
			return
		}
		if in.lat != nil {
			in.lat.records.Add(int64(env.Count))
		}
		var start int64
		timed := in.measured() && (env.Sent != 0 || in.latEvery <= 1)
		if timed {
			start = in.batchStart(env)
		} else {
			in.lastEnd = 0 // nothing to carry over to the next batch's start
		}
		in.curBorn, in.curKeep, in.sentAt, in.untimed = env.Born, env.Keep, start, !timed
		count := int64(env.Count)
		if in.tr != nil && env.Channel < len(in.ins) {
			// The chain head's spans of sampled records say the edge and
			// the wait in the mailbox.
			wait := int64(-1) // unknown
			if env.Sent != 0 {
				wait = max(0, in.exec.now()-env.Sent) / 1000
			}
			if m, ok := env.Payload.(stage.Marked); ok {
				if _, gone := m.Marks(); len(gone) > 0 { // shed by the mailbox's policy
					in.traceShed(gone, "drop", in.mbCfg.Overflow.String())
					m.Forget()
				}
			}
			ic := &in.ins[env.Channel]
			in.tr.Receive(ic.from, ic.kind, ic.remote, wait)
			in.head.Deliver(env.Payload)
			in.tr.Received()
		} else {
			in.head.Deliver(env.Payload)
		}
		in.em.Flush()
		if timed {
			in.batchDone(env, start, count)
		}
		in.untimed = false
		if in.credited && !in.replaying && in.gatedIn(env.Channel) {
			in.grant(env)
		}
		// Handled: nothing refers to the envelope any more (it left the
		// stash; an unaligned checkpoint encoded it on arrival).
		stage.Release(env)
	case actors.Gate:
		in.onGateMark(env.Channel, env.Mark)
	case actors.EndOfStream:
		in.eosLeft--
		in.finishedIn[env.Channel] = true
		in.gateEnded(env.Channel)
		if env.Mark == eosDrained || env.Mark == eosSuspended {
			in.drainedEnd = true
		}
		if env.Mark == eosSuspended {
			in.suspendedEnd = true
		}
		in.maybeAligned()
		in.uaMaybeDone()
		if in.eosLeft == 0 {
			in.endOfInput()
		} else {
			in.advance()
		}
	case actors.Barrier:
		in.onBarrier(env.Channel, uint64(env.Mark), env.Seq)
	case actors.UnalignedBarrier:
		in.onUnalignedBarrier(env)
	case actors.Watermark:
		in.curBorn, in.curKeep, in.sentAt, in.untimed = env.Born, env.Keep, 0, false
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
		in.head.Watermark(low)
		in.em.Flush()
	}
}

// goIdle tells every consumer that this instance has nothing for a while.
func (in *instance) goIdle() {
	if in.idleOut {
		return
	}
	in.em.Flush()
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
	quiet := in.exec.topo.Config().Now().Sub(in.lastData)
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
// instance stops first or stop is called (in the actor). Stages use it
// for processing-time timers.
func (in *instance) afterFunc(d time.Duration, f func()) (stop func()) {
	if in.timers == nil {
		in.timers = make(map[uint64]func() bool)
	}
	in.timerSeq++
	id := in.timerSeq
	root, self := in.exec.root, in.self
	in.timers[id] = in.exec.topo.Config().After(d, func() { root.Send(self, &timerMsg{id: id, f: f}) })
	return func() {
		if stop, ok := in.timers[id]; ok {
			delete(in.timers, id)
			stop()
		}
	}
}

// eosDrained is the Mark of an end-of-stream that a drain caused;
// eosSuspended one that a suspension (a stop with a savepoint) caused.
const (
	eosDrained   = 1
	eosSuspended = 2
)

// endOfInput finishes the chain (aggregations emit, sinks flush) and sends
// end-of-stream on every output. An instance that the restored checkpoint
// says had finished does not finish its chain again (its aggregations
// emitted before the checkpoint); only its sinks learn that the stream
// ended. A checkpoint announced to the instance that did not reach it
// through its inputs is answered now.
func (in *instance) endOfInput() {
	if in.done || in.finishing {
		return
	}
	switch {
	case in.restoredDone:
		for _, s := range in.sinks {
			if e, ok := s.(interface{ EndRestored() }); ok {
				e.EndRestored()
			}
		}
	case in.src != nil:
		in.src.Finish()
	case in.suspendedEnd: // the state stays as it is for the savepoint; sinks flush
		for _, s := range in.sinks {
			if e, ok := s.(interface{ EndRestored() }); ok {
				e.EndRestored()
			}
		}
	default:
		in.head.Finish()
	}
	if in.cont != nil { // a stage goes on emitting once the outputs have room
		in.finishing = true
		return
	}
	in.endOfStream()
}

// outputsBlocked says whether an output waits for credits (stage.Ctx.Blocked).
func (in *instance) outputsBlocked() bool { return in.blockedN > 0 }

// resumeLater has f called once no output waits for credits
// (stage.Ctx.Resume): a stage's Finish emitting more than the receivers
// have room for goes on there.
func (in *instance) resumeLater(f func()) { in.cont = f }

// resumeFinish goes on with the chain's Finish while the outputs have
// room, and ends the stream once it is done.
func (in *instance) resumeFinish() {
	for in.cont != nil && in.blockedN == 0 {
		f := in.cont
		in.cont = nil
		f()
	}
	if in.cont == nil && in.finishing {
		in.finishing = false
		in.endOfStream()
	}
}

// endOfStream sends end-of-stream on every output once the chain has
// finished, and answers a checkpoint announced meanwhile.
func (in *instance) endOfStream() {
	in.em.Flush()
	var mark int64
	switch {
	case in.suspendedEnd:
		mark = eosSuspended
	case in.drainedEnd:
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
		s.Latency = x.instLatencyWire(in)
		f.Stats = &s
	}
	return f
}

func (in *instance) enqueue(oc *outChan, env *actors.Envelope) {
	if env.Born == 0 {
		env.Born = in.curBorn
	}
	if env.Keep == 0 {
		env.Keep = in.curKeep
	}
	if env.Kind == actors.Data {
		if oc.shed != nil && !in.shedTraced(oc, env) {
			return // shed whole, or nothing left of it
		}
		if in.measured() {
			// Made outside a batch's handling (a timer's, a window's
			// output, the end of the input's): always timed, as such
			// outputs are few beside the batches they come from.
			if in.sentAt == 0 && !in.untimed {
				in.sentAt = in.exec.now()
			}
			env.Sent = in.sentAt
		}
		if in.tr != nil && env.Sent == 0 {
			if m, ok := env.Payload.(stage.Marked); ok { // for the queue wait of its sampled records
				if tr, _ := m.Marks(); len(tr) > 0 {
					env.Sent = in.exec.now()
				}
			}
		}
	}
	env.Channel = oc.channel
	env.Seq = oc.seq
	oc.seq += uint64(env.Count)
	switch env.Kind {
	case actors.Watermark:
		oc.lastWm = env.Mark
	case actors.UnalignedBarrier:
		env.Wm = oc.lastWm
	}
	if !oc.credited || len(oc.queue) == 0 && (env.Kind != actors.Data || oc.credits >= env.Count) {
		oc.credits -= env.Count
		in.send(oc, env)
		return
	}
	if len(oc.queue) == 0 {
		in.blockedN++
		if in.blockedN == 1 {
			in.since = in.exec.topo.Config().Now()
			in.blockedSince.Store(in.since.UnixNano())
			if in.lat != nil {
				in.lat.blockedSince.Store(in.since.UnixNano())
			}
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
	in.flushQueue(oc)
}

// flushQueue sends what waits on oc as far as its credits reach (all of
// it when oc is not credit-gated), and goes on with the instance's own
// input once nothing waits on any channel.
func (in *instance) flushQueue(oc *outChan) {
	if len(oc.queue) == 0 {
		return
	}
	sent := 0
	for ; sent < len(oc.queue); sent++ {
		env := oc.queue[sent]
		if oc.credited && env.Kind == actors.Data && oc.credits < env.Count {
			break
		}
		oc.credits -= env.Count
		in.send(oc, env)
		oc.queue[sent] = nil
	}
	if sent < len(oc.queue) {
		oc.queue = oc.queue[sent:]
		return
	}
	oc.queue = oc.queue[:0] // its array serves the next time the channel waits
	in.blockedN--
	if in.blockedN > 0 {
		return
	}
	d := int64(in.exec.topo.Config().Now().Sub(in.since))
	in.blocked.Add(d)
	if in.lat != nil {
		in.lat.blocked.Add(d)
		in.lat.blockedSince.Store(0)
	}
	in.blockedSince.Store(0)
	if in.finishing {
		in.resumeFinish()
		if in.blockedN > 0 {
			return
		}
	}
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
		in.c.Send(in.self, &in.tick)
	}
}

// sourceBatchesPerTick is how many batches a source reads per tick message.
const sourceBatchesPerTick = 16

// readTick reads up to sourceBatchesPerTick batches and pushes them through
// the chain, in one trace when the sampler keeps it (the unit of sampling:
// starting a span for every small batch would cost more than tracing is
// worth). The span ends even when an operator of the chain panics.
//
// Without latency measured the emitter is flushed once, at the end of the
// tick (full batches go as they fill): a hash edge to two instances
// flushed after every batch sent two half-full batches and a watermark
// on each channel per batch read.
func (in *instance) readTick() (n int, err error) {
	var at int64 // the end of the previous step: the start of the next
	for range sourceBatchesPerTick {
		n, at, err = in.sourceStep(at)
		if n == 0 || err != nil || in.blockedN > 0 {
			break
		}
	}
	if in.lat == nil {
		in.em.Flush()
	}
	return n, err
}

// sourceStep reads one batch and pushes it through the chain. With latency
// measured, the records' ingestion time is the reader's
// (connector.IngestionTimer) or the clock's now (at: the end of the step
// just before, which started this one; 0: read the clock), and a chain that
// ends in a sink records their end-to-end latency. It returns when the step
// ended (0 when it read nothing or measures nothing).
func (in *instance) sourceStep(at int64) (int, int64, error) {
	if in.lat == nil { // readTick flushes
		// Only the job's OpenTelemetry metrics measure, if anything
		// (NoLatencyStats): one step in latEvery is stamped as sent, for
		// the receivers to time; the others go unstamped.
		in.curBorn, in.curKeep, in.sentAt, in.untimed = 0, 0, 0, true
		if in.exec.metrics != nil && in.pickTimed() {
			in.sentAt, in.untimed = in.exec.now(), false
		}
		n, err := in.src.Step()
		return n, 0, err
	}
	start := at
	if start == 0 {
		start = in.exec.now()
	}
	// Every step is timed here (its start is the previous step's end),
	// and its batches carry their ingestion time; one in latEvery is
	// stamped as sent, and timed at every operator downstream.
	var sent int64
	timed := in.pickTimed()
	if timed {
		sent = start
	}
	in.curBorn, in.curKeep, in.sentAt, in.untimed = start, 0, sent, !timed
	n, err := in.src.Step()
	if n > 0 {
		in.lat.offered.Add(int64(n))
		in.lat.records.Add(int64(n))
		in.lat.lastBorn.Store(in.curBorn)
	}
	in.em.Flush()
	in.untimed = false
	if n > 0 {
		end := in.exec.now()
		in.lat.proc.observe(time.Duration(end-start), int64(n))
		in.lat.busy.Add(end - start)
		if in.sinkTail {
			in.lat.e2e.observe(time.Duration(end-in.curBorn), int64(n))
		}
		return n, end, err
	}
	return n, 0, err
}

// measured says whether the instance times batches: for its latency
// statistics, or for the job's OpenTelemetry metrics.
func (in *instance) measured() bool { return in.lat != nil || in.exec.metrics != nil }

// pickTimed chooses, one time in latEvery at random, to stamp a source's
// step as sent, so that its batches are timed downstream.
func (in *instance) pickTimed() bool {
	if in.latEvery <= 1 {
		return true
	}
	x := in.latRand // xorshift64: never 0 from a state that is not 0
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	in.latRand = x
	return x%in.latEvery == 0
}

// batchStart is when the handling of data envelope env starts: the end of
// the previous batch's handling when the instance went from it straight to
// env (in the same run of its mailbox, with nothing between but envelopes
// stashed and credits, and env sent before it ended), else the clock. One
// reading of the clock per batch then times both the end of one batch and
// the start of the next; what the mailbox does between them counts as the
// next batch's processing, not as its queue wait.
func (in *instance) batchStart(env *actors.Envelope) int64 {
	if in.lastEnd != 0 && env.Sent <= in.lastEnd {
		if mb := in.mb.Load(); mb != nil && mb.Run() == in.lastRun {
			return in.lastEnd
		}
	}
	return in.exec.now()
}

// batchDone records what handling env took: its queue wait, its
// processing, and at a sink its end-to-end latency.
func (in *instance) batchDone(env *actors.Envelope, start, count int64) {
	end := in.exec.now()
	in.lastEnd = end
	if mb := in.mb.Load(); mb != nil {
		in.lastRun = mb.Run()
	}
	if m := in.exec.metrics; m != nil {
		m.batchDone(in, time.Duration(end-start))
		queue, e2e := time.Duration(-1), time.Duration(-1)
		if env.Sent != 0 {
			queue = time.Duration(start - env.Sent)
		}
		if in.sinkTail && env.Born != 0 {
			e2e = time.Duration(end - env.Born)
		}
		m.latencyDone(in, queue, e2e)
	}
	if l := in.lat; l != nil {
		if env.Sent != 0 {
			l.queue.observe(time.Duration(start-env.Sent), count)
		}
		l.proc.observe(time.Duration(end-start), count)
		l.busy.Add(end - start)
		if in.sinkTail && env.Born != 0 {
			l.e2e.observe(time.Duration(end-env.Born), count)
		}
	}
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
		in.suspendedEnd = in.suspending
		in.endOfInput()
		return
	}
	if in.paused { // PauseSource: Resume ticks again
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
			in.lastData = in.exec.topo.Config().Now()
			in.idleOut = false
		}
		in.scheduleTick()
	default:
		in.checkIdle()
		w := in.src.Waiter()
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
		_ = in.src.Close()
	}
	// Sinks still open (the job stopped early, or before its final
	// checkpoint was committed) are aborted; closed ones are left alone.
	for _, s := range in.sinks {
		s.Abort()
	}
	for _, c := range in.closers {
		if err := c.CloseState(); err != nil {
			in.exec.sys.Logger().Warn("close operator state", "job", in.exec.topo.Name(), "err", err)
		}
	}
	in.closers = nil
}

// nopFlusher is the emitter of a chain that ends in a sink.
type nopFlusher struct{}

func (nopFlusher) Flush() {}

// JobArrays is the job's lent batch arrays (stage.ArraysLender).
func (in *instance) JobArrays() *stage.Arrays { return &in.exec.arrays }

// Enqueue sends env on channel target of output out (stage.Sender).
func (in *instance) Enqueue(out, target int, env *actors.Envelope) {
	in.enqueue(in.outputs[out].chans[target], env)
}

// Watermarked notes that watermark wm went out on every output
// (stage.Sender).
func (in *instance) Watermarked(wm int64) {
	in.idleOut = false
	in.noteEventTime(wm)
}

// lateSender is the stage.Sender of a window's late records: the instance's
// late outputs.
type lateSender struct{ *instance }

// Enqueue sends env on channel target of late output out.
func (l lateSender) Enqueue(out, target int, env *actors.Envelope) {
	l.enqueue(l.lateOutputs[out].chans[target], env)
}

// flushers flush a chain's emitters: its results' and its late records'.
type flushers []stage.Flusher

func (fs flushers) Flush() {
	for _, f := range fs {
		f.Flush()
	}
}
