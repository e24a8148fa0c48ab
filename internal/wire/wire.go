// Package wire is the protocol between a job's actors: the job actor (the
// coordinator), the operator instances and the hosts of instances in other
// processes. Each message is defined once and used both within one process
// and across processes, where package cluster encodes it with msgpack
// (it registers every type here with its codec). Field names are the
// encoding: renaming one breaks mixed-version clusters.
//
// Records and control marks between instances travel as Records (encoded
// with the receiving task's envelope codec) only across processes; within
// one they are actors.Envelope values. Credits are totals since the channel
// opened, so that a lost credit is made good by the next; sequence numbers
// of Records detect a lost message.
package wire

type (
	// Records is an envelope (records or a control mark), encoded with
	// the envelope codec of the receiving task. Seq numbers the messages
	// of one channel from 1: a gap means a message was lost between the
	// processes, and the receiving instance fails (the job restarts from
	// its last checkpoint) rather than go on without it.
	Records struct {
		Seq  uint64
		Data []byte
	}
	// Credit grants the sender's output Out room for Total records
	// since the channel opened (a total, not an increment: a credit message
	// lost between processes is made good by the next).
	Credit struct {
		Out   int
		Total int64
	}
	// Barrier announces checkpoint ID to every instance. A running source
	// starts it; an instance that has finished its input answers it with
	// its final state; any other instance aligns the barrier arriving on
	// its inputs, or answers as a finished instance if its input ends
	// first. That is how checkpoints go on while some sources have
	// finished and others run (as Flink's FLIP-147), and how the final
	// checkpoint reaches every instance. Unaligned: a source sends
	// unaligned barriers (actors.UnalignedBarrier); to any other instance
	// it says that checkpoint ID switched to unaligned (its alignment
	// timed out): an instance aligning it, or with its barrier queued,
	// records its state at once, and one that has not seen it yet does
	// when it does.
	Barrier struct {
		ID        uint64
		Unaligned bool
	}
	// Ack: an instance recorded its state for checkpoint ID.
	Ack struct {
		Gen      int
		ID       uint64
		Instance int
		States   map[string][]byte
		Offsets  map[string]int64
		// Channels: the in-flight records of an unaligned checkpoint,
		// by input channel ("operator/instance/in<channel>").
		Channels map[string][]byte
	}
	// Committed: checkpoint ID completed; sinks commit, sources
	// acknowledge, and a finished instance whose final state it covers
	// closes its sinks and reports Finished a second time.
	Committed struct {
		Gen int
		ID  uint64
	}
	// Finished: an instance finished its input. Stats are its final
	// counters, so that the job's statistics are complete when it ends.
	Finished struct {
		Task, Instance, Gen int
		Stats               *InstanceStats
	}
	// Stats reports the counters of a generation's instances in one
	// process to the job actor: every hostStatsInterval while they run, and
	// once more (Final) after they stopped. Counts are totals since the
	// generation started, so a lost report is made good by the next.
	Stats struct {
		Gen       int
		Address   string
		Final     bool
		Instances []InstanceStats
	}
	// InstanceStats are the counters of one instance.
	InstanceStats struct {
		Task, Instance int
		Final          bool      // the instance finished or stopped: no later report changes it
		Ops            []OpStats // by position in the task's chain
		// Its input mailbox (none for a source).
		Policy                     string
		Capacity, Depth, HighWater int
		Dropped                    []int64 // by mailbox.Reason
		Spilled, SpillPending      int64
		Blocked                    int64 // nanoseconds without credit to send, the current episode included
		Backpressured              bool  // without credit now
		Watermark                  int64 // the instance's event time (Unix ns), 0 before the first
		// Latency is what the instance measured (nil when the job
		// measures none), totals since the generation started.
		Latency *Latency
	}
	// Latency is an instance's latency measurements (DESIGN.md, Latency
	// and shedding): histograms of queue wait, processing and end-to-end
	// latency (a sink's), time busy, records handled, a source's records
	// read and the ingestion time of its latest batch, records shed by
	// reason.
	Latency struct {
		Queue, Proc, EndToEnd  Hist
		Busy, Handled, Offered int64
		LastBorn               int64
		Shed                   []int64
	}
	// Hist is a latency histogram, sparse: Count[i] records in bucket
	// Index[i] of the engine's log-linear buckets; N records in all, Max
	// the largest (ns).
	Hist struct {
		Index  []int32
		Count  []int64
		N, Max int64
	}
	// OpStats are the counters of one operator of an instance's chain.
	OpStats struct{ In, Out, DeadLettered, Late int64 }
	// SourceDone: a source ended. Older versions sent it to stop
	// checkpoints; a finished source now answers barriers instead, and the
	// job actor ignores it.
	SourceDone struct{ Gen int }
	// Drain asks a source to stop reading and finish. Suspend (a stop with
	// a savepoint): the operators downstream do not finish their input
	// (no aggregation emits, no timer fires, state is kept as it is); only
	// sinks flush, and a job started from the final checkpoint reads on.
	Drain struct{ Suspend bool }
	// Failed: an instance failed; the job restarts or stops. Operator and
	// Message describe the failure across processes; within one, Reason is
	// what the instance failed with (a panic's value or an error), which
	// does not cross processes.
	Failed struct {
		Gen               int
		Address, ID       string // the instance's PID
		Operator, Message string
		Reason            any `msgpack:"-"`
	}
	// Deploy asks a process to run its instances of one generation.
	Deploy struct {
		Job               string // the name the topology is registered under
		JobAddress, JobID string // the job actor
		Gen               int
		Placement         []string // the address of every instance, by instance number
		Checkpoint        *Checkpoint
		// Inputs and Paused are the live changes in force (the engine's
		// control plane): the input of a task changed while the job ran,
		// by task, and the sources paused, so that a new generation is
		// built as the running one was.
		Inputs map[int]Input
		Paused []int
	}
	// Input is an input mailbox's settings on the wire (mailbox.Config
	// without what does not cross processes): Policy is mailbox.Overflow's
	// name.
	Input struct {
		Policy                           string
		Capacity, HighWater, SampleEvery int
		Rate                             float64
	}
	// Change is the coordinator of a distributed job asking a process that
	// hosts instances of its generation Gen to change them, in two phases
	// (cluster's change machine): Phase "prepare" checks the change and
	// keeps it (ID names it), "commit" applies it to the instances there,
	// "abort" forgets it or, once applied, puts the instances back as they
	// were. Op is the operator heading the task Task; Input the input to
	// set, or Pause/Resume the source.
	Change struct {
		Job               string // the name the topology is registered under
		JobAddress, JobID string // the job actor: the coordinator
		Gen               int
		ID                uint64
		Phase             string
		Version           uint64 // a desired-state version it applies, or 0
		Task              int
		Op                string
		Input             *Input
		Pause             *bool
	}
	// Changed answers Change: Err is the process's reason to refuse it,
	// empty when it did the phase; Address is the process's.
	Changed struct {
		Address string
		ID      uint64
		Phase   string
		Err     string
	}
	// Gate tells a sender in another process that its channel Out is
	// credit-gated from now on (Credited, with Window credits, Epoch naming
	// the live change) or no longer (see the engine's control plane).
	Gate struct {
		Out      int
		Credited bool
		Window   int
		Epoch    int64
	}
	// Checkpoint is the checkpoint a generation starts from.
	Checkpoint struct {
		ID      uint64
		States  map[string][]byte
		Offsets map[string]int64
	}
	// Deployed answers Deploy; Err is empty on success.
	Deployed struct{ Err string }
	// StopGen asks a process to stop its instances of a generation.
	StopGen struct {
		JobAddress, JobID string
		Gen               int
	}
	// Stopped: a process stopped its instances of generation Gen.
	Stopped struct {
		Address string
		Gen     int
	}
)

// The messages sent to instances besides records are control messages: an
// overflow policy must never count or drop them. A dropped credit would
// leave its sender waiting for room the receiver already granted.
func (*Credit) IsControl() bool    { return true }
func (*Barrier) IsControl() bool   { return true }
func (*Committed) IsControl() bool { return true }
func (*Drain) IsControl() bool     { return true }
func (*Gate) IsControl() bool      { return true }

// IsUrgent makes a job's checkpoint announcement overtake the records
// queued (and spilled) in an instance's mailbox (mailbox.Urgent): a source
// starts the checkpoint without first reading its queue, and an instance
// starts an unaligned one at once.
func (*Barrier) IsUrgent() bool { return true }

// IsUrgent makes a completed checkpoint's commit overtake the queue too:
// sinks commit without waiting for the records queued after the
// checkpoint (and a spill cannot hold it: it is no envelope).
func (*Committed) IsUrgent() bool { return true }

// IsUrgent makes a credit overtake the queue: the sender it frees sends
// sooner, and a spill cannot hold it (it is no envelope). Credits are
// totals, so their order against records does not matter.
func (*Credit) IsUrgent() bool { return true }
