package operators_test

import (
	"context"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/operators"
)

// TestCollectorKeepsOrder writes batches of many sizes (one larger than a
// chunk) and reads them back in order.
func TestCollectorKeepsOrder(t *testing.T) {
	c := operators.NewCollector[int]()
	w, err := c.Open(context.Background(), 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Items(); got != nil || c.Len() != 0 {
		t.Fatalf("empty collector: %v, len %d", got, c.Len())
	}
	var want []int
	for i, size := range []int{1, 255, 256, 300, 0, 7, 70_000, 3, 1 << 16, 5} {
		batch := make([]int, size)
		for j := range batch {
			batch[j] = i*1_000_000 + j
		}
		if err := w.Write(batch); err != nil {
			t.Fatal(err)
		}
		want = append(want, batch...)
		if c.Len() != len(want) {
			t.Fatalf("after batch %d: Len %d, want %d", i, c.Len(), len(want))
		}
	}
	if got := c.Items(); !slices.Equal(got, want) {
		t.Fatalf("Items: %d records, want %d, or out of order", len(got), len(want))
	}
}
