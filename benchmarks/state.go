package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/state"
	"github.com/sluicehq/sluice/operators"
)

// benchStateBackends runs the small-state keyed pipeline (source -> map ->
// KeyBy -> Count -> sink, 1000 keys, checkpoints every second) with the
// memory and the disk backend, alternating rounds.
func benchStateBackends(ctx context.Context, e *env) ([]Result, error) {
	n := e.n(10_000_000)
	run := func(disk bool) (time.Duration, error) { return stateBackendRun(ctx, n, disk) }
	var mem, disk float64
	for range e.rounds {
		for _, d := range []bool{false, true} {
			took, err := run(d)
			if err != nil {
				return nil, err
			}
			v := float64(n) / took.Seconds()
			if d {
				disk = max(disk, v)
			} else {
				mem = max(mem, v)
			}
		}
	}
	base := Result{Name: "state/memory", Value: mem, Unit: "records/s", Note: fmt.Sprintf("%d records: source -> map -> KeyBy -> Count (1000 keys, EmitAtEnd) -> sink, checkpoints every 1 s, best of %d alternated rounds", n, e.rounds)}
	return []Result{base, Result{Name: "state/disk-vs-memory", Value: disk, Unit: "records/s",
		Note: "same job, DiskState (pebble, default 64 MiB cache)"}.against(base)}, nil
}

