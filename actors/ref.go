package actors

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/mailbox"
)

// ErrActorStopped is the cause of an actor's end when it was stopped (by
// Ref.Stop, System.Stop, or from inside) rather than by its failures.
var ErrActorStopped = errors.New("actors: actor stopped")

// ErrRequestThroughSpill is returned by a request to an actor whose mailbox
// spills: a request carries its reply address, which cannot be written to
// disk. Put a reply channel or an id into the message and use Send, or
// give the actor a mailbox that does not spill.
var ErrRequestThroughSpill = errors.New("actors: requests cannot pass a Spill mailbox (a reply address cannot be stored on disk)")

// FailedError is why an actor ended when its supervisor stopped it after a
// failure: Cause is the failure's reason (the panic's value, an error as
// it was when it was one: errors.As reaches it, for example a
// *persistence.RecoveryError).
type FailedError struct {
	Actor string
	Cause error
}

func (e *FailedError) Error() string {
	return fmt.Sprintf("actors: %s stopped after a failure: %v", e.Actor, e.Cause)
}

func (e *FailedError) Unwrap() error { return e.Cause }

// RequestFailedError is returned by a request whose message the actor
// failed on (a panic while it handled it): the message is lost, as with
// every failing message, and the request ends at once with the cause.
type RequestFailedError struct {
	Actor string
	Cause error
}

func (e *RequestFailedError) Error() string {
	return fmt.Sprintf("actors: request to %s: the actor failed on it: %v", e.Actor, e.Cause)
}

func (e *RequestFailedError) Unwrap() error { return e.Cause }

// Ref is a handle to an actor spawned on a System: it sends to the actor,
// asks it, and tells when and why it ended (Done, Err).
type Ref struct {
	sys   *System
	pid   *actor.PID
	name  string
	spill bool // its mailbox spills: no requests

	mb atomic.Pointer[mailbox.Mailbox] // replaced if protoactor builds a new mailbox; read on every Send, without mu

	mu       sync.Mutex
	done     chan struct{}         // closed when the actor has ended
	err      error                 // why; set before done closes
	failure  error                 // the last failure its guardian saw
	stopping error                 // the cause of a stop asked by Stop or System.Stop
	requests map[string]*actor.PID // the reply actors of requests waiting, by id
}

type reply struct {
	v   any
	err error
}

// requestFailed tells a request's reply actor that the actor failed on the
// request's message. It goes through the reply actor's mailbox, behind a
// reply the actor sent before it failed, which then counts.
type requestFailed struct{ err error }

// PID returns the actor's protoactor PID, for sends from inside other actors.
func (r *Ref) PID() *actor.PID { return r.pid }

// Done is closed when the actor has ended: stopped, or stopped by its
// supervisor after failures. Err then says why.
func (r *Ref) Done() <-chan struct{} { return r.done }

// Err is nil while the actor runs; after Done it wraps ErrActorStopped or
// is a *FailedError with the failure that ended it.
func (r *Ref) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func (r *Ref) mailbox() *mailbox.Mailbox { return r.mb.Load() }

// Send delivers msg, waiting while the mailbox is full until ctx ends. Call
// it from application goroutines, never from inside an actor's Receive (use
// the actor.Context's Send there).
func (r *Ref) Send(ctx context.Context, msg any) error {
	if err := r.mailbox().Put(ctx, msg); err != nil {
		return fmt.Errorf("actors: send to %s: %w", r.name, err)
	}
	return nil
}

// TrySend delivers msg if the mailbox has room and returns an error wrapping
// mailbox.ErrFull otherwise.
func (r *Ref) TrySend(msg any) error {
	if err := r.mailbox().TryPut(msg); err != nil {
		return fmt.Errorf("actors: send to %s: %w", r.name, err)
	}
	return nil
}

// Request sends msg with a reply address and waits for the actor's
// ctx.Respond, until ctx ends. It waits for mailbox room like Send. A reply
// that is an error is returned as the error (errors.Is and errors.As reach
// it). When the actor ends before it replies, or fails on msg, Request
// returns at once with why (see Err and RequestFailedError), whatever
// ctx's deadline. An actor whose mailbox spills takes no requests
// (ErrRequestThroughSpill).
func (r *Ref) Request(ctx context.Context, msg any) (any, error) {
	if r.spill {
		return nil, fmt.Errorf("actors: request to %s: %w", r.name, ErrRequestThroughSpill)
	}
	replies := make(chan reply, 1)
	tmp := r.sys.root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		var rep reply
		switch m := c.Message().(type) {
		case actor.SystemMessage, actor.AutoReceiveMessage:
			return
		case requestFailed: // after a reply the actor sent before it failed
			rep.err = m.err
		default:
			rep.v = m
		}
		select {
		case replies <- rep:
		default: // only the first answer counts
		}
	}))
	defer r.sys.root.Stop(tmp)
	r.mu.Lock()
	r.requests[tmp.Id] = tmp
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.requests, tmp.Id)
		r.mu.Unlock()
	}()
	env := &actor.MessageEnvelope{Message: msg, Sender: tmp}
	if err := r.mailbox().Put(ctx, env); err != nil {
		if errors.Is(err, mailbox.ErrClosed) { // the actor ended, or is ending: say why
			select {
			case <-r.done:
				return nil, fmt.Errorf("actors: request to %s: %w (%w)", r.name, r.Err(), err)
			case <-ctx.Done():
			}
		}
		return nil, fmt.Errorf("actors: request to %s: %w", r.name, err)
	}
	select {
	case rep := <-replies:
		if rep.err != nil {
			return nil, rep.err
		}
		if err, ok := rep.v.(error); ok {
			return nil, err
		}
		return rep.v, nil
	case <-r.done:
		select { // a reply that came with the end still counts
		case rep := <-replies:
			if rep.err == nil {
				if err, ok := rep.v.(error); ok {
					return nil, err
				}
				return rep.v, nil
			}
		default:
		}
		return nil, fmt.Errorf("actors: request to %s: %w", r.name, r.Err())
	case <-ctx.Done():
		return nil, fmt.Errorf("actors: request to %s: %w", r.name, context.Cause(ctx))
	}
}

