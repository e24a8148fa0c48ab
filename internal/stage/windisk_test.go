package stage

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/state"
)

type winRec struct {
	K string
	V int64
}

type winRes struct {
	K          string
	Start, End int64
	Sum, N     int64
}

func winTestFns() WinFns[string, winRec, [2]int64, winRes] {
	return WinFns[string, winRec, [2]int64, winRes]{
		Key:   func(r winRec) string { return r.K },
		Zero:  func() [2]int64 { return [2]int64{} },
		Add:   func(a [2]int64, r winRec) [2]int64 { return [2]int64{a[0] + r.V, a[1] + 1} },
		Merge: func(a, b [2]int64) [2]int64 { return [2]int64{a[0] + b[0], a[1] + b[1]} },
		Emit: func(k string, start, end int64, a [2]int64, out func(winRes)) {
			out(winRes{k, start, end, a[0], a[1]})
		},
	}
}

// winInput is batches of records over keys, out of order within a bound,
// some later than the watermark, each batch followed by a watermark.
type winBatch struct {
	vs []winRec
	ts []int64
	wm int64
}

func winInput(keys, batches int) []winBatch {
	r := rand.New(rand.NewPCG(1, 2))
	var out []winBatch
	var now int64
	for range batches {
		var b winBatch
		for range 40 {
			now += int64(r.IntN(3))
			t := now - int64(r.IntN(20)) // out of order
			if r.IntN(25) == 0 {
				t -= 40 + int64(r.IntN(100)) // late: behind the watermark, some within the lateness
			}
			b.vs = append(b.vs, winRec{keyOf(r.IntN(keys)), int64(r.IntN(100))})
			b.ts = append(b.ts, t)
		}
		b.wm = now - 20
		out = append(out, b)
	}
	return out
}

type winCase struct {
	name     string
	w        Windows
	lateness time.Duration
}

var winCases = []winCase{
	{"tumbling", Tumbling(50), 0},
	{"tumbling-late", Tumbling(50), 30},
	{"sliding", Sliding(60, 20), 0},
	{"sliding-late", Sliding(60, 20), 25},
	{"sessions", Sessions(15), 0},
	{"sessions-late", Sessions(15), 30},
}

type winRun struct {
	t    *testing.T
	c    winCase
	spec func() state.Spec // the backend; nil: memory
	sink *sinkPusher[winRes]
	late int64
}

func (r *winRun) stage(i, p int) *winStage[string, winRec, [2]int64, winRes] {
	sc := testCtx(i, p)
	sc.FinalCheckpoint = true
	if r.spec != nil {
		sc.State = r.spec()
	}
	s := NewWinStage(winTestFns(), r.c.w, r.c.lateness, r.sink, sc)
	if s.tab == nil {
		r.t.Fatal(s.openErr)
	}
	r.t.Cleanup(func() { s.CloseState() })
	return s
}

// feed pushes the records of in that instance i of p owns (every one for
// p = 0).
func feed(s *winStage[string, winRec, [2]int64, winRes], in []winBatch, i, p int) {
	h := HasherFor[string]()
	for _, b := range in {
		var x Batch[winRec]
		for j, v := range b.vs {
			if p == 0 || InstanceFor(h(v.K), p) == i {
				x.Vs, x.Ts = append(x.Vs, v), append(x.Ts, b.ts[j])
			}
		}
		s.Push(&x)
		s.Watermark(b.wm)
	}
}

func sortedRes(got []winRes) []winRes {
	got = slices.Clone(got)
	slices.SortFunc(got, func(a, b winRes) int {
		return cmp.Or(cmp.Compare(a.End, b.End), cmp.Compare(a.K, b.K), cmp.Compare(a.Start, b.Start), cmp.Compare(a.Sum, b.Sum), cmp.Compare(a.N, b.N))
	})
	return got
}

