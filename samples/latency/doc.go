// Package latency is the sample of latency you can see and load shedding
// that holds a latency target: one load, arriving at three times what its
// slow operator can handle, through three copies of one topology side by
// side, each with its own way of facing the overload, and then at half the
// capacity.
//
//		load (source) -> ts -> slow (1 ms a record) -> out (sink)
//		                            \-> by-key -> count (WindowCountEstimate, 1 s) -> counts (sink)
//
//	  - block: the slow operator's mailbox blocks; back-pressure reaches the
//	    source, which reads at the operator's pace, and the records that
//	    arrive meanwhile wait outside: the end-to-end p99, counted from each
//	    record's arrival (the source's reader is a connector.IngestionTimer),
//	    grows through the overload.
//	  - drop-oldest: the mailbox evicts its oldest records; the p99 stays at
//	    the mailbox's length, and what is lost is not accounted for in the
//	    counts.
//	  - target: operators.LatencyTarget(200ms). The controller samples at the
//	    source, at the rate that admits 90 % of the slow operator's capacity
//	    of what arrives (95 % once the p99 has stayed well under the
//	    target), after a deeper cut that lets the slow operator, busy all
//	    the time, work through its full mailbox and the backlog that built
//	    up in the first second; the counts downstream are estimates,
//	    scaled by the sampling rate, with their 95 % bounds. When the load
//	    falls to half the capacity, shedding stops.
//
// Every second the sample records each pipeline's p99 over the latest
// latency window (OperatorStats.LatencyWindow) and the target's sample
// rate; at the end it prints them side by side with the throughput, what
// was shed or dropped, and the approximate counts' mean error and the share
// of key-windows whose truth lies within the reported bound.
//
// The load, the slow operator's work and the jobs all read one clock
// (Config.Clock). Its test runs the sample in a testing/synctest bubble,
// where that clock is fake and moves only when every goroutine waits, so
// what it asserts (the p99 within 1.2x the target from the 5th second of
// the overload, at least 0.9x the capacity processed during it, shedding
// stopped within 5 s of the load falling, Block's p99 growing) holds at any
// machine speed. On the real clock (`sluice run latency`) the slow
// operator's millisecond is a timer, whose real length varies with the
// machine's load from window to window; the controller measures the
// capacity each window and at seven looks between, cuts when what the
// mailbox holds at that capacity predicts a wait past the target (again at
// the next look while the rate still admits more than the capacity), and
// works it off. Config.Jitter varies the work per record on the simulated
// clock as such timers do (-jitter), and Config.Seed seeds that and the
// shedding's random numbers (-seed): the tests run ten seeds for the p99
// and twenty for the counts' coverage, not one.
//
// Each second's reading is taken 50 ms after the second, so that it reads
// the latency window the job closed at that second.
//
// The approximate counts are over 20 keys in windows of a second (220
// key-windows in the default run); a key-window counts as a miss when its
// truth is outside the reported interval, and also when it claims to be
// exact but is wrong, or was never emitted (the report gives the misses by
// kind).
package latency
