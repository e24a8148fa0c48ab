package stage

import (
	"github.com/sluicehq/sluice/internal/state"

	"fmt"
	"maps"
	"slices"
	"testing"
	"time"
)

type sinkPusher[T any] struct{ got []T }

func (p *sinkPusher[T]) Push(b *Batch[T]) { p.got = append(p.got, b.Vs...) }
func (p *sinkPusher[T]) Watermark(int64)  {}
func (p *sinkPusher[T]) Finish()          {}

func testCtx(i, p int) *Ctx {
	return &Ctx{Name: "op", Instance: i, Parts: p, C: new(Counters), BatchSize: 16,
		Now: func() time.Time { return time.UnixMilli(0) }, After: func(time.Duration, func()) func() { return func() {} }}
}

const rescaleKeys = 300

func keyOf(i int) string { return fmt.Sprintf("key-%d", i) }

// rescaleAll snapshots the stages of an old parallelism (each fed the keys
// it owns) and restores them over every new parallelism: each new instance
// holds exactly the keys of its key-group range, each once, with their
// values.
func rescaleAll[S any](t *testing.T, oldP int, build func(i, p int) S, feed func(s S, keys []string),
	snapshot func(S) []byte, restore func(s S, states [][]byte, lo, hi int) error, held func(S) map[string]string) {
	t.Helper()
	hash := HasherFor[string]()
	owned := func(i, p int) []string {
		var ks []string
		for k := range rescaleKeys {
			if InstanceFor(hash(keyOf(k)), p) == i {
				ks = append(ks, keyOf(k))
			}
		}
		return ks
	}
	var states [][]byte
	want := map[string]string{}
	for i := range oldP {
		s := build(i, oldP)
		feed(s, owned(i, oldP))
		maps.Copy(want, held(s))
		states = append(states, snapshot(s))
	}
	if len(want) != rescaleKeys {
		t.Fatalf("the old stages hold %d keys, want %d", len(want), rescaleKeys)
	}
	for _, p := range []int{1, 2, 3, 4, 7} {
		got := map[string]string{}
		for i := range p {
			s := build(i, p)
			lo, hi := KeyGroupRange(i, p)
			if err := restore(s, states, lo, hi); err != nil {
				t.Fatal(err)
			}
			h := held(s)
			for k, v := range h {
				if InstanceFor(hash(k), p) != i {
					t.Fatalf("%d -> %d: instance %d holds %q of instance %d", oldP, p, i, k, InstanceFor(hash(k), p))
				}
				if _, dup := got[k]; dup {
					t.Fatalf("%d -> %d: %q twice", oldP, p, k)
				}
				got[k] = v
			}
		}
		if !maps.Equal(got, want) {
			t.Fatalf("%d -> %d: %d keys, want %d", oldP, p, len(got), len(want))
		}
	}
}

func TestRescaleKeyedStage(t *testing.T) {
	for _, backend := range []string{"memory", "disk", "changelog"} {
		disk, changelog := backend == "disk", backend == "changelog"
		t.Run(backend, func(t *testing.T) {
			type st = *KeyedStage[string, string, int64, int64]
			dir := t.TempDir()
			var open []st
			t.Cleanup(func() {
				for _, s := range open {
					if err := s.CloseState(); err != nil {
						t.Error(err)
					}
				}
			})
			rescaleAll(t, 3, func(i, p int) st {
				sc := testCtx(i, p)
				if disk {
					sc.State = state.Spec{Dir: dir, Budget: 4 << 10} // a few dozen keys: the rest on disk
				}
				if changelog {
					sc.State, sc.FinalCheckpoint = state.Spec{Changelog: dir}, true
				}
				s := NewKeyed(func(v string) string { return v }, func(a int64, _ bool, _ string) int64 { return a + 1 },
					func(_ string, a int64) int64 { return a }, EmitAtEnd, &sinkPusher[int64]{}, sc).(st)
				open = append(open, s)
				return s
			}, func(s st, keys []string) {
				for j, k := range keys {
					if changelog && j == len(keys)/2 {
						// a base of the first half: the snapshot below is a
						// delta of the rest, and a restore reads the chain
						if _, err := s.SnapshotState(1); err != nil {
							t.Fatal(err)
						}
					}
					s.Push(&Batch[string]{Vs: slices.Repeat([]string{k}, j%5+1)})
				}
			}, func(s st) []byte {
				if changelog {
					if files, _, _ := s.mem.LastChain(); files != 1 {
						t.Fatalf("before the snapshot: a chain of %d files, want the base", files)
					}
				}
				b, err := s.SnapshotState(2)
				if err != nil {
					t.Fatal(err)
				}
				return b
			}, st.RestoreKeyGroups, func(s st) map[string]string {
				out := map[string]string{}
				n := 0
				for k, v := range s.tab.All {
					out[k] = fmt.Sprint(v)
					n++
				}
				if len(out) != n {
					panic("a key twice")
				}
				return out
			})
		})
	}
}

