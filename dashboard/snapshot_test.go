package dashboard

import (
	"encoding/json"
	"errors"
	"math"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func opNamed(t *testing.T, j Job, name string) Operator {
	t.Helper()
	for _, op := range j.Operators {
		if op.Name == name {
			return op
		}
	}
	t.Fatalf("job %s has no operator %q", j.Name, name)
	return Operator{}
}

// Rates are the change of each counter between two samples, per second of
// the time between them.
func TestRatesFromTwoSamples(t *testing.T) {
	prev := sample{at: t0, stats: []actors.OperatorStats{
		{Name: "src", Kind: "source", Task: 0, Parallelism: 1, Out: 1000},
		{Name: "sink", Kind: "sink", Task: 1, Parallelism: 2, In: 100, Dropped: 10, Blocked: 100 * time.Millisecond},
	}}
	cur := sample{at: t0.Add(500 * time.Millisecond), elapsed: 3 * time.Second, stats: []actors.OperatorStats{
		{Name: "src", Kind: "source", Task: 0, Parallelism: 1, Out: 2500},
		{Name: "sink", Kind: "sink", Task: 1, Parallelism: 2, In: 600, Out: 0, Dropped: 50,
			DroppedBy: map[string]int64{"evicted": 50}, Blocked: 350 * time.Millisecond, Backpressured: 1,
			Policy: "drop-oldest", Capacity: 2048, Queued: 1024, QueueHighWater: 1024},
	}}
	j := buildJob(jobInfo{id: "1", name: "j"}, &prev, cur, traceLinks{})
	src, sink := opNamed(t, j, "src"), opNamed(t, j, "sink")
	if !near(src.OutRate, 3000) || src.InRate != 0 {
		t.Errorf("src rates in %v out %v, want 0 and 3000/s", src.InRate, src.OutRate)
	}
	if !near(sink.InRate, 1000) || !near(sink.DropRate, 80) {
		t.Errorf("sink rates in %v drop %v, want 1000/s and 80/s", sink.InRate, sink.DropRate)
	}
	// 250 ms without credit over 500 ms, for 2 instances: a quarter.
	if !near(sink.BlockedShare, 0.25) || !near(sink.BlockedMS, 350) || sink.Backpressured != 1 {
		t.Errorf("sink back-pressure share %v, total %v ms, now %d", sink.BlockedShare, sink.BlockedMS, sink.Backpressured)
	}
	if !src.Head || !sink.Head || sink.Queued != 1024 || sink.Capacity != 2048 || sink.DroppedBy["evicted"] != 50 {
		t.Errorf("counters not carried over: %+v", sink)
	}
	if j.State != StateRunning || j.ElapsedMS != 3000 || j.Checkpoints.AgeMS != -1 {
		t.Errorf("job %+v", j)
	}
}

func TestNoRatesWithoutTwoLiveSamples(t *testing.T) {
	cur := sample{at: t0.Add(time.Second), stats: []actors.OperatorStats{{Name: "a", Task: 0, Parallelism: 1, In: 10, Out: 10}}}
	if op := buildJob(jobInfo{}, nil, cur, traceLinks{}).Operators[0]; op.InRate != 0 || op.In != 10 {
		t.Errorf("first sample: %+v, want counters and no rates", op)
	}
	// A counter that went down (a restart started the instances afresh).
	prev := sample{at: t0, stats: []actors.OperatorStats{{Name: "a", Task: 0, Parallelism: 1, In: 500}}}
	if op := buildJob(jobInfo{}, &prev, cur, traceLinks{}).Operators[0]; op.InRate != 0 {
		t.Errorf("after a reset: in rate %v, want 0", op.InRate)
	}
	// A job already ended at the previous sample has no rates.
	prev = sample{at: t0, done: true, stats: []actors.OperatorStats{{Name: "a", Task: 0, Parallelism: 1, In: 0}}}
	cur.done = true
	if op := buildJob(jobInfo{}, &prev, cur, traceLinks{}).Operators[0]; op.InRate != 0 {
		t.Errorf("ended job: in rate %v, want 0", op.InRate)
	}
	// Same time twice: no division by zero.
	prev = sample{at: cur.at, stats: []actors.OperatorStats{{Name: "a", Task: 0, Parallelism: 1}}}
	cur.done = false
	if op := buildJob(jobInfo{}, &prev, cur, traceLinks{}).Operators[0]; op.InRate != 0 {
		t.Errorf("zero interval: in rate %v, want 0", op.InRate)
	}
}

func TestJobStateAndCheckpoints(t *testing.T) {
	cp := operators.CheckpointStats{Completed: 7, Failed: 1, LastID: 9, LastDuration: 1500 * time.Microsecond,
		LastTime: t0, RestoredFrom: 2, Restarts: 3, TimedOut: 1, LastFailure: "timed out after 1s",
		InProgress: []operators.InProgressCheckpoint{{ID: 10, Started: t0.Add(500 * time.Millisecond), Acked: []int{0, 2}, Pending: 1}, {ID: 11, Started: t0.Add(time.Second)}},
		History: []operators.CompletedCheckpoint{{ID: 8, Time: t0.Add(-time.Second), Duration: time.Millisecond, Size: 100, Instances: 3},
			{ID: 9, Time: t0, Duration: 1500 * time.Microsecond, Size: 120, Instances: 3}},
		RestartCauses: []operators.RestartCause{{Time: t0, Err: "operator \"parse\": first", Delay: 10 * time.Millisecond}}}
	cur := sample{at: t0.Add(2 * time.Second), cp: cp, done: true, err: errors.New("operator \"parse\": boom"),
		dead: []operators.DeadLetterInfo{{Seq: 4, Operator: "w", Instance: 0, Error: "bad", Attempts: 3, Time: t0},
			{Seq: 5, Operator: "w", Instance: 1, Error: "worse", Attempts: 3, Time: t0}},
		stats: []actors.OperatorStats{
			{Name: "src", Task: 0, Parallelism: 1},
			{Name: "parse", Task: 0, Parallelism: 1},
			{Name: "w", Task: 1, Parallelism: 1, Watermark: t0, Late: 4, DeadLettered: 2},
		}}
	j := buildJob(jobInfo{id: "4", name: "orders"}, nil, cur, traceLinks{})
	if j.State != StateFailed || !strings.Contains(j.Error, "boom") || j.Restarts != 3 {
		t.Errorf("state %q error %q restarts %d", j.State, j.Error, j.Restarts)
	}
	want := Checkpoints{Completed: 7, Failed: 1, LastID: 9, LastDurationMS: 1.5, AgeMS: 2000, RestoredFrom: 2,
		TimedOut: 1, LastFailure: "timed out after 1s", InProgress: 2, OldestID: 10, OldestSinceMS: 1500, OldestAcked: 2, OldestPending: 1}
	got := j.Checkpoints
	got.LastTime = nil
	// History newest first; in progress oldest first.
	if h := got.History; len(h) != 2 || h[0] != (CheckpointRow{ID: 9, Time: t0, DurationMS: 1.5, Size: 120, States: 3}) || h[1].ID != 8 {
		t.Errorf("history %+v", h)
	}
	if p := got.Pending; len(p) != 2 || p[0] != (Pending{ID: 10, SinceMS: 1500, Acked: 2, Waiting: 1}) || p[1].ID != 11 || p[1].SinceMS != 1000 {
		t.Errorf("in progress %+v", p)
	}
	got.History, got.Pending = nil, nil
	ex := j.Exceptions
	if !strings.Contains(ex.Error, "boom") || len(ex.Restarts) != 1 || ex.Restarts[0].Error != "operator \"parse\": first" ||
		ex.Restarts[0].DelayMS != 10 || ex.CheckpointFailure != "timed out after 1s" || ex.DeadLetters["w"] != 2 || len(ex.DeadLetters) != 1 {
		t.Errorf("exceptions %+v", ex)
	}
	if r := ex.Recent; len(r) != 2 || r[0] != (DeadLetter{Seq: 5, Operator: "w", Instance: 1, Error: "worse", Attempts: 3, Time: t0}) || r[1].Seq != 4 {
		t.Errorf("recent dead letters %+v, want newest first", r)
	}
	if !reflect.DeepEqual(got, want) || j.Checkpoints.LastTime == nil || !j.Checkpoints.LastTime.Equal(t0) {
		t.Errorf("checkpoints %+v, want %+v with last time %v", j.Checkpoints, want, t0)
	}
	if opNamed(t, j, "parse").Head || !opNamed(t, j, "src").Head {
		t.Error("only the first operator of a task is its head")
	}
	w := opNamed(t, j, "w")
	if w.Watermark == nil || !w.Watermark.Equal(t0) || w.Late != 4 || w.DeadLettered != 2 {
		t.Errorf("w: %+v", w)
	}
	cur.err = nil
	if j := buildJob(jobInfo{}, nil, cur, traceLinks{}); j.State != StateFinished || j.Error != "" {
		t.Errorf("ended without error: state %q error %q", j.State, j.Error)
	}
}

// The JSON the page reads: its field names are the contract with app.js.
func TestSnapshotJSONFields(t *testing.T) {
	cur := sample{at: t0, stats: []actors.OperatorStats{{Name: "a", Kind: "map", Task: 0, Parallelism: 1}},
		insts: []operators.InstanceStats{{Task: 0, Instance: 0, In: []int64{1}, Out: []int64{1}}}}
	snap := Snapshot{Seq: 3, Time: t0, IntervalMS: 500, Jobs: []Job{buildJob(jobInfo{id: "1", name: "j",
		graph: layout([]operators.Task{{ID: 0, Operators: []string{"a"}, Kinds: []string{"map"}, Parallelism: 1}}, nil)},
		nil, cur, traceLinks{})}}
	data, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	job := m["jobs"].([]any)[0].(map[string]any)
	for _, k := range []string{"id", "name", "state", "elapsed_ms", "restarts", "checkpoints", "graph", "operators", "exceptions"} {
		if _, ok := job[k]; !ok {
			t.Errorf("job lacks %q: %s", k, data)
		}
	}
	op := job["operators"].([]any)[0].(map[string]any)
	for _, k := range []string{"name", "kind", "task", "parallelism", "head", "in", "out", "in_rate", "out_rate", "drop_rate",
		"capacity", "queued", "queue_high_water", "dropped", "spilled", "spill_pending", "blocked_ms", "blocked_share",
		"backpressured", "dead_lettered", "late", "busy", "blocked", "idle", "instances", "skew"} {
		if _, ok := op[k]; !ok {
			t.Errorf("operator lacks %q: %s", k, data)
		}
	}
	in := op["instances"].([]any)[0].(map[string]any)
	for _, k := range []string{"index", "in", "out", "in_rate", "out_rate", "queued", "capacity", "dropped", "backpressured", "busy", "blocked", "idle"} {
		if _, ok := in[k]; !ok {
			t.Errorf("instance lacks %q: %s", k, data)
		}
	}
	for _, k := range []string{"history", "pending"} {
		if _, ok := job["checkpoints"].(map[string]any)[k]; !ok {
			t.Errorf("checkpoints lack %q: %s", k, data)
		}
	}
	if _, ok := job["exceptions"].(map[string]any)["restarts"]; !ok {
		t.Errorf("exceptions lack restarts: %s", data)
	}
	for _, k := range []string{"watermark", "traces_url", "dropped_by"} {
		if _, ok := op[k]; ok {
			t.Errorf("operator has %q though it is unset: %s", k, data)
		}
	}
	task := job["graph"].(map[string]any)["tasks"].([]any)[0].(map[string]any)
	for _, k := range []string{"id", "operators", "kinds", "parallelism", "depth", "mailbox", "x", "y", "w", "h"} {
		if _, ok := task[k]; !ok {
			t.Errorf("task lacks %q: %s", k, data)
		}
	}
}

func TestTraceLinks(t *testing.T) {
	l := traceLinks{base: "http://127.0.0.1:16686/", service: "sluice-wordcount", topology: "wordcount"}
	got := l.url("by word")
	u, err := url.Parse(got)
	if err != nil {
		t.Fatal(err)
	}
	if u.Scheme != "http" || u.Host != "127.0.0.1:16686" || u.Path != "/search" {
		t.Errorf("link %s: want http://127.0.0.1:16686/search?...", got)
	}
	q := u.Query()
	if q.Get("service") != "sluice-wordcount" || q.Get("operation") != "by word" || q.Get("tags") != `{"sluice.topology":"wordcount"}` {
		t.Errorf("link %s: query %v", got, q)
	}
	if (traceLinks{service: "s"}).url("x") != "" {
		t.Error("a link without a Jaeger URL")
	}
}

// Per instance: records and rates of each instance at the operator's
// position in its task, the busy / back-pressured / idle shares of the
// interval summing to 1, and the skewed operator's busiest instance marked.
func TestInstancesSharesAndSkew(t *testing.T) {
	ops := []actors.OperatorStats{
		{Name: "count", Kind: "count", Task: 1, Parallelism: 2},
		{Name: "fmt", Kind: "map", Task: 1, Parallelism: 2},
	}
	prev := sample{at: t0, stats: ops, insts: []operators.InstanceStats{
		{Task: 1, Instance: 0, In: []int64{0, 0}, Out: []int64{0, 0}, BusyKnown: true},
		{Task: 1, Instance: 1, In: []int64{0, 0}, Out: []int64{0, 0}, BusyKnown: true, Blocked: time.Second},
	}}
	cur := sample{at: t0.Add(time.Second), stats: ops, insts: []operators.InstanceStats{
		// Instance 0: 900 records, busy 600 ms, 100 ms without credit.
		{Task: 1, Instance: 0, In: []int64{900, 900}, Out: []int64{900, 800}, BusyKnown: true, Busy: 600 * time.Millisecond,
			Blocked: 100 * time.Millisecond, Backpressured: true, Queued: 7, Capacity: 64},
		// Instance 1: 100 records, busy 50 ms.
		{Task: 1, Instance: 1, In: []int64{100, 100}, Out: []int64{100, 90}, BusyKnown: true, Busy: 50 * time.Millisecond,
			Blocked: time.Second},
	}}
	j := buildJob(jobInfo{}, &prev, cur, traceLinks{})
	count, fm := opNamed(t, j, "count"), opNamed(t, j, "fmt")
	if len(count.Instances) != 2 || len(fm.Instances) != 2 {
		t.Fatalf("instances: count %+v, fmt %+v", count.Instances, fm.Instances)
	}
	i0, i1 := count.Instances[0], count.Instances[1]
	if i0.In != 900 || !near(i0.InRate, 900) || i0.Queued != 7 || !i0.Backpressured || !near(i0.Busy, 0.6) || !near(i0.Blocked, 0.1) || !near(i0.Idle, 0.3) {
		t.Errorf("instance 0: %+v", i0)
	}
	if !near(i1.Busy, 0.05) || i1.Blocked != 0 || !near(i1.Idle, 0.95) {
		t.Errorf("instance 1: %+v", i1)
	}
	for _, in := range count.Instances {
		if !near(in.Busy+in.Blocked+in.Idle, 1) {
			t.Errorf("instance %d: shares %v + %v + %v do not sum to 1", in.Index, in.Busy, in.Blocked, in.Idle)
		}
	}
	if !near(count.Busy, 0.325) || !near(count.Blocked, 0.05) || !near(count.Idle, 0.625) {
		t.Errorf("count: busy %v blocked %v idle %v", count.Busy, count.Blocked, count.Idle)
	}
	// 900 of 1000 records on one of two instances: 1.8 times the mean.
	if !near(count.Skew, 1.8) || !i0.Hot || i1.Hot {
		t.Errorf("skew %v, hot %v %v", count.Skew, i0.Hot, i1.Hot)
	}
	// The second operator of the chain: its own counters, no mailbox.
	if f := fm.Instances[0]; f.Out != 800 || !near(f.OutRate, 800) || f.Queued != 0 || f.Busy != -1 || fm.Busy != -1 {
		t.Errorf("fmt instance 0: %+v (op busy %v)", f, fm.Busy)
	}
	// Without a previous sample: no shares, skew from the totals.
	j = buildJob(jobInfo{}, nil, cur, traceLinks{})
	if c := opNamed(t, j, "count"); c.Busy != -1 || c.Instances[0].Busy != -1 || !near(c.Skew, 1.8) {
		t.Errorf("first sample: busy %v, skew %v", c.Busy, c.Skew)
	}
}
