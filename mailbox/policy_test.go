package mailbox_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/clock/clocktest"
	"github.com/sluicehq/sluice/mailbox"
)

var seedFlag = flag.Uint64("mailbox.seed", 0, "seed for the randomised mailbox tests (0: a new one, printed)")

// testSeed returns the seed of a randomised test and logs it so that a
// failure can be replayed with -mailbox.seed.
func testSeed(t *testing.T) uint64 {
	t.Helper()
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -mailbox.seed=%d)", seed, seed)
	return seed
}

// rec is one data record of producer P.
type rec struct{ P, Seq int }

// batch is a message carrying several records of producer P, one per
// sequence number, so that the mailbox counts and sheds them one by one.
type batch struct {
	P    int
	Seqs []int
}

func (b *batch) Records() int { return len(b.Seqs) }

func (b *batch) Retain(keep func(i int) bool) int {
	out := b.Seqs[:0]
	for i, s := range b.Seqs {
		if keep(i) {
			out = append(out, s)
		}
	}
	b.Seqs = out
	return len(out)
}

// mark is a control message of producer P: never dropped, never counted,
// in order with P's data. It is encodable, so it can travel through a spill.
type mark struct{ P, Seq int }

func (mark) IsControl() bool { return true }

// stall is an encodable data message on which the rig's actor blocks, like
// a gate, until the test releases the gate registered under its ID. Unlike a
// gate it can be spilled.
type stall struct{ ID int }

// fence is a control message that the actor acknowledges by closing
// reached. Once it is reached, everything before it has been processed
// (and, for a spill, acknowledged). It cannot be encoded: put it only when
// nothing is spilled.
type fence struct{ reached chan struct{} }

func (*fence) IsControl() bool { return true }

// codec encodes the test's message types for spill mailboxes.
func codec() *mailbox.TypeCodec {
	return mailbox.NewTypeCodec().
		Register("rec", rec{}).
		Register("batch", &batch{}).
		Register("mark", mark{}).
		Register("stall", stall{})
}

// rig is one protoactor actor on a mailbox of the configuration under test.
// The actor forwards every message except gates, stalls and fences to got.
type rig struct {
	t     *testing.T
	root  *actor.RootContext
	pid   *actor.PID
	mb    *mailbox.Mailbox
	got   chan any
	gates sync.Map // stall ID -> *gate
	// onMessage, if set before the first message, runs in the actor for every
	// forwarded message (to sample Stats from the consumer's side).
	onMessage func(any)
}

func newRig(t *testing.T, cfg mailbox.Config, buffer int) *rig {
	t.Helper()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(discardLogger))
	t.Cleanup(sys.Shutdown)
	r := &rig{t: t, root: actor.NewRootContext(sys, nil), got: make(chan any, buffer)}
	receive := func(c actor.Context) {
		switch m := c.Message().(type) {
		case actor.SystemMessage, actor.AutoReceiveMessage:
		case *gate:
			close(m.entered)
			<-m.release
		case stall:
			g, _ := r.gates.Load(m.ID)
			close(g.(*gate).entered)
			<-g.(*gate).release
		case *fence:
			close(m.reached)
		default:
			if r.onMessage != nil {
				r.onMessage(m)
			}
			r.got <- m
		}
	}
	var created []*mailbox.Mailbox
	props := actor.PropsFromFunc(receive, actor.WithMailbox(mustProducer(t, cfg, func(mb *mailbox.Mailbox) {
		created = append(created, mb)
	})))
	r.pid = r.root.Spawn(props)
	if len(created) != 1 {
		t.Fatalf("producer reported %d mailboxes for one spawn, want 1", len(created))
	}
	r.mb = created[0]
	return r
}

// hold blocks the actor on a gate put through TryPut (so the mailbox must
// have room for one record) and returns the function that releases it.
func (r *rig) hold() (release func()) {
	r.t.Helper()
	g := newGate()
	r.t.Cleanup(g.open)
	if err := r.mb.TryPut(g); err != nil {
		r.t.Fatalf("TryPut(gate) = %v", err)
	}
	waitClosed(r.t, g.entered, "actor reaching the gate")
	return g.open
}

// stall registers a gate for a stall message with this ID and returns it.
func (r *rig) stall(id int) *gate {
	g := newGate()
	r.t.Cleanup(g.open)
	r.gates.Store(id, g)
	return g
}

// fence waits until the actor has processed everything put before it.
func (r *rig) fence() {
	r.t.Helper()
	f := &fence{reached: make(chan struct{})}
	if err := r.mb.TryPut(f); err != nil {
		r.t.Fatalf("TryPut(fence) = %v", err)
	}
	waitClosed(r.t, f.reached, "actor reaching the fence")
}

