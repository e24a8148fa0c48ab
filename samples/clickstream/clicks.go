package clickstream

import (
	"cmp"
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Epoch is when the generated clicks start.
var Epoch = time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)

// Click is one page view of a user: the stream's record.
type Click struct {
	Seq  int64     // the click's number in event-time order
	User string    // "user-007"
	Page string    // "/cart"
	At   time.Time // when it happened: its event time
	// Delay is how long after At the click reached the stream: it arrives
	// in the order of At+Delay.
	Delay time.Duration
}

// EventTime returns the click's event time, for operators.Timestamps.
func (c Click) EventTime() time.Time { return c.At }

// Config describes a generated click stream and how it is sessionized.
type Config struct {
	Users  int   // users, "user-000" to "user-<Users-1>"
	Clicks int64 // clicks in all
	Seed   uint64
	// LateFraction is the share of clicks delayed beyond OutOfOrder: they
	// may arrive behind the watermark. Whether such a click is late for its
	// session depends on the session (see the package doc).
	LateFraction float64
	// OutOfOrder is the bound of Timestamps (OutOfOrderness): a quarter
	// of the clicks are delayed by up to this much, and are never late.
	OutOfOrder time.Duration
	Gap        time.Duration // a session ends after Gap without a click
	Lateness   time.Duration // AllowedLateness of the session windows
}

// DefaultConfig is what `sluice run clickstream` runs without flags.
func DefaultConfig() Config {
	return Config{Users: 100, Clicks: 20_000, Seed: 1, LateFraction: 0.02,
		OutOfOrder: 5 * time.Second, Gap: 30 * time.Second, Lateness: time.Minute}
}

// Validate reports a configuration that cannot be generated or run.
func (c Config) Validate() error {
	var errs []error
	if c.Users < 1 {
		errs = append(errs, fmt.Errorf("users %d: must be at least 1", c.Users))
	}
	if c.Clicks < 0 {
		errs = append(errs, fmt.Errorf("clicks %d: must not be negative", c.Clicks))
	}
	if !(c.LateFraction >= 0 && c.LateFraction <= 0.75) {
		errs = append(errs, fmt.Errorf("late fraction %v: must be between 0 and 0.75", c.LateFraction))
	}
	if c.OutOfOrder < 0 || c.Lateness < 0 {
		errs = append(errs, fmt.Errorf("out-of-order %v, lateness %v: must not be negative", c.OutOfOrder, c.Lateness))
	}
	if c.Gap < 30*time.Millisecond {
		errs = append(errs, fmt.Errorf("gap %v: must be at least 30ms", c.Gap))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("clickstream: %w", err)
	}
	return nil
}

// Pages are the pages users visit.
var Pages = []string{"/", "/search", "/cart", "/checkout", "/account", "/help",
	"/product/1", "/product/2", "/product/3", "/product/4", "/product/5", "/product/6"}

// userClock is a user's next click, for the generator's heap.
type userClock struct {
	user int
	next time.Duration // since Epoch
}

type clockHeap []userClock

func (h clockHeap) Len() int { return len(h) }
func (h clockHeap) Less(i, j int) bool {
	return cmp.Or(cmp.Compare(h[i].next, h[j].next), cmp.Compare(h[i].user, h[j].user)) < 0
}
func (h clockHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *clockHeap) Push(x any)   { *h = append(*h, x.(userClock)) }
func (h *clockHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// between draws a duration in [lo, hi), in whole milliseconds.
func between(r *rand.Rand, lo, hi time.Duration) time.Duration {
	ms := int64((hi - lo) / time.Millisecond)
	if ms <= 0 {
		return lo.Truncate(time.Millisecond)
	}
	return lo.Truncate(time.Millisecond) + time.Duration(r.Int64N(ms))*time.Millisecond
}

// Generate returns the clicks of cfg in the order they arrive. It depends
// only on cfg: the same configuration gives the same stream.
//
// Every user clicks in bursts: a click follows the previous one after
// Gap/30 to Gap*2/3 (the same session), or, one time in five, after more
// than Gap (a new session). The clicks of all users are numbered in
// event-time order (Seq), then delayed: a quarter by up to OutOfOrder,
// LateFraction of them by more than OutOfOrder (up to OutOfOrder +
// 2*(Gap+Lateness)), the rest not at all; they arrive in the order of
// their event time plus delay.
func Generate(cfg Config) []Click {
	if cfg.Validate() != nil {
		return nil
	}
	r := rand.New(rand.NewPCG(cfg.Seed, 0x636c69636b73))
	h := make(clockHeap, cfg.Users)
	for u := range h {
		h[u] = userClock{user: u, next: between(r, 0, 2*cfg.Gap)}
	}
	heap.Init(&h)
	clicks := make([]Click, 0, cfg.Clicks)
	for i := range cfg.Clicks {
		u := &h[0]
		clicks = append(clicks, Click{Seq: i, User: fmt.Sprintf("user-%03d", u.user),
			Page: Pages[r.IntN(len(Pages))], At: Epoch.Add(u.next)})
		if r.IntN(5) == 0 {
			u.next += between(r, cfg.Gap+cfg.Gap/30, 8*cfg.Gap)
		} else {
			u.next += between(r, cfg.Gap/30, cfg.Gap*2/3)
		}
		heap.Fix(&h, 0)
	}
	for i := range clicks {
		switch x := r.Float64(); {
		case x < cfg.LateFraction:
			clicks[i].Delay = between(r, cfg.OutOfOrder+time.Millisecond, cfg.OutOfOrder+2*(cfg.Gap+cfg.Lateness))
		case x < cfg.LateFraction+0.25:
			clicks[i].Delay = between(r, 0, cfg.OutOfOrder+time.Millisecond)
		}
	}
	slices.SortStableFunc(clicks, func(a, b Click) int {
		return a.At.Add(a.Delay).Compare(b.At.Add(b.Delay))
	})
	return clicks
}
