package mailbox

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// entry is one queued user message.
type entry struct {
	msg  any
	n    int    // records; 0 for control messages
	ctl  bool   // decided once, when the message arrived
	seq  uint64 // its key in the spill when it came back from there, else 0
	dead bool   // evicted by DropOldest; skipped when popped
}

// Mailbox is a bounded mailbox for one actor. It implements actor.Mailbox.
type Mailbox struct {
	cfg Config

	mu      sync.Mutex
	mem     ring[entry]
	depth   int // data records in mem (dead entries excluded)
	dead    int // dead entries in mem, compacted away as they accumulate
	system  ring[any]
	urgent  ring[any]     // Urgent messages, handed out before the queue
	space   chan struct{} // closed and replaced when room frees up for waiting Puts
	waiters int
	closed  bool
	st      Stats
	ep      *Episode // the episode in progress, nil when none
	sampled uint64
	tokens  float64
	refill  time.Time
	spill   *spillQueue

	scheduled atomic.Bool
	suspended atomic.Bool
	held      atomic.Bool  // HoldQueue: only urgent and system messages are handed out
	sysN      atomic.Int32 // system messages queued
	urgentN   atomic.Int32 // urgent messages queued
	errs      []error      // for OnError, reported outside the lock
	errN      atomic.Int32 // len(errs), read without the lock
	local     []entry      // messages handed to the actor, being processed
	localNext int          // the next of local to process (Queued reads it)
	runs      uint64       // runs started (Run); written and read by the run's goroutine only

	invoker    actor.MessageInvoker
	dispatcher actor.Dispatcher
	proc       func()      // m.process, built once: a method value allocates on every schedule
	registered atomic.Bool // dispatcher is set
	refuse     error       // set by refusing: every record is dropped
	overfill   bool        // a Block mailbox admits beyond capacity (SetOverfill)
}

// New builds a mailbox from a validated configuration; with OverflowSpill it
// opens the spill queue. Messages put before protoactor registers the
// mailbox's handlers wait until it does.
func New(cfg Config) (*Mailbox, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	m := &Mailbox{cfg: cfg, space: make(chan struct{}), tokens: cfg.burst(), refill: cfg.Now()}
	m.proc = m.process
	m.st.Policy, m.st.Capacity = cfg.Overflow.String(), cfg.Capacity
	if cfg.Overflow == OverflowSpill {
		sq, recovered, err := openSpillQueue(cfg.Spill)
		if err != nil {
			return nil, err
		}
		m.spill = sq
		m.st.Posted += int64(recovered)
		m.st.SpillPending = int64(recovered)
		m.st.SpillBytes = sq.bytes()
	}
	return m, nil
}

// Producer returns a protoactor mailbox producer that builds a Mailbox for
// every spawn and reports it to onCreate (which may be nil). It checks the
// configuration and builds the first mailbox at once, so that a spill
// queue that cannot open (its store closed, the disk failing) fails here,
// and with it the spawn, with an error naming the queue and the file: it
// never turns silently into another policy. That first mailbox goes to the
// first spawn; a later spawn with the same producer builds its own, and
// should its spill queue fail to open then, it gets a mailbox that refuses
// every message (counted as dropped, ReasonUnspillable) and the error goes
// to Config.OnError.
func (c Config) Producer(onCreate func(*Mailbox)) (actor.MailboxProducer, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	first, err := New(c)
	if err != nil {
		return nil, err
	}
	var used atomic.Bool
	return func() actor.Mailbox {
		mb := first
		if used.Swap(true) {
			var err error
			if mb, err = New(c); err != nil {
				if c.OnError != nil {
					c.OnError(err)
				}
				mb = refusing(c, err)
			}
		}
		if onCreate != nil {
			onCreate(mb)
		}
		return mb
	}, nil
}

// refusing returns a mailbox that delivers control and system messages
// and drops every record, counted as ReasonUnspillable: the mailbox of an
// actor whose spill queue did not open.
func refusing(c Config, err error) *Mailbox {
	fallback := c
	fallback.Overflow, fallback.Spill, fallback.Capacity = OverflowDropNewest, nil, 1
	mb, _ := New(fallback)
	mb.refuse = err
	return mb
}

