package dashboard

// ring keeps the newest n values pushed into it, in a fixed array: the
// dashboard's bounded history of points, whatever the job's duration.
type ring[T any] struct {
	buf  []T
	next int // where the next push goes
	full bool
}

// newRing returns a ring of n values (at least 1).
func newRing[T any](n int) *ring[T] { return &ring[T]{buf: make([]T, max(n, 1))} }

// push adds v, forgetting the oldest value when the ring is full.
func (r *ring[T]) push(v T) {
	r.buf[r.next] = v
	r.next++
	if r.next == len(r.buf) {
		r.next, r.full = 0, true
	}
}

// len is how many values the ring holds.
func (r *ring[T]) len() int {
	if r.full {
		return len(r.buf)
	}
	return r.next
}

// values returns a copy of the values, oldest first.
func (r *ring[T]) values() []T {
	out := make([]T, 0, r.len())
	if r.full {
		out = append(out, r.buf[r.next:]...)
	}
	return append(out, r.buf[:r.next]...)
}