// run feeds in with a checkpoint after cut batches, restored into oldP
// instances' successors at newP (0, 0: one instance, no checkpoint).
func (r *winRun) run(in []winBatch, cut, oldP, newP int) ([]winRes, int64) {
	r.sink = &sinkPusher[winRes]{}
	var late int64
	if oldP == 0 {
		s := r.stage(0, 1)
		feed(s, in, 0, 0)
		s.Finish()
		return sortedRes(r.sink.got), s.sc.C.Late.Load()
	}
	var states [][]byte
	for i := range oldP {
		s := r.stage(i, oldP)
		feed(s, in[:cut], i, oldP)
		b, err := s.SnapshotState(1)
		if err != nil {
			r.t.Fatal(err)
		}
		if !state.IsBundle(b) {
			r.t.Fatalf("window state is no bundle: %q", b[:min(len(b), 20)])
		}
		s.CommittedState(1)
		states = append(states, b)
		late += s.sc.C.Late.Load()
		r.evicted(s)
	}
	for i := range newP {
		s := r.stage(i, newP)
		lo, hi := KeyGroupRange(i, newP)
		if err := s.RestoreKeyGroups(states, lo, hi); err != nil {
			r.t.Fatal(err)
		}
		feed(s, in[cut:], i, newP)
		s.Finish()
		late += s.sc.C.Late.Load()
		r.evicted(s)
	}
	return sortedRes(r.sink.got), late
}

// evicted checks that a disk table's cache was too small for the state.
func (r *winRun) evicted(s *winStage[string, winRec, [2]int64, winRes]) {
	if d, ok := s.tab.(*state.Disk[string, []session[[2]int64]]); ok && d.Stats.Evicted == 0 {
		r.t.Errorf("the disk table evicted nothing: the test does not reach the disk")
	}
}

// TestWindowDiskStateEqualsMemory: tumbling, sliding and session windows,
// with late records and allowed lateness, emit the same results and count
// the same late records under the disk backend (a cache far too small for
// the keys), the memory backend and its changelog, across a checkpoint and
// a restore, and a rescale from 2 instances to 3 and to 1.
func TestWindowDiskStateEqualsMemory(t *testing.T) {
	in := winInput(400, 60)
	for _, c := range winCases {
		t.Run(c.name, func(t *testing.T) {
			ref := &winRun{t: t, c: c}
			want, wantLate := ref.run(in, 0, 0, 0)
			if len(want) < 100 || wantLate == 0 {
				t.Fatalf("the reference emitted %d results, %d late: the input exercises too little", len(want), wantLate)
			}
			disk := func() state.Spec { return state.Spec{Dir: t.TempDir(), Budget: 4 << 10} }
			dir := t.TempDir()
			shared := func() state.Spec { return state.Spec{Dir: dir, Budget: 4 << 10} }
			clDir := t.TempDir()
			changelog := func() state.Spec { return state.Spec{Changelog: clDir, MaxChain: 3} }
			for _, v := range []struct {
				name            string
				spec            func() state.Spec
				cut, oldP, newP int
			}{
				{"disk", disk, 0, 0, 0},
				{"memory checkpoint", nil, 30, 1, 1},
				{"disk checkpoint", shared, 30, 1, 1},
				{"changelog checkpoint", changelog, 30, 1, 1},
				{"memory 2 to 3", nil, 25, 2, 3},
				{"disk 2 to 3", shared, 20, 2, 3},
				{"disk 3 to 1", shared, 35, 3, 1},
				{"changelog 2 to 3", changelog, 40, 2, 3},
			} {
				r := &winRun{t: t, c: c, spec: v.spec}
				got, late := r.run(in, v.cut, v.oldP, v.newP)
				if late != wantLate {
					t.Errorf("%s: %d late records, want %d", v.name, late, wantLate)
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s: %d results, want %d; first difference %s", v.name, len(got), len(want), firstDiff(got, want))
				}
			}
		})
	}
}

func firstDiff(got, want []winRes) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("at %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	return "at the end"
}

