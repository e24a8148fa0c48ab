// Emit, an option of the per-key aggregations, passed to a window: it must
// not compile.
package main

import (
	"time"

	"github.com/sluicehq/sluice/operators"
)

func main() {
	t := operators.NewTopology("misused")
	s := operators.Source(t, "numbers", operators.FromSlice([]int{1, 2, 3}))
	ks := operators.KeyBy(s, "k", func(v int) int { return v % 2 })
	operators.WindowCount(ks, "w", operators.Tumbling(time.Second).ProcessingTime(), operators.Emit(operators.EmitAtEnd))
}
