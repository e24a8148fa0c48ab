// Package mailbox provides sluice's bounded mailbox: an implementation of
// protoactor-go's actor.Mailbox that knows its capacity, keeps control
// messages (end-of-stream, barriers, watermarks) in order with data without
// counting them against capacity, and keeps statistics that telemetry and the
// CLI read.
//
// # Basics
//
// Create a mailbox from a Config and hand its producer to protoactor:
//
//	mb := mailbox.Config{Capacity: 1024}
//	props := actor.PropsFromProducer(newActor, actor.WithMailbox(mb.Producer(&stats)))
//
// Producers outside any actor (an application goroutine) use Put, which waits
// for free capacity while honouring its context, or TryPut, which returns
// ErrFull at once. Messages posted by protoactor itself (PostUserMessage, the
// path every actor-to-actor send takes) are never refused: between sluice
// operators the sender holds credits for the receiver's free capacity, so a
// well-behaved sender never overfills the mailbox; a send beyond capacity is
// admitted and counted in Stats.Overfilled so that it is visible.
//
// # Caveats
//
// This is the foundation's mailbox: the overflow policies that drop, sample,
// throttle or spill to bbolt are not implemented yet (see the README's status
// table). A mailbox instance serves exactly one actor; the Producer makes a new
// one for every spawn.
package mailbox
