package clustertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
)

// HeldSource is Generate's numbers 0 .. N-1, held after Hold of them
// (split over the partitions) until Gate closes: a job cannot end before
// the test has done what it must do while the job runs (a kill, a pause, a
// cut), however fast the machine. A held source idles as a dry source
// does: checkpoints go on.
type HeldSource struct {
	N, Hold int64
	Gate    <-chan struct{}
}

// Open implements operators.SourceConnector.
func (s HeldSource) Open(ctx context.Context, part, parts int, offset int64) (operators.Reader[int64], error) {
	r, err := operators.Generate(s.N, func(i int64) int64 { return i }).Open(ctx, part, parts, offset)
	if err != nil {
		return nil, err
	}
	return &heldReader{Reader: r, hold: s.Hold / int64(parts), gate: s.Gate}, nil
}

type heldReader struct {
	operators.Reader[int64]
	hold int64 // records of this partition read before the gate
	gate <-chan struct{}
}

func (r *heldReader) Read(buf []int64) (int, error) {
	select {
	case <-r.gate:
		return r.Reader.Read(buf)
	default:
	}
	left := r.hold - r.Offset() // the offset counts the partition's records read
	if left <= 0 {
		return 0, nil // dry until the gate opens: Wait
	}
	return r.Reader.Read(buf[:min(int64(len(buf)), left)])
}

func (r *heldReader) Wait(ctx context.Context) error {
	select {
	case <-r.gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Key is the counting job's key of a number: k0 .. k22.
func Key(v int64) string { return "k" + strconv.Itoa(int(v*7%23)) }

// CountingJob counts the numbers 0 .. n-1 (held half way until gate
// closes) by Key; the counters (6 instances) are spread over the cluster,
// the sink stays on the coordinator and commits on checkpoints (exactly
// once) into dir/counts.
func CountingJob(n int64, dir string, gate <-chan struct{}) *operators.Topology {
	t := operators.NewTopology("counting", operators.Checkpoints(100*time.Millisecond), operators.BatchSize(256))
	src := operators.Source(t, "numbers", HeldSource{N: n, Hold: n / 2, Gate: gate})
	keys := operators.Map(src, "key", Key)
	by := operators.KeyBy(keys, "by-key", func(k string) string { return k }, operators.Parallelism(6))
	counts := operators.Count(by, "count", operators.Emit(operators.EmitAtEnd))
	CountsSink(counts, dir)
	return t
}

// CountsSink writes key=count lines into dir/counts, from one instance.
func CountsSink(counts operators.Stream[operators.KV[string, int64]], dir string) {
	operators.Sink(counts, "out", operators.File(filepath.Join(dir, "counts"), func(kv operators.KV[string, int64]) string {
		return fmt.Sprintf("%s=%d", kv.Key, kv.Value)
	}), operators.Parallelism(1))
}

// WantCounts is the plain loop's answer for n numbers, as Report prints it.
func WantCounts(n int64) string {
	m := map[string]int64{}
	for v := range n {
		m[Key(v)]++
	}
	var lines []string
	for k, c := range m {
		lines = append(lines, fmt.Sprintf("%s=%d", k, c))
	}
	sort.Strings(lines)
	return strings.Join(lines, ",")
}

// Report waits for a run's end, printing through say:
//
//	CHECKPOINT <id>              as checkpoints complete
//	CHECKPOINT-PENDING <id>      once, when one is in progress and none completed since
//	SOURCE-WAITING <out>         once, when source "numbers" ran out of credits
//	SLOW-DROPPING <dropped>      once, when operator "slow" dropped records
//	RUNEND <unix nanoseconds>    when its sources and sinks have stopped
//
// then JOBERROR <error>, or a STAT <name> <in> <out> <dropped> and a LAT
// <name> <queue waits> <their p99 ns> <end-to-end latencies> <their p99 ns>
// per operator, SOURCE-BLOCKED <n>, RESTARTS <n> <restored from> and RESULT <the sorted
// lines of dir/counts, joined by commas>.
func Report(run *actors.Run, dir string, say func(string, ...any)) {
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { done <- run.Wait(ctx) }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last uint64
	var waiting, dropping, pending bool
	for {
		select {
		case err := <-done:
			say("RUNEND %d", time.Now().UnixNano())
			if err != nil {
				say("JOBERROR %v", err)
				return
			}
			st := operators.CheckpointStatsOf(run)
			if st.LastID != last { // completed after the last tick
				say("CHECKPOINT %d", st.LastID)
			}
			b, err := os.ReadFile(filepath.Join(dir, "counts"))
			if err != nil {
				say("JOBERROR %v", err)
				return
			}
			lines := strings.Fields(string(b))
			sort.Strings(lines)
			for _, st := range run.Stats() {
				say("STAT %s %d %d %d", st.Name, st.In, st.Out, st.Dropped)
				l := st.Latency
				say("LAT %s %d %d %d %d", st.Name, l.QueueWait.Count, l.QueueWait.P99, l.EndToEnd.Count, l.EndToEnd.P99)
				if st.Name == "numbers" {
					say("SOURCE-BLOCKED %d", st.Blocked)
				}
			}
			say("RESTARTS %d %d", st.Restarts, st.RestoredFrom)
			say("RESULT %s", strings.Join(lines, ","))
			return
		case <-tick.C:
			if st := operators.CheckpointStatsOf(run); st.LastID != last {
				last = st.LastID
				say("CHECKPOINT %d", last)
			} else if len(st.InProgress) > 0 && !pending {
				pending = true
				say("CHECKPOINT-PENDING %d", st.InProgress[0].ID)
			}
			for _, st := range run.Stats() {
				switch {
				case st.Name == "numbers" && st.Blocked > 0 && !waiting:
					waiting = true
					say("SOURCE-WAITING %d", st.Out)
				case st.Name == "slow" && st.Dropped > 0 && !dropping:
					dropping = true
					say("SLOW-DROPPING %d", st.Dropped)
				}
			}
		}
	}
}