func classify(msg any) (n int, ctl bool) {
	m := msg
	if env, ok := m.(*actor.MessageEnvelope); ok {
		m = env.Message
	}
	if c, ok := m.(Control); ok && c.IsControl() {
		return 0, true
	}
	if b, ok := m.(Batch); ok {
		return b.Records(), false
	}
	return 1, false
}

func isUrgent(msg any) bool {
	if env, ok := msg.(*actor.MessageEnvelope); ok {
		msg = env.Message
	}
	u, ok := msg.(Urgent)
	return ok && u.IsUrgent()
}

// Queued returns the messages queued and not yet processed, in the order
// the actor will get them: the urgent ones, then those handed to the actor
// and not yet processed, then the queue in memory (control messages
// included; spilled ones are not). It takes one lock: a message posted
// later is not in it. It is meant for the actor itself, from its Receive
// (an unaligned checkpoint records the records its barrier overtook); the
// caller must not change the messages, which the actor processes later.
func (m *Mailbox) Queued() []any {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.queuedLocked()
}

func (m *Mailbox) queuedLocked() []any {
	out := make([]any, 0, m.urgent.len()+len(m.local)+m.mem.len())
	for i := range m.urgent.len() {
		out = append(out, *m.urgent.at(i))
	}
	for _, e := range m.local[min(m.localNext, len(m.local)):] {
		if !e.dead {
			out = append(out, e.msg)
		}
	}
	for i := range m.mem.len() {
		if e := m.mem.at(i); !e.dead {
			out = append(out, e.msg)
		}
	}
	return out
}

// QueuedAndSpilled is Queued, and then, in the same lock, the messages
// waiting in the spill (none without one), in order, as the codec encoded
// them: the rest of the group being read back, the groups committed and not
// read yet (read from the store now), and the group not yet committed.
func (m *Mailbox) QueuedAndSpilled() (queued []any, spilled [][]byte, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	queued = m.queuedLocked()
	if m.spill != nil {
		spilled, _, err = m.spill.pending()
	}
	return queued, spilled, err
}

// QueuedAndSpillRange is QueuedAndSpilled that also commits the spill's
// pending group first and returns the range of the spill queue that holds
// the spilled messages it returns, which stay in the store, however they
// are processed, until PinSpill lets them go: the range is pinned (a
// processed group is deleted only once it holds no message of a pinned
// range). An unaligned checkpoint records the range instead of copying the
// messages. When the commit fails (reported and counted as for Sync) the
// range is empty and the caller copies what it got.
func (m *Mailbox) QueuedAndSpillRange() (queued []any, spilled [][]byte, r SpillRange, err error) {
	defer m.reportErrors()
	m.mu.Lock()
	defer m.mu.Unlock()
	queued = m.queuedLocked()
	if m.spill == nil {
		return queued, nil, r, nil
	}
	cerr := m.commitLocked()
	spilled, first, err := m.spill.pending()
	if cerr == nil && err == nil && len(spilled) > 0 && first > 0 {
		q := m.spill
		r = SpillRange{Queue: q.opts.Queue, From: first, To: q.nextSeq - 1}
		if q.floor == 0 || r.From < q.floor {
			q.floor = r.From
		}
	}
	return queued, spilled, r, err
}

// PinSpill keeps the spill's messages from sequence number floor on in the
// store (0: none), once processed, and deletes the processed groups below
// it. See QueuedAndSpillRange.
func (m *Mailbox) PinSpill(floor uint64) {
	defer m.reportErrors()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.spill == nil || m.spill.floor == floor {
		return
	}
	m.spill.floor = floor
	if m.spill.ack(m.spill.ackSeq) {
		_ = m.commitLocked() // counted and reported
	}
}

// SpillPending says how many records the mailbox holds in its spill (0
// without one).
func (m *Mailbox) SpillPending() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st.SpillPending
}

