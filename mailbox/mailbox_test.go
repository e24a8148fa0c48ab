package mailbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/actors/actortest"
	"github.com/sluicehq/sluice/mailbox"
)

// TestMain fails the package when a test leaves a goroutine behind: every
// actor's mailbox goroutine must have exited once its gate is released.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, actortest.LeakOptions()...) // protoactor's dead-letter throttle aside
}

// waitTimeout bounds every wait on a channel. In a synctest bubble the clock
// is fake, so it only fires when the bubble is deadlocked.
const waitTimeout = 10 * time.Second

// ctl is a message whose control-ness the test chooses.
type ctl struct {
	id      string
	control bool
}

func (c ctl) IsControl() bool { return c.control }

// gate holds the actor inside Receive until released, so that the test
// controls when the mailbox is consumed.
type gate struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func newGate() *gate {
	return &gate{entered: make(chan struct{}), release: make(chan struct{})}
}

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

// harness is one protoactor actor on a bounded mailbox. The actor forwards
// every user message except gates to got, in the order it receives them.
type harness struct {
	t    *testing.T
	root *actor.RootContext
	pid  *actor.PID
	mb   *mailbox.Mailbox
	got  chan any
}

func discardLogger(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }

func newHarness(t *testing.T, cfg mailbox.Config, buffer int) *harness {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v", cfg, err)
	}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(discardLogger))
	t.Cleanup(sys.Shutdown)
	h := &harness{t: t, root: actor.NewRootContext(sys, nil), got: make(chan any, buffer)}
	receive := func(c actor.Context) {
		switch m := c.Message().(type) {
		case actor.SystemMessage, actor.AutoReceiveMessage:
			// lifecycle: *actor.Started, *actor.Stopping, ...
		case *gate:
			close(m.entered)
			<-m.release
		case string:
			if m == "boom" {
				panic("boom")
			}
			h.got <- m
		default:
			h.got <- m
		}
	}
	var created []*mailbox.Mailbox
	props := actor.PropsFromFunc(receive, actor.WithMailbox(mustProducer(t, cfg, func(mb *mailbox.Mailbox) {
		created = append(created, mb) // runs inside Spawn, on this goroutine
	})))
	h.pid = h.root.Spawn(props)
	if len(created) != 1 {
		t.Fatalf("producer reported %d mailboxes for one spawn, want 1", len(created))
	}
	h.mb = created[0]
	return h
}

// hold puts a gate through TryPut and waits until the actor is blocked on
// it; the mailbox is then empty and nothing is consumed until release is
// called. Cleanup releases the gate in any case.
func (h *harness) hold() (release func()) {
	h.t.Helper()
	g := h.putGate()
	h.waitEntered(g)
	return g.open
}

func (h *harness) putGate() *gate {
	h.t.Helper()
	g := newGate()
	h.t.Cleanup(g.open)
	if err := h.mb.TryPut(g); err != nil {
		h.t.Fatalf("TryPut(gate) = %v", err)
	}
	return g
}

func (h *harness) waitEntered(g *gate) {
	h.t.Helper()
	select {
	case <-g.entered:
	case <-time.After(waitTimeout):
		h.t.Fatalf("actor did not reach the gate within %v", waitTimeout)
	}
}

func (h *harness) tryPut(msgs ...any) {
	h.t.Helper()
	for _, m := range msgs {
		if err := h.mb.TryPut(m); err != nil {
			h.t.Fatalf("TryPut(%v) = %v, want nil (stats %+v)", m, err, h.mb.Stats())
		}
	}
}

// expect receives len(want) messages from the actor and compares them, in
// order, with want.
func (h *harness) expect(want ...any) {
	h.t.Helper()
	for i, w := range want {
		select {
		case m := <-h.got:
			if m != w {
				h.t.Fatalf("message %d = %v, want %v", i, m, w)
			}
		case <-time.After(waitTimeout):
			h.t.Fatalf("message %d: nothing received within %v, want %v (stats %+v)", i, waitTimeout, w, h.mb.Stats())
		}
	}
}

func (h *harness) expectNothingMore() {
	h.t.Helper()
	select {
	case m := <-h.got:
		h.t.Fatalf("unexpected extra message %v", m)
	default:
	}
}

func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("%s: nothing within %v", what, waitTimeout)
	}
	panic("unreachable")
}

