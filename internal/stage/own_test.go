package stage

import (
	"context"
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/connector"
)

// Batches whose arrays a stage may keep (Batch.Own) travel without a copy;
// the tests below check that no array is ever shared by two batches in
// flight, or reused by its producer after it was kept: such aliasing would
// corrupt records silently.

// outCapture keeps what an emitter sends, by output and target (out*10 +
// target).
type outCapture struct{ envs map[int][]*actors.Envelope }

func newOutCapture() *outCapture { return &outCapture{envs: map[int][]*actors.Envelope{}} }

func (c *outCapture) Enqueue(out, target int, env *actors.Envelope) {
	c.envs[out*10+target] = append(c.envs[out*10+target], env)
}
func (c *outCapture) Watermarked(int64) {}

// shippedBatches are the int64 batches c captured, channel by channel.
func shippedBatches(c *outCapture) [][]*Batch[int64] {
	var out [][]*Batch[int64]
	for _, k := range slices.Sorted(maps.Keys(c.envs)) {
		var bs []*Batch[int64]
		for _, env := range c.envs[k] {
			if env.Kind == actors.Data {
				bs = append(bs, env.Payload.(*Batch[int64]))
			}
		}
		out = append(out, bs)
	}
	return out
}

// span is the memory of a slice's array from its first element to its
// capacity.
type span struct{ lo, hi uintptr }

