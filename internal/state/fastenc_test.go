package state

import (
	"bytes"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
)

type encInner struct {
	A int64  `msgpack:"a"`
	B string `msgpack:"b,omitempty"`
}

type encNamed int32

type encAll struct {
	Bool    bool              `msgpack:"bo"`
	Int     int               `msgpack:"i"`
	Int8    int8              `msgpack:"i8"`
	Int16   int16             `msgpack:"i16"`
	Int32   int32             `msgpack:"i32"`
	Int64   int64             `msgpack:"i64"`
	Uint    uint              `msgpack:"u"`
	Uint8   uint8             `msgpack:"u8"`
	Uint16  uint16            `msgpack:"u16"`
	Uint32  uint32            `msgpack:"u32"`
	Uint64  uint64            `msgpack:"u64"`
	F32     float32           `msgpack:"f32"`
	F64     float64           `msgpack:"f64"`
	Str     string            `msgpack:"s"`
	Bytes   []byte            `msgpack:"by"`
	Arr     [3]int16          `msgpack:"ar"`
	BArr    [4]byte           `msgpack:"ba"`
	Ints    []int64           `msgpack:"is"`
	Strs    []string          `msgpack:"ss"`
	Inner   encInner          `msgpack:"in"`
	Inners  []encInner        `msgpack:"ins"`
	Ptr     *encInner         `msgpack:"p"`
	Named   encNamed          `msgpack:"n"`
	NoTag   int64             // its Go name
	Skipped int64             `msgpack:"-"`
	private int64             //nolint:unused // not encoded
	Opt     int64             `msgpack:"o,omitempty"`
	OptS    []int64           `msgpack:"os,omitempty"`
	OptP    *encInner         `msgpack:"op,omitempty"`
	OptIn   encInner          `msgpack:"oi,omitempty"`
	OptF    float64           `msgpack:"of,omitempty"`
	OptB    bool              `msgpack:"ob,omitempty"`
	OptStr  string            `msgpack:",omitempty"` // its Go name
	Alias   int64             `msgpack:"al,alias:other"`
	Nested  [][]encInner      `msgpack:"ne"`
	PtrPtr  **int64           `msgpack:"pp"`
	OptArr0 [0]int64          `msgpack:"oa,omitempty"`
	Many    [20]bool          `msgpack:"mb"`
	Big     map[string]string `msgpack:"-"` // skipped: a map would fall back
}

// randAll fills an encAll with values at and around msgpack's encoding
// boundaries.
func randAll(r *rand.Rand) encAll {
	ints := []int64{0, 1, -1, 31, 32, -32, -33, 127, 128, -128, -129, 255, 256, 32767, 32768, -32768, -32769,
		65535, 65536, math.MaxInt32, math.MinInt32, math.MaxInt32 + 1, math.MinInt32 - 1, math.MaxInt64, math.MinInt64}
	i := func() int64 { return ints[r.IntN(len(ints))] + int64(r.IntN(3)) - 1 }
	strs := []string{"", "x", strings.Repeat("a", 31), strings.Repeat("b", 32), strings.Repeat("c", 255),
		strings.Repeat("d", 256), strings.Repeat("e", 65535), strings.Repeat("f", 65536)}
	s := func() string { return strs[r.IntN(len(strs))] }
	short := func() string { return strs[r.IntN(4)] } // for the many strings of slices
	inner := func() encInner { return encInner{A: i(), B: short()} }
	v := encAll{Bool: r.IntN(2) == 0, Int: int(i()), Int8: int8(i()), Int16: int16(i()), Int32: int32(i()), Int64: i(),
		Uint: uint(i()), Uint8: uint8(i()), Uint16: uint16(i()), Uint32: uint32(i()), Uint64: uint64(i()),
		F32: float32(r.NormFloat64()), F64: r.NormFloat64(), Str: s(), Inner: inner(), Named: encNamed(i()),
		NoTag: i(), Skipped: i(), private: i(), Alias: i()}
	switch r.IntN(4) {
	case 0:
		v.F64 = math.Copysign(0, -1)
	case 1:
		v.F64 = math.NaN()
	case 2:
		v.F32 = float32(math.Inf(-1))
	}
	if r.IntN(3) > 0 {
		v.Bytes = []byte(s())
	}
	for j := range v.Arr {
		v.Arr[j] = int16(i())
	}
	for j := range v.BArr {
		v.BArr[j] = byte(r.IntN(256))
	}
	for j := range v.Many {
		v.Many[j] = r.IntN(2) == 0
	}
	switch r.IntN(3) {
	case 0: // nil
	case 1:
		v.Ints, v.Strs, v.Inners = []int64{}, []string{}, []encInner{}
	case 2:
		for range r.IntN(40) {
			v.Ints, v.Strs, v.Inners = append(v.Ints, i()), append(v.Strs, short()), append(v.Inners, inner())
		}
	}
	if r.IntN(2) == 0 {
		x := inner()
		v.Ptr = &x
	}
	if r.IntN(2) == 0 {
		v.Opt, v.OptS, v.OptIn, v.OptF, v.OptB, v.OptStr = i(), []int64{i()}, inner(), r.NormFloat64(), true, s()
		x := inner()
		v.OptP = &x
	} else if r.IntN(2) == 0 {
		v.OptS = []int64{} // empty, not nil: omitted all the same
	}
	if r.IntN(2) == 0 {
		v.Nested = [][]encInner{nil, {}, {inner(), inner()}}
	}
	if r.IntN(2) == 0 {
		n := i()
		p := &n
		v.PtrPtr = &p
	}
	return v
}

