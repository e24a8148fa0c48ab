// Package operators is sluice's topology API: typed streams of records,
// operators that transform them, and the job that runs them. The runtime
// beneath (planner, stages, actors) is internal; connectors implement the
// interfaces of package connector.
//
// # Basics
//
// A Topology is built with free functions (Go generics do not allow generic
// methods), each naming its operator and taking options at the call site:
//
//	t := operators.NewTopology("wordcount")
//	lines := operators.Source(t, "lines", operators.FileLines("book.txt"))
//	words := operators.FlatMap(lines, "split", strings.Fields)
//	byWord := operators.KeyBy(words, "by-word", func(w string) string { return w }, operators.Parallelism(4))
//	counts := operators.Count(byWord, "count", operators.Emit(operators.EmitAtEnd))
//	operators.Sink(counts, "print", operators.Stdout[operators.KV[string, int64]]())
//
//	job, err := operators.Start(ctx, sys, t) // sys is an *actors.System
//	err = job.Wait(ctx)
//
// Start returns a Job: Wait, Drain and Stop it, read its Stats and
// Checkpoints, take a checkpoint now (CheckpointNow) or a Savepoint to a
// directory of its own, from which a later job starts at another
// parallelism (FromSavepoint). Run settings (Checkpoints,
// RestartOnFailure, WithClock, stores) may be given to NewTopology or to
// Start, which applies them to that run only. A Topology is also an
// actors.Job, for sys.Run.
//
// Sources read SourceConnectors (FromSlice, Generate, FileLines,
// FromChannel); sinks write SinkConnectors (SinkFunc, File, Lines, Stdout,
// Collector). Map, Filter and FlatMap are stateless; KeyBy partitions a
// stream by key with a hash that is stable across runs and machines, and
// Count, Reduce and Aggregate keep per-key state. Merge unites streams,
// Broadcast copies every record to every instance of the next operator, and
// Rebalance spreads records round-robin. A stream consumed by several
// operators is copied to each.
//
// # Validation
//
// Validate (also run by Plan and by System.Run) reports every problem at
// once, each a *TopologyError that names the operator: duplicate names,
// parallelism below 1, outputs nobody consumes, declared inputs never
// connected, type mismatches and cycles through Topology.Connect, streams
// from another topology, nil functions, a topology without sources.
//
// # Execution
//
// Plan computes the physical plan. Consecutive stateless operators with the
// same parallelism over a forward edge are fused into one chain that runs in
// one actor per instance, as plain function calls on batches of records;
// NoFusion opts an operator out. Every instance is a protoactor-go actor
// supervised by the job's actor. Records travel between actors in batches
// (BatchSize), and every edge is credit-based: a receiver grants each sender
// credits for its free capacity (Capacity), a sender without credits stops
// taking input, and back-pressure reaches the sources, which pause. No actor
// blocks and no goroutine spins.
//
// # Flow control
//
// Input sets an operator's mailbox: its capacity in records and its policy
// when full (mailbox.Block with credits, the default; DropNewest,
// DropOldest, Sample, Throttle, which never slow the sender and count every
// drop; Spill, which keeps order and bounds memory by spilling to bbolt).
// NewIngress is a source that an application feeds with Send, which waits
// under back-pressure.
//
// # Latency and load shedding
//
// Every job measures latency (off with NoLatencyStats): queue wait and
// processing per task, end to end from a record's ingestion at a source to
// its sink, as percentiles in OperatorStats.Latency (since the start) and
// LatencyWindow (the latest second), with each operator's EventTimeLag;
// the records of one batch in 8 that the sources read are timed, at every
// operator they reach, and every window's and timer's output
// (LatencyEvery). A source whose reader knows when records arrived (connector.IngestionTimer)
// counts from then, so the time records wait outside under back-pressure
// shows. LatencyTarget(d) sheds load to hold the p99 under d: at the
// sources or the edge into the bottleneck, by sampling, or by dropping whole
// batches before an operator declared Selective(); it sheds nothing while
// the target holds and stops when the load falls (ShedStatsOf, and
// OperatorStats.Shed by reason); ShedSeed seeds the choice of what is shed.
// WindowCountEstimate and WindowSumEstimate scale by the sampling and report
// a 95 % bound (Estimate).
//
// # Checkpoints and failures
//
// With Checkpoints(interval), barriers flow from the sources through every
// operator; operators with several inputs align them; per-key state, sink
// positions and source offsets are recorded together, and a job that
// starts again (after a crash, or a restart) resumes from its last
// completed checkpoint: exactly-once state. The File sink is exactly-once
// with checkpoints; the other sinks are at-least-once (the HTTP sink sends
// an idempotency key per record, so that an idempotent server sees each
// once). When the input ends or the job is drained, a final checkpoint is
// taken after every operator finished, so that sinks which commit with
// checkpoints (TwoPhaseWriter) commit their last records through it; a
// drained job keeps it to resume from, one that ran to its end forgets its
// checkpoints. Windows fire at the end of the input, before that
// checkpoint: a job resumed after a drain does not fire them again, and
// records it reads later for the same window fill a new one. Keyed state
// (Count, Aggregate) is kept and goes on from where it was.
//
// OnRecordFailure(n) retries a record whose function panics and then gives
// it to the dead-letter store (DeadLetters; `sluice deadletters`), and
// processing goes on. Any other failure of an operator stops the job with an
// *OperatorError naming it, or, with RestartOnFailure, restarts the whole
// job from its last checkpoint after a backoff, within a restart budget.
//
// # Event time, windows and joins
//
// Timestamps takes each record's event time and generates watermarks
// (OutOfOrderness bounds how late a record may be); an operator's event
// time is the lowest watermark of its inputs, and a source marked with
// IdleAfter stops holding it back while it has nothing to read.
//
//	ts := operators.Timestamps(clicks, "ts", func(c Click) time.Time { return c.At },
//		operators.OutOfOrderness(5*time.Second))
//	perUser := operators.KeyBy(ts, "by-user", func(c Click) string { return c.User })
//	sessions := operators.WindowCount(perUser, "sessions", operators.Sessions(30*time.Minute),
//		operators.AllowedLateness(time.Minute))
//	lateClicks := operators.LateRecords(perUser, sessions, "late-clicks")
//
// WindowAggregate, WindowCount and WindowReduce group a keyed stream in
// Tumbling, Sliding or Sessions windows, aligned to the epoch, in event time
// (or ProcessingTime); a window fires when the watermark passes its end, and
// every open window fires at the end of the input. Records later than the
// allowed lateness are counted (OperatorStats.Late) and form the stream
// LateRecords takes from the window (a side output).
// WindowJoin, IntervalJoin and Join (unbounded, with StateTTL) join two
// streams by key; KeyedUnion and Process (keyed state with event-time
// timers) build joins and operators of your own. Window, join and process
// state is part of checkpoints. WithClock replaces the clock that
// processing-time windows, idleness and state TTL read, for tests.
//
// # Caveats
//
// Restarts are all-for-one (the whole job, as Flink restarts a region);
// a single instance is not restarted alone. Per-key state lives in memory
// between checkpoints. A window's results carry the window's last instant
// as their event time.
package operators