// benchStateIncremental fills a disk table with 10 M keys, then changes 1 %
// of them before each of 16 checkpoints: with the default chain of 10
// deltas, checkpoints 2-11 are deltas (the changed keys), 12 a base (the
// cache written back, the memtable flushed, the sstables new since the
// last base linked and checksummed), 13-17 deltas. It reports the deltas'
// mean new bytes and time against a full checkpoint (every file copied)
// of the same state, the mean over all 16 (the base's share included),
// and the time to restore the state from the longest chain (checkpoint
// 11: a base and 10 deltas) into a fresh table. Then the same with the
// memory backend's changelog (benchMemChangelog).
func benchStateIncremental(ctx context.Context, e *env) ([]Result, error) {
	keys := e.n(10_000_000)
	dir, err := os.MkdirTemp("", "sluice-state-inc-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	hash := func(k int64) uint64 { return uint64(k) * 0x9E3779B97F4A7C15 }
	spec := state.Spec{Dir: dir, Budget: 64 << 20}
	d, err := state.OpenDisk[int64, int64](spec, "count", 0, 1, hash, nil)
	if err != nil {
		return nil, err
	}
	defer func() { d.Close() }()
	for k := range int64(keys) {
		d.Put(k, k, false)
	}
	id := uint64(1)
	if _, err := d.Snapshot(id); err != nil {
		return nil, err
	}
	firstBytes := d.Stats.LastBytes
	rng := rand.New(rand.NewPCG(1, 2))
	const rounds = 16
	var incTime, allTime, baseTime time.Duration
	var incNew, incMax, allNew, baseNew int64
	var deltas, chain int
	var h []byte
	for range rounds {
		for range keys / 100 {
			k := rng.Int64N(int64(keys))
			v, _ := d.Get(k)
			d.Put(k, v+1, true)
		}
		id++
		start := time.Now()
		hh, err := d.Snapshot(id)
		if err != nil {
			return nil, err
		}
		took := time.Since(start)
		allTime, allNew = allTime+took, allNew+d.Stats.LastNew
		if !d.Stats.LastDelta {
			baseTime, baseNew, chain = took, d.Stats.LastNew, 0
			continue
		}
		deltas++
		incTime += took
		incNew += d.Stats.LastNew
		incMax = max(incMax, d.Stats.LastNew)
		if chain++; chain == state.DefaultMaxChain {
			h = hh // the longest chain
		}
	}
	if deltas == 0 || h == nil {
		return nil, fmt.Errorf("state-incremental: %d deltas, longest chain found %v", deltas, h != nil)
	}
	// A full checkpoint of the same state: every file copied.
	id++
	start := time.Now()
	if _, err := d.SnapshotCopy(id); err != nil {
		return nil, err
	}
	fullTime := time.Since(start)
	fullBytes := d.Stats.LastNew
	// Recovery from the last incremental checkpoint, in a fresh table.
	r, err := state.OpenDisk[int64, int64](spec, "count", 1, 2, hash, nil)
	if err != nil {
		return nil, err
	}
	start = time.Now()
	if err := r.Restore([][]byte{h}, 0, state.AllGroups); err != nil {
		return nil, err
	}
	recovery := time.Since(start)
	for _, k := range []int64{0, int64(keys / 2), int64(keys - 1)} {
		if v, ok := r.Get(k); !ok || v < k {
			return nil, fmt.Errorf("restored key %d: %d, %v", k, v, ok)
		}
	}
	r.Close()
	// The memory backend's whole-map checkpoint of the same number of keys
	// (context: what it writes without a changelog).
	m := state.NewMem[int64, int64](nil)
	for k := range int64(keys) {
		m.Put(k, k, false)
	}
	start = time.Now()
	mb, err := m.Snapshot(1)
	if err != nil {
		return nil, err
	}
	memTime := time.Since(start)
	memBytes := len(mb)
	m, mb = nil, nil
	meanNew := float64(incNew) / float64(deltas)
	meanTime := incTime / time.Duration(deltas)
	full := Result{Name: "state-incremental/full-bytes", Value: float64(fullBytes), Unit: "bytes",
		Note: fmt.Sprintf("%d keys: a full checkpoint copies every file (%.1f MiB; the first checkpoint's files: %.1f MiB)", keys, float64(fullBytes)/(1<<20), float64(firstBytes)/(1<<20))}
	fullT := Result{Name: "state-incremental/full-time", Value: float64(fullTime.Microseconds()) / 1000, Unit: "ms", Note: "the full checkpoint's time (copy and checksum)"}
	out := []Result{full,
		Result{Name: "state-incremental/incremental-bytes-vs-full", Value: meanNew, Unit: "bytes",
			Note: fmt.Sprintf("mean bytes of the %d delta checkpoints, each after 1 %% of the keys changed (max %d)", deltas, incMax)}.against(full),
		fullT,
		Result{Name: "state-incremental/incremental-time-vs-full", Value: float64(meanTime.Microseconds()) / 1000, Unit: "ms",
			Note: "mean time of those deltas (read the changed keys from the cache or the database, write, fsync)"}.against(fullT),
		Result{Name: "state-incremental/amortised-bytes-vs-full", Value: float64(allNew) / rounds, Unit: "bytes",
			Note: fmt.Sprintf("mean new bytes of all %d checkpoints after the first, the periodic base included (the base: %d bytes in %.0f ms)", rounds, baseNew, float64(baseTime.Microseconds())/1000)}.against(full),
		Result{Name: "state-incremental/amortised-time-vs-full", Value: float64((allTime / rounds).Microseconds()) / 1000, Unit: "ms",
			Note: "mean time of all of them"}.against(fullT),
		{Name: "state-incremental/recovery", Value: float64(recovery.Microseconds()) / 1000, Unit: "ms",
			Note: fmt.Sprintf("restore the %d-key state from the longest chain (a base and %d deltas: verify every file's checksum, link, open, apply the deltas) into a fresh table", keys, state.DefaultMaxChain)},
		{Name: "state-incremental/context-memory-full", Value: float64(memTime.Microseconds()) / 1000, Unit: "ms",
			Note: fmt.Sprintf("context: the memory backend's whole-map checkpoint of %d keys, without a changelog (%.1f MiB of msgpack)", keys, float64(memBytes)/(1<<20))},
	}
	runtime.GC()
	mem, err := benchMemChangelog(keys, filepath.Join(dir, "changelog"))
	if err != nil {
		return nil, err
	}
	return append(out, mem...), nil
}

// benchMemChangelog fills a memory table with a changelog (the memory
// backend's incremental checkpoints) with keys keys, then changes 1 % of
// them before each of 16 checkpoints: with the default chain of 10 deltas,
// checkpoints 2-11 are deltas, 12 a base again (a full checkpoint of the
// same state, in the same run), 13-17 deltas. It reports the deltas' mean
// bytes and time against that base's, the mean over all 16 (the bases'
// share included), and the recovery of the longest chain (checkpoint 11: a
// base and 10 deltas) into a fresh table.
func benchMemChangelog(keys int, dir string) ([]Result, error) {
	owns := func(int64, int, int) bool { return true }
	m, err := state.OpenChangelog[int64, int64](state.Spec{Changelog: dir}, "count", 0, 1, owns)
	if err != nil {
		return nil, err
	}
	for k := range int64(keys) {
		m.Put(k, k, false)
	}
	start := time.Now()
	if _, err := m.Snapshot(1); err != nil {
		return nil, err
	}
	firstTime := time.Since(start)
	_, firstBytes, _ := m.LastChain()
	rng := rand.New(rand.NewPCG(1, 2))
	const rounds = 16
	var deltaTime, allTime, baseTime time.Duration
	var deltaBytes, allBytes, baseBytes, deltaMax int64
	var deltas int
	var longest []byte
	for id := uint64(2); id < 2+rounds; id++ {
		for range keys / 100 {
			k := rng.Int64N(int64(keys))
			v, _ := m.Get(k)
			m.Put(k, v+1, true)
		}
		start := time.Now()
		h, err := m.Snapshot(id)
		if err != nil {
			return nil, err
		}
		took := time.Since(start)
		files, n, base := m.LastChain()
		allTime, allBytes = allTime+took, allBytes+n
		if base {
			baseTime, baseBytes = took, n
			continue
		}
		deltas++
		deltaTime, deltaBytes, deltaMax = deltaTime+took, deltaBytes+n, max(deltaMax, n)
		if files == state.DefaultMaxChain+1 {
			longest = h
		}
	}
	if baseBytes == 0 || deltas == 0 || longest == nil {
		return nil, fmt.Errorf("memory changelog bench: %d deltas, a base of %d bytes, longest chain found %v", deltas, baseBytes, longest != nil)
	}
	m = nil
	runtime.GC()
	r, err := state.OpenChangelog[int64, int64](state.Spec{Changelog: dir}, "count", 1, 2, owns)
	if err != nil {
		return nil, err
	}
	start = time.Now()
	if err := r.Restore([][]byte{longest}, 0, state.AllGroups); err != nil {
		return nil, err
	}
	recovery := time.Since(start)
	if len(r.M) != keys {
		return nil, fmt.Errorf("memory changelog bench: restored %d keys of %d", len(r.M), keys)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	full := Result{Name: "state-incremental/memory-full-bytes", Value: float64(baseBytes), Unit: "bytes",
		Note: fmt.Sprintf("memory backend with a changelog, %d keys: a base (every key; %.1f MiB; the first checkpoint's base %d bytes in %.0f ms)", keys, float64(baseBytes)/(1<<20), firstBytes, ms(firstTime))}
	fullT := Result{Name: "state-incremental/memory-full-time", Value: ms(baseTime), Unit: "ms", Note: "that base's time (encode every key, write, fsync): checkpoint 12 of the run, after 10 deltas"}
	return []Result{full,
		Result{Name: "state-incremental/memory-delta-bytes-vs-full", Value: float64(deltaBytes) / float64(deltas), Unit: "bytes",
			Note: fmt.Sprintf("mean bytes of the %d deltas, each after 1 %% of the keys changed (max %d)", deltas, deltaMax)}.against(full),
		fullT,
		Result{Name: "state-incremental/memory-delta-time-vs-full", Value: ms(deltaTime / time.Duration(deltas)), Unit: "ms",
			Note: "mean time of those deltas (encode the changed keys, write, fsync)"}.against(fullT),
		Result{Name: "state-incremental/memory-amortised-bytes-vs-full", Value: float64(allBytes) / rounds, Unit: "bytes",
			Note: fmt.Sprintf("mean bytes of all %d checkpoints after the first, the periodic base included", rounds)}.against(full),
		Result{Name: "state-incremental/memory-amortised-time-vs-full", Value: ms(allTime / rounds), Unit: "ms",
			Note: "mean time of all of them"}.against(fullT),
		{Name: "state-incremental/memory-recovery", Value: ms(recovery), Unit: "ms",
			Note: fmt.Sprintf("restore the %d-key state from the longest chain (a base and %d deltas; read, check every file's CRC, apply) into a fresh table", keys, state.DefaultMaxChain)},
	}, nil
}

// stateLargeCase names state-large's child process (childMain).
const stateLargeCase = "state-large"

// stateLargeBudget is the disk backend's memory budget per instance in
// state-large (96 MiB until session 11: a peak RSS of 528 MiB at load 16-20,
// 2 x 66 MiB of it pebble's, outside the Go heap).
const stateLargeBudget = 64 << 20

// benchStateLarge runs stateLarge in a child process of this binary under
// GOMEMLIMIT=256MiB (unless the environment sets one), so that the peak
// RSS it reports is the job's own, whatever ran before it in this run.
func benchStateLarge(ctx context.Context, e *env) ([]Result, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self, childFlag, "-case", stateLargeCase, "-scale", strconv.FormatFloat(e.scale, 'g', -1, 64))
	cmd.Env = os.Environ()
	if os.Getenv("GOMEMLIMIT") == "" {
		cmd.Env = append(cmd.Env, "GOMEMLIMIT=256MiB")
	}
	cmd.Stderr = os.Stderr
	raw, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("state-large child: %w", err)
	}
	var res []Result
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("state-large: child said %q: %w", raw, err)
	}
	return res, nil
}

