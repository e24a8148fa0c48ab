package overload

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
)

// Config describes the load and the consumers.
type Config struct {
	Records int64 // records produced by each source
	// Slow is the work per record in each consumer: rounds of a 64-bit
	// hash (Digest); 2 000 rounds take about 10 µs on a current core.
	Slow int
	// Capacity is each consumer's mailbox capacity, in records.
	Capacity int
}

// DefaultConfig is what `sluice run overload` runs without flags.
func DefaultConfig() Config { return Config{Records: 100_000, Slow: 2_000, Capacity: 1024} }

// Validate reports a configuration that cannot run.
func (c Config) Validate() error {
	var errs []error
	if c.Records < 1 {
		errs = append(errs, fmt.Errorf("records %d: must be at least 1", c.Records))
	}
	if c.Slow < 0 {
		errs = append(errs, fmt.Errorf("slow %d: must not be negative", c.Slow))
	}
	if c.Capacity < 1 {
		errs = append(errs, fmt.Errorf("capacity %d: must be at least 1", c.Capacity))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("overload: %w", err)
	}
	return nil
}

// Policy is one of the three mailboxes compared.
type Policy struct {
	Name    string // "block", "drop-oldest", "spill"
	Mailbox func(capacity int) mailbox.Config
}

// Policies are the consumers' mailboxes, in the order they are reported.
var Policies = []Policy{
	{"block", mailbox.Block},
	{"drop-oldest", mailbox.DropOldest},
	{"spill", func(capacity int) mailbox.Config { return mailbox.Spill(capacity, mailbox.SpillOptions{}) }},
}

// Record is what the sources produce: its number in the load.
type Record struct {
	Seq int64
}

// Result is what a consumer makes of a record: the record's Digest.
type Result struct {
	Seq    int64
	Digest uint64
}

// Digest is the consumers' work: rounds of splitmix64 from seq. It depends
// only on its arguments.
func Digest(seq int64, rounds int) uint64 {
	x := uint64(seq)
	for range rounds {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		x = z ^ (z >> 31)
	}
	return x
}

// Received is what a pipeline's sink saw: the results in the order they
// came, and when the input began and ended.
type Received struct {
	mu      sync.Mutex
	results []Result
	closed  time.Time
}

// Results returns the results received, in order.
func (r *Received) Results() []Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.results)
}

// Open implements operators.SinkConnector: the sink has one instance.
func (r *Received) Open(context.Context, int, int) (operators.Writer[Result], error) { return r, nil }

// Write implements operators.Writer.
func (r *Received) Write(rs []Result) error {
	r.mu.Lock()
	r.results = append(r.results, rs...)
	r.mu.Unlock()
	return nil
}

// Close implements operators.Writer: it records when the input ended.
func (r *Received) Close() error {
	r.mu.Lock()
	r.closed = time.Now()
	r.mu.Unlock()
	return nil
}

func (r *Received) closedAt() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// Pipelines is the topology measured: for each policy, its own source of
// the same Records records, a consumer ("slow-NAME") that computes Digest
// with Slow rounds behind a mailbox of that policy and Capacity, and a
// sink. The three pipelines share no operator, so the back-pressure of the
// Block pipeline slows only its own source. Records travel in batches of
// at most Capacity (256 at most), so that a whole batch fits a mailbox:
//
//	source-block       -> slow-block (block)             -> sink-block
//	source-drop-oldest -> slow-drop-oldest (drop-oldest) -> sink-drop-oldest
//	source-spill       -> slow-spill (spill)             -> sink-spill
type Pipelines struct {
	cfg      Config
	top      *operators.Topology
	received []*Received
	produced []atomic.Int64 // when each source produced its last record, Unix ns
}

// NewPipelines builds the topology for cfg.
func NewPipelines(cfg Config) (*Pipelines, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// A batch travels in one envelope: no bigger than a mailbox, so that
	// the capacity really bounds what each queue holds in memory.
	top := operators.NewTopology("overload", operators.BatchSize(min(256, cfg.Capacity)))
	p := &Pipelines{cfg: cfg, top: top, produced: make([]atomic.Int64, len(Policies))}
	for i, pol := range Policies {
		done := &p.produced[i]
		last := cfg.Records - 1
		src := operators.Source(p.top, "source-"+pol.Name, operators.Generate(cfg.Records, func(seq int64) Record {
			if seq == last {
				done.Store(time.Now().UnixNano())
			}
			return Record{Seq: seq}
		}))
		rounds := cfg.Slow
		slow := operators.Map(src, "slow-"+pol.Name, func(r Record) Result {
			return Result{Seq: r.Seq, Digest: Digest(r.Seq, rounds)}
		}, operators.Input(pol.Mailbox(cfg.Capacity)))
		rec := &Received{}
		p.received = append(p.received, rec)
		operators.Sink(slow, "sink-"+pol.Name, rec)
	}
	return p, nil
}

