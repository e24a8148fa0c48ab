package msgpacksafe_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
)

type Address struct {
	Street string
	Since  time.Time
}

type Item struct {
	SKU  string
	Qty  int
	At   time.Time
	Tags map[string]string
}

// Order is a realistic record: times, pointers, maps, nested structs and
// slices of structs.
type Order struct {
	ID     uint64 `msgpack:"id"`
	At     time.Time
	Ship   *Address
	Items  []Item
	Attrs  map[string]Item
	Note   *string
	Nested struct {
		A, B int
		When time.Time
	}
	Any any
}

// Big is an element type of about 300 bytes.
type Big struct {
	Vals [36]int64
	At   time.Time
}

type Node struct {
	Val  int
	Kids []Node
}

// hostile returns an array32 header of n elements followed by n copies
// of elem: a 1 MiB input of one-byte elements for n ≈ 1<<20.
func hostile(n int, elem byte) []byte {
	b := make([]byte, 5, 5+n)
	b[0] = 0xdd
	binary.BigEndian.PutUint32(b[1:], uint32(n))
	for range n {
		b = append(b, elem)
	}
	return b
}

func sampleOrder() Order {
	note := "leave at the door"
	o := Order{ID: 7, At: time.Date(2026, 12, 1, 8, 0, 0, 5, time.UTC),
		Ship:  &Address{Street: "Main St 1", Since: time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)},
		Items: []Item{{SKU: "a", Qty: 2, At: time.Unix(100, 0).UTC(), Tags: map[string]string{"x": "y"}}, {SKU: "b"}},
		Attrs: map[string]Item{"gift": {SKU: "g", Qty: 1}},
		Note:  &note, Any: map[string]any{"k": []any{int8(1), "two"}}}
	o.Nested.A, o.Nested.When = 3, time.Unix(5, 6).UTC()
	return o
}

func TestDecodeRoundTrip(t *testing.T) {
	in := sampleOrder()
	data, err := msgpack.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var got, want Order
	if err := msgpacksafe.Decode(data, &got, msgpacksafe.Limits{}); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if err := msgpack.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Decode = %+v, msgpack.Unmarshal = %+v", got, want)
	}
	if got.Ship == nil || got.Ship.Street != "Main St 1" || !got.At.Equal(in.At) || got.Items[0].Tags["x"] != "y" {
		t.Fatalf("Decode = %+v", got)
	}

	tree := Node{Val: 1, Kids: []Node{{Val: 2}, {Val: 3, Kids: []Node{{Val: 4}}}}}
	data, _ = msgpack.Marshal(tree)
	n, err := msgpacksafe.DecodeAs[Node](data, msgpacksafe.Limits{})
	if err != nil || !reflect.DeepEqual(n, tree) {
		t.Fatalf("DecodeAs[Node] = %+v, %v", n, err)
	}
}

func TestDecodeNilTime(t *testing.T) {
	// {"Items": [{"At": nil}]}: msgpack v5.4.1 panics on it.
	data := []byte{0x81, 0xa5, 'I', 't', 'e', 'm', 's', 0x91, 0x81, 0xa2, 'A', 't', 0xc0}
	var o Order
	err := msgpacksafe.Decode(data, &o, msgpacksafe.Limits{Source: "peer n2"})
	var e *msgpacksafe.Error
	if !errors.As(err, &e) || !errors.Is(err, msgpacksafe.ErrMalformed) {
		t.Fatalf("Decode = %v, want an *Error wrapping ErrMalformed", err)
	}
	if e.Path != ".Items[0].At" || e.Offset != 12 || e.Source != "peer n2" {
		t.Fatalf("Error at %q byte %d from %q, want .Items[0].At byte 12 from peer n2", e.Path, e.Offset, e.Source)
	}
	for _, want := range []string{"msgpackSafe_test.Order", "peer n2", ".Items[0].At", "byte 12", "time.Time"} {
		if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(want)) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	var tm time.Time // at the top, too
	if err := msgpacksafe.Decode([]byte{0xc0}, &tm, msgpacksafe.Limits{}); !errors.Is(err, msgpacksafe.ErrMalformed) {
		t.Fatalf("nil into time.Time: %v", err)
	}
	var p struct{ At *time.Time } // a nil pointer is fine
	if err := msgpacksafe.Decode([]byte{0x81, 0xa2, 'A', 't', 0xc0}, &p, msgpacksafe.Limits{}); err != nil || p.At != nil {
		t.Fatalf("nil into *time.Time: %v, %v", p.At, err)
	}
}

