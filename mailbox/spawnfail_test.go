package mailbox_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/mailbox"
)

// A spill mailbox whose store cannot open silently became DropNewest; now
// the producer, and with it the spawn, fails with an error naming the
// queue and the file.
func TestSpawnFailsWhenSpillCannotOpen(t *testing.T) {
	st, err := mailbox.OpenSpillStore(filepath.Join(t.TempDir(), "spill.db"))
	if err != nil {
		t.Fatal(err)
	}
	st.Close() // a store that cannot be used
	cfg := spillConfig(st, "orders.in", 4, 2)
	if _, err := cfg.Producer(nil); err == nil || !strings.Contains(err.Error(), `"orders.in"`) || !strings.Contains(err.Error(), st.Path()) {
		t.Fatalf("Producer = %v, want an error naming the queue and %s", err, st.Path())
	}
	sys, err := actors.NewSystem(actors.Config{Name: "spawnfail"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	defer sys.Stop(ctx)
	_, err = sys.Spawn("orders", func() actor.Actor { return actor.ReceiveFunc(func(actor.Context) {}) }, actors.Mailbox(cfg))
	if err == nil || !strings.Contains(err.Error(), `spawn "orders"`) || !strings.Contains(err.Error(), st.Path()) {
		t.Fatalf("Spawn = %v, want it to fail naming the actor and %s", err, st.Path())
	}
}

// The producer's first mailbox goes to the first spawn; a second spawn
// whose queue cannot open gets a mailbox that refuses every record,
// counted, with the error reported.
func TestProducerLaterFailureRefuses(t *testing.T) {
	st, err := mailbox.OpenSpillStore(filepath.Join(t.TempDir(), "spill.db"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := spillConfig(st, "q", 4, 2)
	errs := make(chan error, 1)
	cfg.OnError = func(err error) { errs <- err }
	var made []*mailbox.Mailbox
	p, err := cfg.Producer(func(mb *mailbox.Mailbox) { made = append(made, mb) })
	if err != nil {
		t.Fatal(err)
	}
	p()
	st.Close()
	p()
	if len(made) != 2 {
		t.Fatalf("%d mailboxes made", len(made))
	}
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), `"q"`) {
			t.Fatalf("OnError(%v), want the queue named", err)
		}
	default:
		t.Fatal("the failure was not reported")
	}
	if err := made[1].TryPut(rec{Seq: 1}); !errors.Is(err, mailbox.ErrDropped) {
		t.Fatalf("TryPut into the refusing mailbox = %v, want ErrDropped", err)
	}
	if s := made[1].Stats(); s.Dropped[mailbox.ReasonUnspillable] != 1 || s.Posted != 1 {
		t.Fatalf("stats %+v, want 1 posted and dropped as unspillable", s)
	}
}
