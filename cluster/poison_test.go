package cluster_test

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/operators"
)

// stampedRecord is a record with a time, as the samples' clickstream
// events. Its encoder writes nil where the time is when Poison is set:
// the bytes a damaged or hostile peer would send (msgpack v5.4.1 panics
// decoding them on the gRPC goroutine). It decodes as any struct does.
type stampedRecord struct {
	ID     int64
	At     time.Time
	Poison bool `msgpack:"-"`
}

func (s stampedRecord) EncodeMsgpack(enc *msgpack.Encoder) error {
	if err := enc.EncodeMapLen(2); err != nil {
		return err
	}
	if err := enc.EncodeString("ID"); err != nil {
		return err
	}
	if err := enc.EncodeInt(s.ID); err != nil {
		return err
	}
	if err := enc.EncodeString("At"); err != nil {
		return err
	}
	if s.Poison {
		return enc.EncodeNil()
	}
	return enc.EncodeTime(s.At)
}

// poisonPassed: this process's "poisoned" job has passed its poisoned
// records once; a replay after the restart sends them as they are.
var poisonPassed atomic.Bool

// poisonedJob is countingJob over stampedRecords whose 256 records after
// the source's gate are poisoned once per process: the keyed counters in
// other processes receive batches that do not decode.
func poisonedJob(n int64, dir string) *operators.Topology {
	t := operators.NewTopology("poisoned", operators.Checkpoints(100*time.Millisecond), operators.BatchSize(256))
	src := operators.Source(t, "numbers", heldSource(n, n/2, nil))
	from, to := n/2, n/2+256
	stamped := operators.Map(src, "stamp", func(v int64) stampedRecord {
		if v >= to {
			poisonPassed.Store(true)
		}
		return stampedRecord{ID: v, At: time.Unix(1_700_000_000+v, 0), Poison: v >= from && v < to && !poisonPassed.Load()}
	})
	by := operators.KeyBy(stamped, "by-key", func(s stampedRecord) string { return "k" + strconv.Itoa(int(s.ID*7%23)) }, operators.Parallelism(6))
	counts := operators.Count(by, "count", operators.Emit(operators.EmitAtEnd))
	operators.Sink(counts, "out", operators.File(dir+"/counts", func(kv operators.KV[string, int64]) string {
		return fmt.Sprintf("%s=%d", kv.Key, kv.Value)
	}), operators.Parallelism(1))
	return t
}

// TestDistributedJobUndecodableBatch: batches of records with nil where a
// time.Time is reach keyed counters on other nodes, over real gRPC
// connections. No node crashes: the receiving instances fail, the nodes
// count the batches (CodecStats.Undecodable), the job restarts from its
// last checkpoint and its result equals the plain loop's exactly.
func TestDistributedJobUndecodableBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes")
	}
	a, b, c, _ := jobCluster(t)
	want := wantCounts(jobRecords)
	a.Send(fmt.Sprintf("run poisoned %d %s", jobRecords, t.TempDir()))
	where := placed(a, 20*time.Second)
	if where[b.Address]+where[c.Address] == 0 {
		t.Fatalf("no counter on b or c: %v", where)
	}
	a.AwaitLine(30*time.Second, "checkpoint 1", func(f []string) bool { return len(f) == 2 && f[0] == "CHECKPOINT" && atou(f[1]) >= 1 })
	openGates("source", a)
	f := a.JobLine(2*time.Minute, "RESTARTS")
	if f[1] == "0" || f[2] == "0" {
		t.Fatalf("restarts %s, restored from checkpoint %s: want a restart from a checkpoint", f[1], f[2])
	}
	got := a.Expect(10*time.Second, "RESULT")
	if len(got) != 2 || got[1] != want {
		t.Fatalf("result after the undecodable batches:\n%v\nwant the plain loop's\n%s", got, want)
	}
	var undecodable uint64
	for _, ch := range []*child{b, c} {
		ch.Send("codec")
		undecodable += atou(ch.Expect(10*time.Second, "UNDECODABLE")[1])
	}
	if undecodable == 0 {
		t.Fatal("b and c counted no undecodable batch")
	}
	t.Logf("restarts %s, restored from checkpoint %s, %d undecodable batches counted on b and c", f[1], f[2], undecodable)
}