// Boom's decoder panics, as a buggy custom decoder would.
type Boom struct{}

func (*Boom) DecodeMsgpack(*msgpack.Decoder) error { panic("boom") }

func TestDecodeRecoversPanic(t *testing.T) {
	var b struct{ B Boom }
	err := msgpacksafe.Decode([]byte{0x81, 0xa1, 'B', 0x01}, &b, msgpacksafe.Limits{})
	if !errors.Is(err, msgpacksafe.ErrPanic) || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("Decode = %v, want ErrPanic naming boom", err)
	}
}

func TestDecodeRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
		kind error
		want string
	}{
		{"empty", nil, msgpacksafe.ErrMalformed, "empty input"},
		{"huge array header", []byte{0x81, 0xa5, 'I', 't', 'e', 'm', 's', 0xdd, 0xff, 0xff, 0xff, 0xff, 0x80}, msgpacksafe.ErrMalformed, "4294967295 elements"},
		{"huge map header", []byte{0xdf, 0x7f, 0xff, 0xff, 0xff}, msgpacksafe.ErrMalformed, "bytes left"},
		{"huge string", []byte{0x81, 0xa2, 'i', 'd', 0xdb, 0xff, 0xff, 0xff, 0xff}, msgpacksafe.ErrMalformed, "length 4294967295"},
		{"trailing bytes", []byte{0x80, 0x01}, msgpacksafe.ErrMalformed, "1 bytes after the value"},
		{"invalid code", []byte{0x81, 0xa2, 'i', 'd', 0xc1}, msgpacksafe.ErrMalformed, "invalid code 0xc1"},
		{"truncated", []byte{0x82, 0xa2, 'i', 'd', 0x01}, msgpacksafe.ErrMalformed, "truncated"},
		{"deep", append(bytesOf(0x91, 2000), 0xc0), msgpacksafe.ErrTooLarge, "nested deeper"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o Order
			err := msgpacksafe.Decode(tc.data, &o, msgpacksafe.Limits{})
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Decode = %v, want %v naming %q", err, tc.kind, tc.want)
			}
		})
	}
	var o Order
	if err := msgpacksafe.Decode(make([]byte, 100), &o, msgpacksafe.Limits{MaxInput: 10}); !errors.Is(err, msgpacksafe.ErrTooLarge) {
		t.Fatalf("MaxInput: %v", err)
	}
	if err := msgpacksafe.Decode([]byte{0x80}, o, msgpacksafe.Limits{}); err == nil {
		t.Fatal("Decode into a non-pointer succeeded")
	}
}

func bytesOf(b byte, n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = b
	}
	return out
}

// allocated returns the bytes fn allocates.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestDecodeHostileAllocation: a 1 MiB input of one-byte elements
// allocates less than 8 MiB, whatever it decodes into.
func TestDecodeHostileAllocation(t *testing.T) {
	const n = 1<<20 - 5
	const limit = 8 << 20
	for _, tc := range []struct {
		name   string
		elem   byte
		into   func() any
		refuse bool
	}{
		{"[]Big", 0x80, func() any { return new([]Big) }, true},
		{"[]*Big", 0x80, func() any { return new([]*Big) }, true},
		{"400k []*Big", 0x80, func() any { return new([]*Big) }, true},
		{"[]Order", 0x80, func() any { return new([]Order) }, true},
		{"[]time.Time nil", 0xc0, func() any { return new([]time.Time) }, true},
		{"[]int64", 0x01, func() any { return new([]int64) }, true},
		{"[]any", 0x01, func() any { return new([]any) }, true},
		{"struct field []Item", 0x80, func() any { return new(Order) }, true},
		{"[]int32", 0x01, func() any { return new([]int32) }, true},
		{"[]int16", 0x01, func() any { return new([]int16) }, false},
		{"[]uint8 as an array", 0x01, func() any { return new([]uint8) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := hostile(n, tc.elem)
			if strings.HasPrefix(tc.name, "400k") {
				data = hostile(400_000, tc.elem)
			}
			if tc.name == "struct field []Item" {
				data = append([]byte{0x81, 0xa5, 'I', 't', 'e', 'm', 's'}, data...)
			}
			var err error
			got := allocated(func() { err = msgpacksafe.Decode(data, tc.into(), msgpacksafe.Limits{}) })
			if tc.refuse != errors.Is(err, msgpacksafe.ErrTooLarge) {
				t.Fatalf("Decode = %v, want refused: %v", err, tc.refuse)
			}
			if got >= limit {
				t.Fatalf("Decode of %d bytes allocated %d bytes, want < %d", len(data), got, limit)
			}
			t.Logf("%d input bytes: %d bytes allocated (%v)", len(data), got, err)
		})
	}
}

