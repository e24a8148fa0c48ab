// Package overload is the sample of what a full mailbox does: one load,
// from a source far faster than its consumer, through three identical
// slow consumers side by side, one behind each kind of mailbox, and the
// accounting of each.
//
// # The three policies
//
// Every operator input is a bounded mailbox (operators.Input); its policy
// says what happens when it is full:
//
//   - mailbox.Block: the sender holds credits for the free capacity and
//     stops when it has none; the back-pressure reaches the source, which
//     pauses. Nothing is lost, and the source runs at the consumer's pace.
//   - mailbox.DropOldest: the sender is never slowed; to make room for new
//     records the oldest queued ones are evicted, and every eviction is
//     counted (reason "evicted"). The consumer sees the newest records.
//   - mailbox.Spill: the sender is never slowed; what does not fit in
//     memory goes, in order, to a FIFO in the system's bbolt store, and
//     comes back as the consumer catches up. Nothing is lost, memory stays
//     bounded, and the disk absorbs the burst.
//
// # Why three pipelines
//
// One source feeding three consumers would not compare anything: the
// source sends every record to all three, so the Block consumer's
// back-pressure would slow the source for the other two as well, and they
// would never overflow. The Pipelines are therefore three separate
// pipelines in one topology, each with its own copy of the same
// deterministic source (Records records), its own consumer ("slow-block",
// "slow-drop-oldest", "slow-spill": a map that computes Digest, Slow rounds
// of a 64-bit hash, behind a mailbox of Capacity records) and its own
// sink. They run at the same time on the same machine, so they share its
// cores alike:
//
//	source-block       -> slow-block (block)             -> sink-block
//	source-drop-oldest -> slow-drop-oldest (drop-oldest) -> sink-drop-oldest
//	source-spill       -> slow-spill (spill)             -> sink-spill
//
// # The accounting
//
// Measure runs them to their end and reads the job's statistics
// (actors.Run.Stats): produced (the source's Out), delivered (the
// consumer's In), dropped by reason, spilled, queued at the end, the
// queue's high-water mark, and how long the source was back-pressured
// (without credit). Check then verifies what holds whatever the timing:
// produced = delivered + dropped with nothing queued at the end, for each;
// no queue above its capacity; every result in order; block and spill
// lossless, their digests summing to ExpectedSum, a plain loop over the
// same records; drop-oldest's drops all evictions, and its newest record
// delivered. How many records drop-oldest drops and spill spills depends
// on the machine; the tests check that each policy does overflow under a
// load its consumer cannot follow.
//
// # Running it
//
//	sluice run overload --records 100000 --slow 2000 --capacity 1024
//
// The sample's topology is the Pipelines themselves: `sluice run overload`
// runs them on the command's own system, so their drops and spills show in
// the progress line, on the dashboard (--ui) and in the traces (--trace).
// The command tells the sample of the run (samples.Observer), and Report
// reads the statistics from it once it has ended. `sluice plan overload`
// shows the three pipelines.
package overload
