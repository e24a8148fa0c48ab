package actors

import "fmt"

// Kind says what an Envelope carries.
type Kind uint8

// The kinds of envelope. Every kind but Data is a control record.
const (
	Data        Kind = iota // a batch of records
	EndOfStream             // the sender will send nothing more on this channel
	Barrier                 // a checkpoint barrier; Mark is the checkpoint id
	Watermark               // event time has reached Mark on this channel
	Idle                    // the sender has nothing for a while: event time stops waiting for the channel until it sends again
	Gate                    // from here on the sender holds credits again (a live change to Block); Mark is the change's epoch
	// UnalignedBarrier is the barrier of an unaligned checkpoint (Mark is
	// its id, Seq the channel's next record): it overtakes the records
	// queued in the receiver's mailbox (mailbox.Urgent); those before Seq
	// that the receiver had not processed are recorded with the checkpoint.
	UnalignedBarrier
)

func (k Kind) String() string {
	switch k {
	case Data:
		return "data"
	case EndOfStream:
		return "end-of-stream"
	case Barrier:
		return "barrier"
	case Watermark:
		return "watermark"
	case Idle:
		return "idle"
	case Gate:
		return "gate"
	case UnalignedBarrier:
		return "unaligned-barrier"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Envelope is what travels between operator instances.
type Envelope struct {
	Kind Kind
	// Channel is the receiver's input channel the envelope arrives on.
	Channel int
	// Seq is the per-channel sequence number of the envelope's first record
	// (data) or of the next record (control).
	Seq uint64
	// Count is the number of records in Payload; credits are counted in records.
	Count int
	// Payload holds the records of a Data envelope; its concrete type is
	// private to the operators that exchange it.
	Payload any
	// Mark is the checkpoint id of a Barrier or the event time of a Watermark.
	Mark int64
	// Wm is, in an UnalignedBarrier, the last watermark the sender sent on
	// the channel before it (math.MinInt64: none). A sender's watermarks
	// grow on a channel, so the receiver tells the watermarks queued before
	// the barrier from those after it, at the same Seq, and records those
	// before it with the records it overtook.
	Wm int64
	// Headers carry W3C trace context and other metadata.
	Headers map[string]string
	// Born is the ingestion time of the records (unix ns, the job's clock):
	// when the source read the batch they come from, or the batch whose
	// handling sent them; 0: unknown. Sent is when the sender enqueued the
	// envelope (unix ns, the sending process's clock), 0: unknown. They
	// measure latency (DESIGN.md, Latency and shedding) and cross
	// processes with the envelope, as Keep does.
	Born, Sent int64
	// Keep is the probability that a record of the envelope survived the
	// load shedding upstream (LatencyTarget's sampling), 0 meaning 1:
	// approximate aggregations scale by its inverse.
	Keep float64
}

// IsControl reports whether the envelope is a control record. It makes
// *Envelope a mailbox.Control.
func (e *Envelope) IsControl() bool { return e.Kind != Data }

// IsUrgent implements mailbox.Urgent: an unaligned barrier overtakes the
// queue.
func (e *Envelope) IsUrgent() bool { return e.Kind == UnalignedBarrier }

// Records implements mailbox.Batch: the number of records of a data envelope.
func (e *Envelope) Records() int {
	if e.Kind != Data {
		return 0
	}
	return e.Count
}

// retainer is implemented by the payloads of data envelopes.
type retainer interface {
	Retain(keep func(i int) bool) int
}

// Retain implements mailbox.Batch: it keeps the records for which keep is
// true, so that an overflow policy can shed single records of a batch.
func (e *Envelope) Retain(keep func(i int) bool) int {
	if e.Kind != Data {
		return 0
	}
	if r, ok := e.Payload.(retainer); ok {
		e.Count = r.Retain(keep)
		return e.Count
	}
	// An opaque payload is all or nothing.
	if !keep(0) {
		e.Count, e.Payload = 0, nil
	}
	return e.Count
}
