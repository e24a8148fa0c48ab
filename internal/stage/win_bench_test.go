package stage

import (
	"testing"
	"time"
)

// BenchmarkWindowMemory: a tumbling window's sum over 10 000 keys with
// the memory backend, 256-record batches, a window fired every 40 batches
// (ns/op is per record).
func BenchmarkWindowMemory(b *testing.B) {
	fns := sumWindows(10000)
	s := NewWinStage(fns, Tumbling(time.Second), 0, &sinkPusher[int64]{}, testCtx(0, 1))
	bt := &Batch[int64]{Vs: make([]int64, 256), Ts: make([]int64, 256)}
	var n, t int64
	b.ReportAllocs()
	for i := 0; i < b.N; i += len(bt.Vs) {
		for j := range bt.Vs {
			n = n*6364136223846793005 + 1442695040888963407
			bt.Vs[j] = int64(uint64(n) >> 33)
			bt.Ts[j] = t
			t += int64(time.Second) / (40 * 256)
		}
		s.Push(bt)
		if (i/len(bt.Vs))%40 == 39 {
			s.Watermark(t - 1)
		}
	}
}

// BenchmarkSessionsDisk: session windows (gap 1 s) counting over 100 000
// keys on the disk backend (1 MiB budget), 256-record batches of event
// times advancing 1 ms a batch, a watermark every 40 batches 2 s behind
// (ns/op is per record): the record loop sets a session timer per record
// that moves its session's end, and watermarks fire the sessions ended.
// A/B against main (whose disk sessions keep their timers in heaps; copy
// this file into a checkout of main), alternating the two test binaries:
//
//	go test -c -o /tmp/stage-X.test ./internal/stage/
//	/tmp/stage-X.test -test.run XXX -test.bench SessionsDisk -test.benchmem -test.benchtime 400000x
func BenchmarkSessionsDisk(b *testing.B) {
	fns := WinFns[int64, int64, int64, int64]{
		Key:   func(v int64) int64 { return v % 100_000 },
		Zero:  func() int64 { return 0 },
		Add:   func(a, _ int64) int64 { return a + 1 },
		Merge: func(a, c int64) int64 { return a + c },
		Emit:  func(k, start, end int64, a int64, out func(int64)) { out(a) },
	}
	sc := testCtx(0, 1)
	sc.State.Dir, sc.State.Budget = b.TempDir(), 1<<20
	s := NewWinStage(fns, Sessions(time.Second), 0, &sinkPusher[int64]{}, sc)
	defer s.CloseState()
	bt := &Batch[int64]{Vs: make([]int64, 256), Ts: make([]int64, 256)}
	var n, t int64
	b.ReportAllocs()
	for i := 0; i < b.N; i += len(bt.Vs) {
		for j := range bt.Vs {
			n = n*6364136223846793005 + 1442695040888963407
			bt.Vs[j] = int64(uint64(n) >> 33)
			bt.Ts[j] = t
		}
		t += int64(time.Millisecond)
		s.Push(bt)
		if (i/len(bt.Vs))%40 == 39 {
			s.Watermark(t - int64(2*time.Second))
		}
	}
}
