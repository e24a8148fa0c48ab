// A join-only option passed to Map: it must not compile.
package main

import (
	"time"

	"github.com/sluicehq/sluice/operators"
)

func main() {
	t := operators.NewTopology("misused")
	s := operators.Source(t, "numbers", operators.FromSlice([]int{1, 2, 3}))
	operators.Map(s, "m", func(v int) int { return v }, operators.StateTTL(time.Hour))
}
