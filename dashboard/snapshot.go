package dashboard

import (
	"encoding/json"
	"maps"
	"math"
	"net/url"
	"strings"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/engine"
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
	// Process is the dashboard's process: memory, GC, goroutines, CPU.
	Process Process `json:"process"`
	// ProcessPoint is the newest point of the process's charts;
	// ProcessHistory the points of the last Options.History, oldest first,
	// only in the page's first frame and /snapshot.json (the stream sends
	// the newest point of each snapshot, which the page appends).
	ProcessPoint   *ProcPoint  `json:"process_point,omitempty"`
	ProcessHistory []ProcPoint `json:"process_history,omitempty"`
	// Controls is true when the dashboard serves the admin API under
	// admin/ (Options.Admin): the page then shows its controls.
	Controls bool `json:"controls"`
	// Traces is true when the dashboard reads traces from Jaeger
	// (Options.JaegerQueryURL): the page then offers to find one.
	Traces bool `json:"traces"`
}

// ProcPoint is one point of the process's charts.
type ProcPoint struct {
	T          int64   `json:"t"` // Unix milliseconds
	HeapBytes  uint64  `json:"heap"`
	CPU        float64 `json:"cpu"`
	Goroutines uint64  `json:"goroutines"`
	GCPauseMS  float64 `json:"gc_pause_ms"`
}

// Point is one point of a job's charts: per operator, in the order of
// Job.Operators, its rates, queue, back-pressured share, watermark lag and
// latency p99.
type Point struct {
	T   int64     `json:"t"` // Unix milliseconds
	Ops []OpPoint `json:"ops"`
}

// OpPoint is one operator's figures in a Point. Lag and latency are in
// milliseconds, -1 when not measured; the latency is the end-to-end p99 at
// a sink, the queue wait's p99 at a task's first operator (over the latest
// latency window).
type OpPoint struct {
	InRate  float64 `json:"in"`
	OutRate float64 `json:"out"`
	Queued  int     `json:"q"`
	Blocked float64 `json:"bp"`
	LagMS   float64 `json:"lag"`
	P50MS   float64 `json:"p50"`
	P99MS   float64 `json:"p99"`
}

// Series are a job's points over the last Options.History, oldest first.
type Series struct {
	Operators []string `json:"operators"` // the names, in the order of each point's Ops
	Points    []Point  `json:"points"`
}

// JobConfig is a job's configuration: its physical plan, its inputs (policy
// and capacity now: they may change while the job runs), its checkpoint and
// restart settings.
type JobConfig struct {
	Plan               string        `json:"plan"`
	BatchSize          int           `json:"batch_size"`
	Capacity           int           `json:"capacity"`
	CheckpointInterval string        `json:"checkpoint_interval"` // "" without checkpoints
	CheckpointMode     string        `json:"checkpoint_mode,omitempty"`
	CheckpointTimeout  string        `json:"checkpoint_timeout,omitempty"`
	MaxConcurrent      int           `json:"max_concurrent,omitempty"`
	MinPause           string        `json:"min_pause,omitempty"`
	CheckpointStore    string        `json:"checkpoint_store,omitempty"`
	Savepoint          string        `json:"savepoint,omitempty"`
	DeadLetters        string        `json:"dead_letters,omitempty"`
	Restart            string        `json:"restart,omitempty"`
	Distributed        bool          `json:"distributed"`
	LatencyWindow      string        `json:"latency_window,omitempty"` // "" when latency is not measured
	LatencyTarget      string        `json:"latency_target,omitempty"`
	Inputs             []InputConfig `json:"inputs"`
}

// InputConfig is one task's input, on its first operator.
type InputConfig struct {
	Operator    string   `json:"operator"`
	Fused       []string `json:"fused,omitempty"`
	Parallelism int      `json:"parallelism"`
	Source      bool     `json:"source"`
	Paused      bool     `json:"paused,omitempty"`
	Policy      string   `json:"policy,omitempty"`
	Capacity    int      `json:"capacity,omitempty"`
	// Live: the input can change while the job runs (Why says why not).
	Live bool   `json:"live"`
	Why  string `json:"why,omitempty"`
}

