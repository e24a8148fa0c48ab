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
	lastWm   int64         // the last watermark sent on the channel (math.MinInt64: none), for its unaligned barriers
	codec    mailbox.Codec // the receiver's, when it is in another process
	wseq     uint64        // messages sent to another process on this channel
	granted  int64         // records the receiver granted room for, in total (wire.Credit)
	shed     *shedPoint    // where a LatencyTarget may shed, nil: never here
}

// inChan identifies the sender behind one input channel, to return credits.
type inChan struct {
	sender   *actor.PID
	from     string // the sending operator (its chain's tail), for traces
	kind     string // the edge's partitioning (stage.Partition), for traces
	remote   bool   // the sender runs in another process
	out      int    // the sender's output channel index
	consumed int64  // records handled, in total: the credit granted back (wire.Credit)
	reported int64  // the total last granted back
	every    int64  // grant once this many records were handled since (grantEvery)
}

// grantEvery is how many handled records a receiver gathers before it
// grants them back on a channel of window records whose batches hold up to
// batch records: half the window, so that the sender fills one half while
// the receiver handles the other, and never more than window - batch, so
// that a sender without credit for its next batch always has records
// queued at the receiver, whose handling grants it (no deadlock).
func grantEvery(window, batch int) int64 {
	return int64(max(1, min(window/2, window-batch)))
}
