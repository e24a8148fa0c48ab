package engine

import (
	"context"
	"math"

	"github.com/sluicehq/sluice/internal/stage"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/telemetry"
)

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
	bufs []stage.Batch[T]
	rr   int
}

func newEmitter[T any](specs []*outputSpec, in *instance) *emitter[T] {
	e := &emitter[T]{in: in, size: in.exec.topo.cfg.batchSize, wm: math.MinInt64, sent: math.MinInt64}
	for _, s := range specs {
		o := &output[T]{spec: s, bufs: make([]stage.Batch[T], len(s.chans))}
		if s.part == partHash {
			o.hash = s.hasher.(func(T) uint64)
		}
		e.outs = append(e.outs, o)
	}
	return e
}

func (e *emitter[T]) Push(b *stage.Batch[T]) {
	if tr := e.in.tr; tr != nil {
		e.tctx = tr.Current()
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
			for i, v := range b.Vs {
				t := instanceFor(o.hash(v), n)
				buf := &o.bufs[t]
				buf.Vs = append(buf.Vs, v)
				if b.Ts != nil {
					buf.Ts = append(buf.Ts, b.Ts[i])
				}
				if len(buf.Vs) >= e.size {
					e.ship(o, t)
				}
			}
		}
	}
}

func (e *emitter[T]) add(o *output[T], t int, b *stage.Batch[T]) {
	buf := &o.bufs[t]
	buf.Vs = append(buf.Vs, b.Vs...)
	if b.Ts != nil {
		buf.Ts = append(buf.Ts, b.Ts...)
	}
	if len(buf.Vs) >= e.size {
		e.ship(o, t)
	}
}

// ship hands the target's buffer over in envelopes of at most one batch; the
// receiver owns them from then on.
func (e *emitter[T]) ship(o *output[T], t int) {
	buf := o.bufs[t]
	o.bufs[t] = stage.Batch[T]{}
	for start := 0; start < len(buf.Vs); start += e.size {
		end := min(start+e.size, len(buf.Vs))
		part := &stage.Batch[T]{Vs: buf.Vs[start:end:end]}
		if buf.Ts != nil {
			part.Ts = buf.Ts[start:end:end]
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
			if len(o.bufs[t].Vs) > 0 {
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
func (e *emitter[T]) Watermark(wm int64) { e.wm = max(e.wm, wm) }

func (e *emitter[T]) Finish() { e.flush() }
