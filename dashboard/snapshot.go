package dashboard

import (
	"encoding/json"
	"maps"
	"math"
	"net/url"
	"strings"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
)

// Snapshot is what the page shows at one instant: every job the dashboard
// follows. It is the JSON the /events stream and /snapshot.json carry.
type Snapshot struct {
	Seq   uint64    `json:"seq"`   // increases with every snapshot the dashboard publishes
	Title string    `json:"title"` // Options.Title
	Time  time.Time `json:"time"`  // when the statistics were read
	// IntervalMS is the polling interval: rates are per second over it.
	IntervalMS int64 `json:"interval_ms"`
	Jobs       []Job `json:"jobs"`
}

// The states of a job.
const (
	StateRunning  = "running"
	StateFinished = "finished" // ended without error
	StateFailed   = "failed"   // ended with an error (Job.Error)
)

// Job is one job's state, its physical plan and its operators.
type Job struct {
	ID          string      `json:"id"` // unique within the dashboard: "1", "2", ... in the order of Add
	Name        string      `json:"name"`
	State       string      `json:"state"` // StateRunning, StateFinished or StateFailed
	Error       string      `json:"error,omitempty"`
	ElapsedMS   int64       `json:"elapsed_ms"` // since the job started; frozen when it ends
	Restarts    int         `json:"restarts"`
	Checkpoints Checkpoints `json:"checkpoints"`
	Graph       Graph       `json:"graph"`
	Operators   []Operator  `json:"operators"`
}

// Checkpoints sums up a job's checkpoints.
type Checkpoints struct {
	Completed      int64      `json:"completed"`
	Failed         int64      `json:"failed"`
	LastID         uint64     `json:"last_id"`
	LastDurationMS float64    `json:"last_duration_ms"`
	LastTime       *time.Time `json:"last_time,omitempty"`
	// AgeMS is the time from the last completed checkpoint to the snapshot,
	// -1 when there has been none.
	AgeMS        int64  `json:"age_ms"`
	RestoredFrom uint64 `json:"restored_from"`
	// TimedOut counts the failed checkpoints that timed out, LastFailure is
	// the newest failure's reason.
	TimedOut    int64  `json:"timed_out"`
	LastFailure string `json:"last_failure,omitempty"`
	// InProgress counts the checkpoints in flight; the oldest of them is
	// OldestID, in progress for OldestSinceMS (-1 when none), acknowledged
	// by OldestAcked instances and waiting for OldestPending.
	InProgress    int    `json:"in_progress"`
	OldestID      uint64 `json:"oldest_id,omitempty"`
	OldestSinceMS int64  `json:"oldest_since_ms"`
	OldestAcked   int    `json:"oldest_acked"`
	OldestPending int    `json:"oldest_pending"`
}

// Operator is one logical operator, summed over its instances.
type Operator struct {
	Name        string `json:"name"`
	Kind        string `json:"kind"`
	Task        int    `json:"task"`
	Parallelism int    `json:"parallelism"`
	// Head is true for the first operator of its task: the one that reads
	// the task's input mailbox, and so carries the queue, drop, spill and
	// back-pressure figures.
	Head bool  `json:"head"`
	In   int64 `json:"in"`
	Out  int64 `json:"out"`
	// InRate and OutRate are records per second over the last polling
	// interval; DropRate likewise for drops.
	InRate   float64 `json:"in_rate"`
	OutRate  float64 `json:"out_rate"`
	DropRate float64 `json:"drop_rate"`

	Policy         string           `json:"policy,omitempty"`
	Capacity       int              `json:"capacity"`
	Queued         int              `json:"queued"`
	QueueHighWater int              `json:"queue_high_water"`
	Dropped        int64            `json:"dropped"`
	DroppedBy      map[string]int64 `json:"dropped_by,omitempty"`
	Spilled        int64            `json:"spilled"`
	SpillPending   int64            `json:"spill_pending"`
	// BlockedMS is the time the task's instances spent without credit to
	// send, in total; BlockedShare the share of the last interval they
	// spent so (0 to 1, averaged over instances); Backpressured how many
	// instances are without credit now.
	BlockedMS     float64 `json:"blocked_ms"`
	BlockedShare  float64 `json:"blocked_share"`
	Backpressured int     `json:"backpressured"`

	DeadLettered int64      `json:"dead_lettered"`
	Late         int64      `json:"late"`
	Watermark    *time.Time `json:"watermark,omitempty"`
	// TracesURL searches Jaeger for the operator's spans; empty when the
	// dashboard has no JaegerURL.
	TracesURL string `json:"traces_url,omitempty"`
}

// sample is one reading of a job's statistics.
type sample struct {
	at    time.Time
	stats []actors.OperatorStats
	cp    operators.CheckpointStats
	// done is set once the job has ended; err is its outcome.
	done    bool
	err     error
	elapsed time.Duration
}