func retain(msg any, keep func(int) bool) int {
	if env, ok := msg.(*actor.MessageEnvelope); ok {
		msg = env.Message
	}
	if b, ok := msg.(Batch); ok {
		return b.Retain(keep)
	}
	if keep(0) {
		return 1
	}
	return 0
}

// TryPut enqueues a message without waiting. A Block mailbox without room
// returns ErrFull; other policies apply themselves and return ErrDropped when
// they discarded the message. Control messages are always accepted.
func (m *Mailbox) TryPut(msg any) error {
	n, ctl := classify(msg)
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	if !ctl && m.cfg.Overflow == OverflowBlock && m.depth+n > m.cfg.Capacity && m.depth > 0 {
		m.st.Refused++
		m.mu.Unlock()
		return ErrFull
	}
	err, fire := m.admitLocked(msg, n, ctl)
	m.mu.Unlock()
	m.after(fire)
	return err
}

// Put enqueues a message. A Block mailbox makes it wait for room until ctx
// ends; other policies never wait. It must not be called from inside an
// actor's Receive: that would block the actor's goroutine.
func (m *Mailbox) Put(ctx context.Context, msg any) error {
	n, ctl := classify(msg)
	m.mu.Lock()
	var waitStart time.Time
	for !ctl && m.cfg.Overflow == OverflowBlock && m.depth+n > m.cfg.Capacity && m.depth > 0 && !m.closed {
		if waitStart.IsZero() {
			waitStart = m.cfg.Now()
		}
		wait := m.space
		m.waiters++
		m.mu.Unlock()
		var err error
		select {
		case <-wait:
		case <-ctx.Done():
			err = fmt.Errorf("mailbox: put: %w", context.Cause(ctx))
		}
		m.mu.Lock()
		m.waiters--
		if err != nil {
			m.st.Waited += m.cfg.Now().Sub(waitStart)
			m.mu.Unlock()
			return err
		}
	}
	if !waitStart.IsZero() {
		m.st.Waited += m.cfg.Now().Sub(waitStart)
	}
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	err, fire := m.admitLocked(msg, n, ctl)
	m.mu.Unlock()
	m.after(fire)
	return err
}

// PostUserMessage implements actor.Mailbox: the path of every send from
// another actor. It never waits: a Block mailbox without room refuses the
// message and counts its records as Dropped[ReasonRefused] (sluice
// operators, which send within their credits, never meet this); other
// policies apply themselves.
func (m *Mailbox) PostUserMessage(msg any) {
	n, ctl := classify(msg)
	m.mu.Lock()
	_, fire := m.admitLocked(msg, n, ctl)
	m.mu.Unlock()
	m.after(fire)
}

// after runs outside the lock: episode and error callbacks, then
// scheduling.
func (m *Mailbox) after(fire []Episode) {
	if m.cfg.OnOverflow != nil {
		for _, e := range fire {
			m.cfg.OnOverflow(e)
		}
	}
	m.reportErrors()
	m.schedule()
}

func (m *Mailbox) push(msg any, n int, ctl bool) {
	m.mem.push(entry{msg: msg, n: n, ctl: ctl})
	m.depth += n
	if m.depth > m.st.HighWater {
		m.st.HighWater = m.depth
	}
}

// discardedLocked tells Config.OnDrop of a data message the policy
// discarded whole.
func (m *Mailbox) discardedLocked(msg any, why Reason) {
	if m.cfg.OnDrop != nil && msg != nil {
		m.cfg.OnDrop(unwrap(msg), why)
	}
}

// unwrap is the message protoactor's envelope carries, or msg.
func unwrap(msg any) any {
	if env, ok := msg.(*actor.MessageEnvelope); ok {
		return env.Message
	}
	return msg
}

func (m *Mailbox) dropLocked(n int, why Reason) {
	if n <= 0 {
		return
	}
	m.st.Dropped[why] += int64(n)
	if m.ep != nil {
		m.ep.Dropped[why] += int64(n)
	}
}

