package operators_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/supervision"
)

// TestPoisonRecordsGoToDeadLetters injects panics on 1% of the records of a
// map and of a per-key aggregation: exactly those records end in the
// dead-letter store, with their operator and attempts, and every other
// record is processed.
func TestPoisonRecordsGoToDeadLetters(t *testing.T) {
	sys, ctx := newSystem(t)
	const n = 20_000
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	poisonMap, poisonCount := map[int64]bool{}, map[int64]bool{}
	for i := int64(0); i < n; i++ {
		switch r := rng.IntN(200); {
		case r == 0:
			poisonMap[i] = true
		case r == 1:
			poisonCount[i] = true
		}
	}
	var attempts atomic.Int64
	dead, err := supervision.NewMemoryDeadLetters(0)
	if err != nil {
		t.Fatal(err)
	}
	top := operators.NewTopology("poison", operators.DeadLetters(dead), operators.BatchSize(64))
	src := operators.Source(top, "numbers", operators.Generate(n, func(i int64) int64 { return i }))
	checked := operators.Map(src, "check", func(v int64) int64 {
		if poisonMap[v] {
			attempts.Add(1)
			panic(fmt.Sprintf("poison %d", v))
		}
		return v
	}, operators.OnRecordFailure(3))
	by := operators.KeyBy(checked, "by-parity", func(v int64) int64 { return v % 2 }, operators.Parallelism(2))
	sums := operators.Aggregate(by, "sum", func() int64 { return 0 }, func(acc, v int64) int64 {
		if poisonCount[v] {
			panic(fmt.Sprintf("cannot add %d", v))
		}
		return acc + v
	}, operators.OnRecordFailure(1), operators.Emit(operators.EmitAtEnd))
	col := operators.NewCollector[operators.KV[int64, int64]]()
	operators.Sink(sums, "out", col)
	run := runToEnd(t, sys, ctx, top)

	var want [2]int64
	for i := int64(0); i < n; i++ {
		if !poisonMap[i] && !poisonCount[i] {
			want[i%2] += i
		}
	}
	for _, kv := range col.Items() {
		if kv.Value != want[kv.Key] {
			t.Errorf("sum of parity %d = %d, want %d: records lost or kept that should not be", kv.Key, kv.Value, want[kv.Key])
		}
	}
	letters, err := dead.List(supervision.Filter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	gotMap, gotCount := map[int64]bool{}, map[int64]bool{}
	for _, d := range letters {
		var v int64
		if err := msgpack.Unmarshal(d.Payload, &v); err != nil {
			t.Fatalf("payload of dead letter %d: %v", d.Seq, err)
		}
		switch d.Operator {
		case "check":
			gotMap[v] = true
			if d.Attempts != 3 || !strings.Contains(d.Error, "poison") {
				t.Errorf("dead letter %+v: want 3 attempts and the panic", d)
			}
		case "sum":
			gotCount[v] = true
			if d.Attempts != 1 {
				t.Errorf("dead letter %+v: want 1 attempt", d)
			}
		default:
			t.Errorf("dead letter from operator %q", d.Operator)
		}
		if d.Job != "poison" {
			t.Errorf("dead letter job %q", d.Job)
		}
	}
	if !maps(gotMap, poisonMap) || !maps(gotCount, poisonCount) {
		t.Fatalf("dead letters: %d from check, %d from sum; want %d and %d, the same records", len(gotMap), len(gotCount), len(poisonMap), len(poisonCount))
	}
	if got := attempts.Load(); got != int64(3*len(poisonMap)) {
		t.Errorf("the map ran its poison records %d times, want %d", got, 3*len(poisonMap))
	}
	if s := stat(t, run, "check"); s.DeadLettered != int64(len(poisonMap)) || s.Out != n-int64(len(poisonMap)) {
		t.Errorf("check stats: dead-lettered %d, out %d", s.DeadLettered, s.Out)
	}
	if s := stat(t, run, "sum"); s.DeadLettered != int64(len(poisonCount)) {
		t.Errorf("sum stats: dead-lettered %d, want %d", s.DeadLettered, len(poisonCount))
	}
	// The run remembers the newest 64 of them (for the dashboard): the
	// store's last ones, in order.
	recent := operators.RecentDeadLetters(run)
	if want := min(len(letters), 64); len(recent) != want {
		t.Fatalf("%d recent dead letters, want %d", len(recent), want)
	}
	tail := letters[len(letters)-len(recent):]
	for i, r := range recent {
		if d := tail[i]; r.Seq != d.Seq || r.Operator != d.Operator || r.Error != d.Error || r.Attempts != d.Attempts || r.Instance != d.Instance {
			t.Errorf("recent[%d] = %+v, the store's is %+v", i, r, d)
		}
	}
}

func maps(a, b map[int64]bool) bool {
	ka, kb := keys(a), keys(b)
	return slices.Equal(ka, kb)
}

func keys(m map[int64]bool) []int64 {
	var out []int64
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestOnRecordFailureValidated(t *testing.T) {
	top := operators.NewTopology("bad-failure")
	// OnRecordFailure on a source does not compile (see TestOptionFamilies).
	src := operators.Source(top, "src", operators.FromSlice([]int{1}))
	operators.Sink(operators.Map(src, "m", identity[int], operators.OnRecordFailure(0)), "out", discard[int]())
	err := top.Validate()
	if !containsAll(err.Error(), `"m"`, "at least one attempt") {
		t.Fatalf("Validate() = %v", err)
	}
}