// TestCheckThenUnmarshalAllocation shows what the old path (Check, then
// msgpack.Unmarshal) allocates for the same input: hundreds of MiB.
func TestCheckThenUnmarshalAllocation(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates about 320 MB")
	}
	data := hostile(1<<20-5, 0x80)
	got := allocated(func() {
		if err := msgpacksafe.Check(data); err != nil {
			t.Fatal(err)
		}
		var v []Big
		_ = msgpack.Unmarshal(data, &v)
	})
	if got < 100<<20 {
		t.Fatalf("Check+Unmarshal allocated only %d bytes", got)
	}
	t.Logf("Check+Unmarshal of %d bytes into []Big allocated %d bytes", len(data), got)
}

func TestDecodeUnknownFields(t *testing.T) {
	// A field this build does not know is skipped; small ones pass.
	data, _ := msgpack.Marshal(map[string]any{"id": 3, "Gone": []int{1, 2, 3}, "Ship": map[string]any{"Street": "x", "Old": "y"}})
	var o Order
	if err := msgpacksafe.Decode(data, &o, msgpacksafe.Limits{}); err != nil || o.ID != 3 || o.Ship.Street != "x" {
		t.Fatalf("Decode = %+v, %v", o, err)
	}
}

func ExampleDecode() {
	type Reading struct {
		Sensor string
		At     time.Time
	}
	data, _ := msgpack.Marshal(Reading{Sensor: "t1", At: time.Unix(0, 0).UTC()})
	var r Reading
	err := msgpacksafe.Decode(data, &r, msgpacksafe.Limits{Source: "example"})
	fmt.Println(r.Sensor, r.At.Year(), err)

	// A nil where a time.Time belongs: refused, naming where.
	err = msgpacksafe.Decode([]byte{0x81, 0xa2, 'A', 't', 0xc0}, &r, msgpacksafe.Limits{Source: "example"})
	fmt.Println(err)
	// Output:
	// t1 1970 <nil>
	// msgpack: decode msgpacksafe_test.Reading from example: at .At byte 4: nil where a time.Time is expected
}

func TestBudget(t *testing.T) {
	if got := (msgpacksafe.Limits{}).Budget(1 << 20); got != 7<<20 {
		t.Fatalf("default Budget(1 MiB) = %d", got)
	}
	if got := (msgpacksafe.Limits{Factor: 2, Slack: 10}).Budget(100); got != 210 {
		t.Fatalf("Budget = %d, want 210", got)
	}
}

// A Scanner's failures are *Errors wrapping ErrMalformed that name the
// source and the offset of the value at fault; the first one sticks.
func TestScannerErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		data []byte
		read func(s *msgpacksafe.Scanner)
		at   int
	}{
		{"truncated string", []byte{0x81, 0xa5, 'a'}, func(s *msgpacksafe.Scanner) { s.MapLen(); s.Str() }, 2},
		{"map larger than the data", []byte{0xdf, 0, 1, 0, 0, 1, 2}, func(s *msgpacksafe.Scanner) { s.MapLen() }, 5},
		{"a string where an integer is", []byte{0xa1, 'x'}, func(s *msgpacksafe.Scanner) { s.Int() }, 0},
		{"uint64 past int64", []byte{0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, func(s *msgpacksafe.Scanner) { s.Int() }, 0},
		{"negative for an unsigned", []byte{0xff}, func(s *msgpacksafe.Scanner) { s.Uint() }, 0},
		{"bytes after the value", []byte{0x01, 0x02}, func(s *msgpacksafe.Scanner) { s.Uint() }, 1},
		{"binary longer than the data", []byte{0xc6, 0xff, 0xff, 0xff, 0xff, 1}, func(s *msgpacksafe.Scanner) { s.Bin(); s.Bin() }, 5},
	} {
		s := msgpacksafe.NewScanner(c.data, "peer n2")
		c.read(&s)
		err := s.End()
		var e *msgpacksafe.Error
		if !errors.As(err, &e) || !errors.Is(err, msgpacksafe.ErrMalformed) || e.Source != "peer n2" || e.Offset != c.at {
			t.Errorf("%s: %v (offset %d), want an *Error from peer n2 wrapping ErrMalformed at byte %d", c.name, err, offsetOf(e), c.at)
		}
	}
}

func offsetOf(e *msgpacksafe.Error) int {
	if e == nil {
		return -1
	}
	return e.Offset
}
