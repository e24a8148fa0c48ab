package persistence

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/internal/msgpacksafe"
)

// GetState asks an event-sourced actor for its state: it responds with its
// state S, as of the last event persisted.
type GetState struct{}

// Behavior describes an event-sourced actor: a state S, changed only by
// events E, which commands C produce. Handle decides, Apply changes.
type Behavior[S, C, E any] struct {
	// ID is the persistence id: the actor's journal and snapshots. One
	// actor at a time may use an id. Required.
	ID string
	// Journal keeps the events. Required.
	Journal Journal
	// Snapshots keeps snapshots of the state, encoded with msgpack (so S's
	// persisted fields must be exported). Nil: no snapshots, recovery
	// replays every event.
	Snapshots SnapshotStore
	// Events names and encodes the event types. Required.
	Events *Registry
	// Initial returns the state before any event. Nil: S's zero value.
	Initial func() S
	// Handle runs a command against the state and returns the events to
	// persist and the reply. It must not change state: Apply does, once
	// the events are durable. An error is the reply, and nothing is
	// persisted. A nil reply answers with the state after the events.
	// Required.
	Handle func(state S, cmd C) (events []E, reply any, err error)
	// Apply returns the state after event. It runs for new events once they
	// are durable, and for stored events during recovery, so it must be
	// deterministic and must not fail. Required.
	Apply func(state S, event E) S
	// SnapshotEvery takes a snapshot whenever the sequence number passes a
	// multiple of it (0: never).
	SnapshotEvery uint64
	// SnapshotWhen takes a snapshot when it returns true, after the events
	// of a command have been applied; seq is the last event's (nil: never).
	SnapshotWhen func(state S, seq uint64) bool
	// KeepSnapshots is how many snapshots to keep, the newest (0: 1). Older
	// ones are deleted after each snapshot.
	KeepSnapshots int
	// DeleteEventsOnSnapshot deletes, after each snapshot, the journal's
	// events that the oldest snapshot kept covers: recovery no longer
	// needs them. Recovering to a point before that snapshot (RecoverTo)
	// is then impossible.
	DeleteEventsOnSnapshot bool
	// RecoverTo, when not zero, recovers an older state: the newest
	// snapshot it admits, then the events after it up to RecoverTo.MaxSeq
	// and RecoverTo.MaxTime. Such an actor answers GetState, and refuses
	// commands with ErrRecoveredToPast (its journal goes on beyond it).
	RecoverTo SnapshotCriteria
	// Context bounds the actor's journal and snapshot I/O. Nil: the
	// lifetime of the System that runs the actor (actors.System.Context),
	// so that System.Stop interrupts a write that hangs.
	Context context.Context
	// Clock stamps events and snapshots. Nil: clock.Real().
	Clock clock.Clock
}

func (b *Behavior[S, C, E]) validate() error {
	var problems []error
	if b.ID == "" {
		problems = append(problems, errors.New("empty ID"))
	}
	if b.Journal == nil {
		problems = append(problems, errors.New("no Journal"))
	}
	if b.Events == nil {
		problems = append(problems, errors.New("no Events registry"))
	} else if err := b.Events.Err(); err != nil {
		problems = append(problems, err)
	}
	if b.Handle == nil {
		problems = append(problems, errors.New("no Handle function"))
	}
	if b.Apply == nil {
		problems = append(problems, errors.New("no Apply function"))
	}
	if b.Snapshots == nil && (b.SnapshotEvery > 0 || b.SnapshotWhen != nil) {
		problems = append(problems, errors.New("SnapshotEvery or SnapshotWhen without a Snapshots store"))
	}
	if b.KeepSnapshots < 0 {
		problems = append(problems, fmt.Errorf("KeepSnapshots %d: want 0 or more", b.KeepSnapshots))
	}
	if b.DeleteEventsOnSnapshot && b.Snapshots == nil {
		problems = append(problems, errors.New("DeleteEventsOnSnapshot without a Snapshots store"))
	}
	if len(problems) > 0 {
		return fmt.Errorf("persistence: event-sourced actor %q: %w", b.ID, errors.Join(problems...))
	}
	return nil
}

// EventSourced returns a producer of an event-sourced actor, for
// actors.System.Spawn or protoactor's Props. It validates b: invalid
// configuration is an error, never a panic.
//
// The actor, when started (and restarted), recovers: it loads the newest
// snapshot and replays the events after it through Apply. When recovery
// fails (the journal cannot be read, an event does not decode, events are
// missing) the actor panics with a *RecoveryError naming the persistence id
// and the sequence number, which reaches its supervisor as the failure's
// reason.
//
// It then takes messages: a C is a command. Handle decides; the events it
// returns are appended to the journal, and only once they are durable are
// they applied and the reply sent (with ctx.Respond, when the message has a
// sender). When the append fails nothing is applied and the error is the
// reply. GetState is answered with the state. Other messages are answered
// with an error when they have a sender, and otherwise ignored.
//
// Appends and snapshots run on the actor's goroutine: the actor waits for
// the fsync, while other actors' appends share it (group commit).
func EventSourced[S, C, E any](b Behavior[S, C, E]) (actor.Producer, error) {
	if err := b.validate(); err != nil {
		return nil, err
	}
	if b.Clock == nil {
		b.Clock = clock.Real()
	}
	return func() actor.Actor { return &eventSourced[S, C, E]{b: &b} }, nil
}