// overflowLocked marks that the mailbox is overflowing and returns the
// start of an episode when one begins.
func (m *Mailbox) overflowLocked() *Episode {
	if m.ep != nil {
		return nil
	}
	m.st.Episodes++
	m.ep = &Episode{Started: true, At: m.cfg.Now()}
	return m.ep
}

// admitLocked applies the policy to one message and returns ErrDropped when
// the message itself was discarded, and episode events to report.
func (m *Mailbox) admitLocked(msg any, n int, ctl bool) (error, []Episode) {
	if ctl && isUrgent(msg) {
		m.urgent.push(msg)
		m.urgentN.Add(1)
		return nil, nil
	}
	if ctl {
		if m.spill != nil && m.spill.active() {
			if err := m.spillLocked(msg, 0, true); err != nil {
				// A control message that cannot be spilled jumps the queue
				// rather than being lost.
				m.push(msg, 0, true)
			}
			return nil, nil
		}
		m.push(msg, 0, true)
		return nil, nil
	}
	m.st.Posted += int64(n)
	if m.refuse != nil {
		m.dropLocked(n, ReasonUnspillable)
		m.discardedLocked(msg, ReasonUnspillable)
		return fmt.Errorf("%w: %w", ErrDropped, m.refuse), nil
	}
	if done, err, fire := m.admitLiveLocked(msg, n); done { // after a live change (reconfigure.go)
		return err, fire
	}
	var started *Episode
	var err error
	c := m.cfg.Capacity
	switch m.cfg.Overflow {
	case OverflowBlock:
		// Put waits and TryPut refuses before they get here: only a
		// message posted through protoactor (PostUserMessage, an actor's
		// ctx.Send) can find no room. It is refused, whole, and counted;
		// sluice operators send within their credits and never are. A
		// message larger than the capacity is admitted into an empty
		// mailbox, so that it is not refused forever.
		if m.depth+n > c && m.depth > 0 {
			started = m.overflowLocked()
			m.dropLocked(n, ReasonRefused)
			m.discardedLocked(msg, ReasonRefused)
			err = fmt.Errorf("%w: %w", ErrDropped, ErrFull)
			break
		}
		m.push(msg, n, false)
	case OverflowDropNewest:
		n, started, err = m.fitNewestLocked(msg, n, ReasonFull)
	case OverflowDropOldest:
		if n > c { // keep the newest c of the incoming records
			cut := n - c
			n = retain(msg, func(i int) bool { return i >= cut })
			started = m.overflowLocked()
			m.dropLocked(cut, ReasonEvicted)
		}
		if m.depth+n > c {
			if s := m.overflowLocked(); s != nil {
				started = s
			}
			m.evictLocked(m.depth + n - c)
		}
		if n > 0 {
			m.push(msg, n, false)
		}
	case OverflowSample, OverflowThrottle:
		if m.depth >= m.cfg.HighWater {
			kept := m.shedLocked(msg, n)
			if kept < n {
				started = m.overflowLocked()
				why := ReasonSampled
				if m.cfg.Overflow == OverflowThrottle {
					why = ReasonThrottled
				}
				m.dropLocked(n-kept, why)
			}
			if kept == 0 {
				m.discardedLocked(msg, ReasonSampled)
				err = ErrDropped
				break
			}
			n = kept
		}
		var s *Episode
		n, s, err = m.fitNewestLocked(msg, n, ReasonFull)
		if s != nil {
			started = s
		}
	case OverflowSpill:
		if m.spill.active() || m.depth+n > c {
			started = m.overflowLocked()
			if e := m.spillLocked(msg, n, false); e != nil {
				err = ErrDropped
			}
		} else {
			m.push(msg, n, false)
		}
	}
	if started != nil {
		e := *started
		e.Depth = m.depth
		return err, []Episode{e}
	}
	return err, nil
}

