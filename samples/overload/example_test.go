package overload_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/samples/overload"
)

// The pipelines' plan, and what holds whatever the timing: how much
// drop-oldest drops, and how much spill spills, depends on the machine.
func ExamplePipelines() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := overload.Config{Records: 2000, Slow: 2000, Capacity: 64}
	p, err := overload.NewPipelines(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	plan, err := p.Topology().Plan()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(plan)
	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sys.Stop(ctx)
	accounts, err := p.Measure(ctx, sys)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, a := range accounts {
		fmt.Printf("%-11s produced %d = delivered + dropped, none queued: %v; ", a.Policy, a.Produced, a.Balanced())
		if a.Policy == "drop-oldest" {
			fmt.Printf("in order, the newest delivered: %v\n", a.InOrder && a.Newest)
		} else {
			fmt.Printf("every record delivered in order: %v\n", a.Complete)
		}
	}
	fmt.Println("check:", overload.Check(cfg, accounts))
	// Output:
	// topology overload: 6 tasks, 3 edges
	//   task 0  x1  source-block(source)
	//   task 1  x1  slow-block(map) -> sink-block(sink)  [fused]
	//   task 2  x1  source-drop-oldest(source)
	//   task 3  x1  slow-drop-oldest(map) -> sink-drop-oldest(sink)  [fused]
	//   task 4  x1  source-spill(source)
	//   task 5  x1  slow-spill(map) -> sink-spill(sink)  [fused]
	//   edge    task 0 -> task 1  forward
	//   edge    task 2 -> task 3  forward
	//   edge    task 4 -> task 5  forward
	// block       produced 2000 = delivered + dropped, none queued: true; every record delivered in order: true
	// drop-oldest produced 2000 = delivered + dropped, none queued: true; in order, the newest delivered: true
	// spill       produced 2000 = delivered + dropped, none queued: true; every record delivered in order: true
	// check: <nil>
}