func (r *rig) put(msgs ...any) {
	r.t.Helper()
	for _, m := range msgs {
		if err := r.mb.TryPut(m); err != nil {
			r.t.Fatalf("TryPut(%v) = %v, want nil (stats %+v)", m, err, r.mb.Stats())
		}
	}
}

func (r *rig) putDropped(msgs ...any) {
	r.t.Helper()
	for _, m := range msgs {
		if err := r.mb.TryPut(m); !errors.Is(err, mailbox.ErrDropped) {
			r.t.Fatalf("TryPut(%v) = %v, want ErrDropped (stats %+v)", m, err, r.mb.Stats())
		}
	}
}

// next receives one forwarded message.
func (r *rig) next() any {
	r.t.Helper()
	select {
	case m := <-r.got:
		return m
	case <-time.After(waitTimeout):
		r.t.Fatalf("nothing received within %v (stats %+v)", waitTimeout, r.mb.Stats())
	}
	panic("unreachable")
}

// expect receives len(want) messages and compares them with want, in order;
// batches are compared by their records.
func (r *rig) expect(want ...any) {
	r.t.Helper()
	for i, w := range want {
		if m := r.next(); !sameMsg(m, w) {
			r.t.Fatalf("message %d = %s, want %s", i, show(m), show(w))
		}
	}
}

func (r *rig) expectNothingMore() {
	r.t.Helper()
	select {
	case m := <-r.got:
		r.t.Fatalf("unexpected extra message %s", show(m))
	default:
	}
}

func sameMsg(a, b any) bool {
	ba, okA := a.(*batch)
	bb, okB := b.(*batch)
	if okA || okB {
		return okA && okB && ba.P == bb.P && slices.Equal(ba.Seqs, bb.Seqs)
	}
	return a == b
}

func show(m any) string {
	if b, ok := m.(*batch); ok {
		return fmt.Sprintf("batch%v", b.Seqs)
	}
	return fmt.Sprintf("%#v", m)
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitTimeout):
		t.Fatalf("%s: not within %v", what, waitTimeout)
	}
}

// checkInvariant checks the accounting identity of a Stats snapshot.
func checkInvariant(st mailbox.Stats) error {
	if st.Posted != st.Delivered+st.DroppedTotal()+int64(st.Depth)+st.SpillPending {
		return fmt.Errorf("Posted %d != Delivered %d + Dropped %d + Depth %d + SpillPending %d (stats %+v)",
			st.Posted, st.Delivered, st.DroppedTotal(), st.Depth, st.SpillPending, st)
	}
	return nil
}

// clockStart is where the manual clocks of these tests start; Config.Now
// reads them, and only Advance moves them.
var clockStart = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// openStore opens a spill store in the test's temporary directory.
func openStore(t *testing.T) *mailbox.SpillStore {
	t.Helper()
	st, err := mailbox.OpenSpillStore(filepath.Join(t.TempDir(), "spill.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("closing the spill store: %v", err)
		}
	})
	return st
}

// policy is one entry of the conformance table.
type policy struct {
	name string
	// config builds the configuration; a spill store lives in t.TempDir().
	config func(t *testing.T) mailbox.Config
	// drops lists the reasons for which the policy may drop under load.
	drops []mailbox.Reason
	// bounded: memory depth never exceeds the capacity, whatever the senders do.
	bounded bool
}

const conformanceCapacity = 16

func policies() []policy {
	return []policy{
		// Put waits, TryPut is not used, ctx.Send (PostUserMessage) is
		// refused at capacity: bounded on every path.
		{name: "block", bounded: true, drops: []mailbox.Reason{mailbox.ReasonRefused},
			config: func(*testing.T) mailbox.Config { return mailbox.Block(conformanceCapacity) }},
		{name: "drop-newest", bounded: true, drops: []mailbox.Reason{mailbox.ReasonFull},
			config: func(*testing.T) mailbox.Config { return mailbox.DropNewest(conformanceCapacity) }},
		{name: "drop-oldest", bounded: true, drops: []mailbox.Reason{mailbox.ReasonEvicted},
			config: func(*testing.T) mailbox.Config { return mailbox.DropOldest(conformanceCapacity) }},
		{name: "spill", bounded: true, config: func(t *testing.T) mailbox.Config {
			return mailbox.Spill(conformanceCapacity, mailbox.SpillOptions{
				Store: openStore(t), Queue: "conformance", Codec: codec(), CommitEvery: 32,
			})
		}},
		{name: "sample", bounded: true, drops: []mailbox.Reason{mailbox.ReasonSampled, mailbox.ReasonFull},
			config: func(*testing.T) mailbox.Config { return mailbox.Sample(conformanceCapacity, 3) }},
		{name: "throttle", bounded: true, drops: []mailbox.Reason{mailbox.ReasonThrottled, mailbox.ReasonFull},
			config: func(*testing.T) mailbox.Config {
				cfg := mailbox.Throttle(conformanceCapacity, 50)
				cfg.Now = clocktest.NewManual(clockStart).Now // time stands still: the burst, then nothing
				return cfg
			}},
	}
}