// stateLargeChild is the child process of benchStateLarge: it runs
// stateLarge and prints its results as one JSON array.
func stateLargeChild(scale float64) error {
	res, err := stateLarge(context.Background(), &env{scale: scale, rounds: 1})
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// stateLarge counts 50 M distinct keys (60 M records) with the disk
// backend. It checks the counts against the reference and reports the
// records/s and the peak RSS (VmHWM) of the process.
func stateLarge(ctx context.Context, e *env) ([]Result, error) {
	keys := e.n(50_000_000)
	extra := keys / 5 // keys [0, extra) of the sequence appear twice
	n := keys + extra
	dir, err := os.MkdirTemp("", "sluice-state-large-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	sys, err := actors.NewSystem(actors.Config{Name: "state-large"})
	if err != nil {
		return nil, err
	}
	defer sys.Stop(ctx)
	keyOf := func(i int64) int64 { return int64(uint64(i%int64(keys)) * 0x9E3779B97F4A7C15) }
	var sum, twos, check int64
	var results atomic.Int64
	if os.Getenv("SLUICE_MEMTRACE") != "" {
		stop := make(chan struct{})
		done := make(chan struct{})
		go memTrace(stop, done, &results)
		defer func() { close(stop); <-done }()
	}
	// The budget per instance: half of it (the write-back cache) is in the
	// Go heap, under GOMEMLIMIT; the other half (pebble's block cache) and
	// pebble's memtables are allocated outside it. Two instances of 64 MiB
	// put about 2 x 44 MiB beside the Go heap's 256 MiB.
	t := operators.NewTopology("state-large", operators.StateBackend(operators.DiskState(dir, stateLargeBudget)))
	src := operators.Source(t, "numbers", operators.Generate(int64(n), func(i int64) int64 { return i }))
	by := operators.KeyBy(src, "by-key", keyOf, operators.Parallelism(2))
	counts := operators.Count(by, "count", operators.Emit(operators.EmitAtEnd))
	operators.Sink(counts, "check", operators.SinkFunc(func(kv operators.KV[int64, int64]) error {
		results.Add(1)
		sum += kv.Value
		if kv.Value == 2 {
			twos++
		}
		check += kv.Key * kv.Value
		return nil
	}), operators.Parallelism(1))
	start := time.Now()
	r, err := sys.Run(ctx, t)
	if err != nil {
		return nil, err
	}
	if err := r.Wait(ctx); err != nil {
		return nil, err
	}
	took := time.Since(start)
	var ref int64
	for i := range int64(n) {
		ref += keyOf(i)
	}
	if results.Load() != int64(keys) || sum != int64(n) || twos != int64(extra) || check != ref {
		return nil, fmt.Errorf("state-large: %d results (want %d), sum %d (want %d), %d counted twice (want %d), checksum %d (want %d)",
			results.Load(), keys, sum, n, twos, extra, check, ref)
	}
	return []Result{
		{Name: "state-large/disk-count", Value: float64(n) / took.Seconds(), Unit: "records/s",
			Note: fmt.Sprintf("%d records over %d distinct keys, KeyBy -> Count (2 instances, DiskState %d MiB each, EmitAtEnd) -> sink; counts equal the reference; GOMEMLIMIT=%s", n, keys, stateLargeBudget>>20, os.Getenv("GOMEMLIMIT"))},
		{Name: "state-large/peak-rss", Value: peakRSS(), Unit: "MiB", Note: "VmHWM of the process at the end"},
	}, nil
}

// peakRSS is the process's VmHWM in MiB (0 where unknown).
func peakRSS() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}

// memTrace prints, every 5 s until stop, the process's memory: its RSS,
// the Go heap (runtime/metrics), and the disk tables' pebble memory.
func memTrace(stop <-chan struct{}, done chan<- struct{}, results *atomic.Int64) {
	defer close(done)
	names := []string{"/gc/heap/live:bytes", "/gc/heap/goal:bytes", "/gc/cycles/total:gc-cycles",
		"/memory/classes/total:bytes", "/memory/classes/heap/objects:bytes", "/memory/classes/heap/released:bytes",
		"/memory/classes/heap/free:bytes"}
	samples := make([]metrics.Sample, len(names))
	for i, n := range names {
		samples[i].Name = n
	}
	start := time.Now()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	mib := func(v uint64) float64 { return float64(v) / (1 << 20) }
	var hwm float64
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		metrics.Read(samples)
		u := func(i int) uint64 { return samples[i].Value.Uint64() }
		p := state.DiskMemory()
		c := state.CMallocStats()
		rss := procStatus("VmRSS:")
		fmt.Fprintf(os.Stderr, "memtrace t=%.0fs rss=%.0f live=%.0f goal=%.0f gcs=%d gomapped=%.0f(objs %.0f free %.0f released %.0f) | pebble dbs=%d bcache=%.0f memt=%.0f(%d, zombie %.0f) tables=%d open=%d iters=%d L0=%d compacting=%d(%.0f) cgo: %s | malloc arena=%.0f(in use %.0f, free %.0f) mapped=%.0f | results=%d\n",
			time.Since(start).Seconds(), rss, mib(u(0)), mib(u(1)), u(2), mib(u(3)), mib(u(4)), mib(u(6)), mib(u(5)),
			p.DBs, mib(uint64(p.BlockCache)), mib(uint64(p.MemTables)), p.MemTableCount, mib(uint64(p.ZombieMemTables)),
			p.Files, p.TableCache, p.TableIters, p.L0Files, p.Compacting, mib(uint64(p.CompactingBytes)), p.Cgo,
			mib(uint64(c.Arena)), mib(uint64(c.InUse)), mib(uint64(c.Free)), mib(uint64(c.Mapped)), results.Load())
		if f := os.Getenv("SLUICE_HEAPPROF"); f != "" && rss > hwm {
			hwm = rss
			if out, err := os.Create(f); err == nil {
				_ = pprof.WriteHeapProfile(out)
				out.Close()
			}
		}
	}
}

