package jetstreamtopg_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/samples/jetstreamtopg"
)

// The generated clicks are a function of the seed and their number, so the
// expected count of every window can be computed without the servers.
func ExampleWindowOf() {
	size := (10 * time.Second).Milliseconds()
	for i := range int64(3) {
		c := jetstreamtopg.ClickAt(1, 50, i)
		w := jetstreamtopg.WindowOf(c, size)
		fmt.Printf("click %d: %s at %s, window %s\n", c.Seq, c.Page,
			time.UnixMilli(c.TS).UTC().Format("15:04:05.000"), time.UnixMilli(w.Start).UTC().Format("15:04:05"))
	}
	fmt.Println(len(jetstreamtopg.Expected(1, 50, 1000, size)), "windows hold the first 1000 clicks")
	// Output:
	// click 0: /page/5 at 00:00:00.216, window 00:00:00
	// click 1: /page/15 at 00:00:00.374, window 00:00:00
	// click 2: /page/15 at 00:00:00.305, window 00:00:00
	// 60 windows hold the first 1000 clicks
}
