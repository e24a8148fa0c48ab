package fraud_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/samples/fraud"
)

// The sample, run small. The joins' results do not depend on timing: no
// transaction is late, and an interval join pairs two records whichever
// arrives first, so the report is the same on every run.
func ExampleSample() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := fraud.DefaultConfig()
	cfg.Cards, cfg.Transactions, cfg.Stolen, cfg.Trips = 300, 3000, 2, 3
	s := fraud.New()
	s.Configure(cfg, 2, 6)
	top, err := s.Topology()
	if err != nil {
		fmt.Println(err)
		return
	}
	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sys.Stop(ctx)
	run, err := sys.Run(ctx, top)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := run.Wait(ctx); err != nil {
		fmt.Println(err)
		return
	}
	if err := s.Report(os.Stdout); err != nil {
		fmt.Println(err)
	}
	// Output:
	// 3006 transactions on 300 cards (seed 1), 2 cards reported stolen: 26 alerts on 21 transactions
	//   stolen-card           10  (used within 30m0s after the report; 3 planted, all caught)
	//   impossible-travel     16  (more than 500 km from a transaction 1h0m0s or less before; 3 planted, all caught)
	// the alerts equal the nested-loop computation
	// first suspicious transactions:
	//   09:22:17  card-0170  tx 3001      896.55  impossible-travel  in Brussels, 567 km from Lyon 30m33s before (tx 1034)
	//   09:27:47  card-0233  tx 1755       45.63  stolen-card        in Geneva, 4m10s after report 1
	//   09:27:52  card-0170  tx 1757       69.00  impossible-travel  in Lyon, 567 km from Brussels 5m36s before (tx 3001)
	//   09:29:12  card-0233  tx 1784       58.74  stolen-card        in Geneva, 5m35s after report 1
	//   09:32:13  card-0170  tx 1844        4.45  impossible-travel  in Lyon, 567 km from Brussels 9m56s before (tx 3001)
	//   09:47:23  card-0233  tx 2147       76.54  stolen-card        in Geneva, 23m46s after report 1
}
