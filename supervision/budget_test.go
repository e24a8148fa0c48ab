package supervision

import (
	"errors"
	"testing"
	"time"
)

func TestBudgetSlidingWindow(t *testing.T) {
	b, err := NewBudget(3, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	steps := []struct {
		at    float64
		allow bool
		used  int
	}{
		{0, true, 1},
		{1, true, 2},
		{2, true, 3},
		{3, false, 3},     // full
		{9.999, false, 3}, // the first still counts
		{10, true, 3},     // the first expired at exactly 0+10s
		{10.5, false, 3},
		{11, true, 3}, // the second expired
		{12, true, 3},
		{12, false, 3},
		{40, true, 1}, // all expired: the window really slides
	}
	for _, s := range steps {
		if got := b.Allow(at(s.at)); got != s.allow {
			t.Errorf("Allow at %vs = %v, want %v", s.at, got, s.allow)
		}
		if got := b.Used(at(s.at)); got != s.used {
			t.Errorf("Used at %vs = %d, want %d", s.at, got, s.used)
		}
	}
	b.Reset()
	if b.Used(at(40)) != 0 || !b.Allow(at(40)) {
		t.Error("Reset did not empty the budget")
	}
}

// TestBudgetFlapping: a component failing every 100ms for a minute is
// allowed exactly max restarts in every window, never more.
func TestBudgetFlapping(t *testing.T) {
	const limit, within = 5, 2 * time.Second
	b, _ := NewBudget(limit, within)
	t0 := time.Unix(1_700_000_000, 0)
	var allowed []time.Time
	for i := 0; i < 600; i++ {
		now := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		if b.Allow(now) {
			allowed = append(allowed, now)
		}
	}
	for i := range allowed {
		n := 0
		for _, a := range allowed[i:] {
			if a.Sub(allowed[i]) < within {
				n++
			}
		}
		if n > limit {
			t.Fatalf("%d restarts within %v from %v", n, within, allowed[i].Sub(t0))
		}
	}
	// 60s of flapping, 5 per 2s window: 150 restarts, not 600.
	if len(allowed) != 150 {
		t.Errorf("%d restarts allowed in 60s, want 150", len(allowed))
	}
}

func TestBudgetZeroAndInvalid(t *testing.T) {
	b, err := NewBudget(0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if b.Allow(time.Now()) {
		t.Error("a budget of 0 allowed an event")
	}
	if _, err := NewBudget(-1, time.Second); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("negative max: %v", err)
	}
	if _, err := NewBudget(1, 0); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("zero window: %v", err)
	}
}
