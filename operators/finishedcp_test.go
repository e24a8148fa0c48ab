package operators_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/persistence"
)

// The jobs below read a small bounded source ("dims", read once) and an
// unbounded one ("facts"). The dims are counted on their own (emitted once,
// at their end) and, merged with the facts, by key (emitted when the job is
// drained). Checkpoints must go on after the dims ended.

const (
	dimN    = 40
	dimBase = 1_000_000
	dimKeys = 5
	allKeys = 7
)

// mixedTopology builds the job; fail, when not nil, is asked before each
// fact whether the "check" operator fails on it.
func mixedTopology(dir string, dimOut *operators.Collector[operators.KV[int64, int64]], fail func() bool, opts ...operators.TopologyOption) *operators.Topology {
	t := operators.NewTopology("finished-sources", append([]operators.TopologyOption{operators.BatchSize(32)}, opts...)...)
	dims := operators.Source(t, "dims", operators.Generate(dimN, func(i int64) int64 { return dimBase + i }))
	facts := operators.Source(t, "facts", operators.Generate(operators.Unbounded, func(i int64) int64 { return i }))
	checked := operators.Map(facts, "check", func(v int64) int64 {
		if fail != nil && fail() {
			panic(fmt.Sprintf("fact %d", v))
		}
		return v
	})
	byDim := operators.KeyBy(dims, "dim-key", func(v int64) int64 { return v % dimKeys })
	operators.Sink(operators.Count(byDim, "dim-count", operators.Emit(operators.EmitAtEnd)), "dim-out", dimOut)

	all := operators.Merge("all", dims, checked)
	by := operators.KeyBy(all, "key", func(v int64) int64 { return v % allKeys }, operators.Parallelism(3))
	counts := operators.Count(by, "count", operators.Emit(operators.EmitAtEnd))
	operators.Sink(counts, "out", operators.File(filepath.Join(dir, "counts"), func(kv operators.KV[int64, int64]) string {
		return fmt.Sprintf("%d=%d", kv.Key, kv.Value)
	}))
	return t
}

// boltSystem is a system whose store is a real bbolt file, with its
// checkpoint store.
func boltSystem(t *testing.T) (*actors.System, context.Context, *persistence.BoltCheckpointStore) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	sys, err := actors.NewSystem(actors.Config{Name: t.Name(), Store: filepath.Join(t.TempDir(), "sluice.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sys.Stop(ctx); err != nil {
			t.Errorf("system stop: %v", err)
		}
		cancel()
	})
	db, err := sys.DB()
	if err != nil {
		t.Fatal(err)
	}
	store, err := persistence.NewBoltCheckpointStore(db)
	if err != nil {
		t.Fatal(err)
	}
	return sys, ctx, store
}

// dimsEnded waits until the dims' counts came out: the dims source and
// everything downstream of it only have finished their input.
func dimsEnded(t *testing.T, dimOut *operators.Collector[operators.KV[int64, int64]]) {
	t.Helper()
	waitFor(t, "the dims' counts", func() bool { return dimOut.Len() >= dimKeys })
}

