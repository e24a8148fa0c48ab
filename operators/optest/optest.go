// Package optest is a harness for testing operators and small
// sub-topologies, as Flink's operator test harnesses are: feed records with
// event times and watermarks into a real job, collect what comes out, take
// a checkpoint, crash, restore a fresh job from it and go on, and make a
// record fail on purpose.
//
// A complete test of a windowed count:
//
//	func TestPerMinute(t *testing.T) {
//		h := optest.New(t, func(in operators.Stream[string]) operators.Stream[operators.Windowed[string, int64]] {
//			byWord := operators.KeyBy(in, "by-word", func(w string) string { return w })
//			return operators.WindowCount(byWord, "count", operators.Tumbling(time.Minute))
//		})
//		h.PushAt("a", time.UnixMilli(1_000))
//		h.PushAt("a", time.UnixMilli(2_000))
//		h.Watermark(time.UnixMilli(60_000)) // the first minute is over
//		out := h.WaitOutput(1)              // [{a 00:00 00:01 2}]
//		h.Checkpoint()
//		h.PushAt("a", time.UnixMilli(61_000))
//		h = h.Restart() // a crash: a fresh job restored from the checkpoint
//		final := h.Finish() // the input ends, open windows fire
//	}
//
// The job runs on its own actors.System, with batches of one record so that
// every record and watermark is handled in the order it was pushed. The
// input is an operators.Log: a restarted job reads again what was pushed
// after its checkpoint. Outputs are collected in memory, at-least-once: a
// job restored from a checkpoint emits again what it emitted after it.
package optest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/persistence"
)

// item is one entry of the harness's input log: a record with its event
// time, or a watermark.
type item[In any] struct {
	V    In
	At   int64 // Unix ns
	Mark bool  // a watermark at At-1
}

// Option configures a Harness.
type Option func(*config)

type config struct {
	clock   operators.Clock
	timeout time.Duration
	topo    []operators.TopologyOption
}

// WithClock gives the job a clock the test controls (processing-time
// windows, idleness, state TTL, the checkpoint interval).
func WithClock(c operators.Clock) Option { return func(c2 *config) { c2.clock = c } }

// Timeout bounds every wait of the harness (default 10 s).
func Timeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// TopologyOptions adds options to the job's topology (RestartOnFailure,
// DeadLetters, ...).
func TopologyOptions(opts ...operators.TopologyOption) Option {
	return func(c *config) { c.topo = append(c.topo, opts...) }
}

// Harness runs a sub-topology from In to Out. Create it with New.
type Harness[In, Out any] struct {
	t      testing.TB
	cfg    config
	name   string
	sys    *actors.System
	log    *operators.Log[item[In]]
	store  persistence.CheckpointStore
	build  func(operators.Stream[In]) operators.Stream[Out]
	out    *operators.Collector[Out]
	run    *actors.Run
	last   int64 // the latest event time pushed
	fail   *failPoint
	closed *sync.Once
	cpLen  int // inputs covered by the last checkpoint
	base   int // inputs the current job resumed after
}

type failPoint struct {
	at   atomic.Int64 // the record that fails, 0: none
	seen atomic.Int64
}

var harnesses atomic.Int64

// New starts a job that feeds what the test pushes into build's input and
// collects build's output. The job and its system stop when the test ends.
func New[In, Out any](t testing.TB, build func(in operators.Stream[In]) operators.Stream[Out], opts ...Option) *Harness[In, Out] {
	t.Helper()
	cfg := config{timeout: 10 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	sys, err := actors.NewSystem(actors.Config{Name: "optest"})
	if err != nil {
		t.Fatalf("optest: %v", err)
	}
	h := &Harness[In, Out]{t: t, cfg: cfg, sys: sys, build: build, log: operators.NewLog[item[In]](),
		store: persistence.NewMemoryCheckpointStore(), fail: &failPoint{},
		name: fmt.Sprintf("optest-%d-%s", harnesses.Add(1), strings.ReplaceAll(t.Name(), "/", "."))}
	h.closed = new(sync.Once)
	t.Cleanup(h.Close)
	h.start()
	return h
}

// Close stops the job and its system. The test's cleanup calls it; call it
// yourself when the harness is used outside a test.
func (h *Harness[In, Out]) Close() {
	h.closed.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), h.cfg.timeout)
		defer cancel()
		if h.run != nil {
			_ = h.run.Stop(ctx)
		}
		h.log.Close()
		if err := h.sys.Stop(ctx); err != nil {
			h.t.Errorf("optest: stop: %v", err)
		}
	})
}

func (h *Harness[In, Out]) start() {
	h.t.Helper()
	opts := append([]operators.TopologyOption{operators.BatchSize(1), operators.Capacity(64),
		operators.Checkpoints(time.Hour), operators.CheckpointStore(h.store)}, h.cfg.topo...)
	if h.cfg.clock != nil {
		opts = append(opts, operators.WithClock(h.cfg.clock))
	}
	top := operators.NewTopology(h.name, opts...)
	src := operators.Source(top, "optest.input", h.log)
	ts := operators.Timestamps(src, "optest.time", func(it item[In]) time.Time { return time.Unix(0, it.At) })
	fail := h.fail
	in := operators.FlatMap(ts, "optest.records", func(it item[In]) []In {
		if it.Mark {
			return nil
		}
		if at := fail.at.Load(); at > 0 && fail.seen.Add(1) == at {
			fail.at.Store(0)
			panic(fmt.Sprintf("optest: failure injected at record %d", at))
		}
		return []In{it.V}
	})
	h.out = operators.NewCollector[Out]()
	operators.Sink(h.build(in), "optest.output", h.out)
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.timeout)
	defer cancel()
	run, err := h.sys.Run(ctx, top)
	if err != nil {
		h.t.Fatalf("optest: start: %v", err)
	}
	h.run = run
}