// jobInfo is what stays the same over a job's life.
type jobInfo struct {
	id    string
	name  string
	graph Graph
}

// buildJob turns two successive samples of a job into its snapshot: the
// counters of cur, and rates over the time from prev to cur. prev may be
// nil (no rates yet), and so it is when the job had already ended at prev:
// a finished job has no rates.
func buildJob(info jobInfo, prev *sample, cur sample, links traceLinks) Job {
	j := Job{
		ID:        info.id,
		Name:      info.name,
		State:     StateRunning,
		ElapsedMS: cur.elapsed.Milliseconds(),
		Restarts:  cur.cp.Restarts,
		Graph:     info.graph,
		Checkpoints: Checkpoints{
			Completed:      cur.cp.Completed,
			Failed:         cur.cp.Failed,
			LastID:         cur.cp.LastID,
			LastDurationMS: ms(cur.cp.LastDuration),
			AgeMS:          -1,
			RestoredFrom:   cur.cp.RestoredFrom,
			TimedOut:       cur.cp.TimedOut,
			LastFailure:    cur.cp.LastFailure,
			InProgress:     len(cur.cp.InProgress),
			OldestSinceMS:  -1,
		},
	}
	if len(cur.cp.InProgress) > 0 {
		o := cur.cp.InProgress[0]
		j.Checkpoints.OldestID, j.Checkpoints.OldestAcked, j.Checkpoints.OldestPending = o.ID, len(o.Acked), o.Pending
		j.Checkpoints.OldestSinceMS = max(cur.at.Sub(o.Started).Milliseconds(), 0)
	}
	if cur.done {
		j.State = StateFinished
		if cur.err != nil {
			j.State, j.Error = StateFailed, cur.err.Error()
		}
	}
	if !cur.cp.LastTime.IsZero() {
		t := cur.cp.LastTime
		j.Checkpoints.LastTime = &t
		j.Checkpoints.AgeMS = max(cur.at.Sub(t).Milliseconds(), 0)
	}
	var dt time.Duration
	before := map[string]actors.OperatorStats{}
	if prev != nil && !prev.done {
		dt = cur.at.Sub(prev.at)
		for _, s := range prev.stats {
			before[s.Name] = s
		}
	}
	heads := map[int]bool{}
	for _, s := range cur.stats {
		op := Operator{
			Name: s.Name, Kind: s.Kind, Task: s.Task, Parallelism: s.Parallelism,
			Head: !heads[s.Task],
			In:   s.In, Out: s.Out,
			Policy: s.Policy, Capacity: s.Capacity, Queued: s.Queued, QueueHighWater: s.QueueHighWater,
			Dropped: s.Dropped, DroppedBy: maps.Clone(s.DroppedBy), Spilled: s.Spilled, SpillPending: s.SpillPending,
			BlockedMS: ms(s.Blocked), Backpressured: s.Backpressured,
			DeadLettered: s.DeadLettered, Late: s.Late,
			TracesURL: links.url(s.Name),
		}
		heads[s.Task] = true
		if !s.Watermark.IsZero() {
			w := s.Watermark
			op.Watermark = &w
		}
		if p, ok := before[s.Name]; ok && dt > 0 {
			op.InRate = rate(p.In, s.In, dt)
			op.OutRate = rate(p.Out, s.Out, dt)
			op.DropRate = rate(p.Dropped, s.Dropped, dt)
			if s.Parallelism > 0 {
				op.BlockedShare = round3(min(max(float64(s.Blocked-p.Blocked)/float64(dt)/float64(s.Parallelism), 0), 1))
			}
		}
		j.Operators = append(j.Operators, op)
	}
	return j
}

// rate is the change from a to b per second over dt. A counter that went
// down (instances started afresh by a restart) gives 0, not a negative rate.
func rate(a, b int64, dt time.Duration) float64 {
	if dt <= 0 || b < a {
		return 0
	}
	return round3(float64(b-a) / dt.Seconds())
}

// round3 keeps three decimals: enough for the page, and a shorter JSON.
func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

func ms(d time.Duration) float64 { return round3(float64(d) / float64(time.Millisecond)) }

// traceLinks builds the Jaeger search links of one job's operators. sluice
// names each span after its operator and tags it with sluice.topology, so a
// search by service and operation, narrowed to the topology, finds them.
type traceLinks struct {
	base     string // Jaeger UI, without a trailing slash; empty: no links
	service  string
	topology string
}

func (l traceLinks) url(operator string) string {
	if l.base == "" {
		return ""
	}
	tags, _ := json.Marshal(map[string]string{"sluice.topology": l.topology})
	q := url.Values{
		"service":   {l.service},
		"operation": {operator},
		"tags":      {string(tags)},
		"limit":     {"20"},
	}
	return strings.TrimRight(l.base, "/") + "/search?" + q.Encode()
}
