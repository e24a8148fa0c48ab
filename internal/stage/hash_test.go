package stage

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// TestHashUint64IsFNVOfItsBytes: the unrolled hash of an integer key is
// the FNV-1a (mixed) of its 8 little-endian bytes, as it always was (the
// key groups of checkpoints depend on it).
func TestHashUint64IsFNVOfItsBytes(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	vs := []uint64{0, 1, 0xff, 0x100, math.MaxUint64, 1 << 63, 0x0123456789abcdef}
	for range 10000 {
		vs = append(vs, r.Uint64())
	}
	var b [8]byte
	for _, v := range vs {
		binary.LittleEndian.PutUint64(b[:], v)
		if got, want := hashUint64(v), fnvBytes(b[:]); got != want {
			t.Fatalf("hashUint64(%#x) = %#x, FNV of its bytes %#x", v, got, want)
		}
	}
	// HasherFor[int64] hashes through it.
	if got := HasherFor[int64]()(42); got != fnvBytes([]byte{42, 0, 0, 0, 0, 0, 0, 0}) {
		t.Fatalf("HasherFor[int64](42) = %#x", got)
	}
}
