package supervision

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// Jitter says how a Backoff randomises its delays. The nominal delay of
// attempt n is min(Max, Initial·Multiplierⁿ⁻¹); r is a draw from the random
// source in [0, 1).
type Jitter uint8

const (
	// EqualJitter (the default): half the nominal delay d, plus a random
	// part up to the other half: d/2 + r·d/2. A retry never comes sooner
	// than half the nominal delay, so a flapping component cannot hammer
	// what it depends on, while components that failed together spread out.
	EqualJitter Jitter = iota
	// FullJitter: a random delay between 0 and the nominal delay, r·d (the
	// "full jitter" of AWS's architecture blog): the least contention
	// between many clients, but a retry may come almost at once.
	FullJitter
	// NoJitter: exactly the nominal delay. For tests and single clients.
	NoJitter
)

func (j Jitter) String() string {
	switch j {
	case EqualJitter:
		return "equal"
	case FullJitter:
		return "full"
	case NoJitter:
		return "none"
	}
	return fmt.Sprintf("Jitter(%d)", uint8(j))
}

// Defaults of a Backoff's zero fields.
const (
	DefaultInitial    = 100 * time.Millisecond
	DefaultMax        = 30 * time.Second
	DefaultMultiplier = 2.0
)

// Backoff is exponential backoff with a cap and jitter: plain data, safe to
// copy and to share. The zero value is valid and means the defaults: 100 ms,
// doubling, capped at 30 s, equal jitter, math/rand/v2.
type Backoff struct {
	// Initial is the nominal delay after the first failure. Default
	// DefaultInitial.
	Initial time.Duration
	// Max caps the nominal delay. Default: DefaultMax, or Initial if that is
	// larger.
	Max time.Duration
	// Multiplier grows the nominal delay from one attempt to the next; at
	// least 1 (1: constant delay). Default DefaultMultiplier.
	Multiplier float64
	// Jitter randomises the delays. Default EqualJitter.
	Jitter Jitter
	// Rand returns numbers in [0, 1); it is called once per jittered Delay.
	// Inject a fixed or seeded source (SeededRand) to make schedules exact.
	// When the Backoff is shared by goroutines, Rand must be safe for
	// concurrent use. Default: math/rand/v2's Float64.
	Rand func() float64
}

// Validate reports a field out of range, wrapping ErrInvalidConfig.
func (b Backoff) Validate() error {
	switch {
	case b.Initial < 0:
		return errorf(ErrInvalidConfig, "supervision: backoff: negative initial delay %v", b.Initial)
	case b.Max < 0:
		return errorf(ErrInvalidConfig, "supervision: backoff: negative maximum delay %v", b.Max)
	case b.Max != 0 && b.Max < b.withDefaults().Initial:
		return errorf(ErrInvalidConfig, "supervision: backoff: maximum delay %v below the initial delay %v", b.Max, b.withDefaults().Initial)
	case b.Multiplier != 0 && !(b.Multiplier >= 1) || math.IsInf(b.Multiplier, 0):
		return errorf(ErrInvalidConfig, "supervision: backoff: multiplier %v: want a finite number of at least 1", b.Multiplier)
	case b.Jitter > NoJitter:
		return errorf(ErrInvalidConfig, "supervision: backoff: unknown jitter %v", b.Jitter)
	}
	return nil
}

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = DefaultInitial
	}
	if b.Max <= 0 {
		b.Max = max(DefaultMax, b.Initial)
	}
	if !(b.Multiplier >= 1) || math.IsInf(b.Multiplier, 0) {
		b.Multiplier = DefaultMultiplier
	}
	if b.Rand == nil {
		b.Rand = rand.Float64
	}
	return b
}

// Nominal is the delay before jitter after failed attempt number attempt
// (1 for the first failure): min(Max, Initial·Multiplier^(attempt-1)).
func (b Backoff) Nominal(attempt int) time.Duration {
	b = b.withDefaults()
	attempt = max(attempt, 1)
	d := float64(b.Initial) * math.Pow(b.Multiplier, float64(attempt-1))
	if !(d < float64(b.Max)) { // also catches +Inf
		return b.Max
	}
	return time.Duration(d)
}

// Delay is the time to wait after failed attempt number attempt (1 for the
// first failure) before the next one: the nominal delay with jitter
// applied. Fields out of range (see Validate) are taken as their defaults,
// so Delay never panics.
func (b Backoff) Delay(attempt int) time.Duration {
	b = b.withDefaults()
	d := float64(b.Nominal(attempt))
	switch b.Jitter {
	case FullJitter:
		d *= unit(b.Rand())
	case NoJitter:
	default: // EqualJitter
		d = d/2 + d/2*unit(b.Rand())
	}
	return time.Duration(d)
}

// unit clamps a draw of a misbehaving source into [0, 1].
func unit(r float64) float64 {
	if !(r > 0) { // also NaN
		return 0
	}
	return min(r, 1)
}

// SeededRand returns a random source for Backoff.Rand that is deterministic
// for its seed and safe for concurrent use.
func SeededRand(seed uint64) func() float64 {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var mu sync.Mutex
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Float64()
	}
}