type eventSourced[S, C, E any] struct {
	b       *Behavior[S, C, E]
	state   S
	seq     uint64          // the last event persisted and applied
	snapSeq uint64          // the newest snapshot saved or loaded
	snapDue bool            // a snapshot failed: try again after the next events
	past    bool            // recovered to an older point (RecoverTo): read only
	ctx     context.Context // of its I/O: Behavior.Context or the System's lifetime
}

// errReplayEnd ends a replay at RecoverTo.MaxTime.
var errReplayEnd = errors.New("persistence: replay reached RecoverTo")

func (a *eventSourced[S, C, E]) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.ctx = a.b.Context
		if a.ctx == nil {
			a.ctx = actors.Lifetime(ctx.ActorSystem())
		}
		a.recoverState()
	case actor.SystemMessage, actor.AutoReceiveMessage:
	case GetState, *GetState:
		respond(ctx, a.state)
	case C:
		a.command(ctx, msg)
	default:
		respond(ctx, fmt.Errorf("persistence: %q: %T is not a command of this actor", a.b.ID, msg))
	}
}

func respond(ctx actor.Context, v any) {
	if ctx.Sender() != nil {
		ctx.Respond(v)
	}
}

func (a *eventSourced[S, C, E]) fail(seq uint64, err error) {
	panic(&RecoveryError{ID: a.b.ID, Seq: seq, Err: err})
}

// recoverState loads the newest snapshot and replays the events after it.
func (a *eventSourced[S, C, E]) recoverState() {
	ctx := a.ctx
	id := a.b.ID
	if a.b.Initial != nil {
		a.state = a.b.Initial()
	}
	if a.b.Snapshots != nil {
		snap, ok, err := a.b.Snapshots.Select(ctx, id, a.b.RecoverTo)
		if err != nil {
			var de *DecodeError
			if errors.As(err, &de) {
				a.fail(de.Seq, err)
			}
			a.fail(0, err)
		}
		if ok {
			var s S
			if err := decodeState(snap.Data, &s); err != nil {
				a.fail(snap.Seq, errorf(ErrDecode, "decode snapshot state as %T: %w", s, err))
			}
			a.state, a.seq, a.snapSeq = s, snap.Seq, snap.Seq
		}
	}
	to, past := uint64(math.MaxUint64), a.b.RecoverTo != (SnapshotCriteria{})
	if a.b.RecoverTo.MaxSeq > 0 {
		to = a.b.RecoverTo.MaxSeq
	}
	err := a.b.Journal.Replay(ctx, id, a.seq+1, to, -1, func(ev Event) error {
		if t := a.b.RecoverTo.MaxTime; !t.IsZero() && ev.Time.After(t) {
			return errReplayEnd
		}
		if ev.Seq != a.seq+1 {
			return &RecoveryError{ID: id, Seq: a.seq + 1, Err: fmt.Errorf("events %d to %d are missing (replay went on at %d)", a.seq+1, ev.Seq-1, ev.Seq)}
		}
		e, err := a.decode(ev)
		if err != nil {
			return &RecoveryError{ID: id, Seq: ev.Seq, Err: err}
		}
		if err := a.applyRecovered(e); err != nil {
			return &RecoveryError{ID: id, Seq: ev.Seq, Err: err}
		}
		a.seq = ev.Seq
		return nil
	})
	if errors.Is(err, errReplayEnd) {
		err = nil
	}
	if err != nil {
		var re *RecoveryError
		if errors.As(err, &re) {
			panic(re)
		}
		seq := a.seq + 1
		var de *DecodeError
		if errors.As(err, &de) {
			seq = de.Seq
		}
		a.fail(seq, err)
	}
	if past {
		a.past = true
		return
	}
	h, err := a.b.Journal.HighestSeq(ctx, id)
	if err != nil {
		a.fail(a.seq, err)
	}
	if h > a.seq {
		a.fail(a.seq+1, fmt.Errorf("events %d to %d are missing (deleted beyond the newest snapshot?)", a.seq+1, h))
	}
}

func (a *eventSourced[S, C, E]) decode(ev Event) (E, error) {
	var zero E
	v, err := a.b.Events.Decode(ev.Type, ev.Data)
	if err != nil {
		return zero, err
	}
	e, ok := v.(E)
	if !ok {
		return zero, errorf(ErrDecode, "event type %q decodes to %T, not %T", ev.Type, v, zero)
	}
	return e, nil
}

// applyRecovered applies a stored event, turning a panic of Apply into an
// error, so that the failure names the event.
func (a *eventSourced[S, C, E]) applyRecovered(e E) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("apply %T: panic: %v", e, r)
		}
	}()
	a.state = a.b.Apply(a.state, e)
	return nil
}