// procStatus is a line of /proc/self/status in MiB (0 where unknown).
func procStatus(field string) float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}

// stateBackendRun is one run of the state-backends job over n records,
// with the memory or (disk) the disk backend; it returns its wall time.
func stateBackendRun(ctx context.Context, n int, disk bool) (time.Duration, error) {
	dir, err := os.MkdirTemp("", "sluice-state-bench-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	sys, err := actors.NewSystem(actors.Config{Name: "state-bench", Store: filepath.Join(dir, "store.db")})
	if err != nil {
		return 0, err
	}
	defer sys.Stop(ctx)
	opts := []operators.TopologyOption{operators.Checkpoints(time.Second)}
	if disk {
		opts = append(opts, operators.StateBackend(operators.DiskState(filepath.Join(dir, "state"), 0)))
	}
	var sum int64
	t := operators.NewTopology("state-bench", opts...)
	src := operators.Source(t, "numbers", operators.Generate(int64(n), func(i int64) int64 { return i }))
	m := operators.Map(src, "triple", func(v int64) int64 { return v * 3 })
	by := operators.KeyBy(m, "by-key", func(v int64) int64 { return v % 1000 })
	counts := operators.Count(by, "count", operators.Emit(operators.EmitAtEnd))
	operators.Sink(counts, "sum", operators.SinkFunc(func(kv operators.KV[int64, int64]) error { sum += kv.Value; return nil }))
	_, d, err := runTimed(ctx, sys, t)
	if err != nil {
		return 0, err
	}
	if sum != int64(n) {
		return 0, fmt.Errorf("state bench: counted %d of %d", sum, n)
	}
	return d, nil
}
