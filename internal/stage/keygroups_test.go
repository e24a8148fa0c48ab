package stage

import "testing"

// TestKeyGroupRange: the range of instance i of p holds exactly the key
// groups InstanceFor routes to i, for every parallelism up to 2 × 128.
func TestKeyGroupRange(t *testing.T) {
	for p := 1; p <= 2*KeyGroups; p++ {
		next := 0
		for i := range p {
			lo, hi := KeyGroupRange(i, p)
			if lo != next || hi < lo {
				t.Fatalf("p %d instance %d: [%d, %d) after %d", p, i, lo, hi, next)
			}
			for kg := lo; kg < hi; kg++ {
				if got := InstanceFor(uint64(kg), p); got != i {
					t.Fatalf("p %d: key group %d in the range of %d, routed to %d", p, kg, i, got)
				}
			}
			next = hi
		}
		if next != KeyGroups {
			t.Fatalf("p %d: ranges end at %d", p, next)
		}
	}
}