// item is one message a producer plans to send.
type item struct {
	seq     int   // control: its sequence number
	seqs    []int // data: the sequence numbers of its records
	ctl     bool
	asBatch bool
}

func (it item) message(p int) any {
	switch {
	case it.ctl:
		return mark{P: p, Seq: it.seq}
	case it.asBatch:
		return &batch{P: p, Seqs: slices.Clone(it.seqs)}
	}
	return rec{P: p, Seq: it.seqs[0]}
}

// plan makes a producer's messages: plain records, batches of 1 to 5
// records and control messages, numbered in one increasing sequence.
func plan(rng *rand.Rand, n int) (items []item, records int) {
	seq := 0
	for range n {
		switch k := rng.IntN(10); {
		case k == 0:
			items = append(items, item{seq: seq, ctl: true})
			seq++
		case k <= 3:
			it := item{asBatch: true}
			for range 1 + rng.IntN(5) {
				it.seqs = append(it.seqs, seq)
				seq++
			}
			items = append(items, it)
			records += len(it.seqs)
		default:
			items = append(items, item{seqs: []int{seq}})
			seq++
			records++
		}
	}
	return items, records
}

// TestPolicyConformance runs one suite against every overflow policy. The
// actor is held while concurrent producers (TryPut, PostUserMessage and
// Put; Block's senders use Put and PostUserMessage) send plain records,
// batches and control messages, then released half-way. It asserts:
//   - delivered records and control messages arrive in each producer's order;
//   - no control message is lost;
//   - Posted = Delivered + Dropped + Depth + SpillPending, sampled by the
//     producers and by the actor during the load, and exactly at the end,
//     where Posted is the number of records sent and Delivered the number
//     received;
//   - drops happen only for the policy's reasons (none for Block and Spill,
//     which deliver every record);
//   - the memory depth never exceeds the capacity for the non-Block policies;
//   - a spill is empty, in memory and on disk, once everything is processed.
func TestPolicyConformance(t *testing.T) {
	const producers, perProducer = 4, 1500
	seed := testSeed(t)
	for _, pol := range policies() {
		t.Run(pol.name, func(t *testing.T) {
			cfg := pol.config(t)
			block := cfg.Overflow == mailbox.OverflowBlock

			plans := make([][]item, producers)
			records := 0
			for p := range producers {
				var n int
				plans[p], n = plan(rand.New(rand.NewPCG(seed, uint64(p))), perProducer)
				records += n
			}
			r := newRig(t, cfg, producers*perProducer+1)

			var samples atomic.Int64
			check := func(who string) {
				st := r.mb.Stats()
				if err := checkInvariant(st); err != nil {
					t.Errorf("%s: %v", who, err)
				}
				if pol.bounded && st.Depth > st.Capacity {
					t.Errorf("%s: Depth %d > Capacity %d", who, st.Depth, st.Capacity)
				}
				samples.Add(1)
			}
			var seen int
			r.onMessage = func(any) { // in the actor
				if seen++; seen%50 == 0 {
					check("actor")
				}
			}

			release := r.hold()
			total := producers * perProducer
			releaseAt := int64(total / 2) // drop policies overflow in the first half
			if block {
				releaseAt = 1 // Put would wait for ever on a held actor
			}
			var sent atomic.Int64
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			var refusedRecords atomic.Int64 // records of messages refused whole (plain and control)
			for p := range producers {
				wg.Go(func() {
					for i, it := range plans[p] {
						msg := it.message(p)
						var err error
						switch {
						case p%3 == 1:
							r.root.Send(r.pid, msg) // PostUserMessage: cannot wait
						case p%3 == 0 && !block:
							err = r.mb.TryPut(msg)
						default:
							err = r.mb.Put(ctx, msg)
						}
						switch {
						case err == nil:
						case errors.Is(err, mailbox.ErrDropped) && !block && !it.ctl && len(pol.drops) > 0:
							if !it.asBatch {
								refusedRecords.Add(1)
							}
						default:
							t.Errorf("producer %d item %d (%s): %v", p, i, show(msg), err)
							return
						}
						if sent.Add(1) == releaseAt {
							release()
						}
						if i%50 == 0 {
							check(fmt.Sprint("producer ", p))
						}
					}
				})
			}
			wg.Wait()
			release()
			if t.Failed() {
				t.FailNow()
			}
			end := mark{P: -1}
			r.put(end)

			// Collect until the end mark: everything before it is delivered.
			last := make([]int, producers)
			for p := range last {
				last[p] = -1
			}
			var gotCtl = make([][]int, producers)
			received := 0
			accept := func(p, seq int) {
				if seq <= last[p] {
					t.Fatalf("producer %d: seq %d after %d: reordered or duplicated", p, seq, last[p])
				}
				last[p] = seq
			}
		collect:
			for {
				switch m := r.next().(type) {
				case rec:
					accept(m.P, m.Seq)
					received++
				case *batch:
					if len(m.Seqs) == 0 {
						t.Fatalf("producer %d: an empty batch was delivered", m.P)
					}
					for _, s := range m.Seqs {
						accept(m.P, s)
					}
					received += len(m.Seqs)
				case mark:
					if m == end {
						break collect
					}
					accept(m.P, m.Seq)
					gotCtl[m.P] = append(gotCtl[m.P], m.Seq)
				default:
					t.Fatalf("unexpected message %s", show(m))
				}
			}
			r.fence() // the spill has acknowledged everything
			r.expectNothingMore()

			for p := range producers {
				var want []int
				for _, it := range plans[p] {
					if it.ctl {
						want = append(want, it.seq)
					}
				}
				if !slices.Equal(gotCtl[p], want) {
					t.Errorf("producer %d: control messages received %v, want all %d sent: %v", p, gotCtl[p], len(want), want)
				}
			}

			st := r.mb.Stats()
			t.Logf("%d records sent, %d received; stats %+v; %d samples", records, received, st, samples.Load())
			if err := checkInvariant(st); err != nil {
				t.Error(err)
			}
			if st.Posted != int64(records)+1 { // and the gate
				t.Errorf("Posted = %d, want the %d records sent and the gate", st.Posted, records)
			}
			if st.Delivered != int64(received)+1 {
				t.Errorf("Delivered = %d, want the %d records received and the gate", st.Delivered, received)
			}
			if st.Depth != 0 || st.SpillPending != 0 || st.SpillBytes != 0 {
				t.Errorf("after the drain Depth %d, SpillPending %d, SpillBytes %d, want 0", st.Depth, st.SpillPending, st.SpillBytes)
			}
			if st.DroppedTotal() < refusedRecords.Load() {
				t.Errorf("Dropped %d < %d records of messages refused with ErrDropped", st.DroppedTotal(), refusedRecords.Load())
			}
			for _, why := range mailbox.Reasons() {
				if st.Dropped[why] != 0 && !slices.Contains(pol.drops, why) {
					t.Errorf("Dropped[%v] = %d, want 0 for %s", why, st.Dropped[why], pol.name)
				}
			}
			if len(pol.drops) == 0 && received != records {
				t.Errorf("received %d records, want all %d", received, records)
			}
			if len(pol.drops) > 0 && st.DroppedTotal() == 0 {
				t.Errorf("no drops: the load did not overflow the mailbox")
			}
			if pol.bounded && st.HighWater > st.Capacity {
				t.Errorf("HighWater = %d > Capacity %d", st.HighWater, st.Capacity)
			}
			if cfg.Spill != nil {
				if st.Spilled == 0 {
					t.Errorf("Spilled = 0: the load did not reach the spill")
				}
				qs, err := cfg.Spill.Store.Queues()
				if err != nil || len(qs) != 1 || qs[0] != (mailbox.QueueInfo{Name: "conformance"}) {
					t.Errorf("Queues() = %+v, %v; want the queue, empty", qs, err)
				}
			}
		})
	}
}