func TestFIFOAcrossRingGrowth(t *testing.T) {
	// Two gates let the first batch be consumed so that the ring's head
	// moves, then enough messages arrive to wrap and grow it past its
	// initial 16 slots while it is non-empty.
	h := newHarness(t, mailbox.Config{Capacity: 100}, 64)
	first := h.putGate()
	h.waitEntered(first)
	var want []any
	for i := range 10 {
		want = append(want, fmt.Sprint("m", i))
	}
	h.tryPut(want...)
	second := h.putGate()
	first.open()
	h.expect(want...)
	h.waitEntered(second)

	want = want[:0]
	for i := 10; i < 50; i++ {
		m := fmt.Sprint("m", i)
		want = append(want, m)
		if i%2 == 0 {
			h.tryPut(m)
		} else {
			h.root.Send(h.pid, m) // protoactor's own path: PostUserMessage
		}
	}
	if got := h.mb.Stats().Depth; got != 40 {
		t.Fatalf("Depth = %d, want 40", got)
	}
	second.open()
	h.expect(want...)
	h.expectNothingMore()
}

func TestTryPutRefusesExactlyAtCapacity(t *testing.T) {
	for _, capacity := range []int{1, 3, 16, 17} {
		t.Run(fmt.Sprint("capacity=", capacity), func(t *testing.T) {
			h := newHarness(t, mailbox.Config{Capacity: capacity}, capacity+2)
			release := h.hold()
			var want []any
			for i := range capacity {
				m := fmt.Sprint("m", i)
				want = append(want, m)
				h.tryPut(m)
			}
			err := h.mb.TryPut("over")
			if !errors.Is(err, mailbox.ErrFull) {
				t.Fatalf("TryPut beyond capacity %d = %v, want ErrFull", capacity, err)
			}
			st := h.mb.Stats()
			if st.Depth != capacity || st.Refused != 1 || st.Capacity != capacity {
				t.Fatalf("Stats = %+v, want Depth %d, Refused 1, Capacity %d", st, capacity, capacity)
			}
			if got := h.mb.UserMessageCount(); got != capacity {
				t.Fatalf("UserMessageCount = %d, want %d", got, capacity)
			}

			release()
			// Once the actor has taken one message there is room again.
			h.expect(want[0])
			h.tryPut("again")
			h.expect(append(want[1:], "again")...)
			h.expectNothingMore()
		})
	}
}

func TestPutWaitsForSpace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, mailbox.Config{Capacity: 2}, 4)
		release := h.hold()
		h.tryPut("a", "b")

		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- h.mb.Put(ctx, "c") }()

		synctest.Wait() // the Put goroutine and the actor are both blocked
		select {
		case err := <-done:
			t.Fatalf("Put on a full mailbox returned %v before the actor consumed anything", err)
		default:
		}
		if st := h.mb.Stats(); st.Depth != 2 {
			t.Fatalf("Depth while Put waits = %d, want 2", st.Depth)
		}

		release()
		if err := wait(t, done, "Put after release"); err != nil {
			t.Fatalf("Put after release = %v, want nil", err)
		}
		h.expect("a", "b", "c")
		h.expectNothingMore()
	})
}

// TestPutWakesAtHalfCapacity: waiting Puts are woken once the queue is
// down to half its capacity (not for every message taken); a Put of more
// than half the capacity still gets in once it fits, and no Put is left
// waiting with room free.
func TestPutWakesAtHalfCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, mailbox.Config{Capacity: 10}, 32)
		release := h.hold()
		var first []any
		for i := range 10 {
			first = append(first, fmt.Sprint(i))
		}
		h.tryPut(first...)

		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		big := &batch{P: 1, Seqs: []int{1, 2, 3, 4, 5, 6, 7, 8}} // 8 records: more than half
		done := make(chan error, 2)
		go func() { done <- h.mb.Put(ctx, big) }()
		go func() { done <- h.mb.Put(ctx, "small") }()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("a Put on a full mailbox returned %v before the actor took anything", err)
		default:
		}

		release()
		for range 2 {
			if err := wait(t, done, "Put after release"); err != nil {
				t.Fatalf("Put after release = %v, want nil", err)
			}
		}
		h.expect(first...)
		got := []any{<-h.got, <-h.got}
		if !(got[0] == big && got[1] == "small" || got[0] == "small" && got[1] == big) {
			t.Fatalf("after the first 10: %v, want the batch and \"small\"", got)
		}
		h.expectNothingMore()
		if st := h.mb.Stats(); st.Delivered != 20 || st.DroppedTotal() != 0 { // the gate, 10, 8 and 1
			t.Fatalf("stats %+v: want 20 delivered, none dropped", st)
		}
	})
}

func TestPutReturnsContextErrorAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, mailbox.Config{Capacity: 1}, 2)
		h.hold()
		h.tryPut("a")

		const timeout = 5 * time.Second
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		defer cancel()
		start := time.Now()
		err := h.mb.Put(ctx, "late")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Put on a full mailbox = %v, want an error wrapping context.DeadlineExceeded", err)
		}
		if !strings.HasPrefix(err.Error(), "mailbox: put:") {
			t.Errorf("error %q does not say where it came from (want prefix %q)", err, "mailbox: put:")
		}
		if elapsed := time.Since(start); elapsed != timeout {
			t.Errorf("Put returned after %v, want exactly the %v deadline", elapsed, timeout)
		}
		if st := h.mb.Stats(); st.Depth != 1 || st.Posted != 2 {
			t.Fatalf("Stats after a timed-out Put = %+v, want Depth 1, Posted 2 (gate and a)", st)
		}
	})
}

func TestPutWithRoomDoesNotWait(t *testing.T) {
	h := newHarness(t, mailbox.Config{Capacity: 1}, 1)
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	if err := h.mb.Put(ctx, "a"); err != nil {
		t.Fatalf("Put on an empty mailbox = %v", err)
	}
	h.expect("a")
}

func TestStopClosesMailboxAndWakesPut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, mailbox.Config{Capacity: 1}, 2)
		release := h.hold()
		h.tryPut("a")

		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- h.mb.Put(ctx, "b") }()
		synctest.Wait()

		h.root.Stop(h.pid) // posts *actor.Stop while the actor is still busy
		if err := wait(t, done, "Put after Stop"); !errors.Is(err, mailbox.ErrClosed) {
			t.Fatalf("waiting Put after Stop = %v, want ErrClosed", err)
		}
		if err := h.mb.TryPut("c"); !errors.Is(err, mailbox.ErrClosed) {
			t.Fatalf("TryPut after Stop = %v, want ErrClosed", err)
		}
		if err := h.mb.Put(ctx, "c"); !errors.Is(err, mailbox.ErrClosed) {
			t.Fatalf("Put after Stop = %v, want ErrClosed", err)
		}
		release()
	})
}

func TestControlBypassesCapacityAndKeepsOrder(t *testing.T) {
	h := newHarness(t, mailbox.Config{Capacity: 2}, 16)
	release := h.hold()
	d1, d2, d3 := ctl{id: "d1"}, ctl{id: "d2"}, ctl{id: "d3"}
	c1, c2, c3, c4, c5 := ctl{"c1", true}, ctl{"c2", true}, ctl{"c3", true}, ctl{"c4", true}, ctl{"c5", true}

	h.tryPut(d1, c1, d2) // data fills the capacity; c1 does not count
	if err := h.mb.TryPut(d3); !errors.Is(err, mailbox.ErrFull) {
		t.Fatalf("TryPut(data) on a full mailbox = %v, want ErrFull", err)
	}
	h.tryPut(c2)           // TryPut: accepted while full
	h.root.Send(h.pid, c3) // PostUserMessage: accepted, not overfilled
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	if err := h.mb.Put(ctx, c4); err != nil { // Put: does not wait
		t.Fatalf("Put(control) on a full mailbox = %v", err)
	}
	// A control message inside protoactor's envelope is still control.
	h.tryPut(&actor.MessageEnvelope{Message: c5})

	st := h.mb.Stats()
	// Depth and HighWater count data records; control messages are not data.
	if st.Depth != 2 || st.HighWater != 2 || st.Overfilled != 0 || st.Refused != 1 || st.Posted != 3 {
		t.Fatalf("Stats = %+v, want Depth 2, HighWater 2, Overfilled 0, Refused 1, Posted 3", st)
	}
	release()
	h.expect(d1, c1, d2, c2, c3, c4, c5)
	h.expectNothingMore()
}

func TestControlMessagesDoNotUseCapacity(t *testing.T) {
	h := newHarness(t, mailbox.Config{Capacity: 1}, 8)
	release := h.hold()
	h.tryPut(ctl{"c1", true}, ctl{"c2", true}, ctl{"c3", true})
	h.tryPut(ctl{id: "d1"}) // the one data slot is still free
	// IsControl() == false is data, whatever the type.
	if err := h.mb.TryPut(ctl{id: "d2", control: false}); !errors.Is(err, mailbox.ErrFull) {
		t.Fatalf("TryPut(data) = %v, want ErrFull", err)
	}
	release()
	h.expect(ctl{"c1", true}, ctl{"c2", true}, ctl{"c3", true}, ctl{id: "d1"})
	h.expectNothingMore()
}

