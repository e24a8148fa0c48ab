package mailbox_test

import (
	"fmt"
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/mailbox"
)

// A DropOldest mailbox of 3 records on an actor that is busy: the senders
// are never slowed, the oldest records make room for the newest, and every
// record is accounted for.
func ExampleDropOldest() {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	defer sys.Shutdown()
	root := actor.NewRootContext(sys, nil)

	busy, release := make(chan struct{}), make(chan struct{})
	received := make(chan int, 8)
	receive := func(c actor.Context) {
		switch m := c.Message().(type) {
		case string: // "busy": hold the actor while the mailbox fills
			close(busy)
			<-release
		case int:
			received <- m
		}
	}

	var mb *mailbox.Mailbox
	producer, err := mailbox.DropOldest(3).Producer(func(m *mailbox.Mailbox) { mb = m })
	if err != nil {
		fmt.Println(err)
		return
	}
	pid := root.Spawn(actor.PropsFromFunc(receive, actor.WithMailbox(producer)))
	defer root.Stop(pid)

	root.Send(pid, "busy")
	<-busy
	for i := 1; i <= 6; i++ {
		root.Send(pid, i) // never refused, never waits
	}
	st := mb.Stats()
	fmt.Printf("queued %d, evicted %d\n", st.Depth, st.Dropped[mailbox.ReasonEvicted])

	close(release)
	fmt.Println("received:", <-received, <-received, <-received)
	st = mb.Stats()
	fmt.Printf("posted %d = delivered %d + dropped %d + queued %d\n", st.Posted, st.Delivered, st.DroppedTotal(), st.Depth)
	// Output:
	// queued 3, evicted 3
	// received: 4 5 6
	// posted 7 = delivered 4 + dropped 3 + queued 0
}
