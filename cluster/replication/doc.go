// Package replication is the replication coordinator of sluice's cluster:
// pure state machines, with no I/O, no clock and no goroutine, that a
// leader and its replicas drive from outside (as etcd's raft is driven).
//
// A leader holds a log of entries (journal entries, checkpoint records)
// numbered 1, 2, 3, ... and replicates it to the replicas named in its
// Config. Each entry carries the epoch of the leader that wrote it.
//
// # The leader
//
// Step(state, event) returns the new state and the actions to carry out.
// The driver (an actor in package cluster) loops:
//
//	s := replication.New(cfg, epoch, log.Info())
//	s, acts := replication.Step(s, replication.Start{})
//	for {
//		for _, a := range acts {
//			switch a := a.(type) {
//			case replication.Send:      // read entries a.From..a.To, send them to a.Replica
//			case replication.SetTimer:  // after a.Delay, feed TimerFired{a.Replica, a.Timer}
//			case replication.StopTimer: // the timer is no longer wanted
//			case replication.Commit:    // entries through a.Index are committed: answer the writers
//			case replication.Unavailable: // fail the writers waiting after a.Commit
//			case replication.StepDown:  // a newer leader exists: fail everything, stop
//			case replication.Transition: // log it, show it in the stats
//			}
//		}
//		s, acts = replication.Step(s, <next event>) // Appended, Acked, Nacked, Rejected, TimerFired, Unreachable, Reachable, Compacted
//	}
//
// Each replica moves through these phases:
//
//	syncing ──acked through the last entry──▶ in-sync
//	in-sync ──ack overdue (AckTimeout)──────▶ lagging (the suffix after Match is sent again)
//	lagging ──acked through the last entry──▶ in-sync
//	syncing, lagging ──no answer in time──▶ retrying (wait Backoff.Delay(attempt))
//	in-sync, syncing, lagging ──Unreachable──▶ retrying
//	retrying ──timer──▶ syncing (send the suffix after the replica's acknowledged index)
//	any of them ──MaxAttempts failed attempts in a row──▶ failed
//	retrying, failed ──Reachable (the node is back)──▶ syncing
//
// A replica that does not hold the entry an append follows answers with a
// mismatch and its last index; the leader goes back (to that index, or one
// entry at a time where the logs diverge) until the logs match, and then
// sends exactly the missing suffix. Entries the leader compacted away are
// replaced by a reset to its first entry, which must stand on its own (a
// snapshot, a checkpoint).
//
// # Commits
//
// An entry is committed when Acks replicas (default: all of them) hold it;
// the leader holds it already, having written it before Appended. Commit
// actions report the highest committed index, which never goes down.
// Acknowledgements are idempotent and may come twice or out of order: a
// replica's Match only grows. When fewer than Acks replicas are live (not
// failed), Unavailable tells the driver that the waiting entries cannot
// commit now; they still commit if enough replicas come back.
//
// With Acks equal to the number of replicas, every committed entry is on
// every replica, so any survivor may take over as the next leader. With
// fewer, the next leader must be the replica whose log is most up to date
// (its last entry's epoch, then its index), as in Raft's election rule.
//
// # Epochs
//
// Every leader term has an epoch, greater than any the log has seen. A
// replica promises the newest epoch it has accepted an append from
// (durably) and refuses older ones (Decide answers Stale), so a stale
// leader can no longer change what a newer one wrote. A leader that learns
// of a newer epoch (Rejected) steps down: StepDown is its last action and
// every later event is ignored. protoactor's identity lookup can activate
// an identity twice during membership changes; epochs, not single
// activation, keep replicated state consistent.
//
// # Replicas
//
// Decide is the replica's rule for an append, a pure function of its log
// (FollowerLog) and the append; the caller applies the Decision atomically
// and sends its Reply, which Reply.Event turns into the leader's event.
// MemoryLog is a FollowerLog in memory, for tests and examples.
//
// # Limits
//
// Epochs, indexes, commits and sequence numbers are below Limit (2^63):
// Decide refuses an append with a value at or above it, or whose entries
// would take the log there (Decision.Err is ErrOutOfRange, and nothing is
// to be applied), and Step ignores events that carry one, so no
// arithmetic on a value from the network wraps. A driver that takes
// office checks that the next epoch stays below Limit before promising it.
package replication
