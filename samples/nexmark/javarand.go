package nexmark

// javaRandom is a port of java.util.Random: the 48-bit linear congruential
// generator of Knuth, TAOCP vol. 2, §3.2.1, with the exact algorithms of the
// Java SE documentation, so that a seed gives the same sequence as in Java.
//
// It is a value type that never allocates; the zero value is not useful:
// make one with newJavaRandom.
type javaRandom struct {
	seed uint64 // only the low 48 bits are used
}

const (
	javaMultiplier = 0x5DEECE66D
	javaAddend     = 0xB
	javaMask       = 1<<48 - 1
)

// newJavaRandom is new java.util.Random(seed): the seed is scrambled with the
// multiplier.
func newJavaRandom(seed int64) javaRandom {
	return javaRandom{seed: (uint64(seed) ^ javaMultiplier) & javaMask}
}

// next is Random.next(bits): it advances the state and returns the state's
// top bits (1 to 32 of them) as a Java int, negative when bits is 32 and the
// top bit is set.
func (r *javaRandom) next(bits uint) int32 {
	r.seed = (r.seed*javaMultiplier + javaAddend) & javaMask
	return int32(r.seed >> (48 - bits))
}

// nextInt is Random.nextInt(): 32 random bits as a signed int.
func (r *javaRandom) nextInt() int32 {
	return r.next(32)
}

// nextIntn is Random.nextInt(bound), uniform in [0, bound). bound must be
// positive (Java throws; callers here validate their bounds first). A power
// of two takes the high bits; any other bound rejects the top partial range,
// with Java's int overflow test.
func (r *javaRandom) nextIntn(bound int32) int32 {
	u := r.next(31)
	m := bound - 1
	if bound&m == 0 {
		return int32((int64(bound) * int64(u)) >> 31)
	}
	if v := u % bound; u-v+m >= 0 { // int32 arithmetic wraps as Java's does
		return v
	}
	return r.nextIntnRetry(bound)
}

// nextIntn13 and nextIntn26 are nextIntn(13) and nextIntn(26) with constant
// bounds, so that their remainders compile to multiplications rather than
// divisions: they draw every character of the generated strings.
func (r *javaRandom) nextIntn13() int32 {
	u := r.next(31)
	if v := u % 13; u-v+12 >= 0 {
		return v
	}
	return r.nextIntnRetry(13)
}

func (r *javaRandom) nextIntn26() int32 {
	u := r.next(31)
	if v := u % 26; u-v+25 >= 0 {
		return v
	}
	return r.nextIntnRetry(26)
}

// nextIntnRetry is the rest of nextInt(bound)'s rejection loop, after a
// first draw was rejected.
func (r *javaRandom) nextIntnRetry(bound int32) int32 {
	for {
		u := r.next(31)
		if v := u % bound; u-v+bound-1 >= 0 {
			return v
		}
	}
}

// nextLong is Random.nextLong(): two 32-bit draws, the second one
// sign-extended and added.
func (r *javaRandom) nextLong() int64 {
	hi := int64(r.next(32))
	lo := int64(r.next(32))
	return hi<<32 + lo
}

// nextDouble is Random.nextDouble(): 53 random bits scaled to [0, 1).
func (r *javaRandom) nextDouble() float64 {
	hi := int64(r.next(26))
	lo := int64(r.next(27))
	return float64(hi<<27+lo) * (1.0 / (1 << 53))
}

// nextBoolean is Random.nextBoolean().
func (r *javaRandom) nextBoolean() bool {
	return r.next(1) != 0
}
