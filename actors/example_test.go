package actors_test

import (
	"context"
	"fmt"
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