// fitNewestLocked admits what fits of a message and drops the rest.
func (m *Mailbox) fitNewestLocked(msg any, n int, why Reason) (int, *Episode, error) {
	free := m.cfg.Capacity - m.depth
	if n <= free {
		m.push(msg, n, false)
		return n, nil, nil
	}
	started := m.overflowLocked()
	if free <= 0 {
		m.dropLocked(n, why)
		m.discardedLocked(msg, why)
		return 0, started, ErrDropped
	}
	kept := retain(msg, func(i int) bool { return i < free })
	m.dropLocked(n-kept, why)
	if kept == 0 {
		m.discardedLocked(msg, why)
		return 0, started, ErrDropped
	}
	m.push(msg, kept, false)
	return kept, started, nil
}

// evictLocked drops k of the oldest queued data records.
func (m *Mailbox) evictLocked(k int) {
	for i := 0; k > 0 && i < m.mem.len(); i++ {
		e := m.mem.at(i)
		if e.dead || e.ctl || e.n == 0 {
			continue
		}
		if e.n <= k {
			k -= e.n
			m.depth -= e.n
			m.dropLocked(e.n, ReasonEvicted)
			m.discardedLocked(e.msg, ReasonEvicted)
			e.dead, e.msg, e.n = true, nil, 0
			m.dead++
			continue
		}
		cut := k
		kept := retain(e.msg, func(i int) bool { return i >= cut })
		m.depth -= e.n - kept
		m.dropLocked(e.n-kept, ReasonEvicted)
		k -= e.n - kept
		e.n = kept
		if kept == 0 {
			e.dead, e.msg = true, nil
			m.dead++
		}
	}
	m.compactLocked()
}

// compactLocked removes dead entries from the queue once they make up half
// of it, so that a DropOldest mailbox whose actor is stuck holds at most
// about twice its live entries rather than one entry for every message ever
// evicted. The cost is amortised over the evictions.
func (m *Mailbox) compactLocked() {
	for m.dead > 0 && m.mem.len() > 0 && m.mem.at(0).dead {
		m.mem.pop()
		m.dead--
	}
	if m.dead == 0 || 2*m.dead < m.mem.len() {
		return
	}
	var live ring[entry]
	for {
		e, ok := m.mem.pop()
		if !ok {
			break
		}
		if !e.dead {
			live.push(e)
		}
	}
	m.mem, m.dead = live, 0
}

// shedLocked applies Sample or Throttle to an incoming message above the
// high-water mark and returns how many of its records remain.
func (m *Mailbox) shedLocked(msg any, n int) int {
	if m.cfg.Overflow == OverflowSample {
		every := uint64(m.cfg.SampleEvery)
		base := m.sampled
		m.sampled += uint64(n)
		return retain(msg, func(i int) bool { return (base+uint64(i))%every == 0 })
	}
	now := m.cfg.Now()
	m.tokens = min(m.cfg.burst(), m.tokens+now.Sub(m.refill).Seconds()*m.cfg.Rate)
	m.refill = now
	allow := int(m.tokens)
	kept := retain(msg, func(i int) bool { return i < allow })
	m.tokens -= float64(kept)
	return kept
}

// PostSystemMessage implements actor.Mailbox. System messages are never
// refused and are processed before user messages. Stop closes the mailbox:
// waiting Puts return ErrClosed, and the spill commits what it holds.
func (m *Mailbox) PostSystemMessage(msg any) {
	m.mu.Lock()
	m.system.push(msg)
	m.sysN.Add(1)
	if _, ok := msg.(*actor.Stop); ok && !m.closed {
		m.closed = true
		close(m.space)
		m.space = make(chan struct{})
		if m.spill != nil {
			_ = m.commitLocked() // reported
		}
	}
	m.mu.Unlock()
	m.reportErrors()
	m.schedule()
}

// reportLocked queues err for OnError, which reportErrors calls once the
// lock is released (the callback may call Stats).
func (m *Mailbox) reportLocked(err error) {
	if m.cfg.OnError != nil {
		m.errs = append(m.errs, err)
		m.errN.Store(int32(len(m.errs)))
	}
}

