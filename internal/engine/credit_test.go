package engine

import (
	"math/rand/v2"
	"testing"
)

func TestGrantEvery(t *testing.T) {
	for _, c := range []struct {
		window, batch int
		want          int64
	}{{4096, 256, 2048}, {2048, 256, 1024}, {512, 256, 256}, {300, 256, 44}, {256, 256, 1}, {1, 1, 1}} {
		if got := grantEvery(c.window, c.batch); got != c.want {
			t.Errorf("grantEvery(%d, %d) = %d, want %d", c.window, c.batch, got, c.want)
		}
	}
}

// TestGatheredCreditsNeverDeadlock simulates one credit-gated channel with
// the receiver granting as grant does (gathered, every grantEvery records):
// whenever the sender lacks credit for its next batch, the receiver has
// records queued, whose handling grants it room. Batch sizes vary up to the
// batch size (partial batches are shipped at flushes); the receiver handles
// queued batches at random moments.
func TestGatheredCreditsNeverDeadlock(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct{ window, batch int }{{4096, 256}, {2048, 256}, {512, 256}, {300, 256}, {256, 256}, {1000, 1}, {64, 7}} {
		every := grantEvery(c.window, c.batch)
		credits := c.window
		var queue []int // batch sizes sent, not yet handled
		var consumed, reported int64
		next := 1 + rng.IntN(c.batch)
		for step := 0; step < 200_000; step++ {
			if credits >= next && rng.IntN(2) == 0 { // the sender sends
				credits -= next
				queue = append(queue, next)
				next = 1 + rng.IntN(c.batch)
				continue
			}
			if credits < next && len(queue) == 0 {
				t.Fatalf("window %d, batch %d: the sender waits for credit for %d records with %d, and the receiver has nothing queued (%d handled, %d granted)",
					c.window, c.batch, next, credits, consumed, reported)
			}
			if len(queue) > 0 { // the receiver handles one batch
				consumed += int64(queue[0])
				queue = queue[1:]
				if consumed-reported >= every {
					credits += int(consumed - reported)
					reported = consumed
				}
			}
		}
	}
}
