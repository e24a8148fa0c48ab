package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/connector"
	"github.com/sluicehq/sluice/internal/graph"
	"github.com/sluicehq/sluice/internal/msgpacksafe"
	"github.com/sluicehq/sluice/persistence"
	"github.com/sluicehq/sluice/supervision"
)

const timeoutStop = 30 * time.Second

// stamped is a record with a time, as the samples' clickstream events. Its
// encoder writes nil where the time is when Poison is set: the bytes a
// damaged or hostile peer would send (msgpack v5.4.1 panics decoding them).
// It decodes as msgpack decodes any struct.
type stamped struct {
	ID     int64
	At     time.Time
	Poison bool `msgpack:"-"`
}

func (s stamped) EncodeMsgpack(enc *msgpack.Encoder) error {
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

// memSink is an exactly-once sink in memory: its position (the number of
// records) is in every checkpoint, and a restore cuts it back to it.
type memSink struct {
	mu   sync.Mutex
	rows []int64
}

type memWriter struct{ s *memSink }

func (s *memSink) Open(context.Context, int, int) (connector.Writer[int64], error) {
	s.mu.Lock()
	s.rows = s.rows[:0]
	s.mu.Unlock()
	return memWriter{s}, nil
}

func (s *memSink) OpenAt(_ context.Context, _, _ int, state []byte) (connector.Writer[int64], error) {
	if len(state) != 8 {
		return nil, fmt.Errorf("state of %d bytes", len(state))
	}
	n := binary.BigEndian.Uint64(state)
	s.mu.Lock()
	defer s.mu.Unlock()
	if n > uint64(len(s.rows)) {
		return nil, fmt.Errorf("position %d past the %d rows", n, len(s.rows))
	}
	s.rows = s.rows[:n]
	return memWriter{s}, nil
}

func (s *memSink) get() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.rows)
}

func (w memWriter) Write(vs []int64) error {
	w.s.mu.Lock()
	w.s.rows = append(w.s.rows, vs...)
	w.s.mu.Unlock()
	return nil
}

func (w memWriter) Checkpoint() ([]byte, error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	return binary.BigEndian.AppendUint64(nil, uint64(len(w.s.rows))), nil
}

func (memWriter) Close() error { return nil }

// memStore is a checkpoint store in memory that counts what it stored.
type memStore struct {
	mu     sync.Mutex
	latest map[string]persistence.Checkpoint
	stored atomic.Int64
}

func (m *memStore) Complete(_ context.Context, job string, cp persistence.Checkpoint) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.latest == nil {
		m.latest = map[string]persistence.Checkpoint{}
	}
	m.latest[job] = cp
	m.stored.Add(1)
	return nil
}

func (m *memStore) Latest(_ context.Context, job string) (persistence.Checkpoint, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cp, ok := m.latest[job]
	return cp, ok, nil
}

func (m *memStore) Clear(_ context.Context, job string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.latest, job)
	return nil
}

// logCapture keeps the messages and errors of warnings.
type logCapture struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logCapture) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }
func (l *logCapture) WithAttrs([]slog.Attr) slog.Handler            { return l }
func (l *logCapture) WithGroup(string) slog.Handler                 { return l }
func (l *logCapture) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	l.mu.Lock()
	l.msgs = append(l.msgs, b.String())
	l.mu.Unlock()
	return nil
}

func (l *logCapture) find(sub string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.msgs {
		if strings.Contains(m, sub) {
			return m
		}
	}
	return ""
}

// TestRemoteBatchThatDoesNotDecode: a batch from another process whose
// record type has a time.Time, with nil where the time is. The receiving
// side does not panic (the bridge's delivery goroutine has no recover: a
// panic would end the test binary); the instance fails with an error
// naming the type and the field, counted by the Distributor; the job
// restarts from its last checkpoint and its output equals that of the run
// without the damage.
func TestRemoteBatchThatDoesNotDecode(t *testing.T) {
	const n = 100_000
	want := make([]int64, n)
	for i := range want {
		want[i] = 3 * int64(i)
	}
	for _, poisoned := range []bool{false, true} {
		t.Run(fmt.Sprintf("poisoned=%v", poisoned), func(t *testing.T) {
			store := &memStore{}
			sink := &memSink{}
			var fired atomic.Bool
			build := func() *graph.Topology {
				top := graph.NewTopology("remote-decode", graph.BatchSize(64), graph.Checkpoints(2*time.Millisecond), graph.CheckpointStore(store),
					graph.RestartOnFailure(supervision.Backoff{Initial: time.Millisecond, Max: 4 * time.Millisecond, Multiplier: 2, Jitter: supervision.NoJitter}, 3, time.Minute))
				src := graph.Source[int64](top, "numbers", numbers(n))
				st := graph.Map(src, "stamp", func(v int64) stamped {
					s := stamped{ID: v, At: time.Unix(1_700_000_000+v, 0).UTC()}
					// The first record after a checkpoint completed, once.
					s.Poison = poisoned && store.stored.Load() > 0 && fired.CompareAndSwap(false, true)
					return s
				})
				out := graph.Map(st, "check", func(s stamped) int64 {
					if s.At.Unix() != 1_700_000_000+s.ID {
						panic(fmt.Sprintf("record %d: time %v", s.ID, s.At))
					}
					return 3 * s.ID
				}, graph.NoFusion())
				graph.Sink[int64](out, "out", sink, graph.NoFusion())
				return top
			}
			logs := &logCapture{}
			a, b := bridged(t, build, actors.Config{Logger: slog.New(logs)})
			top := build()
			top.Configure(graph.Distribute(a))
			ctx, cancel := context.WithTimeout(context.Background(), timeoutStop)
			defer cancel()
			run, err := a.sys.Run(ctx, Job{top})
			if err != nil {
				t.Fatal(err)
			}
			if err := run.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if got := PlacementOf(run); got["b:1"] != 1 {
				t.Fatalf("placement %v: the check map is not in the other system", got)
			}
			st := CheckpointStatsOf(run)
			bad := b.undecodables()
			if !poisoned {
				if st.Restarts != 0 || len(bad) != 0 {
					t.Fatalf("without damage: %d restarts, undecodable %v", st.Restarts, bad)
				}
			} else {
				if !fired.Load() {
					t.Fatal("no record was poisoned: the source ended before a checkpoint")
				}
				if st.Restarts != 1 || st.RestoredFrom == 0 {
					t.Fatalf("restarts %d, restored from %d: want one restart from a checkpoint", st.Restarts, st.RestoredFrom)
				}
				if len(bad) != 1 {
					t.Fatalf("%d undecodable batches counted, want 1: %v", len(bad), bad)
				}
				err := bad[0]
				var me *msgpacksafe.Error
				if !errors.Is(err, ErrUndecodable) || !errors.Is(err, msgpacksafe.ErrMalformed) || !errors.As(err, &me) {
					t.Fatalf("error %v: want ErrUndecodable and a msgpacksafe.ErrMalformed", err)
				}
				if msg := err.Error(); !strings.Contains(msg, "engine.stamped") || !strings.Contains(me.Path, ".At") {
					t.Fatalf("error %q (path %q) does not name the type and the field", msg, me.Path)
				}
				if l := logs.find("restarting the job"); !strings.Contains(l, "engine.stamped") || !strings.Contains(l, ".At") {
					t.Fatalf("the restart's log %q does not name the type and the field", l)
				}
				t.Logf("instance failed with: %v", err)
			}
			if got := sink.get(); !slices.Equal(got, want) {
				t.Fatalf("output of %d records differs from the %d expected", len(got), len(want))
			}
		})
	}
}
