package dashboard

import (
	"slices"
	"testing"
)

func TestRingKeepsTheNewestInOrder(t *testing.T) {
	r := newRing[int](4)
	if got := r.values(); len(got) != 0 || r.len() != 0 {
		t.Fatalf("empty ring holds %v", got)
	}
	for i := range 3 {
		r.push(i)
	}
	if got := r.values(); !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("before it is full: %v", got)
	}
	for i := 3; i < 11; i++ {
		r.push(i)
		if r.len() > 4 {
			t.Fatalf("after %d pushes the ring of 4 holds %d", i+1, r.len())
		}
	}
	if got := r.values(); !slices.Equal(got, []int{7, 8, 9, 10}) {
		t.Fatalf("after 11 pushes into 4: %v, want the newest 4, oldest first", got)
	}
	got := r.values()
	got[0] = -1
	if r.values()[0] != 7 {
		t.Fatal("values shares the ring's array")
	}
	one := newRing[string](0)
	one.push("a")
	one.push("b")
	if got := one.values(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("a ring of 0 keeps one value: %v", got)
	}
}
