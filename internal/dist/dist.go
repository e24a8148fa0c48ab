// Package dist is the seam between the runtime and package cluster for
// distributed execution: one topology whose instances run in several
// processes. Package cluster implements Distributor: it places and deploys
// the instances; the runtime (internal/engine) does the rest.
//
// The process that starts the job runs its job actor (the coordinator: the
// checkpoint coordinator, restarts by generation) and the instances of the
// tasks that read sources, which are always placed there; the other
// instances go where Distributor.Place says. Every process builds the same
// plan from the same topology, so channel numbers, credit windows and
// instance numbers agree without being sent. What crosses processes:
//
//   - records and control envelopes (watermarks, barriers, end of stream)
//     as wire.Records, encoded with the receiving task's envelope codec, on
//     the same credit-gated channels as in one process (per-edge order:
//     one sender actor, one receiver actor, one connection);
//   - credits, checkpoint acknowledgements and commits, finished and failed
//     notices as the other types of package wire;
//   - the counters of the instances, for the job's Stats (wire.Stats, and
//     the final ones with wire.Finished).
//
// An instance with senders in other processes decodes their records
// before its mailbox admits them (remoteInbox), so that every overflow
// policy works across processes as within one.
//
// A generation's instances in another process are children of one actor
// there (see engine.HostGeneration); the coordinator deploys them before its
// sources start and stops them on restart or at the end of the job. When a
// process hosting instances leaves (Distributor.Watch), the coordinator
// stops the generation and restarts the job from its last completed
// checkpoint with a new placement over the processes still there.
package dist

import (
	"context"
	"strings"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/internal/wire"
)

// Distributor places the instances of a distributed job on processes and
// reaches them. Package cluster implements it.
type Distributor interface {
	// Address is this process's address.
	Address() string
	// Root is a root context whose sends reach other processes.
	Root() *actor.RootContext
	// Props attaches what actors need to talk to other processes.
	Props(*actor.Props) *actor.Props
	// Place returns the address of the process that runs instance instance
	// of task in generation gen of job, among the processes alive now.
	// Tasks that read sources run in this process whatever it says.
	Place(job string, gen int, task Task, instance int) string
	// Deploy asks the process at addr to run its instances of a generation
	// (HostGeneration there) and returns once they are spawned.
	Deploy(ctx context.Context, addr string, d *wire.Deploy) error
	// StopOn asks the process at addr to stop its instances of a
	// generation; it answers the job actor with wire.Stopped.
	StopOn(addr string, s *wire.StopGen)
	// Watch calls lost with the address of every process that leaves or
	// whose connection broke (messages to it may have been lost), from now
	// until cancel is called.
	Watch(lost func(addr string)) (cancel func())
	// Unpack returns the value carried by a message as another process's
	// connection posts it to a mailbox (what the receiver middleware of
	// Props would hand the actor), or msg itself when it is not packed.
	// Instances call it on the connection's goroutine, before their
	// mailbox's policy sees the message (see remoteInbox); it must be safe
	// for concurrent use. An error means the message does not decode: Unpack
	// has counted and logged it, and the message is dropped, as the
	// middleware would drop it.
	Unpack(msg any) (any, error)
}

// Task is a chain of operators fused into one actor per instance, as the
// planner made it.
type Task struct {
	ID          int
	Operators   []string // in chain order
	Kinds       []string
	Parallelism int
}

// Name is the task's operators joined by " -> ".
func (t Task) Name() string { return strings.Join(t.Operators, " -> ") }

// UndecodableCounter is implemented by a Distributor that counts the
// messages from other processes that passed Unpack but whose records did
// not decode (a wire.Records whose envelope the receiving task's codec
// refuses). The runtime calls Undecodable, on the connection's goroutine,
// with an error that names the record type and what was wrong, and fails
// the receiving instance.
type UndecodableCounter interface {
	Undecodable(err error)
}

// RecordsPacker is implemented by a Distributor that can frame the
// records of a channel to another process itself: PackRecords returns the
// message to send for the wire.Records of sequence number seq whose data
// is env encoded by enc (the receiving task's envelope codec, writing in place
// after the framing, so a batch is encoded once and never copied before
// the network). The runtime sends what it returns instead of a
// *wire.Records; the receiving process reads it as one.
type RecordsPacker interface {
	PackRecords(seq uint64, size int, enc AppendEncoder, env any) (any, error)
}

// AppendEncoder appends the encoding of an envelope to a buffer (the
// envelope codec of package stage); EncodedSizeOf is about what it writes
// for env (the size PackRecords is given).
type AppendEncoder interface {
	AppendEncode(dst []byte, env any) ([]byte, error)
	EncodedSizeOf(env any) int
}

// FromHeader is the message header in which the receiving process's
// network guard (package cluster) names the process every envelope from
// the network came from: its peer's address, authenticated with TLS, set
// on every such envelope (one the peer set itself is replaced). A message
// without it was sent in this process. The runtime checks a message that
// speaks for an instance (records on a channel, credits, checkpoint
// acknowledgements, statistics, finished notices) against the process the
// placement puts that instance in.
const FromHeader = "sluice-from"

// ForgeryCounter is implemented by a Distributor that counts and logs the
// messages the runtime refuses because they speak for an instance, or for
// the job actor, that the process they came from does not host. The
// runtime drops such a message and calls Forged with what it was, the
// process it came from and what it claimed.
type ForgeryCounter interface {
	Forged(what, from, claim string)
}

// Changer is implemented by a Distributor that can carry a live change of
// a distributed job to the processes hosting its instances (the control
// plane across processes). Change asks every process of hosts (the other
// processes hosting instances of c.Task) to check c, then — once every one
// of them and local.Check agreed — to apply it, local.Apply doing this
// process's part; a process that refuses, does not answer in time or
// leaves makes the whole change rejected: the processes that applied it
// put it back (local.Undo here). The error names the process and its
// reason.
type Changer interface {
	Change(ctx context.Context, c *wire.Change, hosts []string, local LocalChange) error
}

// LocalChange is the part of a change done in the coordinator's process.
type LocalChange struct {
	Apply func(ctx context.Context) error
	Undo  func(ctx context.Context) error
}
