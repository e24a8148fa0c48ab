// Package sampletest holds what the samples' tests share: running a
// sample's topology to its end as `sluice run` does, and the goroutine
// leak check of their TestMain.
package sampletest

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
)

// VerifyTestMain runs the package's tests and fails it when a test leaves a
// goroutine behind. The protoactor goroutines ignored are the dead-letter
// throttle's (see actors/actors_test.go): bounded, owned by protoactor, not
// waitable.
func VerifyTestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
	)
}

// Run runs a sample's topology to its end on a system of its own, as
// `sluice run` does, and returns the statistics of its operators by name.
func Run(t testing.TB, topology func() (*operators.Topology, error)) map[string]actors.OperatorStats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	top, err := topology()
	if err != nil {
		t.Fatal(err)
	}
	sys, err := actors.NewSystem(actors.Config{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop(ctx)
	r, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	stats := map[string]actors.OperatorStats{}
	for _, st := range r.Stats() {
		stats[st.Name] = st
	}
	return stats
}
