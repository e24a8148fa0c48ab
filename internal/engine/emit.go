package engine

import (
	"github.com/sluicehq/sluice/internal/stage"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/mailbox"
)

// outputSpec is one output edge of an instance: how records are partitioned
// and the channels to the target instances (one for forward edges).
type outputSpec struct {
	side   bool // the late records of the chain's window (LateRecords)
	part   stage.Partition
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
	shed     *shedPoint    // where a LatencyTarget may shed, nil: never here
}

// inChan identifies the sender behind one input channel, to return credits.
type inChan struct {
	sender   *actor.PID
	out      int   // the sender's output channel index
	consumed int64 // records handled, in total: the credit granted back (wire.Credit)
}
