// Package persistence keeps durable state for sluice: journals of events,
// snapshots, and the checkpoints of jobs, in memory or in the system's bbolt
// store; and the event-sourced actor that applications embed.
//
// # Basics
//
// Three small interfaces hold the state, each with an implementation in
// memory (for tests, and state that need not outlive the process) and one in
// a bbolt file:
//
//   - Journal: the events of many persistence ids, each id a sequence
//     numbered 1, 2, 3, ... (MemoryJournal, BoltJournal).
//   - SnapshotStore: the state of an id as of one of its events, so that
//     recovery need not replay everything (MemorySnapshotStore,
//     BoltSnapshotStore).
//   - CheckpointStore: the newest completed checkpoint of each job, every
//     operator's state and every source's offset in one record
//     (MemoryCheckpointStore, BoltCheckpointStore).
//
// Inside an actors.System, use the system's store file:
//
//	db, err := sys.DB()
//	journal, err := persistence.NewBoltJournal(db) // starts its writer; Close stops it
//	snapshots, err := persistence.NewBoltSnapshotStore(db)
//	checkpoints, err := persistence.NewBoltCheckpointStore(db)
//
// On their own, Open opens a store file and gives all three, and Close
// closes it. Either way the data lives in top-level buckets of its own
// ("journal", "snapshots", "checkpoints"), next to the spill queues of
// package mailbox; Inspect lists what a file holds without writing to it
// (`sluice store inspect FILE`). A file written by another program, by a
// newer sluice, or damaged is refused by Open (ErrForeignFile, ErrNewerFile,
// ErrCorruptFile) and left as it was.
//
// Events, snapshots and checkpoints are stored as small versioned msgpack
// records under big-endian keys (a journal keeps its events in runs of
// consecutive events, keyed by the first one's sequence number). A record
// that no longer decodes is an error
// wrapping ErrDecode (a *DecodeError, which names the file, the persistence
// id or job, and the sequence number), never a panic, and nothing is
// overwritten to "repair" it.
//
// # The journal contract
//
// Every Journal passes the conformance suite in package persisttest, and
// every new one must. Its contract:
//
//   - Append(ctx, id, events) is atomic: all of the events or none. Their
//     sequence numbers continue the journal: the first is HighestSeq+1 and
//     they are consecutive; anything else fails with ErrSeqConflict and
//     writes nothing, which also fences off a second writer of the same id.
//     When Append returns nil the events are durable.
//   - Replay(ctx, id, from, to, max, fn) calls fn for the events with
//     from <= Seq <= to in order, at most max of them (max < 0: all; 0:
//     none); it stops at fn's first error and returns it.
//   - HighestSeq never decreases, even after DeleteTo removed every event:
//     a sequence number is never reused.
//
// The bbolt journal group-commits: appends from many goroutines (many
// actors) that arrive while a transaction commits are gathered into the next
// one, so that they share one fsync. Each append stays atomic, and one that
// fails does not fail the others of its group. A group is written as one
// entry at the end of a log, which the journal later compacts into one
// bucket per id (when the log has grown, before a Replay or DeleteTo, and at
// Close); a crash in between loses nothing.
//
// # The event-sourced actor
//
// An application keeps state as events with EventSourced, without any
// topology. It describes a Behavior over a state S, commands C and events
// E: Handle decides, from the state and a command, which events to persist
// and what to reply; Apply changes the state by one event. Event types are
// named in a Registry (no global registry: build one per application), which
// encodes them with msgpack and decodes only the names it knows.
//
//	events := persistence.NewRegistry().
//		Register("deposited", Deposited{}).
//		Register("withdrawn", Withdrawn{})
//	account, err := persistence.EventSourced(persistence.Behavior[Account, any, AccountEvent]{
//		ID: "account-42", Journal: journal, Snapshots: snapshots, Events: events,
//		Handle: handle, Apply: apply, SnapshotEvery: 1000,
//	})
//	ref, err := sys.Spawn("account-42", account)
//	reply, err := ref.Request(ctx, Deposit{Amount: 100})
//
// The actor persists a command's events, waits until they are durable, and
// only then applies them and replies (ctx.Respond): a failed write applies
// nothing, and the command's reply is the error. A nil reply from Handle
// answers with the new state, and GetState asks for the state at any time.
// A snapshot is taken every SnapshotEvery events or when SnapshotWhen says
// so, after the reply; only the newest is kept.
//
// When started, and when restarted by its supervisor, the actor recovers:
// it loads the newest snapshot and replays the events after it through
// Apply. When recovery fails (the journal cannot be read, an event does not
// decode or is of an unregistered type, events are missing) the actor panics
// with a *RecoveryError naming the persistence id and the sequence number,
// which its supervisor receives as the failure's reason.
//
// # Caveats
//
//   - One actor at a time per persistence id. A second writer is fenced by
//     ErrSeqConflict (its append fails and it restarts to recover), not
//     prevented.
//   - Share one BoltJournal per database: a second one is safe, but it
//     commits apart from the first, so appends group less. Stop the actors
//     that append before closing the journal, and close the journal before
//     the database, so that it compacts its log (if the database goes
//     first, the log is compacted when the file is next used).
//   - Appends, snapshots and recovery run on the actor's goroutine: the
//     actor waits for the fsync, as it should, while other actors' appends
//     share it. The bbolt journal commits from one writer goroutine, so its
//     throughput is bounded by one core and the disk's fsync latency: many
//     appending actors go faster together than one alone.
//   - Apply runs again for every stored event at each recovery: it must be
//     deterministic and must not fail, and event types must keep their
//     registered names and stay decodable from their old encodings (msgpack
//     ignores unknown fields and zeroes missing ones).
//   - State is snapshotted with msgpack: only exported fields are kept. The
//     state is handed to the caller of GetState and as a default reply:
//     make it a value, or never change what Apply was given.
//   - The journal keeps every event until the application calls DeleteTo
//     (typically up to its newest snapshot). Deleting events that no
//     snapshot covers makes recovery fail: events are missing.
package persistence