// reportErrors hands queued errors to OnError, outside the lock.
func (m *Mailbox) reportErrors() {
	if m.cfg.OnError == nil || m.errN.Load() == 0 { // without the lock: every post and every batch taken call this
		return
	}
	m.mu.Lock()
	errs := m.errs
	m.errs = nil
	m.errN.Store(0)
	m.mu.Unlock()
	for _, err := range errs {
		m.cfg.OnError(err)
	}
}

// RegisterHandlers implements actor.Mailbox.
func (m *Mailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.invoker, m.dispatcher = invoker, dispatcher
	m.registered.Store(true)
}

// Start implements actor.Mailbox: messages that arrived early, or that a
// spill recovered from disk, are scheduled now.
func (m *Mailbox) Start() { m.schedule() }

// UserMessageCount implements actor.Mailbox.
func (m *Mailbox) UserMessageCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.mem.len() - m.dead
	if m.spill != nil {
		n += m.spill.pendingMessages()
	}
	return n
}

// Stats returns a snapshot of the mailbox's counters.
func (m *Mailbox) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.st
	s.Depth = m.depth
	if m.spill != nil {
		s.SpillBytes = m.spill.bytes()
	}
	return s
}

// Sync commits the spill's pending group to disk, so that every message
// spilled so far survives a crash. Without it, spilled messages are durable
// once their group commits: every CommitEvery messages or 1 MiB, whenever
// the actor needs them, and when the actor stops.
func (m *Mailbox) Sync() error {
	defer m.reportErrors()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.spill == nil {
		return nil
	}
	return m.commitLocked()
}

// commitLocked commits the spill's pending group and deletes processed
// messages. When the commit fails, the group's records are lost: they are
// counted as dropped (ReasonUnspillable) so that the counts stay exact, and
// the error is reported.
func (m *Mailbox) commitLocked() error {
	lost := m.spill.wbufN
	if err := m.spill.commit(); err != nil {
		m.st.SpillPending -= int64(lost)
		m.dropLocked(lost, ReasonUnspillable)
		m.reportLocked(err)
		return err
	}
	return nil
}

func (m *Mailbox) schedule() {
	if !m.registered.Load() {
		return // Start schedules once the handlers are registered
	}
	if m.scheduled.CompareAndSwap(false, true) {
		m.dispatcher.Schedule(m.proc)
	}
}

func (m *Mailbox) hasWork() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.system.len() > 0 {
		return true
	}
	if m.suspended.Load() {
		return false
	}
	if m.urgent.len() > 0 {
		return true
	}
	return !m.held.Load() && (m.mem.len() > 0 || (m.spill != nil && m.spill.pendingMessages() > 0))
}

// HoldQueue stops (true) or resumes (false) handing the actor its queued
// messages: while held, only urgent messages (Urgent) and system messages
// reach it, and what is posted stays in the mailbox, under its policy
// (a Spill mailbox spills it). An actor that cannot process what it takes
// (its own outputs are back-pressured) holds its queue instead of keeping
// what it took in memory of its own.
func (m *Mailbox) HoldQueue(hold bool) {
	if m.held.Swap(hold) && !hold {
		m.schedule()
	}
}

func (m *Mailbox) process() {
	for {
		if m.run() {
			// Yield: let other actors have the goroutine's processor.
			m.dispatcher.Schedule(m.proc)
			return
		}
		m.scheduled.Store(false)
		// A message posted after run saw an empty queue but before the flag
		// was cleared would be stranded: look again (lost wake-up).
		if !m.hasWork() || !m.scheduled.CompareAndSwap(false, true) {
			return
		}
	}
}

