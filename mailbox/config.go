package mailbox

import (
	"errors"
	"fmt"
	"time"
)

// Errors returned by Put and TryPut.
var (
	// ErrFull is returned by TryPut when a Block mailbox has no free capacity.
	ErrFull = errors.New("mailbox: full")
	// ErrClosed is returned after the mailbox's actor stopped.
	ErrClosed = errors.New("mailbox: closed")
	// ErrDropped is returned when the policy discarded the message being put
	// (DropNewest, Sample, Throttle, or a full spill). The drop is counted.
	ErrDropped = errors.New("mailbox: message dropped by overflow policy")
)

// Control marks a message that is part of a stream's control flow
// (end-of-stream, a checkpoint barrier, a watermark). Control messages are
// never refused, never dropped, never count against capacity, and keep their
// order relative to data messages.
type Control interface {
	IsControl() bool
}

// Urgent marks a control message that overtakes the queue: it is handed to
// the actor before every user message queued (in memory or spilled), after
// the system messages. An unaligned checkpoint barrier is one. Urgent
// messages keep their order among themselves and are never spilled.
type Urgent interface {
	IsUrgent() bool
}

// Batch is implemented by messages that carry several records (sluice's
// envelopes), so that capacity is counted in records and records are shed
// one at a time. A message that is not a Batch is one record.
type Batch interface {
	// Records is the number of records the message carries.
	Records() int
	// Retain keeps, in order, the records i for which keep(i) is true and
	// returns how many remain.
	Retain(keep func(i int) bool) int
}

// Overflow is what a full mailbox does with more input.
type Overflow uint8

// The overflow policies.
const (
	// OverflowBlock makes senders wait: Put waits, TryPut returns ErrFull,
	// and sluice operators send only as far as their credits reach.
	OverflowBlock Overflow = iota
	// OverflowDropNewest discards the records that do not fit.
	OverflowDropNewest
	// OverflowDropOldest discards the oldest queued records to make room.
	OverflowDropOldest
	// OverflowSpill writes what does not fit to a FIFO in bbolt and brings it
	// back, in order, as the actor catches up.
	OverflowSpill
	// OverflowSample keeps one record in N while the depth is above the
	// high-water mark (and drops the newest at capacity).
	OverflowSample
	// OverflowThrottle admits at most Rate records per second while the depth
	// is above the high-water mark (and drops the newest at capacity).
	OverflowThrottle
)

func (o Overflow) String() string {
	switch o {
	case OverflowBlock:
		return "block"
	case OverflowDropNewest:
		return "drop-newest"
	case OverflowDropOldest:
		return "drop-oldest"
	case OverflowSpill:
		return "spill"
	case OverflowSample:
		return "sample"
	case OverflowThrottle:
		return "throttle"
	}
	return fmt.Sprintf("overflow(%d)", uint8(o))
}

// Reason says why records were dropped.
type Reason uint8

// The reasons for dropping records.
const (
	ReasonFull        Reason = iota // DropNewest (or Sample/Throttle) at capacity
	ReasonEvicted                   // DropOldest made room
	ReasonSampled                   // Sample shed it above the high-water mark
	ReasonThrottled                 // Throttle shed it above the high-water mark
	ReasonSpillFull                 // the spill reached MaxBytes
	ReasonUnspillable               // the codec could not encode it, or the spill write failed
	// ReasonRefused: a Block mailbox at capacity refused a message posted
	// through protoactor (an actor's ctx.Send), which cannot wait.
	ReasonRefused
	numReasons
)

var reasonNames = [numReasons]string{"full", "evicted", "sampled", "throttled", "spill-full", "unspillable", "refused"}

func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Reasons lists every reason, for iterating over Stats.Dropped.
func Reasons() []Reason {
	out := make([]Reason, numReasons)
	for i := range out {
		out[i] = Reason(i)
	}
	return out
}

// Config describes a mailbox. Use the constructors (Block, DropNewest,
// DropOldest, Spill, Sample, Throttle) and adjust fields as needed.
type Config struct {
	// Capacity is how many records the mailbox holds in memory. Required, at
	// least 1.
	Capacity int
	// Overflow is the policy when the mailbox is full. Default OverflowBlock.
	Overflow Overflow
	// HighWater is the depth above which Sample and Throttle shed load.
	// Default: three quarters of Capacity.
	HighWater int
	// SampleEvery is Sample's N: one record in N is kept. At least 2.
	SampleEvery int
	// Rate is Throttle's limit in records per second. Must be > 0. Above the
	// high-water mark a burst of one second's worth (at least one record) is
	// admitted at once, then Rate records per second.
	Rate float64
	// Spill configures OverflowSpill. Required for it.
	Spill *SpillOptions
	// Throughput is how many messages the actor processes before its
	// goroutine yields to others. Default 300, as protoactor's dispatcher.
	Throughput int
	// OnOverflow, if set, is called once when an overflow episode starts and
	// once when it ends (the depth is back to half the capacity and nothing
	// is spilled), with the counts of the episode. It runs on the goroutine
	// that caused the event, outside the mailbox's lock, and must not
	// block. Events on different goroutines are not ordered: the start of
	// an episode (a sender's) can be delivered before the end of the one
	// before it (the actor's); Episode.At orders them.
	OnOverflow func(Episode)
	// OnDrop, if set, is told of each data message the policy discarded
	// whole (its records are counted in Stats.Dropped under why; records
	// shed from a message that goes on are told through Batch.Retain). It
	// runs under the mailbox's lock, on the goroutine that caused the
	// drop, and must neither block nor use the mailbox. sluice uses it to
	// end the traces of sampled records.
	OnDrop func(msg any, why Reason)
	// OnSpill, if set, is told of each data message written to the spill,
	// as OnDrop.
	OnSpill func(msg any)
	// OnError, if set, receives errors of the spill (an unencodable message,
	// a failed write). The affected records are counted as dropped.
	OnError func(error)
	// Now is the mailbox's clock: Throttle's refills and the time a Block
	// mailbox's Put waited (Stats.Waited). Default time.Now.
	Now func() time.Time
}

