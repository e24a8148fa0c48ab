package nexmark

import (
	"math"
	"math/big"
	"testing"
)

// The expected values below were printed by java.util.Random on OpenJDK 17
// (a ten-line program calling each method on a fresh new Random(seed)), and
// the classic ones are the widely published values: new Random(42).nextInt()
// is -1170105035, new Random(0).nextDouble() is 0.730967787376657, new
// Random(42).nextDouble() is 0.7275636800328681. Seeds -1 and 2^48-1 give
// the same sequence (only 48 bits of the seed count), as do 0 and MinInt64.
var javaRandomCases = []struct {
	seed  int64
	ints  [5]int32 // nextInt()
	n10   [5]int32 // nextInt(10): the rejection path
	n16   [3]int32 // nextInt(16): the power-of-two path
	nbig  [5]int32 // nextInt(1500000001): the rejection loop really loops (p ≈ 0.3)
	longs [2]int64 // nextLong()
	dbls  [2]float64
	bools [4]bool
}{
	{0,
		[5]int32{-1155484576, -723955400, 1033096058, -1690734402, -1557280266},
		[5]int32{0, 8, 9, 7, 5}, [3]int32{11, 13, 3},
		[5]int32{516548029, 1302116447, 1368843515, 663681053, 1182054491},
		[2]int64{-4962768465676381896, 4437113781045784766},
		[2]float64{0.730967787376657, 0.24053641567148587},
		[4]bool{true, true, false, true}},
	{42,
		[5]int32{-1170105035, 234785527, -1360544799, 205897768, 1325939940},
		[5]int32{0, 3, 8, 4, 0}, [3]int32{11, 0, 10},
		[5]int32{117392763, 1467211248, 102948884, 662969970, 595021505},
		[2]int64{-5025562857975149833, -5843495416241995736},
		[2]float64{0.7275636800328681, 0.6832234717598454},
		[4]bool{true, false, true, false}},
	{123,
		[5]int32{-1188957731, 1018954901, -39088943, 1295249578, 1087885590},
		[5]int32{2, 0, 6, 9, 5}, [3]int32{11, 3, 15},
		[5]int32{509477450, 647624789, 543942795, 1232933657, 1307388834},
		[2]int64{-5106534569952410475, -167885730524958550},
		[2]float64{0.7231742029971469, 0.9908988967772393},
		[4]bool{true, false, true, false}},
	{-1,
		[5]int32{1155099827, 1887904451, 52699159, -1941176418, -1451336087},
		[5]int32{3, 5, 9, 9, 4}, [3]int32{4, 7, 0},
		[5]int32{577549913, 943952225, 26349579, 1176895439, 1421815604},
		[2]int64{4961115982468162243, 226341162490527646},
		[2]float64{0.26894263088050496, 0.012269981921235296},
		[4]bool{false, false, false, true}},
	{1000,
		[5]int32{-1244746321, 1060493871, -1826063944, 1976922248, -230127712},
		[5]int32{7, 5, 6, 4, 2}, [3]int32{11, 3, 9},
		[5]int32{530246935, 1234451676, 988461124, 34204349, 84623641},
		[2]int64{-5346144739450824145, -7842884917907853176},
		[2]float64{0.7101849056320707, 0.574836350385667},
		[4]bool{true, false, true, false}},
	{1<<48 - 1,
		[5]int32{1155099827, 1887904451, 52699159, -1941176418, -1451336087},
		[5]int32{3, 5, 9, 9, 4}, [3]int32{4, 7, 0},
		[5]int32{577549913, 943952225, 26349579, 1176895439, 1421815604},
		[2]int64{4961115982468162243, 226341162490527646},
		[2]float64{0.26894263088050496, 0.012269981921235296},
		[4]bool{false, false, false, true}},
	{math.MinInt64,
		[5]int32{-1155484576, -723955400, 1033096058, -1690734402, -1557280266},
		[5]int32{0, 8, 9, 7, 5}, [3]int32{11, 13, 3},
		[5]int32{516548029, 1302116447, 1368843515, 663681053, 1182054491},
		[2]int64{-4962768465676381896, 4437113781045784766},
		[2]float64{0.730967787376657, 0.24053641567148587},
		[4]bool{true, true, false, true}},
}

func TestJavaRandomKnownValues(t *testing.T) {
	if got := newJavaRandom(42); got.nextInt() != -1170105035 {
		t.Fatalf("new Random(42).nextInt() = %d, want -1170105035", got.nextInt())
	}
	for _, c := range javaRandomCases {
		r := newJavaRandom(c.seed)
		for i, want := range c.ints {
			if got := r.nextInt(); got != want {
				t.Errorf("seed %d: nextInt #%d = %d, want %d", c.seed, i, got, want)
			}
		}
		r = newJavaRandom(c.seed)
		for i, want := range c.n10 {
			if got := r.nextIntn(10); got != want {
				t.Errorf("seed %d: nextInt(10) #%d = %d, want %d", c.seed, i, got, want)
			}
		}
		r = newJavaRandom(c.seed)
		for i, want := range c.n16 {
			if got := r.nextIntn(16); got != want {
				t.Errorf("seed %d: nextInt(16) #%d = %d, want %d", c.seed, i, got, want)
			}
		}
		r = newJavaRandom(c.seed)
		for i, want := range c.nbig {
			if got := r.nextIntn(1500000001); got != want {
				t.Errorf("seed %d: nextInt(1500000001) #%d = %d, want %d", c.seed, i, got, want)
			}
		}
		r = newJavaRandom(c.seed)
		for i, want := range c.longs {
			if got := r.nextLong(); got != want {
				t.Errorf("seed %d: nextLong #%d = %d, want %d", c.seed, i, got, want)
			}
		}
		r = newJavaRandom(c.seed)
		for i, want := range c.dbls {
			if got := r.nextDouble(); got != want {
				t.Errorf("seed %d: nextDouble #%d = %v, want %v", c.seed, i, got, want)
			}
		}
		r = newJavaRandom(c.seed)
		for i, want := range c.bools {
			if got := r.nextBoolean(); got != want {
				t.Errorf("seed %d: nextBoolean #%d = %v, want %v", c.seed, i, got, want)
			}
		}
	}
}