// TestPostUserMessageRefusedWhenFull: an actor's ctx.Send into a full
// Block mailbox (PostUserMessage, which cannot wait) was admitted beyond
// capacity; now it is refused and counted: the mailbox is bounded on every
// path.
func TestPostUserMessageRefusedWhenFull(t *testing.T) {
	h := newHarness(t, mailbox.Config{Capacity: 2}, 8)
	release := h.hold()
	for _, m := range []any{"a", "b", "c", "d", "e"} {
		h.root.Send(h.pid, m)
	}
	h.root.Send(h.pid, ctl{"eos", true}) // control is never refused
	want := []any{"a", "b", ctl{"eos", true}}

	st := h.mb.Stats()
	if st.Overfilled != 0 || st.Depth != 2 || st.HighWater != 2 || st.Dropped[mailbox.ReasonRefused] != 3 || st.Episodes != 1 {
		t.Fatalf("Stats = %+v, want Depth 2, HighWater 2, 3 refused, one episode", st)
	}
	if err := h.mb.TryPut("f"); !errors.Is(err, mailbox.ErrFull) {
		t.Fatalf("TryPut on a full mailbox = %v, want ErrFull", err)
	}
	release()
	h.expect(want...)
	h.expectNothingMore()
	// Drained: capacity is available again.
	h.tryPut("g")
	h.expect("g")
}

func TestStats(t *testing.T) {
	h := newHarness(t, mailbox.Config{Capacity: 4}, 8)
	if st := h.mb.Stats(); st != (mailbox.Stats{Policy: "block", Capacity: 4}) {
		t.Fatalf("Stats of a new mailbox = %+v, want only Policy block and Capacity 4", st)
	}
	release := h.hold() // posted 1, delivered 1
	h.tryPut("a", "b", "c")
	if st := h.mb.Stats(); st.Posted != 4 || st.Delivered != 1 || st.Depth != 3 || st.HighWater != 3 {
		t.Fatalf("Stats while held = %+v, want Posted 4, Delivered 1, Depth 3, HighWater 3", st)
	}
	h.tryPut("d")
	if err := h.mb.TryPut("e"); !errors.Is(err, mailbox.ErrFull) {
		t.Fatalf("TryPut(e) = %v, want ErrFull", err)
	}
	release()
	h.expect("a", "b", "c", "d")
	// The actor takes a message from the mailbox (and counts it) before it
	// handles it, so the counters are final once the last message is seen.
	want := mailbox.Stats{Policy: "block", Capacity: 4, Depth: 0, HighWater: 4, Posted: 5, Delivered: 5, Refused: 1}
	if st := h.mb.Stats(); st != want {
		t.Fatalf("Stats after drain = %+v, want %+v", st, want)
	}
}

func TestPanicRestartResumesDelivery(t *testing.T) {
	// A panic makes protoactor suspend the mailbox, restart the actor and
	// resume the mailbox; the failing message is lost, the rest delivered.
	h := newHarness(t, mailbox.Config{Capacity: 8}, 8)
	release := h.hold()
	h.tryPut("a", "boom", "b", "c")
	release()
	h.expect("a", "b", "c")
	h.expectNothingMore()
	if st := h.mb.Stats(); st.Delivered != 5 || st.Depth != 0 {
		t.Fatalf("Stats = %+v, want Delivered 5 (gate, a, boom, b, c), Depth 0", st)
	}
}

func TestProducerBuildsOneMailboxPerActor(t *testing.T) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(discardLogger))
	defer sys.Shutdown()
	root := actor.NewRootContext(sys, nil)
	var created []*mailbox.Mailbox
	cfg := mailbox.Config{Capacity: 1}
	props := actor.PropsFromFunc(func(actor.Context) {}, actor.WithMailbox(mustProducer(t, cfg, func(mb *mailbox.Mailbox) {
		created = append(created, mb)
	})))
	root.Spawn(props)
	root.Spawn(props)
	if len(created) != 2 || created[0] == created[1] {
		t.Fatalf("two spawns produced mailboxes %p, want two distinct ones", created)
	}
	// A nil onCreate is allowed.
	root.Spawn(actor.PropsFromFunc(func(actor.Context) {}, actor.WithMailbox(mustProducer(t, cfg, nil))))
}

func TestProducerRefusesInvalidConfig(t *testing.T) {
	p, err := mailbox.Config{}.Producer(nil)
	if p != nil || err == nil || err.Error() != "mailbox: capacity 0: must be at least 1" {
		t.Fatalf("Producer with capacity 0 = %v, %v; want nil and the Validate error", p, err)
	}
}