// TestCompiledEncoderIsMsgpacks compares the compiled encoder with
// msgpack.Marshal on values of every kind it knows, at msgpack's encoding
// boundaries.
func TestCompiledEncoderIsMsgpacks(t *testing.T) {
	enc := compileEnc(reflect.TypeFor[encAll]())
	if enc == nil {
		t.Fatal("encAll is not compiled")
	}
	penc := compileEnc(reflect.TypeFor[*encAll]())
	if penc == nil {
		t.Fatal("*encAll is not compiled")
	}
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 500 {
		v := randAll(r)
		want, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := enc(nil, unsafe.Pointer(&v)); !bytes.Equal(got, want) {
			t.Fatalf("value %d: compiled %x\nmsgpack %x", n, got, want)
		}
		p := &v
		if got := penc([]byte{1, 2}, unsafe.Pointer(&p)); !bytes.Equal(got[2:], want) || got[0] != 1 {
			t.Fatalf("value %d through its pointer: compiled %x\nmsgpack %x", n, got, want)
		}
		var back encAll
		if err := msgpack.Unmarshal(want, &back); err != nil {
			t.Fatal(err)
		}
	}
	var nilp *encAll
	if got := penc(nil, unsafe.Pointer(&nilp)); !bytes.Equal(got, []byte{0xc0}) {
		t.Fatalf("nil pointer: %x", got)
	}
	for _, c := range []struct {
		name string
		v    any
	}{{"int64", int64(-5)}, {"int", -70000}, {"string", "abc"}, {"uint16", uint16(9)}, {"bool", true},
		{"[]int64", []int64{1, -1, 1 << 40}}, {"[]string nil", []string(nil)}, {"[]byte", []byte("xy")}} {
		rt := reflect.TypeOf(c.v)
		enc := compileEnc(rt)
		if enc == nil {
			t.Fatalf("%s: not compiled", c.name)
		}
		want, _ := msgpack.Marshal(c.v)
		pv := reflect.New(rt)
		pv.Elem().Set(reflect.ValueOf(c.v))
		if got := enc(nil, pv.UnsafePointer()); !bytes.Equal(got, want) {
			t.Errorf("%s: compiled %x, msgpack %x", c.name, got, want)
		}
	}
}

type encOwn struct{ A int64 }

func (encOwn) MarshalMsgpack() ([]byte, error) { return []byte{0xc0}, nil }

type encOwnPtr struct{ A int64 }

func (*encOwnPtr) EncodeMsgpack(e *msgpack.Encoder) error { return e.EncodeNil() }

type encZeroer struct{ A int64 }

func (encZeroer) IsZero() bool { return true }

type encNode struct {
	V    int64
	Next *encNode
}