// backendCtxs runs f for each state backend, with a context builder
// whose disk backend has a cache of a few dozen entries (the rest on
// disk) and whose tables are closed when the test ends.
func backendCtxs(t *testing.T, f func(t *testing.T, ctx func(i, p int) *Ctx, opened func(interface{ CloseState() error }))) {
	for _, backend := range []string{"memory", "disk", "changelog"} {
		t.Run(backend, func(t *testing.T) {
			dir := t.TempDir()
			var open []interface{ CloseState() error }
			t.Cleanup(func() {
				for _, s := range open {
					if err := s.CloseState(); err != nil {
						t.Error(err)
					}
				}
			})
			f(t, func(i, p int) *Ctx {
				sc := testCtx(i, p)
				switch backend {
				case "disk":
					sc.State = state.Spec{Dir: dir, Budget: 4 << 10}
				case "changelog":
					sc.State, sc.FinalCheckpoint = state.Spec{Changelog: dir}, true
				}
				return sc
			}, func(s interface{ CloseState() error }) { open = append(open, s) })
		})
	}
}

func TestRescaleJoinStage(t *testing.T) {
	type st = *JoinStage[string, string, int, string]
	backendCtxs(t, func(t *testing.T, ctx func(i, p int) *Ctx, opened func(interface{ CloseState() error })) {
		rescaleAll(t, 2, func(i, p int) st {
			s := NewJoin(func(e Either[string, int]) string {
				if e.Right {
					return keyOf(e.R)
				}
				return e.L
			}, func(l string, r int) string { return l }, 0, &sinkPusher[string]{}, ctx(i, p)).(st)
			opened(s)
			return s
		}, func(s st, keys []string) {
			for _, k := range keys {
				var n int
				fmt.Sscanf(k, "key-%d", &n)
				s.Push(&Batch[Either[string, int]]{Vs: []Either[string, int]{{L: k}, {R: n, Right: true}}})
			}
		}, func(s st) []byte { b, err := s.SnapshotState(1); check(t, err); return b }, st.RestoreKeyGroups, func(s st) map[string]string {
			out := map[string]string{}
			for k, b := range s.t.tab.All {
				out[k] = fmt.Sprint(b.Ls, b.Rs)
			}
			return out
		})
	})
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestRescaleIntervalStage(t *testing.T) {
	type st = *IntervalStage[string, string, string, string]
	backendCtxs(t, func(t *testing.T, ctx func(i, p int) *Ctx, opened func(interface{ CloseState() error })) {
		rescaleAll(t, 4, func(i, p int) st {
			s := NewIntervalJoin(func(e Either[string, string]) string {
				if e.Right {
					return e.R
				}
				return e.L
			}, func(l, r string) string { return l + r }, -10, 10, &sinkPusher[string]{}, ctx(i, p)).(st)
			opened(s)
			return s
		}, func(s st, keys []string) {
			for j, k := range keys {
				s.Push(&Batch[Either[string, string]]{Vs: []Either[string, string]{{L: k}}, Ts: []int64{int64(j)}})
			}
			s.Watermark(-100)
		}, func(s st) []byte { b, err := s.SnapshotState(1); check(t, err); return b }, st.RestoreKeyGroups, func(s st) map[string]string {
			out := map[string]string{}
			for k, b := range s.t.tab.All {
				out[k] = fmt.Sprint(b.Ls, b.Rs)
			}
			if s.wm != -100 {
				panic(fmt.Sprintf("event time %d, want -100", s.wm))
			}
			return out
		})
	})
}

func TestRescaleProcessStage(t *testing.T) {
	type st = *ProcessStage[string, string, int, int]
	backendCtxs(t, func(t *testing.T, ctx func(i, p int) *Ctx, opened func(interface{ CloseState() error })) {
		rescaleAll(t, 3, func(i, p int) st {
			s := NewProcess(func(v string) string { return v }, func(c *ProcessContext[string, int, int], v string) {
				*c.State() += len(v)
				c.Timer(time.UnixMilli(int64(len(v))))
			}, nil, &sinkPusher[int]{}, ctx(i, p)).(st)
			opened(s)
			return s
		}, func(s st, keys []string) {
			s.Push(&Batch[string]{Vs: keys, Ts: make([]int64, len(keys))})
		}, func(s st) []byte { b, err := s.SnapshotState(1); check(t, err); return b }, st.RestoreKeyGroups, func(s st) map[string]string {
			out := map[string]string{}
			for k, v := range s.t.tab.All {
				out[k] = fmt.Sprint(*v)
			}
			timers := 0
			for k, ats := range s.allTimers(t) {
				if _, ok := out[k]; !ok {
					panic("a timer of a key without state")
				}
				timers += len(ats)
			}
			if timers != len(out) || s.dt == nil && len(s.timers) != timers {
				panic(fmt.Sprintf("%d timers for %d keys", timers, len(out)))
			}
			return out
		})
	})
}