func mustProducer(t *testing.T, cfg mailbox.Config, onCreate func(*mailbox.Mailbox)) actor.MailboxProducer {
	t.Helper()
	p, err := cfg.Producer(onCreate)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestValidate(t *testing.T) {
	tests := []struct {
		cfg     mailbox.Config
		wantErr string // "" means valid
	}{
		{mailbox.Config{Capacity: 1}, ""},
		{mailbox.Config{Capacity: 1024, Throughput: 10}, ""},
		{mailbox.Config{}, "mailbox: capacity 0: must be at least 1"},
		{mailbox.Config{Capacity: -5}, "mailbox: capacity -5: must be at least 1"},
		{mailbox.Config{Capacity: 1, Throughput: -1}, "mailbox: throughput -1: must not be negative"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%+v", tt.cfg), func(t *testing.T) {
			err := tt.cfg.Validate()
			mb, newErr := mailbox.New(tt.cfg)
			if tt.wantErr == "" {
				if err != nil || newErr != nil || mb == nil {
					t.Fatalf("Validate = %v, New = (%v, %v), want a valid config", err, mb, newErr)
				}
				return
			}
			if err == nil || err.Error() != tt.wantErr {
				t.Fatalf("Validate = %v, want %q", err, tt.wantErr)
			}
			if mb != nil || newErr == nil || newErr.Error() != tt.wantErr {
				t.Fatalf("New = (%v, %v), want (nil, %q)", mb, newErr, tt.wantErr)
			}
		})
	}
}

// TestConcurrentProducersExactlyOnce runs several producers against a small
// mailbox (so that Put waits often) and checks that every message arrives
// exactly once, in each producer's order, and that the bound held.
func TestConcurrentProducersExactlyOnce(t *testing.T) {
	type msg struct{ producer, seq int }
	const producers, perProducer = 8, 500

	for _, tt := range []struct {
		cfg     mailbox.Config
		control bool // one more producer sends control messages with TryPut
	}{
		{mailbox.Config{Capacity: 1, Throughput: 1}, false},
		{mailbox.Config{Capacity: 1, Throughput: 1}, true},
		{mailbox.Config{Capacity: 8}, true},
		{mailbox.Config{Capacity: 64, Throughput: 3}, false},
	} {
		cfg := tt.cfg
		t.Run(fmt.Sprintf("capacity=%d,throughput=%d,control=%v", cfg.Capacity, cfg.Throughput, tt.control), func(t *testing.T) {
			senders := producers
			if tt.control {
				senders++
			}
			total := senders * perProducer
			h := newHarness(t, cfg, total)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()

			errs := make(chan error, senders)
			var wg sync.WaitGroup
			for p := range producers {
				wg.Go(func() {
					for i := range perProducer {
						if err := h.mb.Put(ctx, msg{p, i}); err != nil {
							errs <- fmt.Errorf("producer %d message %d: %w", p, i, err)
							return
						}
					}
				})
			}
			if tt.control {
				wg.Go(func() { // control messages are never refused
					for i := range perProducer {
						if err := h.mb.TryPut(ctlMsg{producer: producers, seq: i}); err != nil {
							errs <- fmt.Errorf("control message %d: %w", i, err)
							return
						}
					}
				})
			}

			next := make([]int, senders) // next expected seq per producer
			for n := range total {
				var p, seq int
				select {
				case m := <-h.got:
					switch m := m.(type) {
					case msg:
						p, seq = m.producer, m.seq
					case ctlMsg:
						p, seq = m.producer, m.seq
					default:
						t.Fatalf("unexpected message %#v", m)
					}
				case err := <-errs:
					t.Fatal(err)
				case <-ctx.Done():
					t.Fatalf("received %d of %d messages before the deadline (stats %+v)", n, total, h.mb.Stats())
				}
				if seq != next[p] {
					t.Fatalf("producer %d: got seq %d, want %d (lost, duplicated or reordered)", p, seq, next[p])
				}
				next[p]++
				if n%97 == 0 {
					_ = h.mb.Stats() // read concurrently with producers and the actor
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			h.expectNothingMore()

			st := h.mb.Stats()
			data := producers * perProducer // control messages are not posted records
			if st.Posted != int64(data) || st.Delivered != int64(data) || st.Depth != 0 || st.Overfilled != 0 {
				t.Fatalf("Stats = %+v, want Posted = Delivered = %d, Depth 0, Overfilled 0", st, data)
			}
			// Put never lets data exceed the capacity; control messages do
			// not count in the depth.
			bound := cfg.Capacity
			if st.HighWater > bound {
				t.Fatalf("HighWater = %d, want at most %d", st.HighWater, bound)
			}
		})
	}
}

// ctlMsg is a control message carrying a producer and sequence number.
type ctlMsg struct{ producer, seq int }

func (ctlMsg) IsControl() bool { return true }
