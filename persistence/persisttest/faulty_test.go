package persisttest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/persistence"
	"github.com/sluicehq/sluice/persistence/persisttest"
	"github.com/sluicehq/sluice/supervision"
)

// TestMain fails the package when a test leaves a goroutine behind. The
// ignored goroutine is protoactor's dead-letter throttle (see
// actors/actors_test.go).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
	)
}

const wait = 10 * time.Second

// With no fault armed, the faulty stores keep the contract of the stores
// they wrap: the conformance suite passes through them.
func TestFaultyStoresConform(t *testing.T) {
	t.Run("Journal", func(t *testing.T) {
		persisttest.TestJournal(t, func(t *testing.T) persistence.Journal { return persisttest.NewFaultyJournal(nil) })
	})
	t.Run("SnapshotStore", func(t *testing.T) {
		persisttest.TestSnapshotStore(t, func(t *testing.T) persistence.SnapshotStore { return persisttest.NewFaultySnapshotStore(nil) })
	})
	t.Run("CheckpointStore", func(t *testing.T) {
		persisttest.TestCheckpointStore(t, func(t *testing.T) persistence.CheckpointStore {
			return persisttest.NewFaultyCheckpointStore(nil)
		})
	})
	t.Run("BoltJournal", func(t *testing.T) {
		persisttest.TestJournal(t, func(t *testing.T) persistence.Journal {
			s, err := persistence.Open(filepath.Join(t.TempDir(), "store.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return persisttest.NewFaultyJournal(s.Journal())
		})
	})
}

func event(seq uint64, data string) persistence.Event {
	return persistence.Event{Seq: seq, Type: "e", Data: []byte(data)}
}

func replayAll(t *testing.T, j persistence.Journal, id string) []persistence.Event {
	t.Helper()
	var out []persistence.Event
	if err := j.Replay(context.Background(), id, 1, math.MaxUint64, -1, func(e persistence.Event) error {
		out = append(out, e)
		return nil
	}); err != nil {
		t.Fatalf("Replay(%q) = %v", id, err)
	}
	return out
}

func highest(t *testing.T, j persistence.Journal, id string) uint64 {
	t.Helper()
	h, err := j.HighestSeq(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestFailNextWrite(t *testing.T) {
	ctx := context.Background()
	t.Run("Journal", func(t *testing.T) {
		j := persisttest.NewFaultyJournal(nil)
		errDisk := errors.New("disk on fire")
		j.FailNextWrite(errDisk)
		err := j.Append(ctx, "a", []persistence.Event{event(1, "x")})
		if !errors.Is(err, errDisk) || !errors.Is(err, persisttest.ErrInjected) {
			t.Fatalf("Append = %v, want the injected error", err)
		}
		if want := `persisttest: journal "a": append: injected fault: disk on fire`; err.Error() != want {
			t.Errorf("error %q, want %q", err, want)
		}
		if h := highest(t, j, "a"); h != 0 {
			t.Fatalf("HighestSeq = %d after a failed append, want 0", h)
		}
		if err := j.Append(ctx, "a", []persistence.Event{event(1, "x")}); err != nil {
			t.Fatalf("the write after the failed one = %v", err)
		}
		j.FailNextWrite(nil)
		if err := j.DeleteTo(ctx, "a", 1); !errors.Is(err, persisttest.ErrInjected) || err.Error() != `persisttest: journal "a": delete to 1: injected fault` {
			t.Fatalf("DeleteTo = %v, want ErrInjected", err)
		}
		if got := replayAll(t, j, "a"); len(got) != 1 {
			t.Fatalf("%d events after a failed delete, want 1", len(got))
		}
		want := persisttest.Counts{Writes: 3, Reads: 2, FailedWrites: 2, BytesWritten: 1}
		if c := j.Counts(); c != want {
			t.Errorf("Counts = %+v, want %+v", c, want)
		}
	})
	t.Run("SnapshotStore", func(t *testing.T) {
		s := persisttest.NewFaultySnapshotStore(nil)
		s.FailNextWrite(nil)
		if err := s.Save(ctx, "a", persistence.Snapshot{Seq: 3, Data: []byte{0x80}}); !errors.Is(err, persisttest.ErrInjected) {
			t.Fatalf("Save = %v, want ErrInjected", err)
		}
		if _, ok, err := s.Latest(ctx, "a"); ok || err != nil {
			t.Fatalf("Latest after a failed save = %v, %v", ok, err)
		}
	})
	t.Run("CheckpointStore", func(t *testing.T) {
		s := persisttest.NewFaultyCheckpointStore(nil)
		s.FailNextWrite(nil)
		if err := s.Complete(ctx, "job", persistence.Checkpoint{ID: 1}); !errors.Is(err, persisttest.ErrInjected) {
			t.Fatalf("Complete = %v, want ErrInjected", err)
		}
		if _, ok, err := s.Latest(ctx, "job"); ok || err != nil {
			t.Fatalf("Latest after a failed complete = %v, %v", ok, err)
		}
		s.FailNextWrite(nil)
		if err := s.Clear(ctx, "job"); !errors.Is(err, persisttest.ErrInjected) {
			t.Fatalf("Clear = %v, want ErrInjected", err)
		}
	})
}

func TestFailNextRead(t *testing.T) {
	ctx := context.Background()
	j := persisttest.NewFaultyJournal(nil)
	if err := j.Append(ctx, "a", []persistence.Event{event(1, "x")}); err != nil {
		t.Fatal(err)
	}
	j.FailNextRead(syscall.EIO)
	called := false
	err := j.Replay(ctx, "a", 1, 10, -1, func(persistence.Event) error { called = true; return nil })
	if !errors.Is(err, syscall.EIO) || called {
		t.Fatalf("Replay = %v (fn called: %v), want EIO before any event", err, called)
	}
	if h := highest(t, j, "a"); h != 1 { // once only
		t.Fatalf("HighestSeq = %d", h)
	}
	s := persisttest.NewFaultySnapshotStore(nil)
	s.FailNextRead(nil)
	if _, _, err := s.Latest(ctx, "a"); !errors.Is(err, persisttest.ErrInjected) {
		t.Fatalf("snapshot Latest = %v", err)
	}
	c := persisttest.NewFaultyCheckpointStore(nil)
	c.FailNextRead(nil)
	if _, _, err := c.Latest(ctx, "job"); !errors.Is(err, persisttest.ErrInjected) {
		t.Fatalf("checkpoint Latest = %v", err)
	}
	if got := j.Counts(); got.FailedReads != 1 || got.Reads != 2 {
		t.Errorf("journal Counts = %+v, want 2 reads, 1 failed", got)
	}
}

func TestFailAfterBytes(t *testing.T) {
	ctx := context.Background()
	j := persisttest.NewFaultyJournal(nil)
	ten := strings.Repeat("x", 10)
	if err := j.Append(ctx, "a", []persistence.Event{event(1, ten)}); err != nil { // before: not counted
		t.Fatal(err)
	}
	j.FailAfterBytes(25, syscall.ENOSPC)
	if err := j.Append(ctx, "a", []persistence.Event{event(2, ten), event(3, ten)}); err != nil { // 20 of 25
		t.Fatal(err)
	}
	// A write refused by the journal itself writes nothing, and uses none
	// of the bytes.
	if err := j.Append(ctx, "a", []persistence.Event{event(9, "xxxx")}); !errors.Is(err, persistence.ErrSeqConflict) {
		t.Fatalf("Append with a gap = %v, want ErrSeqConflict", err)
	}
	err := j.Append(ctx, "a", []persistence.Event{event(4, ten)}) // 30 > 25
	if !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, persisttest.ErrInjected) {
		t.Fatalf("Append past the limit = %v, want ENOSPC", err)
	}
	if want := `persisttest: journal "a": append: byte limit reached (20/25 used): injected fault: no space left on device`; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	// Once full, every write fails, however small.
	if err := j.Append(ctx, "a", []persistence.Event{event(4, "x")}); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a 1-byte append after the limit = %v, want ENOSPC", err)
	}
	if err := j.DeleteTo(ctx, "a", 1); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("DeleteTo after the limit = %v, want ENOSPC", err)
	}
	if h := highest(t, j, "a"); h != 3 {
		t.Fatalf("HighestSeq = %d, want 3", h)
	}
	j.Heal()
	if err := j.Append(ctx, "a", []persistence.Event{event(4, ten)}); err != nil {
		t.Fatalf("Append after Heal = %v", err)
	}
	want := persisttest.Counts{Writes: 7, Reads: 1, FailedWrites: 3, BytesWritten: 40}
	if c := j.Counts(); c != want {
		t.Errorf("Counts = %+v, want %+v", c, want)
	}

	// Snapshots and checkpoints count their payloads.
	s := persisttest.NewFaultySnapshotStore(nil)
	s.FailAfterBytes(4, nil)
	if err := s.Save(ctx, "a", persistence.Snapshot{Seq: 1, Data: []byte("abcd")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, "a", persistence.Snapshot{Seq: 2, Data: []byte("e")}); !errors.Is(err, persisttest.ErrInjected) {
		t.Fatalf("Save past the limit = %v", err)
	}
	c := persisttest.NewFaultyCheckpointStore(nil)
	c.FailAfterBytes(5, nil)
	if err := c.Complete(ctx, "job", persistence.Checkpoint{ID: 1, States: map[string][]byte{"a/0": []byte("abc"), "a/1": []byte("de")}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Complete(ctx, "job", persistence.Checkpoint{ID: 2, States: map[string][]byte{"a/0": []byte("f")}}); !errors.Is(err, persisttest.ErrInjected) {
		t.Fatalf("Complete past the limit = %v", err)
	}
	if got := c.Counts().BytesWritten; got != 5 {
		t.Errorf("checkpoint BytesWritten = %d, want 5", got)
	}
}

func TestCorruptReads(t *testing.T) {
	ctx := context.Background()
	reg := persistence.NewRegistry().Register("e", "")
	j := persisttest.NewFaultyJournal(nil)
	var batch []persistence.Event
	for i := uint64(1); i <= 3; i++ {
		_, data, err := reg.Encode(fmt.Sprint("event ", i))
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, persistence.Event{Seq: i, Type: "e", Data: data})
	}
	if err := j.Append(ctx, "a", batch); err != nil {
		t.Fatal(err)
	}
	decodes := func() []bool {
		var out []bool
		for _, e := range replayAll(t, j, "a") {
			_, err := reg.Decode(e.Type, e.Data)
			if err != nil && !errors.Is(err, persistence.ErrDecode) {
				t.Fatalf("decode error %v is not ErrDecode", err)
			}
			out = append(out, err == nil)
		}
		return out
	}
	j.CorruptNextRead()
	if got := decodes(); fmt.Sprint(got) != "[false true true]" {
		t.Fatalf("after CorruptNextRead, events decode: %v; want only the first corrupt", got)
	}
	if got := decodes(); fmt.Sprint(got) != "[true true true]" {
		t.Fatalf("the read after: %v; want all intact", got)
	}
	j.CorruptReads(true)
	if got := decodes(); fmt.Sprint(got) != "[false false false]" {
		t.Fatalf("with CorruptReads: %v; want all corrupt", got)
	}
	j.CorruptReads(false)
	if got := decodes(); fmt.Sprint(got) != "[true true true]" {
		t.Fatalf("after CorruptReads(false): %v; want all intact", got)
	}
	// The stored events were not touched.
	if got := replayAll(t, j.Inner(), "a"); !bytes.Equal(got[0].Data, batch[0].Data) {
		t.Fatal("corruption reached the wrapped journal")
	}
	if c := j.Counts(); c.Corrupted != 4 {
		t.Errorf("Corrupted = %d, want 4", c.Corrupted)
	}

	s := persisttest.NewFaultySnapshotStore(nil)
	if err := s.Save(ctx, "a", persistence.Snapshot{Seq: 1, Data: []byte{0x80}}); err != nil {
		t.Fatal(err)
	}
	s.CorruptNextRead()
	if snap, _, _ := s.Latest(ctx, "a"); !bytes.Equal(snap.Data, []byte{0xc1}) {
		t.Fatalf("corrupt snapshot data %x, want c1", snap.Data)
	}
	if snap, _, _ := s.Latest(ctx, "a"); !bytes.Equal(snap.Data, []byte{0x80}) {
		t.Fatalf("snapshot data %x after the corrupt read, want 80", snap.Data)
	}

	c := persisttest.NewFaultyCheckpointStore(nil)
	if err := c.Complete(ctx, "job", persistence.Checkpoint{ID: 1, States: map[string][]byte{"a/0": {0x01, 0x02}}, Offsets: map[string]int64{"src/0": 7}}); err != nil {
		t.Fatal(err)
	}
	c.CorruptReads(true)
	cp, _, _ := c.Latest(ctx, "job")
	if !bytes.Equal(cp.States["a/0"], []byte{0xc1, 0xfd}) || cp.Offsets["src/0"] != 7 {
		t.Fatalf("corrupt checkpoint %+v, want the state corrupt and the offsets intact", cp)
	}
}

func TestCorrupt(t *testing.T) {
	for _, data := range [][]byte{nil, {0x80}, []byte("\x92\x01\x02"), bytes.Repeat([]byte{0xc1}, 5)} {
		got := persisttest.Corrupt(data)
		if len(got) != max(len(data), 1) || got[0] != 0xc1 {
			t.Errorf("Corrupt(%x) = %x", data, got)
		}
		if len(data) > 0 && bytes.Equal(got, data) && data[0] != 0xc1 {
			t.Errorf("Corrupt(%x) left it unchanged", data)
		}
	}
}

// Counter is an event-sourced counter, the code under test below.
type (
	added   struct{ N int }
	counter struct{ Total int }
)

func counterBehavior(j persistence.Journal, s persistence.SnapshotStore, every uint64) persistence.Behavior[counter, int, added] {
	return persistence.Behavior[counter, int, added]{
		ID:            "counter",
		Journal:       j,
		Snapshots:     s,
		SnapshotEvery: every,
		Events:        persistence.NewRegistry().Register("added", added{}),
		Handle: func(_ counter, n int) ([]added, any, error) {
			return []added{{n}}, nil, nil
		},
		Apply: func(c counter, e added) counter { return counter{c.Total + e.N} },
	}
}

// spawnCounter spawns the counter on sys under a supervisor that stops it
// when it fails, and returns the failures it sees.
func spawnCounter(t *testing.T, sys *actors.System, name string, b persistence.Behavior[counter, int, added]) (*actors.Ref, <-chan error) {
	t.Helper()
	failures := make(chan error, 1)
	strategy, err := supervision.NewStrategy(supervision.WithDecider(func(err error) supervision.Directive {
		select {
		case failures <- err:
		default:
		}
		return supervision.Stop
	}))
	if err != nil {
		t.Fatal(err)
	}
	p, err := persistence.EventSourced(b)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := sys.Spawn(name, p, actors.Supervise(strategy))
	if err != nil {
		t.Fatal(err)
	}
	return ref, failures
}

func newSystem(t *testing.T) *actors.System {
	t.Helper()
	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := sys.Stop(ctx); err != nil {
			t.Errorf("System.Stop: %v", err)
		}
	})
	return sys
}

func request(t *testing.T, ref *actors.Ref, msg any) any {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	reply, err := ref.Request(ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	return reply
}

// wantRecoveryError waits for the supervisor to hear of a *RecoveryError
// at seq that is a decode error.
func wantRecoveryError(t *testing.T, failures <-chan error, seq uint64) {
	t.Helper()
	select {
	case err := <-failures:
		var re *persistence.RecoveryError
		if !errors.As(err, &re) || re.ID != "counter" || re.Seq != seq || !errors.Is(err, persistence.ErrDecode) {
			t.Fatalf("supervisor got %T %v; want a *RecoveryError of a decode at seq %d", err, err, seq)
		}
	case <-time.After(wait):
		t.Fatal("the supervisor heard of no failure")
	}
}

// An event-sourced actor whose journal returns a corrupt event fails to
// recover with a *RecoveryError that names the event; its supervisor
// receives it. With the fault gone, the next actor recovers.
func TestEventSourcedRecoveryFromCorruptJournal(t *testing.T) {
	sys := newSystem(t)
	j := persisttest.NewFaultyJournal(nil)
	ref, _ := spawnCounter(t, sys, "counter-1", counterBehavior(j, nil, 0))
	for _, n := range []int{1, 2, 3} {
		request(t, ref, n)
	}
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	if err := ref.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	j.CorruptNextRead()
	_, failures := spawnCounter(t, sys, "counter-2", counterBehavior(j, nil, 0))
	wantRecoveryError(t, failures, 1)

	ref, _ = spawnCounter(t, sys, "counter-3", counterBehavior(j, nil, 0))
	if got := request(t, ref, persistence.GetState{}); got != (counter{6}) {
		t.Fatalf("state %+v after the fault, want {6}", got)
	}
}

// A corrupt snapshot fails recovery at the snapshot's seq.
func TestEventSourcedRecoveryFromCorruptSnapshot(t *testing.T) {
	sys := newSystem(t)
	j, s := persisttest.NewFaultyJournal(nil), persisttest.NewFaultySnapshotStore(nil)
	ref, _ := spawnCounter(t, sys, "counter-1", counterBehavior(j, s, 2))
	for _, n := range []int{1, 2, 3} {
		request(t, ref, n)
	}
	if c := s.Counts(); c.Writes != 1 {
		t.Fatalf("%d snapshots saved, want 1 (at seq 2)", c.Writes)
	}
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	if err := ref.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	s.CorruptNextRead()
	_, failures := spawnCounter(t, sys, "counter-2", counterBehavior(j, s, 2))
	wantRecoveryError(t, failures, 2)
}

// A journal that fails a write makes the command fail and changes nothing.
func TestEventSourcedFailedAppend(t *testing.T) {
	sys := newSystem(t)
	j := persisttest.NewFaultyJournal(nil)
	ref, _ := spawnCounter(t, sys, "counter", counterBehavior(j, nil, 0))
	request(t, ref, 5)
	j.FailAfterBytes(0, syscall.ENOSPC)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := ref.Request(ctx, 7); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("command on a full disk replied %v, want ENOSPC", err)
	}
	if got := request(t, ref, persistence.GetState{}); got != (counter{5}) {
		t.Fatalf("state %+v, want {5}", got)
	}
}

// Faults are armed while other goroutines use the store: run with -race.
func TestFaultsConcurrently(t *testing.T) {
	ctx := context.Background()
	j := persisttest.NewFaultyJournal(nil)
	var wg sync.WaitGroup
	var failed sync.Map
	for g := range 4 {
		wg.Go(func() {
			id := fmt.Sprint("id-", g)
			seq := uint64(1)
			for range 100 {
				err := j.Append(ctx, id, []persistence.Event{event(seq, "x")})
				switch {
				case err == nil:
					seq++
				case errors.Is(err, persisttest.ErrInjected):
					failed.Store(id, true)
				default:
					t.Errorf("Append = %v", err)
				}
				_ = j.Replay(ctx, id, 1, math.MaxUint64, -1, func(persistence.Event) error { return nil })
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			j.FailNextWrite(nil)
			j.CorruptNextRead()
			j.CorruptReads(true)
			j.CorruptReads(false)
			_ = j.Counts()
		}
	})
	wg.Wait()
	c := j.Counts()
	if c.Writes != 400 || c.FailedWrites > 50 || c.BytesWritten != int64(400-c.FailedWrites) {
		t.Errorf("Counts = %+v: want 400 writes, at most 50 failed, a byte per success", c)
	}
	var total uint64
	for g := range 4 {
		total += highest(t, j, fmt.Sprint("id-", g))
	}
	if total != uint64(400-c.FailedWrites) {
		t.Errorf("%d events stored, want %d", total, 400-c.FailedWrites)
	}
}
