package httpin_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/connectors/httpin"
	"github.com/sluicehq/sluice/operators"
)

type order struct {
	ID     int   `json:"id"`
	Amount int64 `json:"amount"`
}

// An ingress on a free loopback port feeds a topology that totals the
// amounts of the orders it receives; a client posts three orders, one a
// line; closing the ingress ends the stream and the topology finishes.
func Example() {
	ctx := context.Background()
	in, err := httpin.New(httpin.Config[order]{Addr: "127.0.0.1:0", Path: "/orders"})
	if err != nil {
		panic(err)
	}
	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		panic(err)
	}
	defer sys.Stop(ctx)

	t := operators.NewTopology("orders")
	orders := operators.Source(t, "orders", in.Source())
	byAll := operators.KeyBy(orders, "all", func(order) string { return "total" })
	total := operators.Aggregate(byAll, "sum", func() int64 { return 0 },
		func(acc int64, o order) int64 { return acc + o.Amount }, operators.Emit(operators.EmitAtEnd))
	result := operators.NewCollector[operators.KV[string, int64]]()
	operators.Sink(total, "result", result)
	run, err := sys.Run(ctx, t)
	if err != nil {
		panic(err)
	}
	if err := in.Start(); err != nil {
		panic(err)
	}

	body := `{"id": 1, "amount": 250}
{"id": 2, "amount": 100}
{"id": 3, "amount": 75}
`
	resp, err := http.Post(in.URL(), "application/x-ndjson", strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	reply, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Print(resp.Status, " ", string(reply))
	http.DefaultClient.CloseIdleConnections()

	if err := in.Close(ctx); err != nil { // no more requests; the stream ends
		panic(err)
	}
	if err := run.Wait(ctx); err != nil {
		panic(err)
	}
	fmt.Println(result.Items())
	st := in.Stats()
	fmt.Printf("%d request, %d records accepted\n", st.Requests, st.AcceptedRecords)
	// Output:
	// 202 Accepted {"accepted":3}
	// [{total 425}]
	// 1 request, 3 records accepted
}
