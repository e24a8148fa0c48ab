package supervision

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"
)

func schedule(b Backoff, n int) []time.Duration {
	var ds []time.Duration
	for i := 1; i <= n; i++ {
		ds = append(ds, b.Delay(i))
	}
	return ds
}

func TestBackoffSchedules(t *testing.T) {
	ms := time.Millisecond
	fixed := func(r float64) func() float64 { return func() float64 { return r } }
	cases := []struct {
		name string
		b    Backoff
		want []time.Duration
	}{
		{"none doubles to the cap", Backoff{Initial: 10 * ms, Max: 100 * ms, Jitter: NoJitter},
			[]time.Duration{10 * ms, 20 * ms, 40 * ms, 80 * ms, 100 * ms, 100 * ms}},
		{"equal jitter at 0 is half", Backoff{Initial: 10 * ms, Max: 100 * ms, Rand: fixed(0)},
			[]time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 50 * ms, 50 * ms}},
		{"equal jitter at 0.5 is three quarters", Backoff{Initial: 10 * ms, Max: 100 * ms, Rand: fixed(0.5)},
			[]time.Duration{7500 * time.Microsecond, 15 * ms, 30 * ms, 60 * ms, 75 * ms, 75 * ms}},
		{"full jitter at 0.5 is half", Backoff{Initial: 10 * ms, Max: 100 * ms, Jitter: FullJitter, Rand: fixed(0.5)},
			[]time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 50 * ms, 50 * ms}},
		{"full jitter at 0 is zero", Backoff{Initial: 10 * ms, Jitter: FullJitter, Rand: fixed(0)},
			[]time.Duration{0, 0, 0}},
		{"multiplier 3", Backoff{Initial: ms, Max: time.Second, Multiplier: 3, Jitter: NoJitter},
			[]time.Duration{ms, 3 * ms, 9 * ms, 27 * ms, 81 * ms, 243 * ms, 729 * ms, time.Second}},
		{"multiplier 1 is constant", Backoff{Initial: 7 * ms, Multiplier: 1, Jitter: NoJitter},
			[]time.Duration{7 * ms, 7 * ms, 7 * ms}},
		{"defaults", Backoff{Jitter: NoJitter},
			[]time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 6400 * ms, 12800 * ms, 25600 * ms, 30 * time.Second}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.b.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := schedule(c.b, len(c.want)); !slices.Equal(got, c.want) {
				t.Errorf("delays %v, want %v", got, c.want)
			}
		})
	}
}

func TestBackoffJitterBounds(t *testing.T) {
	// With a real (seeded) source every delay lies in its jitter's range,
	// and the delays vary.
	for _, j := range []Jitter{EqualJitter, FullJitter} {
		b := Backoff{Initial: time.Millisecond, Max: 50 * time.Millisecond, Jitter: j, Rand: SeededRand(42)}
		seen := map[time.Duration]bool{}
		for i := 0; i < 1000; i++ {
			attempt := 1 + i%10
			d, nominal := b.Delay(attempt), b.Nominal(attempt)
			lo := time.Duration(0)
			if j == EqualJitter {
				lo = nominal / 2
			}
			if d < lo || d > nominal {
				t.Fatalf("%v jitter: attempt %d delay %v outside [%v, %v]", j, attempt, d, lo, nominal)
			}
			seen[d] = true
		}
		if len(seen) < 900 {
			t.Errorf("%v jitter: only %d distinct delays in 1000", j, len(seen))
		}
	}
}

func TestSeededRandIsDeterministic(t *testing.T) {
	a, b, c := SeededRand(7), SeededRand(7), SeededRand(8)
	same, differ := true, false
	for range 100 {
		x, y, z := a(), b(), c()
		same = same && x == y
		differ = differ || x != z
		if x < 0 || x >= 1 {
			t.Fatalf("draw %v outside [0, 1)", x)
		}
	}
	if !same || !differ {
		t.Errorf("same seed equal: %v, other seed differs: %v", same, differ)
	}
}

func TestBackoffNeverPanics(t *testing.T) {
	// Out-of-range fields, attempts and random draws are clamped.
	bs := []Backoff{
		{Initial: -time.Second, Max: -1, Multiplier: -3, Jitter: 99},
		{Initial: time.Hour, Max: time.Millisecond, Multiplier: math.NaN()},
		{Multiplier: math.Inf(1), Rand: func() float64 { return math.NaN() }},
		{Jitter: FullJitter, Rand: func() float64 { return 7 }},
		{Rand: func() float64 { return -1 }},
	}
	for _, b := range bs {
		for _, attempt := range []int{math.MinInt, -1, 0, 1, 2, 64, 1 << 20, math.MaxInt} {
			d := b.Delay(attempt)
			if d < 0 || d > max(DefaultMax, time.Hour) {
				t.Errorf("%+v: Delay(%d) = %v", b, attempt, d)
			}
		}
	}
	b := Backoff{Initial: time.Second, Max: time.Minute, Jitter: NoJitter}
	if d := b.Delay(math.MaxInt); d != time.Minute {
		t.Errorf("huge attempt: %v, want the cap", d)
	}
	if d := b.Delay(0); d != time.Second {
		t.Errorf("attempt 0: %v, want the initial delay", d)
	}
}

func TestBackoffValidate(t *testing.T) {
	bad := []Backoff{
		{Initial: -1},
		{Max: -1},
		{Initial: time.Second, Max: time.Millisecond},
		{Multiplier: 0.5},
		{Multiplier: math.NaN()},
		{Multiplier: math.Inf(1)},
		{Jitter: NoJitter + 1},
	}
	for _, b := range bad {
		if err := b.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: Validate = %v, want ErrInvalidConfig", b, err)
		}
	}
	good := []Backoff{{}, {Initial: time.Minute}, {Initial: time.Second, Max: time.Second, Multiplier: 1}}
	for _, b := range good {
		if err := b.Validate(); err != nil {
			t.Errorf("%+v: Validate = %v", b, err)
		}
	}
	// A large initial delay raises the default cap rather than failing.
	if d := (Backoff{Initial: time.Minute, Jitter: NoJitter}).Delay(3); d != time.Minute {
		t.Errorf("initial 1m, default cap: Delay(3) = %v, want 1m", d)
	}
}