func recs(p int, seqs ...int) []any {
	out := make([]any, len(seqs))
	for i, s := range seqs {
		out[i] = rec{P: p, Seq: s}
	}
	return out
}

func seqRange(from, to int) []int { // [from, to)
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

func wantStats(t *testing.T, st mailbox.Stats, posted, delivered int64, depth int, dropped map[mailbox.Reason]int64) {
	t.Helper()
	if err := checkInvariant(st); err != nil {
		t.Fatal(err)
	}
	var want [len(st.Dropped)]int64
	for why, n := range dropped {
		want[why] = n
	}
	if st.Posted != posted || st.Delivered != delivered || st.Depth != depth || st.Dropped != want {
		t.Fatalf("Stats = %+v, want Posted %d, Delivered %d, Depth %d, Dropped %v", st, posted, delivered, depth, want)
	}
}

func TestDropNewestKeepsFirstRecords(t *testing.T) {
	r := newRig(t, mailbox.DropNewest(5), 16)
	release := r.hold() // posted 1, delivered 1
	r.put(&batch{Seqs: []int{1, 2, 3}})
	r.put(&batch{Seqs: []int{4, 5, 6, 7}}) // 2 fit: 6 and 7 are dropped, the batch is admitted
	r.putDropped(rec{Seq: 8})
	r.put(mark{Seq: 100}) // control: accepted although full
	r.putDropped(&batch{Seqs: []int{9, 10}})
	wantStats(t, r.mb.Stats(), 1+3+4+1+2, 1, 5, map[mailbox.Reason]int64{mailbox.ReasonFull: 2 + 1 + 2})

	release()
	r.expect(&batch{Seqs: []int{1, 2, 3}}, &batch{Seqs: []int{4, 5}}, mark{Seq: 100})
	r.put(rec{Seq: 11}) // drained: room again
	r.expect(rec{Seq: 11})
	r.expectNothingMore()
	st := r.mb.Stats()
	wantStats(t, st, 12, 7, 0, map[mailbox.Reason]int64{mailbox.ReasonFull: 5})
	if st.HighWater != 5 {
		t.Fatalf("HighWater = %d, want 5", st.HighWater)
	}
}

func TestDropOldestKeepsNewestRecords(t *testing.T) {
	r := newRig(t, mailbox.DropOldest(5), 16)
	release := r.hold()
	r.put(&batch{Seqs: []int{1, 2, 3}})
	r.put(mark{Seq: 100})               // control messages are never evicted
	r.put(&batch{Seqs: []int{4, 5, 6}}) // evicts record 1: batch 1 keeps 2, 3
	r.put(rec{Seq: 7})                  // evicts 2
	wantStats(t, r.mb.Stats(), 1+3+3+1, 1, 5, map[mailbox.Reason]int64{mailbox.ReasonEvicted: 2})
	// 7 records: its 2 oldest are dropped, and its newest 5 evict the 5
	// records queued (3, then 4 5 6, then 7).
	r.put(&batch{Seqs: seqRange(10, 17)})
	wantStats(t, r.mb.Stats(), 1+3+3+1+7, 1, 5, map[mailbox.Reason]int64{mailbox.ReasonEvicted: 2 + 2 + 5})

	release()
	r.expect(mark{Seq: 100}, &batch{Seqs: []int{12, 13, 14, 15, 16}})
	r.expectNothingMore()
	st := r.mb.Stats()
	wantStats(t, st, 15, 6, 0, map[mailbox.Reason]int64{mailbox.ReasonEvicted: 9})
	if st.HighWater != 5 {
		t.Fatalf("HighWater = %d, want 5", st.HighWater)
	}
}

// TestDropOldestQueueStaysBounded checks that evicted messages do not stay
// queued: a stuck actor's DropOldest mailbox holds its capacity and the
// control messages, however many messages were evicted.
func TestDropOldestQueueStaysBounded(t *testing.T) {
	r := newRig(t, mailbox.DropOldest(4), 16)
	release := r.hold()
	r.put(mark{Seq: -1}) // a control message at the head: evicted entries pile up behind it
	for i := range 10_000 {
		r.put(rec{Seq: i})
	}
	if n := r.mb.UserMessageCount(); n != 5 {
		t.Fatalf("UserMessageCount = %d, want 5 (the control message and the 4 newest records)", n)
	}
	wantStats(t, r.mb.Stats(), 10_001, 1, 4, map[mailbox.Reason]int64{mailbox.ReasonEvicted: 9_996})
	release()
	r.expect(append([]any{mark{Seq: -1}}, recs(0, 9_996, 9_997, 9_998, 9_999)...)...)
	r.expectNothingMore()
}

func TestSampleKeepsOneInN(t *testing.T) {
	cfg := mailbox.Sample(100, 4)
	cfg.HighWater = 10
	r := newRig(t, cfg, 128)
	release := r.hold()
	var want []any
	for i := range 90 {
		r.mb.TryPut(rec{Seq: i}) // ErrDropped for the sampled-out ones
		// Below the high-water mark everything is kept; above it the first
		// record, then one in 4.
		if i < 10 || (i-10)%4 == 0 {
			want = append(want, rec{Seq: i})
		}
	}
	wantStats(t, r.mb.Stats(), 91, 1, 30, map[mailbox.Reason]int64{mailbox.ReasonSampled: 60})
	// A batch above the mark is sampled record by record, continuing the count:
	// 80 records were seen above the mark, so its records 0 and 4 are kept.
	r.put(&batch{Seqs: seqRange(100, 106)})
	want = append(want, &batch{Seqs: []int{100, 104}})
	wantStats(t, r.mb.Stats(), 97, 1, 32, map[mailbox.Reason]int64{mailbox.ReasonSampled: 64})

	release()
	r.expect(want...)
	r.expectNothingMore()
	st := r.mb.Stats()
	if st.Episodes != 1 || st.HighWater != 32 {
		t.Fatalf("Stats = %+v, want one episode, HighWater 32", st)
	}
}

// TestSampleFullDropsNewest checks that Sample still bounds the memory: at
// capacity, the records kept by sampling are dropped as full.
func TestSampleFullDropsNewest(t *testing.T) {
	cfg := mailbox.Sample(6, 2)
	cfg.HighWater = 4
	r := newRig(t, cfg, 16)
	release := r.hold()
	for i := range 12 {
		r.mb.TryPut(rec{Seq: i})
	}
	// 0-3 below the mark; above it the count keeps 4, 6 (depth 6), then 8
	// and 10 are kept by sampling but dropped as full.
	wantStats(t, r.mb.Stats(), 13, 1, 6, map[mailbox.Reason]int64{mailbox.ReasonSampled: 4, mailbox.ReasonFull: 2})
	release()
	r.expect(recs(0, 0, 1, 2, 3, 4, 6)...)
	r.expectNothingMore()
}

func TestThrottleAdmitsRateTimesElapsed(t *testing.T) {
	clock := clocktest.NewManual(clockStart)
	cfg := mailbox.Throttle(1000, 100)
	cfg.HighWater, cfg.Now = 10, clock.Now
	r := newRig(t, cfg, 1024)
	release := r.hold()

	seq := 0
	var want []any
	// send n records and expect the first admit of them to be kept.
	send := func(n, admit int) {
		t.Helper()
		for i := range n {
			err := r.mb.TryPut(rec{Seq: seq})
			if i < admit {
				if err != nil {
					t.Fatalf("record %d: TryPut = %v, want admitted", seq, err)
				}
				want = append(want, rec{Seq: seq})
			} else if !errors.Is(err, mailbox.ErrDropped) {
				t.Fatalf("record %d: TryPut = %v, want ErrDropped", seq, err)
			}
			seq++
		}
	}
	send(10, 10)   // below the high-water mark: no limit
	send(150, 100) // the bucket holds one second's worth
	throttled := int64(50)
	for _, step := range []struct {
		elapsed  time.Duration
		n, admit int
	}{
		{125 * time.Millisecond, 20, 12}, // 12.5 records: 12 now, the half carries
		{125 * time.Millisecond, 20, 13}, // 0.5 + 12.5
		{time.Second, 130, 100},
		{10 * time.Second, 150, 100}, // the bucket is capped at one second
		{0, 5, 0},
	} {
		clock.Advance(step.elapsed)
		send(step.n, step.admit)
		throttled += int64(step.n - step.admit)
	}
	// A batch is cut to what the rate allows: 50 ms at 100/s is 5 records.
	clock.Advance(50 * time.Millisecond)
	r.put(&batch{Seqs: seqRange(1000, 1008)})
	want = append(want, &batch{Seqs: seqRange(1000, 1005)})
	throttled += 3

	admitted := int64(len(want) - 1 + 5)
	wantStats(t, r.mb.Stats(), int64(1+seq+8), 1, int(admitted), map[mailbox.Reason]int64{mailbox.ReasonThrottled: throttled})
	release()
	r.expect(want...)
	r.expectNothingMore()
}

// TestThrottleBelowOneRecordPerSecond: a rate under 1/s admits one record
// every 1/rate seconds.
func TestThrottleBelowOneRecordPerSecond(t *testing.T) {
	clock := clocktest.NewManual(clockStart)
	cfg := mailbox.Throttle(10, 0.5)
	cfg.HighWater, cfg.Now = 1, clock.Now
	r := newRig(t, cfg, 16)
	release := r.hold()
	r.put(rec{Seq: 0})        // below the mark
	r.put(rec{Seq: 1})        // the bucket holds one record
	r.putDropped(rec{Seq: 2}) // empty
	clock.Advance(time.Second)
	r.putDropped(rec{Seq: 3}) // half a record
	clock.Advance(time.Second)
	r.put(rec{Seq: 4}) // two seconds at 0.5/s
	r.putDropped(rec{Seq: 5})
	wantStats(t, r.mb.Stats(), 7, 1, 3, map[mailbox.Reason]int64{mailbox.ReasonThrottled: 3})
	release()
	r.expect(recs(0, 0, 1, 4)...)
}

// episodeRig builds a rig whose overflow episodes are sent to a channel.
func episodeRig(t *testing.T, cfg mailbox.Config) (*rig, <-chan mailbox.Episode, *clocktest.Manual) {
	clock := clocktest.NewManual(clockStart)
	events := make(chan mailbox.Episode, 64)
	cfg.Now = clock.Now
	cfg.OnOverflow = func(e mailbox.Episode) { events <- e }
	return newRig(t, cfg, 256), events, clock
}

func nextEpisode(t *testing.T, events <-chan mailbox.Episode) mailbox.Episode {
	t.Helper()
	return wait(t, events, "overflow episode event")
}

func noEpisode(t *testing.T, events <-chan mailbox.Episode) {
	t.Helper()
	select {
	case e := <-events:
		t.Fatalf("unexpected episode event %+v", e)
	default:
	}
}

// TestOverflowEpisodes overloads each policy twice and checks that each
// overload is reported by exactly one start event (with the counts of the
// event that started it) and one end event (with the counts of the whole
// episode, once the depth is back to half the capacity).
func TestOverflowEpisodes(t *testing.T) {
	type counts struct {
		dropped    map[mailbox.Reason]int64
		spilled    int64
		overfilled int64
	}
	for _, tt := range []struct {
		name                 string
		cfg                  func(t *testing.T) mailbox.Config
		send                 func(r *rig, n int) // overloads a held actor with n records
		start                counts
		end                  counts
		startDepth, endDepth int
	}{
		{
			name: "block", cfg: func(*testing.T) mailbox.Config { return mailbox.Block(4) },
			send: func(r *rig, n int) {
				for i := range n {
					r.root.Send(r.pid, rec{Seq: i})
				}
			},
			// ctx.Send into a full Block mailbox: refused and counted.
			start: counts{dropped: map[mailbox.Reason]int64{mailbox.ReasonRefused: 1}},
			end:   counts{dropped: map[mailbox.Reason]int64{mailbox.ReasonRefused: 6}}, startDepth: 4, endDepth: 2,
		},
		{
			name: "drop-newest", cfg: func(*testing.T) mailbox.Config { return mailbox.DropNewest(4) },
			start: counts{dropped: map[mailbox.Reason]int64{mailbox.ReasonFull: 1}},
			end:   counts{dropped: map[mailbox.Reason]int64{mailbox.ReasonFull: 6}}, startDepth: 4, endDepth: 2,
		},
		{
			name: "drop-oldest", cfg: func(*testing.T) mailbox.Config { return mailbox.DropOldest(4) },
			start: counts{dropped: map[mailbox.Reason]int64{mailbox.ReasonEvicted: 1}},
			end:   counts{dropped: map[mailbox.Reason]int64{mailbox.ReasonEvicted: 6}}, startDepth: 4, endDepth: 2,
		},
		{
			name: "spill", cfg: func(t *testing.T) mailbox.Config {
				return mailbox.Spill(4, mailbox.SpillOptions{Store: openStore(t), Queue: "episodes", Codec: codec()})
			},
			start: counts{spilled: 1}, end: counts{spilled: 6}, startDepth: 4, endDepth: 2,
		},
		{
			name: "sample", cfg: func(*testing.T) mailbox.Config {
				cfg := mailbox.Sample(4, 2)
				cfg.HighWater = 2
				return cfg
			},
			// 0, 1 below the mark; sampled: 2 kept, 3 dropped, 4 kept, 5-9:
			// 6 and 8 kept by sampling but full.
			start: counts{dropped: map[mailbox.Reason]int64{mailbox.ReasonSampled: 1}},
			end:   counts{dropped: map[mailbox.Reason]int64{mailbox.ReasonSampled: 4, mailbox.ReasonFull: 2}}, startDepth: 3, endDepth: 2,
		},
		{
			name: "throttle", cfg: func(*testing.T) mailbox.Config {
				cfg := mailbox.Throttle(4, 1)
				cfg.HighWater = 2
				return cfg
			},
			// 0, 1 below the mark; 2 takes the one token; 3-9 are throttled.
			start: counts{dropped: map[mailbox.Reason]int64{mailbox.ReasonThrottled: 1}},
			end:   counts{dropped: map[mailbox.Reason]int64{mailbox.ReasonThrottled: 7}}, startDepth: 3, endDepth: 2,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, events, clock := episodeRig(t, tt.cfg(t))
			send := tt.send
			if send == nil {
				send = func(r *rig, n int) {
					for i := range n {
						r.mb.TryPut(rec{Seq: i})
					}
				}
			}
			check := func(e mailbox.Episode, started bool, c counts, depth int, at time.Time) {
				t.Helper()
				var dropped [len(e.Dropped)]int64
				for why, n := range c.dropped {
					dropped[why] = n
				}
				if e.Started != started || e.Dropped != dropped || e.Spilled != c.spilled || e.Overfilled != c.overfilled || e.Depth != depth || !e.At.Equal(at) {
					t.Fatalf("episode event %+v, want Started %v, Dropped %v, Spilled %d, Overfilled %d, Depth %d, At %v",
						e, started, dropped, c.spilled, c.overfilled, depth, at)
				}
			}
			for round := range 2 {
				release := r.hold()
				startAt := clock.Now()
				send(r, 10)
				check(nextEpisode(t, events), true, tt.start, tt.startDepth, startAt)
				noEpisode(t, events) // one event for the whole overload
				clock.Advance(time.Minute)
				release()
				r.fence()
				check(nextEpisode(t, events), false, tt.end, tt.endDepth, startAt.Add(time.Minute))
				noEpisode(t, events)
				for len(r.got) > 0 {
					<-r.got
				}
				if st := r.mb.Stats(); st.Episodes != int64(round+1) {
					t.Fatalf("Episodes = %d after %d overloads", st.Episodes, round+1)
				}
			}
		})
	}
}