// stateLimits bound the decode of a snapshot: states are often maps
// (counts by key), which Go decodes to about ten times their encoded size.
var stateLimits = msgpacksafe.Limits{Source: "snapshot", Factor: 32}

func decodeState(data []byte, s any) error {
	return msgpacksafe.Decode(data, s, stateLimits)
}

func (a *eventSourced[S, C, E]) command(ctx actor.Context, cmd C) {
	if a.past {
		respond(ctx, fmt.Errorf("persistence: %q at seq %d: %w", a.b.ID, a.seq, ErrRecoveredToPast))
		return
	}
	events, reply, err := a.b.Handle(a.state, cmd)
	if err != nil {
		respond(ctx, err)
		return
	}
	if len(events) > 0 {
		batch := make([]Event, len(events))
		now := a.b.Clock.Now()
		for i, e := range events {
			typ, data, err := a.b.Events.Encode(e)
			if err != nil {
				respond(ctx, fmt.Errorf("persistence: %q: %w (nothing persisted)", a.b.ID, err))
				return
			}
			batch[i] = Event{Seq: a.seq + 1 + uint64(i), Type: typ, Data: data, Time: now}
		}
		if err := a.b.Journal.Append(a.ctx, a.b.ID, batch); err != nil {
			respond(ctx, err)
			a.checkJournal()
			return
		}
		for _, e := range events {
			a.state = a.b.Apply(a.state, e)
		}
		a.seq += uint64(len(events))
	}
	if reply == nil {
		reply = a.state
	}
	respond(ctx, reply)
	if len(events) > 0 {
		a.snapshot(ctx, uint64(len(events)))
	}
}

// checkJournal follows a failed append: when the journal nevertheless moved
// (another writer of the same id, or a write whose failure was reported
// after it landed), the state is stale, and the actor fails so that its
// restart recovers.
func (a *eventSourced[S, C, E]) checkJournal() {
	h, err := a.b.Journal.HighestSeq(a.ctx, a.b.ID)
	if err == nil && h != a.seq {
		panic(fmt.Errorf("persistence: %q: the journal is at seq %d and the state at %d: restart to recover", a.b.ID, h, a.seq))
	}
}

// snapshot saves one when due. A failed snapshot is logged and retried
// after the next events: the journal still has everything.
func (a *eventSourced[S, C, E]) snapshot(ctx actor.Context, n uint64) {
	if a.b.Snapshots == nil {
		return
	}
	due := a.snapDue
	if every := a.b.SnapshotEvery; every > 0 && a.seq/every != (a.seq-n)/every {
		due = true
	}
	if a.b.SnapshotWhen != nil && a.b.SnapshotWhen(a.state, a.seq) {
		due = true
	}
	if !due {
		return
	}
	bg := a.ctx
	data, err := msgpack.Marshal(a.state)
	if err == nil {
		err = a.b.Snapshots.Save(bg, a.b.ID, Snapshot{Seq: a.seq, Data: data, Time: a.b.Clock.Now()})
	}
	if err != nil {
		a.snapDue = true
		ctx.Logger().Warn("persistence: snapshot failed; retrying after the next events", "id", a.b.ID, "seq", a.seq, "error", err)
		return
	}
	a.snapDue = false
	hadOlder := a.snapSeq > 0 // saved or recovered before this one
	a.snapSeq = a.seq
	oldest, err := a.retain(bg, hadOlder)
	if err != nil {
		ctx.Logger().Warn("persistence: deleting older snapshots failed", "id", a.b.ID, "seq", a.seq, "error", err)
		return
	}
	if a.b.DeleteEventsOnSnapshot {
		if err := a.b.Journal.DeleteTo(bg, a.b.ID, oldest); err != nil {
			ctx.Logger().Warn("persistence: deleting the events snapshots cover failed", "id", a.b.ID, "to", oldest, "error", err)
		}
	}
}

// retain deletes the snapshots older than the newest KeepSnapshots and
// returns the seq of the oldest one kept. hadOlder says whether the actor
// knows of an older snapshot (with none, keeping one deletes nothing).
func (a *eventSourced[S, C, E]) retain(ctx context.Context, hadOlder bool) (uint64, error) {
	oldest := a.seq
	if !hadOlder {
		return oldest, nil
	}
	for kept := 1; kept < max(a.b.KeepSnapshots, 1); kept++ {
		if oldest <= 1 {
			return oldest, nil
		}
		s, ok, err := a.b.Snapshots.Select(ctx, a.b.ID, SnapshotCriteria{MaxSeq: oldest - 1})
		if err != nil {
			return 0, err
		}
		if !ok {
			return oldest, nil // fewer than KeepSnapshots: nothing to delete
		}
		oldest = s.Seq
	}
	if oldest > 1 {
		if err := a.b.Snapshots.DeleteTo(ctx, a.b.ID, oldest-1); err != nil {
			return 0, err
		}
	}
	return oldest, nil
}