// Pct are latency percentiles in milliseconds over Count records.
type Pct struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50"`
	P95   float64 `json:"p95"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

func pctOf(p actors.Percentiles) *Pct {
	if p.Count == 0 {
		return nil
	}
	return &Pct{Count: p.Count, P50: ms(p.P50), P95: ms(p.P95), P99: ms(p.P99), Max: ms(p.Max)}
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
	Exceptions  Exceptions  `json:"exceptions"`
	Config      JobConfig   `json:"config"`
	// Point is the newest point of the job's charts; History the points
	// of the last Options.History, only in the first frame and
	// /snapshot.json.
	Point   *Point  `json:"point,omitempty"`
	History *Series `json:"history,omitempty"`
}

// Exceptions are what went wrong in a job: the failure that ended it, the
// failures that made it restart (newest last, up to 64), the newest failed
// checkpoint, and the records given to the dead-letter store, by operator.
type Exceptions struct {
	Error             string           `json:"error,omitempty"`
	Restarts          []Restart        `json:"restarts"`
	CheckpointFailure string           `json:"checkpoint_failure,omitempty"`
	DeadLetters       map[string]int64 `json:"dead_letters,omitempty"`
	// Recent are the newest dead letters (up to 64), newest first.
	Recent []DeadLetter `json:"recent_dead_letters"`
}

// DeadLetter is a record given up: its sequence number in the dead-letter
// store (`sluice deadletters` reads, replays and purges it), the operator
// instance, the failure, the attempts, when.
type DeadLetter struct {
	Seq      uint64    `json:"seq"`
	Operator string    `json:"operator"`
	Instance int       `json:"instance"`
	Error    string    `json:"error"`
	Attempts int       `json:"attempts"`
	Time     time.Time `json:"time"`
}

// Restart is one restart of a job: when, why, after what backoff.
type Restart struct {
	Time    time.Time `json:"time"`
	Error   string    `json:"error"`
	DelayMS float64   `json:"delay_ms"`
}

// CheckpointRow is one completed checkpoint of Checkpoints.History.
type CheckpointRow struct {
	ID         uint64    `json:"id"`
	Time       time.Time `json:"time"`
	DurationMS float64   `json:"duration_ms"`
	// Size is the bytes of operator state stored; States how many instance
	// states.
	Size   int64 `json:"size"`
	States int   `json:"states"`
}

// Pending is one checkpoint in progress: since when, and how many
// instances acknowledged it and have yet to.
type Pending struct {
	ID      uint64 `json:"id"`
	SinceMS int64  `json:"since_ms"`
	Acked   int    `json:"acked"`
	Waiting int    `json:"waiting"`
}

// Instance is one instance (subtask) of an operator: its records, and for
// the first operator of a task its mailbox and how it spent the last
// interval.
type Instance struct {
	Index         int     `json:"index"`
	Host          string  `json:"host,omitempty"` // "" in the dashboard's process
	In            int64   `json:"in"`
	Out           int64   `json:"out"`
	InRate        float64 `json:"in_rate"`
	OutRate       float64 `json:"out_rate"`
	Queued        int     `json:"queued"`
	Capacity      int     `json:"capacity"`
	Dropped       int64   `json:"dropped"`
	Backpressured bool    `json:"backpressured"`
	// Shares of the last interval, 0 to 1, summing to 1: handling batches
	// (busy), waiting for credit to send (back-pressured), the rest (idle).
	// Busy and idle are -1 when not measured (NoLatencyStats, or an
	// instance in another process) or without two samples yet.
	Busy      float64    `json:"busy"`
	Blocked   float64    `json:"blocked"`
	Idle      float64    `json:"idle"`
	Watermark *time.Time `json:"watermark,omitempty"`
	// Hot marks the instance that takes the most records of a skewed
	// operator (Operator.Skew).
	Hot bool `json:"hot,omitempty"`
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
	// History are the newest completed checkpoints (up to 64), newest
	// first; Pending those in progress, oldest first.
	History []CheckpointRow `json:"history"`
	Pending []Pending       `json:"pending"`
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

	// Busy, Blocked and Idle are the shares of the last interval the
	// task's instances spent handling batches, back-pressured and idle (0
	// to 1, averaged over the instances, summing to 1; Busy and Idle -1
	// when not measured), on the first operator of a task.
	Busy    float64 `json:"busy"`
	Blocked float64 `json:"blocked"`
	Idle    float64 `json:"idle"`
	// Instances are the operator's instances, in order; Skew is the
	// records of its busiest instance over the mean of them all (1: even),
	// over the last interval (or in total, without rates yet); 0 with one
	// instance or no records.
	Instances []Instance `json:"instances"`
	Skew      float64    `json:"skew"`

	// Latency over the latest latency window (one second by default), nil
	// when nothing was measured: the queue wait and the processing of the
	// task's chain on its first operator, end to end (from ingestion at a
	// source) on a sink. LagMS is the event-time lag (processing time −
	// watermark), -1 before the first watermark.
	QueueWait  *Pct    `json:"queue_wait,omitempty"`
	Processing *Pct    `json:"processing,omitempty"`
	EndToEnd   *Pct    `json:"end_to_end,omitempty"`
	LagMS      float64 `json:"lag_ms"`
	// Shed counts what a LatencyTarget shed from the operator's output;
	// SampleRate is the share it keeps now (1: sheds nothing).
	Shed       int64   `json:"shed"`
	SampleRate float64 `json:"sample_rate"`
}

// SkewThreshold is the Operator.Skew from which the page highlights an
// operator's busiest instance.
const SkewThreshold = 1.5

// sample is one reading of a job's statistics.
type sample struct {
	at    time.Time
	stats []actors.OperatorStats
	insts []operators.InstanceStats
	dead  []operators.DeadLetterInfo
	cp    operators.CheckpointStats
	ins   []engine.InputInfo
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
	cfg   JobConfig // without its inputs, which buildJob adds from the sample
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
		Config:    info.cfg,
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
			History:        []CheckpointRow{},
			Pending:        []Pending{},
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
	byTask := map[int][]operators.InstanceStats{}
	for _, is := range cur.insts {
		byTask[is.Task] = append(byTask[is.Task], is)
	}
	prevInst := map[[2]int]operators.InstanceStats{}
	if dt > 0 {
		for _, is := range prev.insts {
			prevInst[[2]int{is.Task, is.Instance}] = is
		}
	}
	pos := map[int]int{} // the next operator's position in its task's chain
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
			QueueWait: pctOf(s.LatencyWindow.QueueWait), Processing: pctOf(s.LatencyWindow.Processing),
			EndToEnd: pctOf(s.LatencyWindow.EndToEnd), LagMS: -1, Shed: s.Shed, SampleRate: s.SampleRate,
		}
		if !s.Watermark.IsZero() {
			op.LagMS = ms(s.EventTimeLag)
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
		instances(&op, byTask[s.Task], pos[s.Task], prevInst, dt)
		pos[s.Task]++
		j.Operators = append(j.Operators, op)
	}
	j.Config.Inputs = []InputConfig{}
	for _, in := range cur.ins {
		ic := InputConfig{Operator: in.Operator, Fused: in.Fused, Parallelism: in.Parallelism, Source: in.Source,
			Paused: in.Paused, Live: in.Live, Why: in.Why}
		if !in.Source {
			ic.Policy, ic.Capacity = in.Config.Overflow.String(), in.Config.Capacity
		}
		j.Config.Inputs = append(j.Config.Inputs, ic)
	}
	for i := len(cur.cp.History) - 1; i >= 0; i-- {
		h := cur.cp.History[i]
		j.Checkpoints.History = append(j.Checkpoints.History,
			CheckpointRow{ID: h.ID, Time: h.Time, DurationMS: ms(h.Duration), Size: h.Size, States: h.Instances})
	}
	for _, p := range cur.cp.InProgress {
		j.Checkpoints.Pending = append(j.Checkpoints.Pending,
			Pending{ID: p.ID, SinceMS: max(cur.at.Sub(p.Started).Milliseconds(), 0), Acked: len(p.Acked), Waiting: p.Pending})
	}
	j.Exceptions = Exceptions{Error: j.Error, Restarts: []Restart{}, CheckpointFailure: cur.cp.LastFailure, Recent: []DeadLetter{}}
	for i := len(cur.dead) - 1; i >= 0; i-- {
		d := cur.dead[i]
		j.Exceptions.Recent = append(j.Exceptions.Recent,
			DeadLetter{Seq: d.Seq, Operator: d.Operator, Instance: d.Instance, Error: d.Error, Attempts: d.Attempts, Time: d.Time})
	}
	for _, r := range cur.cp.RestartCauses {
		j.Exceptions.Restarts = append(j.Exceptions.Restarts, Restart{Time: r.Time, Error: r.Err, DelayMS: ms(r.Delay)})
	}
	for _, op := range j.Operators {
		if op.DeadLettered > 0 {
			if j.Exceptions.DeadLetters == nil {
				j.Exceptions.DeadLetters = map[string]int64{}
			}
			j.Exceptions.DeadLetters[op.Name] = op.DeadLettered
		}
	}
	return j
}

// instances fills in op's instances from those of its task (op is at
// position pos of the task's chain), with rates and shares of time over dt
// from their previous readings, and its skew.
func instances(op *Operator, insts []operators.InstanceStats, pos int, prev map[[2]int]operators.InstanceStats, dt time.Duration) {
	op.Busy, op.Blocked, op.Idle = -1, -1, -1
	op.Instances = []Instance{}
	var busySum, blockedSum float64
	var busyN, blockedN int
	for _, is := range insts {
		in := Instance{Index: is.Instance, Host: is.Host, Busy: -1, Blocked: -1, Idle: -1}
		if pos < len(is.In) {
			in.In, in.Out = is.In[pos], is.Out[pos]
		}
		if op.Head {
			in.Queued, in.Capacity, in.Dropped, in.Backpressured = is.Queued, is.Capacity, is.Dropped, is.Backpressured
			if !is.Watermark.IsZero() {
				w := is.Watermark
				in.Watermark = &w
			}
		}
		if p, ok := prev[[2]int{is.Task, is.Instance}]; ok && dt > 0 {
			if pos < len(p.In) {
				in.InRate, in.OutRate = rate(p.In[pos], in.In, dt), rate(p.Out[pos], in.Out, dt)
			}
			if op.Head {
				blocked := share(is.Blocked-p.Blocked, dt)
				busy := -1.0
				if is.BusyKnown && p.BusyKnown {
					busy = share(is.Busy-p.Busy, dt)
					if busy+blocked > 1 { // clock skew between the two readings
						busy = 1 - blocked
					}
				}
				in.Blocked = blocked
				blockedSum += blocked
				blockedN++
				if busy >= 0 {
					in.Busy, in.Idle = round3(busy), round3(max(1-busy-blocked, 0))
					busySum += busy
					busyN++
				}
			}
		}
		op.Instances = append(op.Instances, in)
	}
	if blockedN > 0 {
		op.Blocked = round3(blockedSum / float64(blockedN))
	}
	if busyN > 0 && busyN == blockedN {
		op.Busy = round3(busySum / float64(busyN))
		op.Idle = round3(max(1-op.Busy-op.Blocked, 0))
	}
	// Skew: over the interval's rates when there are some, else totals.
	n := len(op.Instances)
	if n < 2 {
		return
	}
	val := func(in Instance) float64 { return in.InRate }
	var sum float64
	for _, in := range op.Instances {
		sum += in.InRate
	}
	if sum == 0 {
		val = func(in Instance) float64 { return float64(in.In) }
		for _, in := range op.Instances {
			sum += float64(in.In)
		}
	}
	if sum == 0 {
		return
	}
	hot := 0
	for i, in := range op.Instances {
		if val(in) > val(op.Instances[hot]) {
			hot = i
		}
	}
	op.Skew = round3(val(op.Instances[hot]) / (sum / float64(n)))
	if op.Skew >= SkewThreshold {
		op.Instances[hot].Hot = true
	}
}

// share is d as a share of dt, from 0 to 1, to three decimals.
func share(d, dt time.Duration) float64 {
	if dt <= 0 {
		return 0
	}
	return round3(min(max(float64(d)/float64(dt), 0), 1))
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

// configOf reads the settings of run that do not change while it runs.
func configOf(run *actors.Run) JobConfig {
	c := JobConfig{Inputs: []InputConfig{}}
	if p := operators.PlanOf(run); p != nil {
		c.Plan = p.String()
	}
	st, ok := engine.SettingsOf(run)
	if !ok {
		return c
	}
	dur := func(d time.Duration) string {
		if d <= 0 {
			return ""
		}
		return d.String()
	}
	c.BatchSize, c.Capacity = st.BatchSize, st.Capacity
	if st.CheckpointInterval > 0 {
		c.CheckpointInterval = st.CheckpointInterval.String()
		c.CheckpointMode = "aligned"
		switch {
		case st.Unaligned:
			c.CheckpointMode = "unaligned"
		case st.AlignmentTimeout > 0:
			c.CheckpointMode = "aligned, unaligned after " + st.AlignmentTimeout.String()
		}
		c.CheckpointTimeout, c.MaxConcurrent, c.MinPause = dur(st.CheckpointTimeout), st.MaxConcurrent, dur(st.MinPause)
		c.CheckpointStore = st.CheckpointStore
	}
	c.Savepoint, c.DeadLetters, c.Restart, c.Distributed = st.Savepoint, st.DeadLetters, st.Restart, st.Distributed
	if st.LatencyMeasured {
		c.LatencyWindow = st.LatencyWindow.String()
	}
	c.LatencyTarget = dur(st.LatencyTarget)
	return c
}

// pointOf is the chart point of a job's snapshot.
func pointOf(j Job, at time.Time) Point {
	p := Point{T: at.UnixMilli(), Ops: make([]OpPoint, 0, len(j.Operators))}
	for _, op := range j.Operators {
		o := OpPoint{InRate: op.InRate, OutRate: op.OutRate, Queued: op.Queued, Blocked: max(op.BlockedShare, op.Blocked),
			LagMS: op.LagMS, P50MS: -1, P99MS: -1}
		lat := op.QueueWait
		if op.EndToEnd != nil {
			lat = op.EndToEnd
		}
		if lat != nil {
			o.P50MS, o.P99MS = lat.P50, lat.P99
		}
		p.Ops = append(p.Ops, o)
	}
	return p
}
