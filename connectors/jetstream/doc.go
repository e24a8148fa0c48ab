// Package jetstream connects sluice topologies to NATS JetStream: a source
// that reads a stream with a pull consumer, and a sink that publishes with
// de-duplication ids. Together with checkpoints (operators.Checkpoints)
// they give exactly-once processing from stream to stream.
//
// # Basics
//
//	src := jetstream.NewSource(jetstream.SourceConfig[Click]{
//		URL:      "nats://127.0.0.1:4222",
//		Stream:   "CLICKS",
//		Consumer: "clicks-job", // optional: a durable consumer
//	})
//	clicks := operators.Source(t, "clicks", src)
//	...
//	operators.Sink(out, "publish", jetstream.NewSink(jetstream.SinkConfig[Total]{
//		URL:     "nats://127.0.0.1:4222",
//		Subject: "totals.all",
//		Name:    "clicks-job/publish",
//	}))
//
// Connection settings come from the URL (nats://user:password@host:port,
// several separated by commas) and SourceConfig.Options /
// SinkConfig.Options (credentials files, TLS). Errors name the stream or
// subject and the servers, never the credentials.
//
// # The source
//
// The offset of a partition is a stream sequence: Reader.Offset is the
// sequence of the next message to read, so the checkpoint records it and a
// job restored from the checkpoint reopens the partition with a consumer
// created with DeliverByStartSequence at exactly that sequence. What
// survives a crash is therefore the checkpoint, which is authoritative; a
// durable consumer (SourceConfig.Consumer) survives too, but it is deleted
// and created again at the checkpoint's sequence whenever a partition
// opens, because a consumer's start cannot be changed and its own position
// may be ahead of the checkpoint (delivered, never acknowledged). A
// partition without a checkpoint starts at SourceConfig.StartSeq, the start
// of the stream by default: a job run from scratch replays the stream.
//
// Messages are acknowledged only once a completed checkpoint covers them
// (the reader is an operators.Acker): the consumer has the AckAll policy,
// and the last message read before the checkpoint's offset is acknowledged,
// which acknowledges all before it. The consumer's ack floor is thus the
// last completed checkpoint. Jobs without checkpoints set AckNone.
// Redeliveries (a checkpoint slower than AckWait) are dropped: the stream
// sequence says they were read.
//
// Reading never runs ahead of the job: Read pulls at most as many messages
// as the buffer the runtime gives it, which it does only with credits to
// send them on, with a no-wait request; when nothing is available the
// reader's Wait (an operators.Waiter) holds one pull open at the server, so
// an idle stream costs nothing. MaxAckPending bounds how far reading may
// run ahead of the last completed checkpoint.
//
// Partitions: with parallelism 1 the source reads the stream, or the
// subject in SourceConfig.Subjects. With parallelism P > 1, Subjects must
// hold P subjects: partition i reads Subjects[i] with a consumer of its own
// (Consumer-i when durable), and its offsets are stream sequences too. Use a
// subject per partition when publishing (orders.0, orders.1, ..., or a
// subject mapping with partition()).
//
// Bounded makes a partition end at the last message the stream held when
// it opened, for batch jobs, tests and benchmarks.
//
// A message's W3C trace context (its "traceparent" and "tracestate"
// headers, as OpenTelemetry's propagators write them into NATS headers)
// goes with the record made from it: in a topology with
// operators.TraceParent(), a record whose traceparent is sampled is traced
// in the publisher's trace (docs/tracing.md, Sampling).
//
// # The sink
//
// Every record is published with a Nats-Msg-Id, NAME/PARTITION/SEQ (see
// MsgID), and JetStream drops a message whose id it has seen within the
// stream's duplicate window (StreamConfig.Duplicates, two minutes by
// default). SEQ counts the records of the sink partition from 0; the
// writer is an operators.Checkpointer, so at every checkpoint it waits for
// the acknowledgement of everything published and records the next SEQ.
// A job restored from the checkpoint reopens the partition there
// (RestorableSink.OpenAt), the records replayed after the checkpoint get
// the ids they had before the crash, and the stream drops those it already
// has: exactly-once, as long as the recovery takes less than the duplicate
// window.
//
// Why not "checkpoint id and a sequence within it": the checkpoint after
// which a record is written is not deterministic. A crash between a
// checkpoint's barrier and its completion restores the checkpoint before
// it, and the replay meets the next barrier at another record, so ids made
// of the barrier's checkpoint id would differ between the run and its
// replay. The count of records since the start of the job's lineage, kept
// in every checkpoint, does not depend on where barriers fall.
//
// The replay assigns the same ids as the first run when the records reach
// the sink partition in the same order, which holds when the partition is
// fed by one upstream instance (a source partition and the operators after
// it, forward or keyed edges from a single source instance) and the
// sources replay deterministically, as JetStream does. A sink partition fed
// by several instances at once (a KeyBy after a source with parallelism
// above 1, a Merge) sees them interleaved differently after a replay: the
// sink is then at-least-once.
//
// A job that starts from scratch (no checkpoint) numbers from 0 again, so
// within the duplicate window a run over the same input publishes nothing
// new; give a different Name to publish again.
//
// # Caveats
//
// Read streams with the Limits retention policy (the default). With
// Interest or WorkQueue retention the server may delete messages that a
// restore needs, since the source deletes and creates its consumer when a
// partition opens; and if limits (MaxAge, MaxMsgs) deleted the message at
// a checkpoint's sequence, the partition resumes at the first message the
// stream still holds.
//
// A failed asynchronous publish is retried synchronously with the same id
// (Attempts, Backoff), so a record may land after records written after it.
// Decoding errors fail the source: make Decode tolerant if bad messages are
// expected. Ordering between partitions is not defined.
package jetstream
