package mailbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// ErrFull is returned by TryPut when the mailbox has no free capacity.
var ErrFull = errors.New("mailbox: full")

// ErrClosed is returned by Put and TryPut after the mailbox's actor stopped.
var ErrClosed = errors.New("mailbox: closed")

// Control marks a message that is part of a stream's control flow
// (end-of-stream, a checkpoint barrier, a watermark). Control messages are
// never refused, never dropped, never count against capacity, and keep their
// order relative to data messages.
type Control interface {
	IsControl() bool
}

// Config describes a mailbox. The zero value is not valid: Capacity must be
// at least 1.
type Config struct {
	// Capacity is the number of user messages the mailbox holds before Put
	// waits and TryPut returns ErrFull. Required, at least 1.
	Capacity int
	// Throughput is how many messages the actor processes before it yields
	// its goroutine to others. Default 300, as protoactor's dispatcher.
	Throughput int
}

// Validate reports whether the configuration can build a mailbox.
func (c Config) Validate() error {
	if c.Capacity < 1 {
		return fmt.Errorf("mailbox: capacity %d: must be at least 1", c.Capacity)
	}
	if c.Throughput < 0 {
		return fmt.Errorf("mailbox: throughput %d: must not be negative", c.Throughput)
	}
	return nil
}

// Stats is a snapshot of a mailbox's counters.
type Stats struct {
	Capacity   int   // configured capacity in messages
	Depth      int   // user messages queued now (data and control)
	HighWater  int   // the largest depth seen
	Posted     int64 // user messages accepted
	Delivered  int64 // user messages handed to the actor
	Overfilled int64 // messages admitted by PostUserMessage while the mailbox was full
	Refused    int64 // TryPut calls that returned ErrFull
}

// Mailbox is a bounded mailbox for one actor. It implements actor.Mailbox.
type Mailbox struct {
	cfg Config

	mu        sync.Mutex
	user      ring // user messages, data and control in arrival order
	data      int  // data (non-control) messages in user
	system    ring
	space     chan struct{} // closed and replaced when capacity frees up
	closed    bool
	highWater int
	posted    int64
	overfill  int64
	refused   int64

	delivered atomic.Int64
	scheduled atomic.Bool
	suspended atomic.Bool

	invoker    actor.MessageInvoker
	dispatcher actor.Dispatcher
}

// New builds a mailbox from a validated configuration.
func New(cfg Config) (*Mailbox, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Throughput == 0 {
		cfg.Throughput = 300
	}
	return &Mailbox{cfg: cfg, space: make(chan struct{})}, nil
}

// Producer returns a protoactor mailbox producer. Each call of the producer
// builds a new Mailbox and reports it to onCreate (which may be nil), so that
// the caller can keep a handle for Put and Stats. The configuration must be
// valid; Producer panics otherwise, so validate first.
func (c Config) Producer(onCreate func(*Mailbox)) actor.MailboxProducer {
	if err := c.Validate(); err != nil {
		panic(err)
	}
	return func() actor.Mailbox {
		mb, _ := New(c)
		if onCreate != nil {
			onCreate(mb)
		}
		return mb
	}
}

func isControl(m any) bool {
	if env, ok := m.(*actor.MessageEnvelope); ok {
		m = env.Message
	}
	c, ok := m.(Control)
	return ok && c.IsControl()
}

// TryPut enqueues a user message if there is free capacity and returns
// ErrFull otherwise. Control messages are always accepted.
func (m *Mailbox) TryPut(msg any) error {
	ctl := isControl(msg)
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	if !ctl && m.data >= m.cfg.Capacity {
		m.refused++
		m.mu.Unlock()
		return ErrFull
	}
	m.enqueueLocked(msg, ctl)
	m.mu.Unlock()
	m.schedule()
	return nil
}

// Put enqueues a user message, waiting for free capacity until ctx is done.
// It must not be called from inside an actor's Receive: that would block the
// actor's goroutine.
func (m *Mailbox) Put(ctx context.Context, msg any) error {
	for {
		err := m.TryPut(msg)
		if !errors.Is(err, ErrFull) {
			return err
		}
		m.mu.Lock()
		wait := m.space
		full := m.data >= m.cfg.Capacity && !m.closed
		m.mu.Unlock()
		if !full {
			continue
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return fmt.Errorf("mailbox: put: %w", context.Cause(ctx))
		}
	}
}

