package stage

import (
	"testing"
	"time"
)

// BenchmarkIntervalJoinDisk: an interval join ([-2 s, +2 s]) over
// 100 000 keys on the disk backend (1 MiB budget), 256-record batches
// (left and right records alternating, random keys: a key comes back
// about every 4 s) of event times advancing 10 ms a batch, a watermark
// every 40 batches 1 s behind (ns/op is per record): a record sets its
// key's pruning time when it had none, and watermarks prune the keys due
// (from 3 s of event time on: 77 000 records). A/B against a checkout whose disk
// interval join keeps its pruning times in a heap (copy this file into
// it), alternating the two test binaries:
//
//	go test -c -o /tmp/stage-X.test ./internal/stage/
//	/tmp/stage-X.test -test.run XXX -test.bench IntervalJoinDisk -test.benchmem -test.benchtime 400000x
func BenchmarkIntervalJoinDisk(b *testing.B) {
	sc := testCtx(0, 1)
	sc.State.Dir, sc.State.Budget = b.TempDir(), 1<<20
	key := func(e Either[int64, int64]) int64 {
		if e.Right {
			return e.R % 100_000
		}
		return e.L % 100_000
	}
	s := NewIntervalJoin(key, func(l, r int64) int64 { return l ^ r }, -int64(2*time.Second), int64(2*time.Second),
		&sinkPusher[int64]{}, sc).(*IntervalStage[int64, int64, int64, int64])
	defer s.CloseState()
	bt := &Batch[Either[int64, int64]]{Vs: make([]Either[int64, int64], 256), Ts: make([]int64, 256)}
	var n, t int64
	b.ReportAllocs()
	for i := 0; i < b.N; i += len(bt.Vs) {
		for j := range bt.Vs {
			n = n*6364136223846793005 + 1442695040888963407
			v := int64(uint64(n) >> 33)
			if j%2 == 0 {
				bt.Vs[j] = Either[int64, int64]{L: v}
			} else {
				bt.Vs[j] = Either[int64, int64]{R: v, Right: true}
			}
			bt.Ts[j] = t
		}
		t += int64(10 * time.Millisecond)
		s.Push(bt)
		if (i/len(bt.Vs))%40 == 39 {
			s.Watermark(t - int64(time.Second))
		}
	}
}
