package actors_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/actors"
)

// tally is an embedded actor: a plain protoactor actor that counts.
type tally struct{ total int }

type (
	increment struct{ by int }
	total     struct{}
)

func (t *tally) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case increment:
		t.total += m.by
	case total:
		c.Respond(t.total)
	}
}

// An application spawns a counter on a System, sends it increments and asks
// for the total with Request.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	sys, err := actors.NewSystem(actors.Config{Name: "example"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sys.Stop(ctx)

	ref, err := sys.Spawn("tally", func() actor.Actor { return &tally{} }, actors.Capacity(8))
	if err != nil {
		fmt.Println(err)
		return
	}
	for i := 1; i <= 4; i++ {
		if err := ref.Send(ctx, increment{by: i}); err != nil { // waits while the mailbox is full
			fmt.Println(err)
			return
		}
	}
	reply, err := ref.Request(ctx, total{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("total:", reply)
	fmt.Println("delivered:", ref.Stats().Delivered)

	_, err = sys.Spawn("tally", func() actor.Actor { return &tally{} }, actors.Capacity(0))
	fmt.Println(err)
	// Output:
	// total: 10
	// delivered: 5
	// actors: spawn "tally": mailbox: capacity 0: must be at least 1
}

// divider answers a division, or an error for a division by zero.
type divider struct{}

type divide struct{ a, b int }

var errDivByZero = errors.New("division by zero")

func (divider) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case divide:
		if m.b == 0 {
			c.Respond(fmt.Errorf("%d/%d: %w", m.a, m.b, errDivByZero))
			return
		}
		c.Respond(m.a / m.b)
	case string: // "crash"
		panic("asked to crash")
	}
}

// Ask is a typed request: the reply is an int, and an error reply is the
// request's error.
func ExampleAsk() {
	ctx := context.Background()
	sys, _ := actors.NewSystem(actors.Config{})
	defer sys.Stop(ctx)
	ref, _ := sys.Spawn("divider", func() actor.Actor { return divider{} })

	q, err := actors.Ask[int](ctx, ref, divide{7, 2})
	fmt.Println(q, err)
	_, err = actors.Ask[int](ctx, ref, divide{7, 0})
	fmt.Println(errors.Is(err, errDivByZero), err)
	// Output:
	// 3 <nil>
	// true 7/0: division by zero
}

// A request whose message makes the actor panic fails at once with the
// panic; when the actor ends, Done is closed and Err says why, and every
// request waiting fails with that.
func ExampleRef_Done() {
	ctx := context.Background()
	sys, _ := actors.NewSystem(actors.Config{Logger: slog.New(slog.DiscardHandler)})
	defer sys.Stop(ctx)
	ref, _ := sys.Spawn("divider", func() actor.Actor { return divider{} })

	_, err := ref.Request(ctx, "crash") // no deadline needed: it cannot hang
	var failed *actors.RequestFailedError
	fmt.Println(errors.As(err, &failed), err)

	_ = ref.Stop(ctx)
	<-ref.Done()
	fmt.Println(errors.Is(ref.Err(), actors.ErrActorStopped))
	_, err = ref.Request(ctx, divide{1, 1})
	fmt.Println(errors.Is(err, actors.ErrActorStopped))
	// Output:
	// true actors: request to divider: the actor failed on it: panic: asked to crash
	// true
	// true
}
