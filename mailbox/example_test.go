package mailbox_test

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/mailbox"
)

// A mailbox of capacity 2 on a protoactor actor. While the actor is busy,
// two messages fit and the third is refused with ErrFull; Stats shows it.
func ExampleMailbox_TryPut() {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	defer sys.Shutdown()
	root := actor.NewRootContext(sys, nil)

	busy, release := make(chan struct{}), make(chan struct{})
	received := make(chan string, 3)
	receive := func(c actor.Context) {
		switch m := c.Message().(type) {
		case string:
			if m == "slow" { // keep the actor busy so that the mailbox fills
				close(busy)
				<-release
			}
			received <- m
		}
	}

	cfg := mailbox.Block(2)
	var mb *mailbox.Mailbox // the handle for TryPut, Put and Stats
	producer, err := cfg.Producer(func(m *mailbox.Mailbox) { mb = m })
	if err != nil {
		fmt.Println(err)
		return
	}
	pid := root.Spawn(actor.PropsFromFunc(receive, actor.WithMailbox(producer)))
	defer root.Stop(pid)

	_ = mb.TryPut("slow")
	<-busy
	for _, msg := range []string{"a", "b", "c"} {
		err := mb.TryPut(msg)
		fmt.Printf("TryPut(%q): %v (full: %v)\n", msg, err, errors.Is(err, mailbox.ErrFull))
	}
	st := mb.Stats()
	fmt.Printf("capacity %d, depth %d, refused %d\n", st.Capacity, st.Depth, st.Refused)

	close(release)
	fmt.Println("received:", <-received, <-received, <-received)
	// Output:
	// TryPut("a"): <nil> (full: false)
	// TryPut("b"): <nil> (full: false)
	// TryPut("c"): mailbox: full (full: true)
	// capacity 2, depth 2, refused 1
	// received: slow a b
}

// Validate says what is wrong with a configuration. New returns the same
// error, and actors.Spawn wraps it.
func ExampleConfig_Validate() {
	fmt.Println(mailbox.Config{Capacity: 0}.Validate())
	fmt.Println(mailbox.Config{Capacity: 64}.Validate())
	// Output:
	// mailbox: capacity 0: must be at least 1
	// <nil>
}