// checkMixedOutput compares the job's output with a model: the dims once
// and the facts before the drained job's final offset, each counted once.
func checkMixedOutput(t *testing.T, ctx context.Context, store persistence.CheckpointStore, dir string, dimOut *operators.Collector[operators.KV[int64, int64]]) {
	t.Helper()
	cp, ok, err := store.Latest(ctx, "finished-sources")
	if err != nil || !ok {
		t.Fatalf("the drained job kept no checkpoint (%v)", err)
	}
	if got := cp.Offsets["dims/0"]; got != dimN {
		t.Errorf("the final checkpoint's dims offset is %d, want %d", got, dimN)
	}
	factsEnd := cp.Offsets["facts/0"]
	want := map[int64]int64{}
	for i := range int64(dimN) {
		want[(dimBase+i)%allKeys]++
	}
	for i := range factsEnd {
		want[i%allKeys]++
	}
	got := map[int64]int64{}
	for i := range 3 {
		f, err := os.Open(filepath.Join(dir, fmt.Sprintf("counts-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, _ := strings.Cut(sc.Text(), "=")
			key, err1 := strconv.ParseInt(k, 10, 64)
			n, err2 := strconv.ParseInt(v, 10, 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("counts-%d: bad line %q", i, sc.Text())
			}
			if _, dup := got[key]; dup {
				t.Errorf("key %d emitted twice", key)
			}
			got[key] = n
		}
		f.Close()
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("counts by key %v, want %v (the dims once and facts 0..%d)", got, want, factsEnd)
	}
	dimWant := map[int64]int64{}
	for i := range int64(dimN) {
		dimWant[(dimBase+i)%dimKeys]++
	}
	dimGot := map[int64]int64{}
	for _, kv := range dimOut.Items() {
		dimGot[kv.Key] += kv.Value
	}
	if dimOut.Len() != dimKeys || fmt.Sprint(dimGot) != fmt.Sprint(dimWant) {
		t.Errorf("the dims' counts came out as %v (%d records), want %v once", dimOut.Items(), dimOut.Len(), dimWant)
	}
}

// Periodic checkpoints go on after the bounded source ended, and a
// savepoint can still be taken.
func TestCheckpointsContinueAfterASourceFinished(t *testing.T) {
	sys, ctx, store := boltSystem(t)
	dir := t.TempDir()
	dimOut := operators.NewCollector[operators.KV[int64, int64]]()
	run, err := sys.Run(ctx, mixedTopology(dir, dimOut, nil, operators.Checkpoints(2*time.Millisecond), operators.CheckpointStore(store)))
	if err != nil {
		t.Fatal(err)
	}
	dimsEnded(t, dimOut)
	before := operators.CheckpointStatsOf(run).Completed
	waitFor(t, "5 checkpoints after the dims ended", func() bool { return operators.CheckpointStatsOf(run).Completed >= before+5 })
	id, err := operators.CheckpointNow(ctx, run)
	if err != nil {
		t.Fatalf("savepoint after the dims ended: %v", err)
	}
	cp, ok, err := store.Latest(ctx, "finished-sources")
	if err != nil || !ok || cp.ID < id {
		t.Fatalf("latest checkpoint %d (%v, %v), want the savepoint %d or later", cp.ID, ok, err, id)
	}
	if cp.Offsets["dims/0"] != dimN || cp.Offsets["facts/0"] == 0 {
		t.Errorf("checkpoint %d offsets %v: want dims at their end (%d) and facts read", cp.ID, cp.Offsets, dimN)
	}
	st := operators.CheckpointStatsOf(run)
	t.Logf("%d checkpoints completed, %d after the dims ended; savepoint %d", st.Completed, st.Completed-before, id)
	if st.Failed != 0 {
		t.Errorf("%d checkpoints failed", st.Failed)
	}
	if err := run.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	checkMixedOutput(t, ctx, store, dir, dimOut)

	// A run resumed from the drained job's final checkpoint reads on from
	// the facts' offset, while the dims stay finished: nothing read or
	// emitted again on their side.
	cp, _, _ = store.Latest(ctx, "finished-sources")
	again := operators.NewCollector[operators.KV[int64, int64]]()
	run, err = sys.Run(ctx, mixedTopology(dir, again, nil, operators.Checkpoints(time.Hour), operators.CheckpointStore(store)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operators.CheckpointNow(ctx, run); err != nil {
		t.Fatalf("savepoint in the resumed run: %v", err)
	}
	if err := run.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if got := stat(t, run, "dims"); got.Out != 0 || again.Len() != 0 {
		t.Errorf("the resumed run read %d dims and emitted %v; want none", got.Out, again.Items())
	}
	next, _, _ := store.Latest(ctx, "finished-sources")
	if next.Offsets["dims/0"] != dimN || next.Offsets["facts/0"] <= cp.Offsets["facts/0"] {
		t.Errorf("resumed run's final offsets %v, want dims at %d and facts past %d", next.Offsets, dimN, cp.Offsets["facts/0"])
	}
}

// A restart after the bounded source ended restores a checkpoint taken
// after its end: the dims are neither read nor counted again, and their
// counts are not emitted a second time. The output equals the model.
func TestRestartAfterASourceFinishedIsExactlyOnce(t *testing.T) {
	sys, ctx, store := boltSystem(t)
	dir := t.TempDir()
	dimOut := operators.NewCollector[operators.KV[int64, int64]]()
	var armed atomic.Bool
	run, err := sys.Run(ctx, mixedTopology(dir, dimOut, func() bool { return armed.CompareAndSwap(true, false) },
		operators.Checkpoints(time.Hour), operators.CheckpointStore(store),
		operators.RestartOnFailure(quickBackoff, 3, time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	dimsEnded(t, dimOut)
	id, err := operators.CheckpointNow(ctx, run)
	if err != nil {
		t.Fatalf("savepoint after the dims ended: %v", err)
	}
	if cp, ok, _ := store.Latest(ctx, "finished-sources"); !ok || cp.ID != id || cp.Offsets["dims/0"] != dimN {
		t.Fatalf("latest checkpoint %d (offsets %v), want savepoint %d with the dims at their end", cp.ID, cp.Offsets, id)
	}
	armed.Store(true)
	waitFor(t, "the restart", func() bool {
		st := operators.CheckpointStatsOf(run)
		return st.Restarts == 1 && st.RestoredFrom != 0
	})
	if from := operators.CheckpointStatsOf(run).RestoredFrom; from != id {
		t.Fatalf("the restart restored checkpoint %d, want %d (taken after the dims ended)", from, id)
	}
	// The restored job checkpoints too, with the dims' instances finished
	// from the start.
	id2, err := operators.CheckpointNow(ctx, run)
	if err != nil || id2 <= id {
		t.Fatalf("savepoint after the restart: %d, %v; want one after %d", id2, err, id)
	}
	if err := run.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if st := operators.CheckpointStatsOf(run); st.Restarts != 1 || armed.Load() {
		t.Fatalf("restarts %d, failure pending %v: want one restart", st.Restarts, armed.Load())
	}
	checkMixedOutput(t, ctx, store, dir, dimOut)
}

// endWatch wraps a source's reader: eof is closed once Read reached the
// end, asked once Offset was asked after that (the finished source answers
// a checkpoint).
type endWatch struct {
	operators.SourceConnector[int64]
	eof, asked     chan struct{}
	eofOnce, askOn sync.Once
}

func (w *endWatch) Open(ctx context.Context, part, parts int, offset int64) (operators.Reader[int64], error) {
	r, err := w.SourceConnector.Open(ctx, part, parts, offset)
	return &endWatchReader{r, w, false}, err
}

type endWatchReader struct {
	operators.Reader[int64]
	w     *endWatch
	ended bool
}

func (r *endWatchReader) Read(buf []int64) (int, error) {
	n, err := r.Reader.Read(buf)
	if errors.Is(err, io.EOF) {
		r.ended = true
		r.w.eofOnce.Do(func() { close(r.w.eof) })
	}
	return n, err
}

func (r *endWatchReader) Offset() int64 {
	if r.ended {
		r.w.askOn.Do(func() { close(r.w.asked) })
	}
	return r.Reader.Offset()
}

// A checkpoint announced while an operator downstream of a finished source
// still holds that source's end-of-stream behind a blocked output: the
// operator answers it when its input ends (no barrier will come on it).
// The sink gate holds the first record so that "slow" is blocked with the
// end-of-stream stashed when the checkpoint reaches it.
func TestCheckpointAnsweredAtEndOfInput(t *testing.T) {
	sys, ctx, store := boltSystem(t)
	const n = 1000
	src := &endWatch{SourceConnector: operators.Generate(n, func(i int64) int64 { return i }),
		eof: make(chan struct{}), asked: make(chan struct{})}
	held, release := make(chan struct{}), make(chan struct{})
	var got atomic.Int64
	var holdOnce sync.Once
	top := operators.NewTopology("answered-at-end", operators.BatchSize(8), operators.Checkpoints(time.Hour), operators.CheckpointStore(store))
	dims := operators.Source(top, "dims", src)
	slow := operators.Map(dims, "slow", func(v int64) int64 { return v }, operators.NoFusion(), operators.Input(mailbox.Block(4*n)))
	operators.Sink(slow, "gate", operators.SinkFunc(func(int64) error {
		holdOnce.Do(func() { close(held); <-release })
		got.Add(1)
		return nil
	}), operators.Input(mailbox.Block(8)))
	facts := operators.Source(top, "facts", operators.Generate(operators.Unbounded, func(i int64) int64 { return i }))
	operators.Sink(facts, "drop", operators.SinkFunc(func(int64) error { return nil }))

	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	<-held
	<-src.eof
	done := make(chan error, 1)
	var id uint64
	go func() {
		var err error
		id, err = operators.CheckpointNow(ctx, run)
		done <- err
	}()
	select {
	case <-src.asked: // the finished source answered: the job announced the checkpoint
	case <-ctx.Done():
		t.Fatal("the finished source was never asked for its offset")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("savepoint: %v", err)
	}
	if c := got.Load(); c != n {
		t.Fatalf("the gate got %d records by checkpoint %d, want all %d (the dims path answers only once it ended)", c, id, n)
	}
	cp, ok, err := store.Latest(ctx, "answered-at-end")
	if err != nil || !ok || cp.ID != id || cp.Offsets["dims/0"] != n {
		t.Fatalf("latest checkpoint %d %v (%v): want %d with dims at %d", cp.ID, cp.Offsets, err, id, n)
	}
	if err := run.Drain(ctx); err != nil {
		t.Fatal(err)
	}
}