func TestValidatePolicies(t *testing.T) {
	st := openStore(t)
	c := codec()
	spill := func(o mailbox.SpillOptions) mailbox.Config { return mailbox.Spill(4, o) }
	withHW := func(cfg mailbox.Config, hw int) mailbox.Config { cfg.HighWater = hw; return cfg }
	tests := []struct {
		name    string
		cfg     mailbox.Config
		wantErr string // "" means valid
	}{
		{"block", mailbox.Block(1), ""},
		{"drop-newest", mailbox.DropNewest(1), ""},
		{"drop-oldest", mailbox.DropOldest(1), ""},
		{"sample", mailbox.Sample(8, 2), ""},
		{"throttle", mailbox.Throttle(8, 0.001), ""},
		{"spill", spill(mailbox.SpillOptions{Store: st, Queue: "q", Codec: c}), ""},
		{"high-water at capacity", withHW(mailbox.Sample(8, 2), 8), ""},
		{"block capacity 0", mailbox.Block(0), "mailbox: capacity 0: must be at least 1"},
		{"drop-newest capacity -1", mailbox.DropNewest(-1), "mailbox: capacity -1: must be at least 1"},
		{"drop-oldest capacity 0", mailbox.DropOldest(0), "mailbox: capacity 0: must be at least 1"},
		{"sample capacity 0", mailbox.Sample(0, 2), "mailbox: capacity 0: must be at least 1"},
		{"throttle capacity 0", mailbox.Throttle(0, 1), "mailbox: capacity 0: must be at least 1"},
		{"spill capacity 0", mailbox.Spill(0, mailbox.SpillOptions{Store: st, Queue: "q", Codec: c}), "mailbox: capacity 0: must be at least 1"},
		{"sample every 1", mailbox.Sample(8, 1), "mailbox: sample: keep one in 1: must be at least 2"},
		{"sample every 0", mailbox.Sample(8, 0), "mailbox: sample: keep one in 0: must be at least 2"},
		{"throttle rate 0", mailbox.Throttle(8, 0), "mailbox: throttle: rate 0 records/s: must be positive"},
		{"throttle rate -1", mailbox.Throttle(8, -1), "mailbox: throttle: rate -1 records/s: must be positive"},
		{"throttle rate NaN", mailbox.Throttle(8, math.NaN()), "mailbox: throttle: rate NaN records/s: must be positive"},
		{"high-water above capacity", withHW(mailbox.Sample(8, 2), 9), "mailbox: high-water mark 9: must be between 0 and the capacity 8"},
		{"high-water negative", withHW(mailbox.Throttle(8, 1), -1), "mailbox: high-water mark -1: must be between 0 and the capacity 8"},
		{"spill without options", mailbox.Config{Capacity: 4, Overflow: mailbox.OverflowSpill}, "mailbox: spill: no SpillOptions"},
		{"spill without store", spill(mailbox.SpillOptions{Queue: "q", Codec: c}), "mailbox: spill: no store"},
		{"spill without queue", spill(mailbox.SpillOptions{Store: st, Codec: c}), "mailbox: spill: empty queue name"},
		{"spill without codec", spill(mailbox.SpillOptions{Store: st, Queue: "q"}), `mailbox: spill queue "q": no codec`},
		{"spill negative CommitEvery", spill(mailbox.SpillOptions{Store: st, Queue: "q", Codec: c, CommitEvery: -1}),
			`mailbox: spill queue "q": CommitEvery must not be negative`},
		{"unknown policy", mailbox.Config{Capacity: 4, Overflow: 99}, "mailbox: unknown overflow policy 99"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			mb, newErr := mailbox.New(tt.cfg)
			p, prodErr := tt.cfg.Producer(nil)
			if tt.wantErr == "" {
				if err != nil || newErr != nil || mb == nil || prodErr != nil || p == nil {
					t.Fatalf("Validate = %v, New = %v, Producer = %v; want a valid config", err, newErr, prodErr)
				}
				return
			}
			for what, e := range map[string]error{"Validate": err, "New": newErr, "Producer": prodErr} {
				if e == nil || e.Error() != tt.wantErr {
					t.Errorf("%s = %v, want %q", what, e, tt.wantErr)
				}
			}
			if mb != nil || p != nil {
				t.Errorf("New or Producer returned a value with the error")
			}
		})
	}
}
