// Package postgres is a PostgreSQL sink for sluice topologies that commits
// with the job's checkpoints: exactly-once from a replayable source (such
// as connectors/jetstream) into a table.
//
// # Basics
//
//	sink := postgres.NewSink(postgres.Config[Click]{
//		DSN:     "postgres://app@127.0.0.1:5432/shop?sslmode=disable",
//		Name:    "clicks-job/store", // its key in sluice_sink_checkpoints
//		Table:   "clicks",
//		Columns: []string{"id", "page", "at"},
//		Row:     func(c Click) []any { return []any{c.ID, c.Page, c.At} },
//	})
//	operators.Sink(clicks, "store", sink)
//	run, err := sys.Run(ctx, t) // t has operators.Checkpoints(interval)
//
// The DSN is a postgres:// URL or key=value pairs, as libpq and pgx take
// them, and the PG* environment variables fill in what it leaves out.
// Errors name the host, port, database and user, never the password.
//
// # How it commits
//
// The writer is an operators.TwoPhaseWriter. Write keeps the records in
// memory (at most MaxPendingRows). At a checkpoint's barrier PreCommit makes
// them the checkpoint's segment and returns every segment not yet
// committed, msgpack-encoded: the checkpoint records them (records must be
// msgpack-encodable, like per-key state). When the checkpoint is complete,
// Commit writes the segments — COPY into the table, or, with Key, COPY into
// a temporary table and INSERT ... ON CONFLICT (Key) DO UPDATE — and updates
// the partition's row of sluice_sink_checkpoints(sink, part, checkpoint,
// position) in the same transaction, retried under supervision's retry
// state machine (Attempts, Backoff) when the failure is transient (the
// connection, a serialization failure, a server shutting down).
//
// Every record has a position: its number among the records of the sink
// partition since the job first started, kept in every checkpoint. The
// table's position says how many the table has, and a commit writes only
// the records at or beyond it, so a commit is idempotent: Commit twice, or
// a restore that commits a checkpoint again, writes nothing twice. After a
// crash between PreCommit and Commit, the job restores the checkpoint and
// OpenAt finishes its commit if the table's position is behind it; the
// records written after the checkpoint are replayed by the source and
// staged again. The checkpoint column records the id of the last commit,
// for people; positions decide.
//
// # End of stream, and jobs without checkpoints
//
// With checkpoints, a job whose input ends, or that is drained, takes a
// final checkpoint once every operator has finished: the records written
// since the last periodic checkpoint become its segment and are committed
// through it like any other, and Close then has nothing left to commit. A
// drained job keeps that checkpoint and its next run resumes after the last
// record, so nothing is written twice; a job that ran to its end forgets its
// checkpoints. If the final checkpoint cannot be stored, the writer is
// aborted and the job fails from its last completed checkpoint.
//
// Close commits what it holds when no checkpoint covered it: in a job
// without checkpoints, and with FlushRows, which commits without waiting
// for a checkpoint. Those records are in no checkpoint, so if the job is
// restored after that, the replay writes them again, and the position skips
// them only if the replay brings the same records in the same order. That
// holds when each sink partition is fed by one upstream instance (one
// source partition, and forward or keyed edges from it) and the source
// replays deterministically (JetStream does); a sink partition that
// interleaves several upstream instances may get a few rows twice, or miss
// a few, in that case only. The same holds for a job run again from
// scratch: the positions of the earlier run skip its records (run from
// scratch over the same input, it writes nothing twice); call Reset to
// write everything again. When a job fails, restarts or is stopped, the
// runtime calls Abort, which discards what no checkpoint covers.
//
// With Key, a row that is written again replaces itself, so a table of
// latest values (counts per key, as with operators.Count) ends exact even
// where positions could not tell.
//
// Exactly-once therefore needs: checkpoints on, a replayable source, and a
// Name that belongs to this sink alone and stays the same across runs.
//
// # Memory and observation
//
// The records between two completed checkpoints are held in memory and
// written into the checkpoint (MaxPendingRows bounds them; Write fails
// beyond it with an error saying so): take checkpoints often enough for the
// rate of the stream. Stats counts commits, rows written and skipped,
// failed attempts, retries and connections; Positions reads what
// sluice_sink_checkpoints records; the connections show in
// pg_stat_activity as application_name "sluice NAME".
package postgres