func (m *Mailbox) popUrgent() (any, bool) {
	if m.urgentN.Load() == 0 { // the common case, without the lock
		return nil, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.urgent.pop()
	if ok {
		m.urgentN.Add(-1)
	}
	return v, ok
}

func (m *Mailbox) popSystem() (any, bool) {
	if m.sysN.Load() == 0 { // the common case, without the lock
		return nil, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.system.pop()
	if ok {
		m.sysN.Add(-1)
	}
	return v, ok
}

// popBatch moves up to k live user messages into buf, refilling from the
// spill as needed: they are handed to the actor (counted as delivered) in
// one lock, which halves the contention with senders. It also reports
// whether an overflow episode ended.
func (m *Mailbox) popBatch(buf []entry, k int) (_ []entry, ended *Episode) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(buf) < k {
		if m.spill != nil && m.spill.pendingMessages() > 0 && m.depth <= m.cfg.Capacity/2 {
			m.refillLocked()
		}
		e, ok := m.mem.pop()
		if !ok {
			break
		}
		if e.dead {
			m.dead--
			continue
		}
		if !e.ctl {
			m.depth -= e.n
			m.st.Delivered += int64(e.n)
		}
		buf = append(buf, e)
		if ended == nil && m.ep != nil && m.depth <= m.cfg.Capacity/2 && (m.spill == nil || m.spill.pendingMessages() == 0) {
			end := *m.ep
			end.Started, end.At, end.Depth = false, m.cfg.Now(), m.depth
			m.ep = nil
			ended = &end
		}
	}
	// Waiting Puts wake once the queue is down to half its capacity, not at
	// the first free slot: a sender woken for every batch the actor takes
	// would park and wake again for each. (A Put of more than half the
	// capacity is woken again by every batch taken below that, until it
	// fits or the queue is empty.)
	if m.waiters > 0 && m.depth <= m.cfg.Capacity/2 {
		close(m.space)
		m.space = make(chan struct{})
	}
	return buf, ended
}

// requeue puts messages that were handed out but not processed back at the
// front of the queue, in order (the actor failed or was suspended).
func (m *Mailbox) requeue(es []entry) {
	if len(es) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := len(es) - 1; i >= 0; i-- {
		e := es[i]
		m.mem.pushFront(e)
		if !e.ctl {
			m.depth += e.n
			m.st.Delivered -= int64(e.n)
		}
	}
}

// refillLocked brings spilled messages back into memory, up to capacity.
func (m *Mailbox) refillLocked() {
	room := m.cfg.Capacity - m.depth
	// Bring in only what fits, unless no data is in memory: a message larger
	// than the capacity must come in whole, alone.
	got, dropped, err := m.spill.read(room, m.depth == 0)
	if err != nil {
		m.reportLocked(err)
	}
	for _, d := range dropped {
		m.st.SpillPending -= int64(d)
		m.dropLocked(d, ReasonUnspillable)
	}
	for _, e := range got {
		m.st.SpillPending -= int64(e.n)
		m.mem.push(e)
		m.depth += e.n
		if m.depth > m.st.HighWater {
			m.st.HighWater = m.depth
		}
	}
}

func (m *Mailbox) spillLocked(msg any, n int, ctl bool) error {
	err := m.spill.write(msg, n, ctl)
	if err != nil {
		if ctl {
			// A control message the codec cannot encode (an engine's
			// in-process message) or that finds the spill full is not
			// lost: the caller queues it in memory. Nothing to report.
			return err
		}
		if isSpillFull(err) {
			m.dropLocked(n, ReasonSpillFull)
			m.discardedLocked(msg, ReasonSpillFull)
		} else {
			m.dropLocked(n, ReasonUnspillable)
			m.discardedLocked(msg, ReasonUnspillable)
			m.reportLocked(err)
		}
		return err
	}
	if !ctl && m.cfg.OnSpill != nil {
		m.cfg.OnSpill(unwrap(msg))
	}
	m.st.Spilled += int64(n)
	m.st.SpillPending += int64(n)
	if m.ep != nil {
		m.ep.Spilled += int64(n)
	}
	if m.spill.groupFull() {
		_ = m.commitLocked() // counted and reported
	}
	return nil
}

func (m *Mailbox) ack(seq uint64) {
	defer m.reportErrors()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.spill.ack(seq) {
		_ = m.commitLocked() // counted and reported
	}
}

// Run is the number of the mailbox's current run: one turn of the actor on
// its queue, from being scheduled until the queue is empty, held, or the
// throughput budget is spent. Between two messages of one run the actor
// did not wait for work (it went from one straight to the next), so an
// actor may carry a clock reading from one message to the next within a
// run (sluice's instances time back-to-back batches with one reading
// each). It is meant for the actor itself, from its Receive: it is not
// safe for concurrent use.
func (m *Mailbox) Run() uint64 { return m.runs }

// run processes messages until the queues are empty (false) or the
// throughput budget is spent (true).
func (m *Mailbox) run() (yield bool) {
	m.runs++
	var msg any
	local := m.local[:0]
	next := 0
	defer func() {
		r := recover()
		// Messages handed out but not processed go back to the queue.
		m.requeue(local[next:])
		clear(local)
		m.local = local[:0]
		if r != nil {
			m.invoker.EscalateFailure(r, msg)
		}
	}()
	for i := 0; ; i++ {
		if i >= m.cfg.Throughput {
			return true
		}
		if sm, ok := m.popSystem(); ok {
			msg = sm
			switch sm.(type) {
			case *actor.SuspendMailbox:
				m.suspended.Store(true)
			case *actor.ResumeMailbox:
				m.suspended.Store(false)
			default:
				m.invoker.InvokeSystemMessage(sm)
			}
			continue
		}
		if m.suspended.Load() {
			return false
		}
		if um, ok := m.popUrgent(); ok {
			msg = um
			m.local, m.localNext = local, next
			m.invoker.InvokeUserMessage(um)
			continue
		}
		if m.held.Load() {
			return false // the rest of local goes back to the queue
		}
		if next == len(local) {
			var ended *Episode
			local, ended = m.popBatch(local[:0], min(popBatchSize, m.cfg.Throughput-i))
			m.reportErrors() // of refills from the spill
			next = 0
			if ended != nil && m.cfg.OnOverflow != nil {
				m.cfg.OnOverflow(*ended)
			}
			if len(local) == 0 {
				return false
			}
		}
		e := local[next]
		next++
		msg = e.msg
		m.local, m.localNext = local, next
		m.invoker.InvokeUserMessage(e.msg)
		if e.seq != 0 {
			m.ack(e.seq) // removed from the spill only after processing
		}
	}
}

// popBatchSize is how many messages the actor takes from the queue at once.
const popBatchSize = 32

// ring is a growable FIFO. It is not safe for concurrent use.
type ring[T any] struct {
	buf        []T
	head, size int
}

func (r *ring[T]) len() int { return r.size }

// The buffer's length is a power of two, so that positions wrap with a mask.
func (r *ring[T]) at(i int) *T { return &r.buf[(r.head+i)&(len(r.buf)-1)] }

func (r *ring[T]) push(v T) {
	if r.size == len(r.buf) {
		n := 2 * len(r.buf)
		if n == 0 {
			n = 16
		}
		buf := make([]T, n)
		k := copy(buf, r.buf[r.head:])
		copy(buf[k:], r.buf[:r.head])
		r.buf, r.head = buf, 0
	}
	r.buf[(r.head+r.size)&(len(r.buf)-1)] = v
	r.size++
}

func (r *ring[T]) pushFront(v T) {
	if r.size == len(r.buf) {
		r.push(v) // grow, then rotate v to the front
		r.size--
		r.head = (r.head - 1) & (len(r.buf) - 1)
		r.buf[r.head] = v
		r.size++
		// the slot push used at the back is now beyond size: clear it
		var zero T
		r.buf[(r.head+r.size)&(len(r.buf)-1)] = zero
		return
	}
	r.head = (r.head - 1) & (len(r.buf) - 1)
	r.buf[r.head] = v
	r.size++
}

func (r *ring[T]) pop() (T, bool) {
	var zero T
	if r.size == 0 {
		return zero, false
	}
	v := r.buf[r.head]
	r.buf[r.head] = zero
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.size--
	return v, true
}