type encEmbedded struct {
	encInner
	C int64
}

type encRegistered struct{ A int64 }

// TestCompiledEncoderLeavesToMsgpack: the types it does not know are left
// to msgpack (compileEnc returns nil), also those inside a struct; a type
// registered with msgpack is caught by the check of its zero value.
func TestCompiledEncoderLeavesToMsgpack(t *testing.T) {
	msgpack.Register(encRegistered{}, func(e *msgpack.Encoder, v reflect.Value) error { return e.EncodeInt(v.Field(0).Int()) }, nil)
	for _, c := range []struct {
		name string
		t    reflect.Type
	}{
		{"map", reflect.TypeFor[map[string]int]()},
		{"interface", reflect.TypeFor[struct{ X any }]()},
		{"time", reflect.TypeFor[struct{ T time.Time }]()},
		{"marshaler", reflect.TypeFor[encOwn]()},
		{"marshaler in a slice", reflect.TypeFor[struct{ S []encOwn }]()},
		{"pointer-receiver encoder", reflect.TypeFor[struct{ X encOwnPtr }]()},
		{"IsZero", reflect.TypeFor[struct {
			Z encZeroer `msgpack:",omitempty"`
		}]()},
		{"recursive", reflect.TypeFor[encNode]()},
		{"embedded", reflect.TypeFor[encEmbedded]()},
		{"as array", reflect.TypeFor[struct {
			_msgpack struct{} `msgpack:",as_array"` //nolint:unused
			A        int64
		}]()},
		{"intern", reflect.TypeFor[struct {
			S string `msgpack:",intern"`
		}]()},
		{"uintptr", reflect.TypeFor[struct{ U uintptr }]()},
		{"registered", reflect.TypeFor[struct{ R encRegistered }]()},
	} {
		if compileEnc(c.t) != nil {
			t.Errorf("%s: compiled, want msgpack's", c.name)
		}
	}
}

