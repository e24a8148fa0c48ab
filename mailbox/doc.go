// Package mailbox provides sluice's bounded mailbox: an implementation of
// protoactor-go's actor.Mailbox whose capacity is counted in records, with a
// policy for what happens when it is full, exact accounting of every record,
// and statistics that telemetry, the CLI and the dashboard read.
//
// # Basics
//
// A Config says how many records the mailbox holds and what it does when it
// is full:
//
//	mailbox.Block(1024)          // senders wait (Put), or get ErrFull (TryPut)
//	mailbox.DropNewest(1024)     // what does not fit is dropped and counted
//	mailbox.DropOldest(1024)     // the oldest records make room, counted
//	mailbox.Sample(1024, 10)     // above the high-water mark keep 1 in 10
//	mailbox.Throttle(1024, 5000) // above the high-water mark at most 5000/s
//	mailbox.Spill(1024, opts)    // the rest goes to a FIFO in bbolt, in order
//
// Hand its producer to protoactor, or use actors.System.Spawn with
// actors.Mailbox(cfg), or operators.Input(cfg) on an operator:
//
//	producer, err := cfg.Producer(func(mb *mailbox.Mailbox) { handle = mb })
//	props := actor.PropsFromProducer(newActor, actor.WithMailbox(producer))
//
// Producers outside any actor use Put, which under Block waits for room
// while honouring its context, or TryPut, which returns ErrFull at once.
// Under the other policies neither ever waits; they return ErrDropped when
// the policy discarded the very message. Messages posted by protoactor
// (PostUserMessage, the path of every actor-to-actor send, ctx.Send) cannot
// wait: between sluice operators the sender holds credits for the
// receiver's free capacity, so they always fit; a message from an actor
// without credits that finds a Block mailbox full is refused, whole, and its
// records are counted as dropped (Stats.Dropped[ReasonRefused], reported as
// an overflow episode). A Block mailbox is thus bounded on every path: Put
// waits, TryPut returns ErrFull, and ctx.Send is refused at capacity (only a
// single message larger than the capacity is admitted, into an empty
// mailbox). An actor that must not lose what it sends to a Block mailbox
// sends from a goroutine with Put, or uses credits as operators do.
//
// A message that implements Batch carries several records (sluice's
// envelopes do): capacity and every count are in records, and a policy
// sheds single records of a batch. Control messages (Control: end-of-stream,
// barriers, watermarks) are never dropped, never count against capacity and
// keep their order relative to data.
//
// # Accounting
//
// At every instant, Stats.Posted = Delivered + DroppedTotal() + Depth +
// SpillPending. Drops are counted by Reason. Overflow is reported once per
// episode through Config.OnOverflow: when it starts, and when the depth is
// back to half the capacity with nothing spilled, with the episode's counts.
//
// # Spill
//
// A SpillStore keeps the queues of many mailboxes in one bbolt file
// (OpenSpillStore, or the system's store via actors.System.SpillStore).
// Messages are encoded by a Codec (TypeCodec for registered types), written
// in groups (one transaction and one bbolt value per CommitEvery messages or
// 1 MiB) and read back in order as the actor catches up, so that memory
// stays bounded however far the actor lags. With SpillOptions.Keep, the
// messages of a group are removed only after they were all processed, and
// survive a crash of the process: after a restart they are delivered again
// (at-least-once; what was only in memory is lost). MaxBytes caps the
// spill (DefaultSpillMaxBytes, 1 GiB, unless set; negative for no cap);
// beyond it new records are dropped as ReasonSpillFull.
//
// When the disk fails, nothing is lost silently and memory stays bounded:
// the records of a group that cannot be written, and of messages that cannot
// be read back or decoded, are counted as dropped (ReasonUnspillable) and
// the error, naming the queue and the store file, goes to Config.OnError
// (a damaged group matches ErrSpillCorrupt). Control messages of a group
// that failed stay in memory and are delivered in their place.
// SpillOptions.WrapIO lets tests inject such failures (package mailboxtest).
//
// Only messages a Codec can encode may spill: a request (protoactor's
// envelope with its reply address) cannot, so an embedded actor with a
// Spill mailbox refuses requests at the call (actors.ErrRequestThroughSpill)
// rather than losing them later.
//
// # Caveats
//
// A store file written by another program, by a newer sluice or damaged is
// refused with an error that names it, and is never modified. A mailbox
// serves exactly one actor; the Producer makes a new one for every spawn. A
// single batch larger than the capacity is admitted whole when the mailbox
// is empty.
package mailbox