// bigRandom is an independent, deliberately naive rendering of the Java SE
// documentation of java.util.Random with math/big: unbounded integers and
// explicit reductions instead of masks and wrapping machine arithmetic.
type bigRandom struct{ seed *big.Int }

var (
	bigMult  = big.NewInt(0x5DEECE66D)
	bigAdd   = big.NewInt(0xB)
	bigMod48 = new(big.Int).Lsh(big.NewInt(1), 48)
	bigMod64 = new(big.Int).Lsh(big.NewInt(1), 64)
)

func newBigRandom(seed int64) *bigRandom {
	s := new(big.Int).Xor(big.NewInt(seed), bigMult)
	return &bigRandom{seed: s.Mod(s, bigMod48)} // Mod is Euclidean: non-negative
}

// next returns the top bits as an unsigned value in [0, 2^bits).
func (r *bigRandom) next(bits uint) *big.Int {
	r.seed.Mul(r.seed, bigMult).Add(r.seed, bigAdd).Mod(r.seed, bigMod48)
	return new(big.Int).Rsh(r.seed, 48-bits)
}

// bigToSigned interprets v in [0, 2^n) as an n-bit two's-complement number.
func bigToSigned(v *big.Int, n uint) int64 {
	half := new(big.Int).Lsh(big.NewInt(1), n-1)
	if v.Cmp(half) >= 0 {
		v = new(big.Int).Sub(v, new(big.Int).Lsh(big.NewInt(1), n))
	}
	return v.Int64()
}

func (r *bigRandom) nextInt() int64 { return bigToSigned(r.next(32), 32) }

func (r *bigRandom) nextIntn(bound int64) int64 {
	b := big.NewInt(bound)
	if bound&(bound-1) == 0 { // (bound * r) >> 31
		v := r.next(31)
		return new(big.Int).Rsh(v.Mul(v, b), 31).Int64()
	}
	// Accept u when u - u%bound + bound - 1 < 2^31, that is when the whole
	// bucket of bound values holding u fits below 2^31.
	limit := new(big.Int).Lsh(big.NewInt(1), 31)
	for {
		u := r.next(31)
		v := new(big.Int).Mod(u, b)
		t := new(big.Int).Sub(u, v)
		t.Add(t, big.NewInt(bound-1))
		if t.Cmp(limit) < 0 {
			return v.Int64()
		}
	}
}

func (r *bigRandom) nextLong() int64 {
	hi := big.NewInt(bigToSigned(r.next(32), 32))
	lo := big.NewInt(bigToSigned(r.next(32), 32))
	v := hi.Lsh(hi, 32).Add(hi, lo)
	return bigToSigned(v.Mod(v, bigMod64), 64)
}

func (r *bigRandom) nextDouble() float64 {
	hi := r.next(26)
	v := hi.Lsh(hi, 27).Add(hi, r.next(27))
	f, _ := new(big.Float).SetMantExp(new(big.Float).SetInt(v), -53).Float64()
	return f
}

func TestJavaRandomMatchesBigReference(t *testing.T) {
	seeds := []int64{0, 1, 42, 123, -1, 1000, 1049, 99999, math.MaxInt64, math.MinInt64, -5025562857975149833}
	bounds := []int32{1, 2, 3, 5, 10, 13, 26, 64, 100, 1010, 1 << 30, 1500000001, math.MaxInt32}
	for _, seed := range seeds {
		fast, ref := newJavaRandom(seed), newBigRandom(seed)
		for i := range 300 {
			switch i % 4 {
			case 0:
				if got, want := int64(fast.nextInt()), ref.nextInt(); got != want {
					t.Fatalf("seed %d draw %d: nextInt %d, reference %d", seed, i, got, want)
				}
			case 1:
				b := bounds[i%len(bounds)]
				if got, want := int64(fast.nextIntn(b)), ref.nextIntn(int64(b)); got != want {
					t.Fatalf("seed %d draw %d: nextInt(%d) %d, reference %d", seed, i, b, got, want)
				}
			case 2:
				if got, want := fast.nextLong(), ref.nextLong(); got != want {
					t.Fatalf("seed %d draw %d: nextLong %d, reference %d", seed, i, got, want)
				}
			case 3:
				if got, want := fast.nextDouble(), ref.nextDouble(); got != want {
					t.Fatalf("seed %d draw %d: nextDouble %v, reference %v", seed, i, got, want)
				}
			}
		}
	}
}

func TestJavaRandomNoAllocs(t *testing.T) {
	allocs := testing.AllocsPerRun(100, func() {
		r := newJavaRandom(7)
		_ = r.nextIntn(26) + r.nextInt()
		_ = r.nextDouble()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per run, want 0", allocs)
	}
}

func BenchmarkJavaRandomNextIntn(b *testing.B) {
	r := newJavaRandom(42)
	var sink int32
	for b.Loop() {
		sink += r.nextIntn(26)
	}
	_ = sink
}