// TestMemSnapshotCompiledIsMsgpacks: a memory table's whole-map snapshot
// with the compiled encoders is the bytes msgpack wrote, empty, filled and
// after deletions, and restores.
func TestMemSnapshotCompiledIsMsgpacks(t *testing.T) {
	owns := func(int64, int, int) bool { return true }
	m := NewMem[int64, *encAll](owns)
	if m.kenc == nil || m.venc == nil {
		t.Fatal("not compiled")
	}
	msgpackOf := func() []byte {
		st := memState[int64, *encAll]{Keys: m.Order, Accs: make([]*encAll, len(m.Order))}
		for i, k := range m.Order {
			st.Accs[i] = m.M[k]
		}
		b, err := msgpack.Marshal(&st)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	check := func(when string) {
		t.Helper()
		got, err := m.Snapshot(1)
		if err != nil {
			t.Fatal(err)
		}
		if want := msgpackOf(); !bytes.Equal(got, want) {
			t.Fatalf("%s: compiled %x\nmsgpack %x", when, got, want)
		}
		back := NewMem[int64, *encAll](owns)
		if err := back.Restore([][]byte{got}, 0, AllGroups); err != nil {
			t.Fatalf("%s: restore: %v", when, err)
		}
		if len(back.M) != len(m.M) {
			t.Fatalf("%s: restored %d keys of %d", when, len(back.M), len(m.M))
		}
	}
	check("empty")
	r := rand.New(rand.NewPCG(3, 4))
	for k := range int64(300) {
		v := randAll(r)
		if k%7 == 0 {
			m.Put(k-150, nil, false)
			continue
		}
		m.Put(k-150, &v, false)
	}
	check("filled")
	gone := map[int64]bool{}
	for k := range m.M {
		gone[k] = true
	}
	m.DeleteAll(gone)
	check("emptied")
}

// TestBundleIsMsgpacks: Bundle writes by hand what msgpack wrote of a
// bundle, behind the magic.
func TestBundleIsMsgpacks(t *testing.T) {
	big := bytes.Repeat([]byte{7}, 70000)
	for i, c := range []struct {
		meta   []byte
		tables [][]byte
	}{
		{nil, nil}, {[]byte{}, [][]byte{}}, {[]byte("m"), [][]byte{nil}}, {big, [][]byte{[]byte("a"), big, bytes.Repeat([]byte{1}, 300)}},
		{[]byte("x"), make([][]byte, 20)},
	} {
		got, err := Bundle(c.meta, c.tables...)
		if err != nil {
			t.Fatal(err)
		}
		enc, err := msgpack.Marshal(&bundle{Meta: c.meta, Tables: c.tables})
		if err != nil {
			t.Fatal(err)
		}
		if want := append(bytes.Clone(bundleMagic), enc...); !bytes.Equal(got, want) {
			t.Fatalf("case %d: %x\nmsgpack %x", i, got[:min(len(got), 64)], want[:min(len(want), 64)])
		}
		meta, tables, err := Unbundle(got)
		if err != nil || !bytes.Equal(meta, c.meta) || len(tables) != len(c.tables) {
			t.Fatalf("case %d: unbundled %d tables, %v", i, len(tables), err)
		}
	}
}

// benchAuction is shaped as Nexmark's winning-bid state.
type benchAuction struct {
	Auction struct {
		ID, Seller, Category, DateTime, Expires, Reserve int64 `msgpack:",omitempty"`
	} `msgpack:"a,omitempty"`
	Has, Open, Closed bool  `msgpack:",omitempty"`
	Forget            int64 `msgpack:"f,omitempty"`
	Best              struct {
		Auction, Bidder, Price, DateTime int64 `msgpack:",omitempty"`
	} `msgpack:"b,omitempty"`
	HasBest bool `msgpack:"bh,omitempty"`
	Pending []struct {
		Auction, Bidder, Price, DateTime int64
	} `msgpack:"p,omitempty"`
}

// BenchmarkMemSnapshot is a whole-map snapshot of 10 000 keys shaped as
// the winning-bid operator's (half open auctions, half closed ones), with
// msgpack.Marshal and with the compiled encoders: ns/op per snapshot.
func BenchmarkMemSnapshot(b *testing.B) {
	m := NewMem[int64, *benchAuction](func(int64, int, int) bool { return true })
	for k := range int64(10_000) {
		v := &benchAuction{}
		if k%2 == 0 {
			v.Has, v.Open, v.HasBest = true, true, true
			v.Auction.ID, v.Auction.Seller, v.Auction.Category, v.Auction.DateTime, v.Auction.Expires, v.Auction.Reserve = k, 1000+k, 10, 1436918400000+k, 1436918500000+k, 500
			v.Best.Auction, v.Best.Bidder, v.Best.Price, v.Best.DateTime = k, 2000+k, 900, 1436918400100+k
		} else {
			v.Closed, v.Forget = true, 1436918600000+k
		}
		m.Put(k, v, false)
	}
	kenc, venc := m.kenc, m.venc
	for _, c := range []struct {
		name     string
		compiled bool
	}{{"msgpack", false}, {"compiled", true}} {
		b.Run(c.name, func(b *testing.B) {
			m.kenc, m.venc = nil, nil
			if c.compiled {
				m.kenc, m.venc = kenc, venc
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.Snapshot(1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzCompiledEncoderIsMsgpacks: for values drawn from the fuzzer's seeds
// (at and around msgpack's encoding boundaries, randAll), the compiled
// encoder writes msgpack.Marshal's bytes, and they decode back.
func FuzzCompiledEncoderIsMsgpacks(f *testing.F) {
	enc := compileEnc(reflect.TypeFor[encAll]())
	if enc == nil {
		f.Fatal("encAll is not compiled")
	}
	f.Add(uint64(1), uint64(2))
	f.Add(uint64(0), uint64(math.MaxUint64))
	f.Fuzz(func(t *testing.T, s1, s2 uint64) {
		v := randAll(rand.New(rand.NewPCG(s1, s2)))
		want, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := enc(nil, unsafe.Pointer(&v)); !bytes.Equal(got, want) {
			t.Fatalf("compiled %x\nmsgpack %x", got, want)
		}
		var back encAll
		if err := msgpack.Unmarshal(want, &back); err != nil {
			t.Fatal(err)
		}
	})
}