func spanOf[T any](s []T) span {
	if cap(s) == 0 {
		return span{}
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	return span{lo, lo + uintptr(cap(s))*unsafe.Sizeof(s[0])}
}

// disjoint fails when two of the slices overlap in memory.
func disjoint[T any](t *testing.T, what string, ss [][]T) {
	t.Helper()
	var spans []span
	for _, s := range ss {
		if sp := spanOf(s); sp.hi > sp.lo {
			spans = append(spans, sp)
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return int(a.lo) - int(b.lo) })
	for i := 1; i < len(spans); i++ {
		if spans[i].lo < spans[i-1].hi {
			t.Fatalf("%s: two batches share an array (%#x..%#x and %#x..%#x)", what, spans[i-1].lo, spans[i-1].hi, spans[i].lo, spans[i].hi)
		}
	}
}

// flat is every value of bs in order.
func flat(bs []*Batch[int64]) []int64 {
	var out []int64
	for _, b := range bs {
		out = append(out, b.Vs...)
	}
	return out
}

// TestOwnedBatchKeptWithoutCopy: a delivered batch, mapped in place and
// filtered, is shipped in its own array; the records are right.
func TestOwnedBatchKeptWithoutCopy(t *testing.T) {
	c := newOutCapture()
	sc := testCtx(0, 1)
	em := NewEmitter[int64]([]Output{{Part: Forward, Targets: 1}}, 16, c)
	in := NewInlet[int64](NewMap(func(v int64) int64 { return v + 1 }, NewFilter(func(v int64) bool { return v%2 == 0 }, em, sc), sc))
	var want []int64
	var arrays []*int64
	for k := range 8 {
		vs := make([]int64, 16)
		for i := range vs {
			vs[i] = int64(k*16 + i)
			if (vs[i]+1)%2 == 0 {
				want = append(want, vs[i]+1)
			}
		}
		arrays = append(arrays, &vs[0])
		in.Deliver(&Batch[int64]{Vs: vs})
		em.Flush() // as the instance does after every message
	}
	got := shippedBatches(c)[0]
	if !slices.Equal(flat(got), want) {
		t.Fatalf("shipped %v, want %v", flat(got), want)
	}
	for k, b := range got {
		if &b.Vs[0] != arrays[k] {
			t.Errorf("batch %d was copied: the emitter may keep a delivered batch's array", k)
		}
	}
	disjoint(t, "delivered", [][]int64{got[0].Vs, got[1].Vs})
}

// TestReusedBuffersCopied: batches their producer reuses (not Own) are
// copied, an own batch is kept by the last of several targets only, and a
// map of another type or a timestamp stage hand on arrays they reuse
// safely. Every shipped batch keeps its records after later pushes.
func TestReusedBuffersCopied(t *testing.T) {
	const size, batches = 16, 12
	input := func(k int) []int64 {
		vs := make([]int64, size)
		for i := range vs {
			vs[i] = int64(k*size + i)
		}
		return vs
	}
	all := func(f func(int64) int64) []int64 {
		var out []int64
		for k := range batches {
			for _, v := range input(k) {
				out = append(out, f(v))
			}
		}
		return out
	}
	cases := []struct {
		name    string
		outs    []Output
		build   func(em any, sc *Ctx) any // the chain's head
		own     bool                      // the input is delivered (owned)
		want    func(int64) int64
		targets int // channels that get records
		copies  int // of every record
	}{
		{name: "reused input", outs: []Output{{Part: Forward, Targets: 1}},
			build: func(em any, sc *Ctx) any { return em }, want: func(v int64) int64 { return v }, targets: 1},
		{name: "broadcast", outs: []Output{{Part: Broadcast, Targets: 3}}, own: true,
			build: func(em any, sc *Ctx) any { return em }, want: func(v int64) int64 { return v }, targets: 3, copies: 3},
		{name: "two outputs", outs: []Output{{Part: Forward, Targets: 1}, {Part: Rebalance, Targets: 2}}, own: true,
			build: func(em any, sc *Ctx) any { return em }, want: func(v int64) int64 { return v }, targets: 3, copies: 2},
		{name: "map of another type", outs: []Output{{Part: Forward, Targets: 1}}, own: true,
			build: func(em any, sc *Ctx) any {
				return NewMap(func(v int64) int32 { return int32(v) }, NewMap(func(v int32) int64 { return int64(v) * 2 }, em, sc), sc)
			}, want: func(v int64) int64 { return v * 2 }, targets: 1},
		{name: "map of another type, reused input", outs: []Output{{Part: Forward, Targets: 1}},
			build: func(em any, sc *Ctx) any {
				return NewMap(func(v int64) int32 { return int32(v) }, NewMap(func(v int32) int64 { return int64(v) * 2 }, em, sc), sc)
			}, want: func(v int64) int64 { return v * 2 }, targets: 1},
		{name: "timestamps", outs: []Output{{Part: Forward, Targets: 1}}, own: true,
			build: func(em any, sc *Ctx) any {
				return NewTimestamps(func(v int64) time.Time { return time.Unix(0, v) }, 0, em, sc)
			}, want: func(v int64) int64 { return v }, targets: 1},
		{name: "timestamps, then maps of other types", outs: []Output{{Part: Forward, Targets: 1}}, own: true,
			build: func(em any, sc *Ctx) any {
				return NewTimestamps(func(v int64) time.Time { return time.Unix(0, v) }, 0,
					NewMap(func(v int64) int32 { return int32(v) }, NewMap(func(v int32) int64 { return int64(v) }, em, sc), sc), sc)
			}, want: func(v int64) int64 { return v }, targets: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newOutCapture()
			sc := testCtx(0, 1)
			em := NewEmitter[int64](tc.outs, size, c)
			head := tc.build(em, sc).(Pusher[int64])
			reused := make([]int64, size)
			for k := range batches {
				if tc.own {
					NewInlet[int64](head).Deliver(&Batch[int64]{Vs: input(k)})
				} else {
					copy(reused, input(k))
					head.Push(&Batch[int64]{Vs: reused})
				}
				if k%3 == 0 {
					em.Flush() // some batches ship at once, others after a merge
				}
			}
			em.Flush()
			got := shippedBatches(c)
			if len(got) != tc.targets {
				t.Fatalf("%d targets got batches, want %d", len(got), tc.targets)
			}
			var arrays [][]int64
			var times [][]int64
			var vs []int64
			for _, bs := range got {
				for _, b := range bs {
					arrays = append(arrays, b.Vs)
					times = append(times, b.Ts)
					if b.Ts != nil && !slices.Equal(b.Ts, b.Vs) { // the timestamps are the values
						t.Errorf("times %v of records %v", b.Ts, b.Vs)
					}
				}
				vs = append(vs, flat(bs)...)
			}
			var want []int64
			for range max(tc.copies, 1) {
				want = append(want, all(tc.want)...)
			}
			slices.Sort(vs)
			slices.Sort(want)
			if !slices.Equal(vs, want) {
				t.Fatalf("shipped %v, want %v", vs, want)
			}
			disjoint(t, "values", arrays)
			disjoint(t, "times", times)
			disjoint(t, "values and the reused input", append(arrays, reused))
		})
	}
}

// countingSource reads 0, 1, 2, ... up to n into the buffers it is given.
type countingSource struct{ n int64 }

func (s countingSource) Open(context.Context, int, int, int64) (connector.Reader[int64], error) {
	return &countingReader{n: s.n}, nil
}

type countingReader struct{ at, n int64 }

func (r *countingReader) Read(buf []int64) (int, error) {
	if r.at == r.n {
		return 0, io.EOF
	}
	k := 0
	for ; k < len(buf) && r.at < r.n; k++ {
		buf[k] = r.at
		r.at++
	}
	return k, nil
}
func (r *countingReader) Offset() int64 { return r.at }
func (r *countingReader) Close() error  { return nil }