// FuzzWindowRestore: a window stage's restore refuses hostile state (a
// bundle whose record or table is damaged, the format before the table)
// with an error, never a panic.
func FuzzWindowRestore(f *testing.F) {
	r := &winRun{t: &testing.T{}, c: winCases[1], sink: &sinkPusher[winRes]{}}
	s := NewWinStage(winTestFns(), r.c.w, r.c.lateness, r.sink, testCtx(0, 1))
	feed(s, winInput(5, 3), 0, 0)
	good, err := s.SnapshotState(1)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	legacy, _ := msgpack.Marshal(winState[string, [2]int64]{Wm: 5, Panes: []paneState[string, [2]int64]{{End: 10, Keys: []string{"a"}, Accs: [][2]int64{{1, 1}}}}})
	f.Add(legacy)
	meta, _ := msgpack.Marshal(winMeta{V: winMetaVersion, Wm: 3, Wins: []winMark{{End: 9, Keep: 2}}})
	bad, _ := state.Bundle(meta, []byte{0x80})
	f.Add(bad)
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, w := range []Windows{Tumbling(10), Sessions(5)} {
			s := NewWinStage(winTestFns(), w, 3, &sinkPusher[winRes]{}, testCtx(0, 1))
			if s.RestoreState(data) == nil {
				s.Watermark(math.MaxInt64 - 1) // a restored stage fires what it holds
			}
		}
	})
}

// TestWindowRestoresOldFormat: a window checkpoint of the format before
// the state table (whole maps of panes and sessions) restores into the
// table, on either backend, whole and by key-group range.
func TestWindowRestoresOldFormat(t *testing.T) {
	panes, _ := msgpack.Marshal(winState[string, [2]int64]{Wm: 15, Panes: []paneState[string, [2]int64]{
		{End: 10, Fired: true, Keys: []string{"a", "b"}, Accs: [][2]int64{{1, 1}, {2, 1}}},
		{End: 20, Keys: []string{"a", "c"}, Accs: [][2]int64{{3, 1}, {4, 2}}, Keep: 0.5},
	}})
	sess, _ := msgpack.Marshal(winState[string, [2]int64]{Wm: 15, Sess: []sessState[string, [2]int64]{
		{Key: "a", List: []session[[2]int64]{{Start: 1, End: 6, Acc: [2]int64{1, 1}, Fired: true}, {Start: 12, End: 17, Acc: [2]int64{5, 2}}}},
		{Key: "b", List: []session[[2]int64]{{Start: 14, End: 19, Acc: [2]int64{7, 1}}}},
	}})
	for _, disk := range []bool{false, true} {
		for _, c := range []struct {
			w    Windows
			b    []byte
			want []winRes
		}{
			{Tumbling(10), panes, []winRes{{"a", 10, 20, 3, 1}, {"c", 10, 20, 4, 2}}},
			{Sessions(5), sess, []winRes{{"a", 12, 17, 5, 2}, {"b", 14, 19, 7, 1}}},
		} {
			for _, p := range []int{1, 2} {
				var got []winRes
				for i := range p {
					sc := testCtx(i, p)
					if disk {
						sc.State = state.Spec{Dir: t.TempDir(), Budget: 4 << 10}
					}
					sink := &sinkPusher[winRes]{}
					s := NewWinStage(winTestFns(), c.w, 10, sink, sc)
					lo, hi := KeyGroupRange(i, p)
					if err := s.RestoreKeyGroups([][]byte{c.b}, lo, hi); err != nil {
						t.Fatal(err)
					}
					if s.wm != 15 {
						t.Fatalf("restored event time %d, want 15", s.wm)
					}
					s.Watermark(100)
					got = append(got, sink.got...)
					s.CloseState()
				}
				if got = sortedRes(got); !slices.Equal(got, c.want) {
					t.Errorf("disk %v, %v, parallelism %d: %+v, want %+v", disk, c.w, p, got, c.want)
				}
			}
		}
	}
}