// Topology returns the topology, to plan or to run once.
func (p *Pipelines) Topology() *operators.Topology { return p.top }

// Received returns what the sink of the policy called name saw.
func (p *Pipelines) Received(name string) *Received {
	for i, pol := range Policies {
		if pol.Name == name {
			return p.received[i]
		}
	}
	return nil
}

// Accounting is one pipeline's record of the run.
type Accounting struct {
	Policy    string
	Produced  int64            // records its source emitted
	Delivered int64            // records its consumer received
	Dropped   int64            // records its consumer's mailbox dropped
	DroppedBy map[string]int64 // by reason
	Spilled   int64            // records written to the spill
	Queued    int64            // records still queued (memory and spill) at the end: 0
	HighWater int              // the most records queued in memory at once
	// Backpressured is how long the source spent without credit to send.
	Backpressured time.Duration
	SourceDone    time.Duration // when the source had read its last record (it may wait for credit to send it)
	ConsumerDone  time.Duration // when the consumer had handled everything
	// InOrder: the results came in the order of the records; Complete:
	// every record's result came; Newest: the last record's result came.
	InOrder, Complete, Newest bool
	// DigestsOK: every result's digest is Digest of its record (checked
	// here for an incomplete pipeline; a complete one's Sum is compared
	// with ExpectedSum).
	DigestsOK bool
	// Sum is the sum of the digests received.
	Sum uint64
}

// Balanced reports whether produced = delivered + dropped + queued, with
// nothing queued at the end.
func (a Accounting) Balanced() bool {
	return a.Produced == a.Delivered+a.Dropped+a.Queued && a.Queued == 0
}

// Measure runs the pipelines on sys to their end and returns each one's
// accounting, in the order of Policies.
func (p *Pipelines) Measure(ctx context.Context, sys *actors.System) ([]Accounting, error) {
	start := time.Now()
	run, err := sys.Run(ctx, p.top)
	if err != nil {
		return nil, err
	}
	if err := run.Wait(ctx); err != nil {
		return nil, err
	}
	return p.Account(run, start)
}

// Account reads each pipeline's accounting from run, a run of Topology
// that has ended (started at start), in the order of Policies.
func (p *Pipelines) Account(run *actors.Run, start time.Time) ([]Accounting, error) {
	stats := map[string]actors.OperatorStats{}
	for _, st := range run.Stats() {
		stats[st.Name] = st
	}
	out := make([]Accounting, len(Policies))
	for i, pol := range Policies {
		src, slow := stats["source-"+pol.Name], stats["slow-"+pol.Name]
		a := Accounting{Policy: pol.Name, Produced: src.Out, Delivered: slow.In, Dropped: slow.Dropped,
			DroppedBy: slow.DroppedBy, Spilled: slow.Spilled, Queued: int64(slow.Queued) + slow.SpillPending,
			HighWater: slow.QueueHighWater, Backpressured: src.Blocked, DigestsOK: true, InOrder: true}
		if t := p.produced[i].Load(); t != 0 {
			a.SourceDone = time.Unix(0, t).Sub(start)
		}
		rec := p.received[i]
		if t := rec.closedAt(); !t.IsZero() {
			a.ConsumerDone = t.Sub(start)
		}
		results := rec.Results()
		for j, r := range results {
			a.Sum += r.Digest
			if j > 0 && r.Seq <= results[j-1].Seq {
				a.InOrder = false
			}
		}
		a.Complete = a.InOrder && int64(len(results)) == p.cfg.Records
		if !a.Complete {
			for _, r := range results {
				if r.Digest != Digest(r.Seq, p.cfg.Slow) {
					a.DigestsOK = false
					break
				}
			}
		}
		a.Newest = len(results) > 0 && results[len(results)-1].Seq == p.cfg.Records-1
		if int64(len(results)) != a.Delivered {
			return out, fmt.Errorf("overload: %s: the sink received %d results, the consumer %d records", pol.Name, len(results), a.Delivered)
		}
		out[i] = a
	}
	return out, nil
}

// ExpectedSum is the sum of the digests of every record, computed with a
// plain loop: what a pipeline that delivered everything received.
func ExpectedSum(cfg Config) uint64 {
	var sum uint64
	for seq := range cfg.Records {
		sum += Digest(seq, cfg.Slow)
	}
	return sum
}