// PostUserMessage implements actor.Mailbox. It never refuses a message: a
// message beyond capacity is admitted and counted as overfilled.
func (m *Mailbox) PostUserMessage(msg any) {
	ctl := isControl(msg)
	m.mu.Lock()
	if !ctl && m.data >= m.cfg.Capacity {
		m.overfill++
	}
	m.enqueueLocked(msg, ctl)
	m.mu.Unlock()
	m.schedule()
}

func (m *Mailbox) enqueueLocked(msg any, ctl bool) {
	m.user.push(msg)
	if !ctl {
		m.data++
	}
	m.posted++
	if n := m.user.len(); n > m.highWater {
		m.highWater = n
	}
}

// PostSystemMessage implements actor.Mailbox. System messages are never
// refused and are processed before user messages.
func (m *Mailbox) PostSystemMessage(msg any) {
	m.mu.Lock()
	m.system.push(msg)
	if _, ok := msg.(*actor.Stop); ok {
		m.closed = true
		close(m.space) // wake waiting producers; they will see ErrClosed
		m.space = make(chan struct{})
	}
	m.mu.Unlock()
	m.schedule()
}

// RegisterHandlers implements actor.Mailbox.
func (m *Mailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.invoker = invoker
	m.dispatcher = dispatcher
}

// Start implements actor.Mailbox.
func (m *Mailbox) Start() {}

// UserMessageCount implements actor.Mailbox.
func (m *Mailbox) UserMessageCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.user.len()
}

// Stats returns a snapshot of the mailbox's counters.
func (m *Mailbox) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Stats{
		Capacity:   m.cfg.Capacity,
		Depth:      m.user.len(),
		HighWater:  m.highWater,
		Posted:     m.posted,
		Delivered:  m.delivered.Load(),
		Overfilled: m.overfill,
		Refused:    m.refused,
	}
}

func (m *Mailbox) schedule() {
	if m.scheduled.CompareAndSwap(false, true) {
		m.dispatcher.Schedule(m.process)
	}
}

func (m *Mailbox) hasWork() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.system.len() > 0 || (!m.suspended.Load() && m.user.len() > 0)
}

func (m *Mailbox) process() {
	for {
		m.run()
		m.scheduled.Store(false)
		// A message posted after run saw an empty queue but before the flag
		// was cleared would be stranded: look again (lost wake-up).
		if !m.hasWork() || !m.scheduled.CompareAndSwap(false, true) {
			return
		}
	}
}

func (m *Mailbox) pop(sys bool) (any, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sys {
		return m.system.pop()
	}
	msg, ok := m.user.pop()
	if !ok {
		return nil, false
	}
	if !isControl(msg) {
		if m.data == m.cfg.Capacity {
			close(m.space)
			m.space = make(chan struct{})
		}
		m.data--
	}
	return msg, true
}

func (m *Mailbox) run() {
	var msg any
	defer func() {
		if r := recover(); r != nil {
			m.invoker.EscalateFailure(r, msg)
		}
	}()
	for i := 0; ; i++ {
		if i >= m.cfg.Throughput {
			// Yield: schedule a fresh run rather than hogging the goroutine.
			return
		}
		if sm, ok := m.pop(true); ok {
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
			return
		}
		um, ok := m.pop(false)
		if !ok {
			return
		}
		msg = um
		m.delivered.Add(1)
		m.invoker.InvokeUserMessage(um)
	}
}

// ring is a growable FIFO of messages. It is not safe for concurrent use.
type ring struct {
	buf        []any
	head, size int
}

func (r *ring) len() int { return r.size }

func (r *ring) push(v any) {
	if r.size == len(r.buf) {
		n := 2 * len(r.buf)
		if n == 0 {
			n = 16
		}
		buf := make([]any, n)
		k := copy(buf, r.buf[r.head:])
		copy(buf[k:], r.buf[:r.head])
		r.buf, r.head = buf, 0
	}
	r.buf[(r.head+r.size)%len(r.buf)] = v
	r.size++
}

func (r *ring) pop() (any, bool) {
	if r.size == 0 {
		return nil, false
	}
	v := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) % len(r.buf)
	r.size--
	return v, true
}
