package cluster_test

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
)

// Overflow policies and statistics of distributed runs, over three child
// processes (see jobs_test.go).

// droppingJob sends n numbers from the coordinator to a slow operator
// (held by the gate until the test has seen it drop) whose input mailbox
// drops the newest records when full: the source is never slowed by it,
// records are dropped, and checkpoint barriers and end of stream must pass
// the full mailbox all the same.
func droppingJob(n int64, dir string) *operators.Topology {
	t := operators.NewTopology("dropping", operators.Checkpoints(50*time.Millisecond), operators.BatchSize(64))
	// The source emits half its records, then runs dry until the test
	// opens its gate ("open drop"): checkpoints go on meanwhile, each
	// barrier behind the full mailbox of the gated slow operator.
	src := operators.Source(t, "numbers", heldSource(n, n/2, dropGate))
	slow := operators.Map(src, "slow", func(v int64) string {
		<-slowGate // closed until the test has seen drops (jobs_test.go)
		return "k" + strconv.Itoa(int(v*7%23))
	}, operators.Parallelism(2), operators.Input(mailbox.DropNewest(64)))
	by := operators.KeyBy(slow, "by-key", func(k string) string { return k }, operators.Parallelism(2))
	counts := operators.Count(by, "count", operators.Emit(operators.EmitAtEnd))
	operators.Sink(counts, "out", operators.File(filepath.Join(dir, "counts"), func(kv operators.KV[string, int64]) string {
		return fmt.Sprintf("%s=%d", kv.Key, kv.Value)
	}), operators.Parallelism(1))
	return t
}

// jobStats reads the STAT lines runJob prints after a job's end, until its
// RESTARTS line: records in, out and dropped by operator.
func jobStats(t *testing.T, a *child) (stats map[string][3]int64, restarts string, checkpoints int) {
	t.Helper()
	stats, _, restarts, checkpoints = jobStatsLat(t, a)
	return stats, restarts, checkpoints
}

// jobStatsLat is jobStats with the LAT lines: by operator, its queue
// waits recorded and their p99 (ns), its end-to-end latencies recorded
// (a sink's) and their p99.
func jobStatsLat(t *testing.T, a *child) (stats map[string][3]int64, lat map[string][4]int64, restarts string, checkpoints int) {
	t.Helper()
	stats, lat = map[string][3]int64{}, map[string][4]int64{}
	var failed string
	defer func() {
		// Not inside awaitLine's callback: it runs with the child's lock
		// held, which a Fatalf there never releases (the cleanup that
		// stops the child then waits on it for ever).
		if failed != "" {
			t.Fatalf("the job failed: %s", failed)
		}
	}()
	a.AwaitLine(2*time.Minute, "the job's statistics", func(f []string) bool {
		switch f[0] {
		case "JOBERROR":
			failed = strings.Join(f[1:], " ")
			return true
		case "CHECKPOINT":
			checkpoints++
		case "STAT":
			if len(f) == 5 {
				stats[f[1]] = [3]int64{int64(atou(f[2])), int64(atou(f[3])), int64(atou(f[4]))}
			}
		case "LAT":
			if len(f) == 6 {
				lat[f[1]] = [4]int64{int64(atou(f[2])), int64(atou(f[3])), int64(atou(f[4])), int64(atou(f[5]))}
			}
		case "RESTARTS":
			restarts = f[1]
			return true
		}
		return false
	})
	return stats, lat, restarts, checkpoints
}

// TestDistributedRunStats: the coordinator's Stats of a distributed run
// cover the instances in every process. The counters run only on the two
// other nodes ("off"), yet the coordinator's count operator reports every
// record in. Then a slow operator on the other nodes, behind a
// drop-newest mailbox, drops most records: every record is either counted
// in or counted dropped (as records, not as batches), checkpoints still
// complete (no barrier is dropped), the job ends (nor is end of stream),
// and there is no restart (the drops leave no sequence gap, no ErrLost).
func TestDistributedRunStats(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes")
	}
	a, b, c, _ := jobCluster(t)

	const n = 300_000
	openGates("source", a, b, c) // the counting run waits for nothing of the test's
	a.Send(fmt.Sprintf("run counting %d %s off", n, t.TempDir()))
	where := placed(a, 20*time.Second)
	if where[a.Address] > 2 { // the source and the sink
		t.Fatalf("the coordinator hosts %d instances (%v): the test needs the counters elsewhere", where[a.Address], where)
	}
	stats, lat, restarts, _ := jobStatsLat(t, a)
	if restarts != "0" {
		t.Fatalf("the counting job restarted %s times", restarts)
	}
	// Latency across processes: the counters' queue waits, measured on the
	// other nodes, reach the coordinator's Stats; the sink here records
	// end-to-end latency for the counts, whose ingestion time was stamped
	// here by the source and travelled with their batches through two
	// other processes and back (a batch without it records none).
	t.Logf("latency (queue waits, p99 ns, end to end, p99 ns): %v", lat)
	if q := lat["key"][0] + lat["by-key"][0] + lat["count"][0]; q == 0 {
		t.Errorf("the counters' tasks (on the other nodes): no queue wait reported: %v", lat)
	}
	if l := lat["out"]; l[2] == 0 || l[3] <= 0 || time.Duration(l[3]) > 2*time.Minute {
		t.Errorf("out: %d end-to-end latencies, p99 %v: want some, within the run", l[2], time.Duration(l[3]))
	}
	if got := stats["count"]; got[0] != n {
		t.Fatalf("count reports %d records in, want all %d (stats %v, placement %v)", got[0], n, stats, where)
	}
	if got := stats["key"]; got[1] != n {
		t.Fatalf("key reports %d records out, want %d", got[1], n)
	}
	if got := a.Expect(10*time.Second, "RESULT"); got[1] != wantCounts(n) {
		t.Fatalf("result %v, want %s", got, wantCounts(n))
	}
	a.SkipTo(a.LastMatch() + 1) // the first run printed everything before its RESULT

	const m = 1_000_000
	a.Send(fmt.Sprintf("run dropping %d %s off", m, t.TempDir()))
	// The gate holds the slow operator until its full mailbox drops and a
	// checkpoint has started: its barrier waits behind the full mailbox.
	a.JobLine(time.Minute, "SLOW-DROPPING")
	a.JobLine(time.Minute, "CHECKPOINT-PENDING")
	openGates("slow", a, b, c)
	openGates("drop", a, b, c)
	stats, restarts, checkpoints := jobStats(t, a)
	a.Expect(10*time.Second, "RESULT")
	slow := stats["slow"]
	t.Logf("slow: %d in, %d dropped; %d checkpoints; restarts %s", slow[0], slow[2], checkpoints, restarts)
	if restarts != "0" {
		t.Fatalf("the dropping job restarted %s times: a policy's drops must not look like lost messages", restarts)
	}
	if slow[0]+slow[2] != m || slow[2] == 0 {
		t.Fatalf("slow: %d in + %d dropped, want %d with drops", slow[0], slow[2], m)
	}
	if c := stats["count"]; c[0] != slow[1] {
		t.Fatalf("count got %d records, slow sent %d", c[0], slow[1])
	}
	// A checkpoint started while the slow operator was gated behind its
	// full, dropping mailbox: it completes once the gate opens unless its
	// barrier was dropped.
	if checkpoints < 1 {
		t.Fatalf("no checkpoint completed: a barrier behind the dropping mailbox was lost")
	}
}