// Push adds a record at the latest event time pushed so far.
func (h *Harness[In, Out]) Push(vs ...In) {
	for _, v := range vs {
		h.log.Append(item[In]{V: v, At: h.last})
	}
}

// PushAt adds a record with event time at. A time at or before a watermark
// already pushed makes the record late.
func (h *Harness[In, Out]) PushAt(v In, at time.Time) {
	ns := at.UnixNano()
	h.last = max(h.last, ns)
	h.log.Append(item[In]{V: v, At: ns})
}

// Watermark says that no record at or before at follows: event-time windows
// and timers up to at fire.
func (h *Harness[In, Out]) Watermark(at time.Time) {
	ns := at.UnixNano()
	h.last = max(h.last, ns)
	h.log.Append(item[In]{At: ns + 1, Mark: true})
}

// FailAt makes the n-th record pushed from now on (1-based) fail, once,
// as if the operator under test had crashed on it: the job fails (or
// restarts, with RestartOnFailure in TopologyOptions).
func (h *Harness[In, Out]) FailAt(n int) {
	h.fail.seen.Store(0)
	h.fail.at.Store(int64(n))
}

// Output returns what the job has emitted so far.
func (h *Harness[In, Out]) Output() []Out { return h.out.Items() }

// WaitOutput waits until the job has emitted at least n records and returns
// all of them; the test fails if they do not come within the timeout.
func (h *Harness[In, Out]) WaitOutput(n int) []Out {
	h.t.Helper()
	deadline := time.NewTimer(h.cfg.timeout)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for h.out.Len() < n {
		select {
		case <-deadline.C:
			h.t.Fatalf("optest: %d outputs after %v, want %d: %v", h.out.Len(), h.cfg.timeout, n, h.out.Items())
		case <-h.run.Done():
			if h.out.Len() < n {
				h.t.Fatalf("optest: the job ended (%v) with %d outputs, want %d: %v", h.Err(), h.out.Len(), n, h.out.Items())
			}
		case <-tick.C:
		}
	}
	return h.out.Items()
}

// Checkpoint takes a checkpoint of the job now, covering everything pushed
// so far, and returns its id.
func (h *Harness[In, Out]) Checkpoint() uint64 {
	h.t.Helper()
	h.waitRead()
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.timeout)
	defer cancel()
	covered := h.log.Len()
	id, err := operators.CheckpointNow(ctx, h.run)
	if err != nil {
		h.t.Fatalf("optest: checkpoint: %v", err)
	}
	h.cpLen = covered
	return id
}

// Sync waits until every operator of the job has handled everything pushed
// so far (it takes a checkpoint, whose barrier follows the records through
// the job): after it, timers set by those records are set, and state holds
// them.
func (h *Harness[In, Out]) Sync() {
	h.t.Helper()
	h.Checkpoint()
}

// waitRead waits until the job has read everything pushed.
func (h *Harness[In, Out]) waitRead() {
	h.t.Helper()
	want := int64(h.log.Len() - h.base)
	deadline := time.NewTimer(h.cfg.timeout)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		for _, st := range h.run.Stats() {
			if st.Name == "optest.input" && st.Out >= want {
				return
			}
		}
		select {
		case <-deadline.C:
			h.t.Fatalf("optest: the job did not read its %d inputs within %v", want, h.cfg.timeout)
		case <-h.run.Done():
			h.t.Fatalf("optest: the job ended: %v", h.Err())
		case <-tick.C:
		}
	}
}

// Restart stops the job as a crash would (nothing more is emitted, open
// windows do not fire) and starts a fresh job restored from the last
// checkpoint, which reads again what was pushed after it. It returns h,
// which now drives the new job; Output starts empty again.
func (h *Harness[In, Out]) Restart() *Harness[In, Out] {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.timeout)
	defer cancel()
	_ = h.run.Stop(ctx)
	h.base = h.cpLen
	h.start()
	return h
}

// Err returns the job's outcome once it ended (nil while it runs).
func (h *Harness[In, Out]) Err() error {
	select {
	case <-h.run.Done():
		err := h.run.Execution().Err()
		if errors.Is(err, operators.ErrAborted) {
			return nil
		}
		return err
	default:
		return nil
	}
}

// WaitErr waits for the job to fail and returns its error; the test fails
// if it ends without one or runs on past the timeout.
func (h *Harness[In, Out]) WaitErr() error {
	h.t.Helper()
	select {
	case <-h.run.Done():
	case <-time.After(h.cfg.timeout):
		h.t.Fatalf("optest: the job did not fail within %v", h.cfg.timeout)
	}
	err := h.Err()
	if err == nil {
		h.t.Fatalf("optest: the job ended without an error")
	}
	return err
}

// Finish ends the input, waits for the job to end (every open window and
// timer fires) and returns all its output.
func (h *Harness[In, Out]) Finish() []Out {
	h.t.Helper()
	h.log.Close()
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.timeout)
	defer cancel()
	if err := h.run.Wait(ctx); err != nil {
		h.t.Fatalf("optest: the job failed: %v", err)
	}
	return h.out.Items()
}

// Stats returns the statistics of the operator called name.
func (h *Harness[In, Out]) Stats(name string) actors.OperatorStats {
	h.t.Helper()
	for _, st := range h.run.Stats() {
		if st.Name == name {
			return st
		}
	}
	h.t.Fatalf("optest: no operator %q", name)
	return actors.OperatorStats{}
}
