// OnRecordFailure passed to a source, which runs no function per record: it
// must not compile.
package main

import "github.com/sluicehq/sluice/operators"

func main() {
	t := operators.NewTopology("misused")
	operators.Source(t, "numbers", operators.FromSlice([]int{1, 2, 3}), operators.OnRecordFailure(3))
}
