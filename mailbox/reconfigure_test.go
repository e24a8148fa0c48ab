package mailbox_test

import (
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/mailbox"
)

// stepper drives a mailbox by hand: its dispatcher keeps what the mailbox
// schedules until the test runs it, and its invoker records what the actor
// would receive.
type stepper struct {
	mb    *mailbox.Mailbox
	sched []func()
	got   []any
}

func (s *stepper) Schedule(f func())                 { s.sched = append(s.sched, f) }
func (s *stepper) Throughput() int                   { return 1 << 30 }
func (s *stepper) InvokeSystemMessage(any)           {}
func (s *stepper) InvokeUserMessage(m any)           { s.got = append(s.got, m) }
func (s *stepper) EscalateFailure(reason any, _ any) { panic(reason) }

// run delivers everything queued (in memory and spilled) to the actor.
func (s *stepper) run() {
	for len(s.sched) > 0 {
		f := s.sched[0]
		s.sched = s.sched[1:]
		f()
	}
}

func newStepper(t *testing.T, cfg mailbox.Config) *stepper {
	t.Helper()
	mb, err := mailbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &stepper{mb: mb}
	mb.RegisterHandlers(s, s)
	return s
}

// exact checks the accounting identity of one snapshot of the counters.
func exact(t *testing.T, step string, st mailbox.Stats) {
	t.Helper()
	if st.Posted != st.Delivered+st.DroppedTotal()+int64(st.Depth)+st.SpillPending {
		t.Fatalf("%s: posted %d != delivered %d + dropped %d + queued %d + spilled %d", step,
			st.Posted, st.Delivered, st.DroppedTotal(), st.Depth, st.SpillPending)
	}
}

// TestReconfigureEveryPolicy switches one mailbox whose actor is held
// through every policy with a burst of records at each step: the
// accounting identity holds after every burst and every change, each
// policy does what it says from its first record on, and a spill left
// behind by Spill drains in order behind the records that follow it.
func TestReconfigureEveryPolicy(t *testing.T) {
	st, err := mailbox.OpenSpillStore(filepath.Join(t.TempDir(), "spill.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	spill := mailbox.SpillOptions{Store: st, Queue: "live", Codec: mailbox.NewTypeCodec().Register("seq", seqMsg{}), CommitEvery: 16}
	s := newStepper(t, mailbox.Block(10))
	seq := 0
	burst := func(n int) {
		for range n {
			s.mb.PostUserMessage(seqMsg{Seq: seq})
			seq++
		}
	}
	type step struct {
		name    string
		cfg     mailbox.Config
		burst   int
		dropped int64 // more drops this step
		spilled int64 // spilled records after it
	}
	steps := []step{
		{"block", mailbox.Block(10), 10, 0, 0},
		{"drop-oldest", mailbox.DropOldest(10), 5, 5, 0},
		{"spill", mailbox.Spill(10, spill), 20, 0, 20},
		// Sample while the spill drains: one in 4 behind the spilled ones.
		{"sample", mailbox.Sample(10, 4), 20, 15, 25},
		// DropNewest counts the spilled as queued: 35 of 40, room for 5.
		{"drop-newest", mailbox.DropNewest(40), 10, 5, 30},
	}
	var dropped int64
	for _, c := range steps {
		if err := s.mb.Reconfigure(c.cfg); err != nil {
			t.Fatalf("%s: Reconfigure: %v", c.name, err)
		}
		exact(t, c.name+" (changed)", s.mb.Stats())
		burst(c.burst)
		got := s.mb.Stats()
		exact(t, c.name, got)
		if d := got.DroppedTotal() - dropped; d != c.dropped {
			t.Errorf("%s: dropped %d more, want %d (%v)", c.name, d, c.dropped, got.Dropped)
		}
		dropped = got.DroppedTotal()
		if got.SpillPending != c.spilled {
			t.Errorf("%s: %d spilled, want %d", c.name, got.SpillPending, c.spilled)
		}
		if got.Policy != c.cfg.Overflow.String() {
			t.Errorf("%s: policy %q", c.name, got.Policy)
		}
	}
	s.run()
	end := s.mb.Stats()
	exact(t, "drained", end)
	if end.Depth != 0 || end.SpillPending != 0 || end.Delivered != int64(len(s.got)) {
		t.Fatalf("drained: %+v, %d received", end, len(s.got))
	}
	last := -1
	for _, m := range s.got {
		v := m.(seqMsg).Seq
		if v <= last {
			t.Fatalf("record %d after %d: order lost", v, last)
		}
		last = v
	}
	// With the spill drained, DropNewest applies to memory alone again.
	burst(50)
	if got := s.mb.Stats(); got.Depth != 40 || got.SpillPending != 0 {
		t.Fatalf("after draining: depth %d, spilled %d; want 40, 0", got.Depth, got.SpillPending)
	}
}

// TestReconfigureToBlockOverfill: a Block mailbox refuses what a sender
// posts beyond its capacity, unless a live change to Block is settling
// (SetOverfill): then it queues it, counted as overfilled.
func TestReconfigureToBlockOverfill(t *testing.T) {
	s := newStepper(t, mailbox.DropNewest(4))
	for i := range 4 {
		s.mb.PostUserMessage(seqMsg{Seq: i})
	}
	if err := s.mb.Reconfigure(mailbox.Block(4)); err != nil {
		t.Fatal(err)
	}
	s.mb.SetOverfill(true)
	s.mb.PostUserMessage(seqMsg{Seq: 4})
	st := s.mb.Stats()
	if st.Depth != 5 || st.Overfilled != 1 || st.DroppedTotal() != 0 {
		t.Fatalf("overfill: %+v", st)
	}
	s.mb.SetOverfill(false)
	s.mb.PostUserMessage(seqMsg{Seq: 5})
	st = s.mb.Stats()
	if st.Depth != 5 || st.Dropped[mailbox.ReasonRefused] != 1 {
		t.Fatalf("after overfill: %+v", st)
	}
	exact(t, "block", st)
}

// TestReconfigureRejects: an invalid configuration changes nothing.
func TestReconfigureRejects(t *testing.T) {
	s := newStepper(t, mailbox.DropOldest(8))
	for _, bad := range []mailbox.Config{
		{Capacity: 0},
		mailbox.Sample(8, 1),
		mailbox.Throttle(8, 0),
		{Capacity: 8, Overflow: mailbox.OverflowSpill},
	} {
		if err := s.mb.Reconfigure(bad); err == nil {
			t.Errorf("Reconfigure(%+v) succeeded", bad)
		}
	}
	if c := s.mb.Config(); c.Overflow != mailbox.OverflowDropOldest || c.Capacity != 8 {
		t.Fatalf("config after refusals: %+v", c)
	}
}
