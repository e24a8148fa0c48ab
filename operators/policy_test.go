package operators_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
)

// TestEdgePolicies pushes a load through an edge whose consumer is stuck
// until the source has emitted everything, under every overflow policy, and
// checks the accounting: produced = delivered + dropped, memory bounded,
// and end-of-stream always delivered.
func TestEdgePolicies(t *testing.T) {
	const (
		n        = 20_000
		capacity = 512
	)
	cases := []struct {
		name     string
		cfg      mailbox.Config
		lossless bool
	}{
		{"drop-newest", mailbox.DropNewest(capacity), false},
		{"drop-oldest", mailbox.DropOldest(capacity), false},
		{"sample", mailbox.Sample(capacity, 4), false},
		{"throttle", mailbox.Throttle(capacity, 100), false},
		{"spill", mailbox.Spill(capacity, mailbox.SpillOptions{CommitEvery: 64}), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sys, ctx := newSystem(t)
			gate := make(chan struct{})
			var once sync.Once
			open := func() { once.Do(func() { close(gate) }) }
			t.Cleanup(open)
			top := operators.NewTopology("edge-"+tc.name, operators.BatchSize(64))
			src := operators.Source(top, "src", operators.Generate(n, func(i int64) int64 { return i }))
			var got []int64
			operators.Sink(src, "stuck", operators.SinkFunc(func(v int64) error {
				<-gate
				got = append(got, v)
				return nil
			}), operators.Input(tc.cfg))
			run, err := sys.Run(ctx, top)
			if err != nil {
				t.Fatal(err)
			}
			// The sender is never slowed: the source finishes while the sink is stuck.
			waitFor(t, "the source to emit everything", func() bool { return stat(t, run, "src").Out == n })
			open()
			if err := run.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			checkAccounts(t, run)
			st := stat(t, run, "stuck")
			if st.In+st.Dropped != n || st.Queued != 0 || st.SpillPending != 0 {
				t.Fatalf("produced %d = delivered %d + dropped %d + queued %d + spilled %d does not hold", n, st.In, st.Dropped, st.Queued, st.SpillPending)
			}
			if int64(len(got)) != st.In {
				t.Fatalf("sink saw %d records, stats say %d", len(got), st.In)
			}
			if st.QueueHighWater > capacity {
				t.Errorf("memory depth reached %d records, capacity %d", st.QueueHighWater, capacity)
			}
			if !slices.IsSorted(got) {
				t.Errorf("%s: delivered records out of order", tc.name)
			}
			if tc.lossless {
				if st.Dropped != 0 || len(got) != n || st.Spilled == 0 {
					t.Fatalf("spill: delivered %d of %d, dropped %d, spilled %d", len(got), n, st.Dropped, st.Spilled)
				}
				return
			}
			if st.Dropped == 0 || st.Policy != tc.name {
				t.Fatalf("%s: no drops counted (stats %+v)", tc.name, st)
			}
			var byReason int64
			for _, v := range st.DroppedBy {
				byReason += v
			}
			if byReason != st.Dropped {
				t.Errorf("drops by reason %v do not sum to %d", st.DroppedBy, st.Dropped)
			}
			if tc.name == "drop-oldest" && got[len(got)-1] != n-1 {
				t.Errorf("drop-oldest lost the newest record: last delivered %d", got[len(got)-1])
			}
			if tc.name == "drop-newest" && got[0] != 0 {
				t.Errorf("drop-newest lost the oldest record: first delivered %d", got[0])
			}
		})
	}
}

// TestBlockIsLossless: under Block nothing is dropped and order is kept,
// with a consumer far slower than the producer.
func TestBlockIsLossless(t *testing.T) {
	sys, ctx := newSystem(t)
	const n = 20_000
	top := operators.NewTopology("block", operators.BatchSize(32))
	src := operators.Source(top, "src", operators.Generate(n, func(i int64) int64 { return i }))
	m := operators.Map(src, "m", func(v int64) int64 { return v }, operators.Input(mailbox.Block(64)))
	col := operators.NewCollector[int64]()
	operators.Sink(m, "out", col, operators.Input(mailbox.Block(64)))
	run := runToEnd(t, sys, ctx, top)
	got := col.Items()
	if len(got) != n || !slices.IsSorted(got) {
		t.Fatalf("got %d records (sorted %v), want %d in order", len(got), slices.IsSorted(got), n)
	}
	if s := stat(t, run, "m"); s.Dropped != 0 || s.Policy != "block" {
		t.Fatalf("block edge stats %+v", s)
	}
}

type secret struct {
	Public  int
	private string
}

func TestSpillNeedsEncodableRecords(t *testing.T) {
	top := operators.NewTopology("unspillable")
	src := operators.Source(top, "src", operators.FromSlice([]secret{{1, "x"}}))
	operators.Sink(src, "out", discard[secret](), operators.Input(mailbox.Spill(16, mailbox.SpillOptions{})))
	err := top.Validate()
	if !errors.Is(err, operators.ErrInvalid) || !containsAll(err.Error(), `"out"`, "private") {
		t.Fatalf("Validate() = %v, want an error naming operator out and the unexported field", err)
	}
}

func TestInputValidated(t *testing.T) {
	top := operators.NewTopology("bad-input")
	// Input on a source does not compile (see TestOptionFamilies).
	src := operators.Source(top, "src", operators.FromSlice([]int{1}))
	operators.Sink(src, "out", discard[int](), operators.Input(mailbox.Block(0)))
	err := top.Validate()
	for _, want := range []string{`"out"`, "capacity 0"} {
		if !containsAll(err.Error(), want) {
			t.Errorf("Validate() = %v: missing %s", err, want)
		}
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

func TestIngressSendWaitsAndTrySendFails(t *testing.T) {
	sys, ctx := newSystem(t)
	in := operators.NewIngress[int](4)
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open) // before the system stops: a stuck sink cannot be stopped
	top := operators.NewTopology("ingress", operators.BatchSize(8), operators.Capacity(8))
	src := operators.Source(top, "in", in)
	var got []int
	operators.Sink(src, "slow", operators.SinkFunc(func(v int) error {
		<-gate
		got = append(got, v)
		return nil
	}), operators.NoFusion())
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	// Fill everything: the topology's credits and the ingress buffer.
	sent := 0
	fill := func() {
		for in.TrySend(sent) == nil {
			if sent++; sent > 10_000 {
				t.Fatal("ingress accepted 10k records into a stuck topology: not bounded")
			}
		}
	}
	for stat(t, run, "in").Backpressured != 1 {
		fill()
		waitFor(t, "the source to take records or run out of credit", func() bool {
			return in.Len() < 4 || stat(t, run, "in").Backpressured == 1
		})
	}
	fill() // what the source read before it ran out of credit
	if err := in.TrySend(sent); !errors.Is(err, mailbox.ErrFull) {
		t.Fatalf("TrySend on a full ingress = %v, want ErrFull", err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := in.Send(short, -1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send on a full ingress = %v, want the context's deadline", err)
	}
	open()
	done := make(chan error, 1)
	go func() { done <- in.Send(ctx, sent) }()
	if err := <-done; err != nil {
		t.Fatalf("Send after the sink resumed = %v", err)
	}
	in.Close()
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	want := make([]int, sent+1)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %d records, want 0..%d in order (%v...)", len(got), sent, got[:min(10, len(got))])
	}
	if err := in.Send(ctx, 1); !errors.Is(err, operators.ErrIngressClosed) {
		t.Fatalf("Send after Close = %v, want ErrIngressClosed", err)
	}
}