// Block is a mailbox of capacity records whose senders wait when it is full.
func Block(capacity int) Config { return Config{Capacity: capacity, Overflow: OverflowBlock} }

// DropNewest is a mailbox that discards what does not fit.
func DropNewest(capacity int) Config { return Config{Capacity: capacity, Overflow: OverflowDropNewest} }

// DropOldest is a mailbox that discards its oldest records to make room.
func DropOldest(capacity int) Config { return Config{Capacity: capacity, Overflow: OverflowDropOldest} }

// Spill is a mailbox that keeps capacity records in memory and spills the
// rest, in order, to the FIFO described by opts.
func Spill(capacity int, opts SpillOptions) Config {
	return Config{Capacity: capacity, Overflow: OverflowSpill, Spill: &opts}
}

// Sample is a mailbox that keeps one record in every records above its
// high-water mark.
func Sample(capacity, every int) Config {
	return Config{Capacity: capacity, Overflow: OverflowSample, SampleEvery: every}
}

// Throttle is a mailbox that admits at most rate records per second above
// its high-water mark.
func Throttle(capacity int, rate float64) Config {
	return Config{Capacity: capacity, Overflow: OverflowThrottle, Rate: rate}
}

// Validate reports whether the configuration can build a mailbox.
func (c Config) Validate() error {
	if c.Capacity < 1 {
		return fmt.Errorf("mailbox: capacity %d: must be at least 1", c.Capacity)
	}
	if c.Throughput < 0 {
		return fmt.Errorf("mailbox: throughput %d: must not be negative", c.Throughput)
	}
	if c.HighWater < 0 || c.HighWater > c.Capacity {
		return fmt.Errorf("mailbox: high-water mark %d: must be between 0 and the capacity %d", c.HighWater, c.Capacity)
	}
	switch c.Overflow {
	case OverflowBlock, OverflowDropNewest, OverflowDropOldest:
	case OverflowSample:
		if c.SampleEvery < 2 {
			return fmt.Errorf("mailbox: sample: keep one in %d: must be at least 2", c.SampleEvery)
		}
	case OverflowThrottle:
		if !(c.Rate > 0) {
			return fmt.Errorf("mailbox: throttle: rate %v records/s: must be positive", c.Rate)
		}
	case OverflowSpill:
		if c.Spill == nil {
			return errors.New("mailbox: spill: no SpillOptions")
		}
		if err := c.Spill.validate(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("mailbox: unknown overflow policy %d", c.Overflow)
	}
	return nil
}

// burst is the capacity of Throttle's token bucket: a second's worth of
// records, and at least one record, so that a rate below one record per
// second still admits one record every 1/Rate seconds.
func (c Config) burst() float64 { return max(c.Rate, 1) }

func (c Config) withDefaults() Config {
	if c.Throughput == 0 {
		c.Throughput = 300
	}
	if c.HighWater == 0 {
		c.HighWater = max(1, c.Capacity*3/4)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Stats is a snapshot of a mailbox's counters. Counts are in records. At
// every instant Posted = Delivered + DroppedTotal() + Depth + SpillPending.
type Stats struct {
	Policy    string
	Capacity  int
	Depth     int   // records queued in memory now
	HighWater int   // the largest memory depth seen
	Posted    int64 // records offered to the mailbox (control messages excluded)
	Delivered int64 // records handed to the actor
	Dropped   [numReasons]int64
	// Overfilled counts records admitted beyond capacity by a Block
	// mailbox while a live change to Block settled (SetOverfill); otherwise
	// a Block mailbox refuses them (Dropped[ReasonRefused]). Overfilled
	// records are queued like any other (in Depth).
	Overfilled int64
	// Refused counts TryPut calls that returned ErrFull.
	Refused int64
	// Waited is the time Put callers spent waiting for room.
	Waited       time.Duration
	Spilled      int64 // records written to the spill, ever
	SpillPending int64 // records in the spill now (on disk or being written)
	SpillBytes   int64 // encoded bytes in the spill now
	Episodes     int64 // overflow episodes started
}

// DroppedTotal is the sum of drops over every reason.
func (s Stats) DroppedTotal() int64 {
	var n int64
	for _, d := range s.Dropped {
		n += d
	}
	return n
}

// Episode reports the start or the end of an overflow episode.
type Episode struct {
	Started bool // true at the start, false at the end
	At      time.Time
	Depth   int
	// Counts within the episode (at its start: the event that started it).
	Dropped    [numReasons]int64
	Spilled    int64
	Overfilled int64
}
