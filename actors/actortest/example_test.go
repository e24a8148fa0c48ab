package actortest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/actors/actortest"
)

type (
	Greet    struct{ Name string }
	Greeting struct{ Text string }
)

// Greeter is the actor under test: it answers a Greet with a Greeting.
type Greeter struct{}

func (Greeter) Receive(c actor.Context) {
	if g, ok := c.Message().(Greet); ok {
		c.Respond(Greeting{Text: "hello, " + g.Name})
	}
}

// The probe sends a Greet to the actor under test, so the Greeting comes
// back to it.
func ExampleProbe() {
	t := newExampleT() // in a test: the *testing.T
	defer t.finish()

	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	t.Cleanup(func() { sys.Stop(context.Background()) })
	greeter, err := sys.Spawn("greeter", func() actor.Actor { return Greeter{} })
	if err != nil {
		fmt.Println(err)
		return
	}

	p := actortest.NewProbe(t, sys)
	p.Send(greeter, Greet{Name: "ada"})
	fmt.Println(actortest.ExpectMsg[Greeting](p, time.Second).Text)
	actortest.ExpectNoMsg(p, 10*time.Millisecond)
	// Output: hello, ada
}

// FishFor skips what the test does not care about, here progress reports,
// until the message it waits for.
func ExampleFishFor() {
	t := newExampleT() // in a test: the *testing.T
	defer t.finish()
	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	t.Cleanup(func() { sys.Stop(context.Background()) })

	p := actortest.NewProbe(t, sys)
	worker := func(report *actor.PID) { // code under test, reporting to the probe
		for i := 1; i <= 3; i++ {
			sys.Root().Send(report, fmt.Sprintf("%d%% done", i*33))
		}
		sys.Root().Send(report, Greeting{Text: "finished"})
	}
	go worker(p.PID())
	fmt.Println(actortest.FishFor(p, time.Second, func(g Greeting) bool { return g.Text == "finished" }).Text)
	// Output: finished
}

// exampleT stands in for a *testing.T in these examples, which have none:
// it prints failures (and, unlike a *testing.T, goes on) and runs the
// cleanups at the end.
type exampleT struct {
	testing.TB // nil: only the methods below are used
	cleanups   []func()
}

func newExampleT() *exampleT { return &exampleT{} }

func (t *exampleT) Helper()                           {}
func (t *exampleT) Name() string                      { return "Example" }
func (t *exampleT) Context() context.Context          { return context.Background() }
func (t *exampleT) Cleanup(f func())                  { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Fatalf(format string, args ...any) { fmt.Printf(format+"\n", args...) }
func (t *exampleT) Errorf(format string, args ...any) { fmt.Printf(format+"\n", args...) }

func (t *exampleT) finish() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}
