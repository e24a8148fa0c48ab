package mailbox_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/mailbox"
)

// An actor that sends with ctx.Send from its Receive into a full Block
// mailbox: protoactor's send path cannot wait, so the mailbox refuses
// what does not fit, counts it, and never holds more than its capacity.
func TestCtxSendIntoFullBlockMailbox(t *testing.T) {
	sys, err := actors.NewSystem(actors.Config{Name: "ctxsend"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	defer sys.Stop(ctx)

	gate := make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(gate) }) // before sys.Stop, which waits for the receiver
	got := make(chan int, 64)
	recv, err := sys.Spawn("receiver", func() actor.Actor {
		return actor.ReceiveFunc(func(c actor.Context) {
			if n, ok := c.Message().(int); ok {
				<-gate // held until the sender is done
				got <- n
			}
		})
	}, actors.Mailbox(mailbox.Block(4)))
	if err != nil {
		t.Fatal(err)
	}
	sent := make(chan struct{})
	sender, err := sys.Spawn("sender", func() actor.Actor {
		return actor.ReceiveFunc(func(c actor.Context) {
			if _, ok := c.Message().(string); ok {
				for i := range 20 {
					c.Send(recv.PID(), i)
				}
				close(sent)
			}
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sender.Send(ctx, "go"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sent:
	case <-ctx.Done():
		t.Fatal("the sender did not finish: ctx.Send blocked")
	}
	st := recv.Stats()
	once.Do(func() { close(gate) })
	// The receiver holds what it took (it waits at the gate; how many the
	// dispatcher handed it before it blocked depends on scheduling); at
	// most 4 more wait in the mailbox; the rest is refused, counted.
	refused := st.Dropped[mailbox.ReasonRefused]
	if st.HighWater > 4 || st.Posted != 20 || refused == 0 || st.Delivered+int64(st.Depth)+refused != 20 {
		t.Fatalf("receiver stats %+v, want HighWater <= 4, some of 20 refused, every record accounted", st)
	}
	// Every admitted message arrives, in the order sent (the refused ones
	// leave gaps).
	last := -1
	for range 20 - int(refused) {
		select {
		case n := <-got:
			if n <= last {
				t.Fatalf("received %d after %d: out of order", n, last)
			}
			last = n
		case <-ctx.Done():
			t.Fatal("the admitted messages were not delivered")
		}
	}
}
