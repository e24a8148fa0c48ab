package msgpacksafe

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// estimate returns what the walk expects decoding data into t to allocate.
func estimate(data []byte, t reflect.Type) (int64, error) {
	w := &walker{data: data, budget: 1 << 62, maxDepth: MaxDepth, pending: 1}
	w.value(shapeOf(t), 0)
	if w.err != nil {
		return 0, w.err
	}
	return w.used, nil
}

func array32(n int, elem []byte) []byte {
	b := []byte{0xdd, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(n))
	return append(b, bytes.Repeat(elem, n)...)
}

type calAddr struct {
	Street string
	Since  time.Time
}

type calItem struct {
	SKU  string
	Qty  int
	At   time.Time
	Tags map[string]string
}

// TestEstimateMatchesAllocation: the walk's estimate of the decoded size
// is within a factor of two of what msgpack allocates, for hostile shapes
// (one-byte elements) and for ordinary data, so that the budget bounds
// real allocation.
func TestEstimateMatchesAllocation(t *testing.T) {
	var items []calItem
	for i := range 5000 {
		items = append(items, calItem{SKU: "a", Qty: i, Tags: map[string]string{"k": "v"}})
	}
	legit, _ := msgpack.Marshal(items)
	strs, _ := msgpack.Marshal(bytes.Split(bytes.Repeat([]byte("ab,"), 50000), []byte(",")))
	m := map[string]int{}
	for i := range 20000 {
		m[string(rune('a'+i%26))+string(rune(i))] = i
	}
	maps, _ := msgpack.Marshal(m)
	cases := []struct {
		name string
		data []byte
		t    reflect.Type
	}{
		{"[]int32 fixints", array32(1<<18, []byte{1}), reflect.TypeFor[[]int32]()},
		{"[]*calAddr empty", array32(1<<16, []byte{0x80}), reflect.TypeFor[[]*calAddr]()},
		{"[]map empty", array32(1<<16, []byte{0x80}), reflect.TypeFor[[]map[string]int]()},
		{"[]any fixints", array32(1<<16, []byte{1}), reflect.TypeFor[[]any]()},
		{"[]any empty maps", array32(1<<16, []byte{0x80}), reflect.TypeFor[[]any]()},
		{"[]any empty arrays", array32(1<<16, []byte{0x90}), reflect.TypeFor[[]any]()},
		{"[]calItem legit", legit, reflect.TypeFor[[]calItem]()},
		{"[][]byte strings", strs, reflect.TypeFor[[]string]()},
		{"map[string]int", maps, reflect.TypeFor[map[string]int]()},
		{"map into any", maps, reflect.TypeFor[any]()},
	}
	for _, c := range cases {
		est, err := estimate(c.data, c.t)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		v := reflect.New(c.t)
		dec := msgpack.NewDecoder(bytes.NewReader(c.data))
		if err := dec.Decode(v.Interface()); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		runtime.ReadMemStats(&after)
		got := int64(after.TotalAlloc - before.TotalAlloc)
		t.Logf("%-20s %8d bytes in: estimate %9d, allocated %9d (%.2f)", c.name, len(c.data), est, got, float64(est)/float64(got))
		if est*2 < got || est > 2*got+64<<10 {
			t.Errorf("%s: estimate %d, allocated %d: not within a factor of two", c.name, est, got)
		}
	}
}