// TestSourceArrayKept: a source's batch kept downstream is not read into
// again; the next read gets a new array.
func TestSourceArrayKept(t *testing.T) {
	for _, part := range []Partition{Forward, Hash} {
		t.Run(fmt.Sprint(part), func(t *testing.T) {
			c := newOutCapture()
			sc := testCtx(0, 1)
			targets := 1
			if part == Hash {
				targets = 2
			}
			em := NewEmitter[int64]([]Output{{Part: part, Targets: targets, Hasher: func(v int64) uint64 { return uint64(v) }}}, sc.BatchSize, c)
			src := NewSource[int64](countingSource{n: 100}, em, sc)
			if err := src.Open(0); err != nil {
				t.Fatal(err)
			}
			for {
				if _, err := src.Step(); err == io.EOF {
					break
				} else if err != nil {
					t.Fatal(err)
				}
				em.Flush()
			}
			var vs []int64
			var arrays [][]int64
			for _, bs := range shippedBatches(c) {
				vs = append(vs, flat(bs)...)
				for _, b := range bs {
					arrays = append(arrays, b.Vs)
				}
			}
			slices.Sort(vs)
			for i, v := range vs {
				if v != int64(i) {
					t.Fatalf("records %v, want 0..99", vs)
				}
			}
			if len(vs) != 100 {
				t.Fatalf("%d records, want 100", len(vs))
			}
			disjoint(t, "source batches", arrays)
		})
	}
}

// TestHashBuffersSized: every record of a batch on a hash edge reaches the
// target its key's group says, in order, with its time, including when a
// buffer ships full in the middle of the batch; and each target's buffer
// is sized for the records the batch brings it, not for the whole batch
// (the bytes allocated for 3 targets were 3 times the records').
func TestHashBuffersSized(t *testing.T) {
	for _, size := range []int{64, 4} { // one batch per target; several
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			const n, targets = 48, 3
			c := newOutCapture()
			hash := func(v int64) uint64 { return uint64(v) * 0x9e3779b97f4a7c15 }
			em := NewEmitter[int64]([]Output{{Part: Hash, Targets: targets, Hasher: hash}}, size, c)
			b := &Batch[int64]{}
			for v := range int64(n) {
				b.Vs, b.Ts = append(b.Vs, v), append(b.Ts, 1000+v)
			}
			em.Push(b)
			em.Flush()
			want := make([][]int64, targets)
			for v := range int64(n) {
				t := InstanceFor(hash(v), targets)
				want[t] = append(want[t], v)
			}
			got := shippedBatches(c)
			if len(got) != targets {
				t.Fatalf("records on %d channels, want %d", len(got), targets)
			}
			var arrays [][]int64
			for i, bs := range got {
				if !slices.Equal(flat(bs), want[i]) {
					t.Fatalf("target %d got %v, want %v", i, flat(bs), want[i])
				}
				for _, sb := range bs {
					if len(sb.Vs) > size || len(sb.Ts) != len(sb.Vs) {
						t.Fatalf("target %d: a batch of %d records with %d times (batch size %d)", i, len(sb.Vs), len(sb.Ts), size)
					}
					for j, v := range sb.Vs {
						if sb.Ts[j] != 1000+v {
							t.Fatalf("target %d: record %d at %d", i, v, sb.Ts[j])
						}
					}
					arrays = append(arrays, sb.Vs)
				}
			}
			disjoint(t, "hash batches", arrays)
		})
	}

	// Bytes allocated per batch of 3000 records (16 bytes each with its
	// time) on 3 targets: the records' and a little for the envelopes (the
	// race detector's allocations are larger).
	if raceEnabled {
		return
	}
	const n = 3000
	hash := func(v int64) uint64 { return uint64(v) * 0x9e3779b97f4a7c15 }
	b := &Batch[int64]{Vs: make([]int64, n), Ts: make([]int64, n)}
	for i := range n {
		b.Vs[i], b.Ts[i] = int64(i), int64(i)
	}
	var before, after runtime.MemStats
	const runs = 10
	runtime.ReadMemStats(&before)
	for range runs {
		em := NewEmitter[int64]([]Output{{Part: Hash, Targets: 3, Hasher: hash}}, 4096, newOutCapture())
		em.Push(b)
		em.Flush()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > n*16*3/2 {
		t.Fatalf("%d bytes allocated per batch of %d records (%d bytes with their times)", per, n, n*16)
	}
}