// Ask is Request with a typed reply: the actor's reply must be a Resp (or
// an error, which Ask returns).
func Ask[Resp any](ctx context.Context, ref *Ref, msg any) (Resp, error) {
	var zero Resp
	v, err := ref.Request(ctx, msg)
	if err != nil {
		return zero, err
	}
	resp, ok := v.(Resp)
	if !ok {
		return zero, fmt.Errorf("actors: request to %s: reply is a %T, want a %T", ref.name, v, zero)
	}
	return resp, nil
}

// Stats returns the actor's mailbox statistics.
func (r *Ref) Stats() mailbox.Stats { return r.mailbox().Stats() }

// Stop stops the actor and waits until it has stopped or ctx ends.
func (r *Ref) Stop(ctx context.Context) error {
	r.stopWith(ErrActorStopped)
	if err := stopAndWait(ctx, r.sys.root, r.pid); err != nil {
		return err
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		return fmt.Errorf("actors: stop %s: %w", r.name, context.Cause(ctx))
	}
	return nil
}

func (r *Ref) stopWith(cause error) {
	r.mu.Lock()
	if r.stopping == nil {
		r.stopping = cause
	}
	r.mu.Unlock()
}

// watch starts the actor's watcher, which ends the Ref when the actor
// terminates and then stops itself.
func (r *Ref) watch() {
	r.sys.root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case *actor.Started:
			c.Watch(r.pid)
		case *actor.Terminated:
			if m.Who.Equal(r.pid) {
				r.end()
				c.Stop(c.Self())
			}
		}
	}))
}

// end records why the actor ended, fails the requests still waiting and
// closes done. A failure is logged at WARN with its cause.
func (r *Ref) end() {
	r.mu.Lock()
	select {
	case <-r.done:
		r.mu.Unlock()
		return
	default:
	}
	switch {
	case r.stopping != nil:
		r.err = fmt.Errorf("actors: %s: %w", r.name, r.stopping)
	case r.failure != nil:
		r.err = &FailedError{Actor: r.name, Cause: r.failure}
	default:
		r.err = fmt.Errorf("actors: %s: %w", r.name, ErrActorStopped)
	}
	err := r.err
	close(r.done)
	r.mu.Unlock()
	var failed *FailedError
	if errors.As(err, &failed) {
		r.sys.log.Warn("actors: actor stopped by its supervisor after a failure", "actor", r.name, "cause", failed.Cause)
	}
	r.sys.untrackRef(r)
}

// failed notes a failure of the actor: its reason for Err, and the
// request whose message it failed on, which ends at once.
func (r *Ref) failed(reason, message any) {
	cause, ok := reason.(error)
	if !ok {
		cause = fmt.Errorf("panic: %v", reason)
	}
	r.mu.Lock()
	r.failure = cause
	var waiting *actor.PID
	if env, ok := message.(*actor.MessageEnvelope); ok && env.Sender != nil {
		waiting = r.requests[env.Sender.Id]
	}
	r.mu.Unlock()
	r.sys.log.Warn("actors: actor failed", "actor", r.name, "cause", cause, "message", fmt.Sprintf("%T", unwrapMessage(message)))
	if waiting != nil {
		r.sys.root.Send(waiting, requestFailed{err: &RequestFailedError{Actor: r.name, Cause: cause}})
	}
}

func unwrapMessage(m any) any {
	if env, ok := m.(*actor.MessageEnvelope); ok {
		return env.Message
	}
	return m
}

// observed is the guardian strategy of every spawned actor: it tells the
// Ref of each failure, then lets the actor's own strategy decide.
type observed struct {
	inner actor.SupervisorStrategy
	ref   *Ref
}

func (o observed) HandleFailure(sys *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, rs *actor.RestartStatistics, reason, message any) {
	o.ref.failed(reason, message)
	o.inner.HandleFailure(sys, sup, child, rs, reason, message)
}
