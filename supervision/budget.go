package supervision

import (
	"sync"
	"time"
)

// Budget allows at most n events (restarts, say) within any sliding
// window of length Within. It remembers the times of the events it allowed
// in the last window, so its memory is bounded by Max. The clock is the
// caller's: every method takes the current time, so tests inject any clock.
// It is safe for concurrent use.
//
// An event at time t counts against the budget while now < t+Within. An
// event that is refused is not recorded: a component that keeps failing
// after its budget is spent does not push its own recovery further out.
type Budget struct {
	mu     sync.Mutex
	max    int
	within time.Duration
	times  []time.Time // allowed events, oldest first: at most max
}

// NewBudget returns a budget of n events within any window of length
// within. n 0 allows none (a component that fails is stopped at once); n
// must not be negative and within must be positive.
func NewBudget(n int, within time.Duration) (*Budget, error) {
	if n < 0 {
		return nil, errorf(ErrInvalidConfig, "supervision: budget: negative maximum %d", n)
	}
	if within <= 0 {
		return nil, errorf(ErrInvalidConfig, "supervision: budget: window %v: want a positive duration", within)
	}
	return &Budget{max: n, within: within, times: make([]time.Time, 0, n)}, nil
}

// Allow records an event at now and reports true if the budget has room for
// it, or reports false and records nothing.
func (b *Budget) Allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expire(now)
	if len(b.times) >= b.max {
		return false
	}
	b.times = append(b.times, now)
	return true
}

// Used is the number of recorded events that still count at now.
func (b *Budget) Used(now time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expire(now)
	return len(b.times)
}

// Max is the number of events the budget allows per window.
func (b *Budget) Max() int { return b.max }

// Within is the length of the window.
func (b *Budget) Within() time.Duration { return b.within }

// Reset forgets every recorded event.
func (b *Budget) Reset() {
	b.mu.Lock()
	b.times = b.times[:0]
	b.mu.Unlock()
}

func (b *Budget) expire(now time.Time) {
	i := 0
	for i < len(b.times) && !now.Before(b.times[i].Add(b.within)) {
		i++
	}
	if i > 0 {
		n := copy(b.times, b.times[i:])
		b.times = b.times[:n]
	}
}
