package msgpacksafe_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
)

type Base struct {
	Kind    string
	Created time.Time
}

type Shape struct {
	Base             // inlined
	*Extra           // inlined through a pointer
	Name    string   `msgpack:"n"`
	Skipped string   `msgpack:"-"`
	Opt     []int    `msgpack:"o,omitempty"`
	Old     int      `msgpack:"new,alias:old"`
	Pair    Pair     // encoded as an array
	Pairs   []Pair   `msgpack:"ps"`
	Bytes   []byte   `msgpack:"b"`
	Arr     [3]int16 `msgpack:"a"`
	Nested  map[string][]*Base
	When    *time.Time
	Any     []any
	private int
}

type Extra struct{ Note string }

type Pair struct {
	_msgpack struct{} `msgpack:",as_array"`
	K        string
	V        float64
}

func randString(r *rand.Rand) string {
	return strings.Repeat(string(rune('a'+r.IntN(26))), r.IntN(40))
}

func randShape(r *rand.Rand) Shape {
	s := Shape{Name: randString(r), Old: r.IntN(1000), Pair: Pair{K: randString(r), V: r.Float64()}}
	s.Kind, s.Created = randString(r), time.Unix(r.Int64N(1<<40), r.Int64N(1e9)).UTC()
	if r.IntN(2) == 0 {
		s.Extra = &Extra{Note: randString(r)}
	}
	for range r.IntN(5) {
		s.Opt = append(s.Opt, r.IntN(1<<20))
	}
	for range r.IntN(30) {
		s.Pairs = append(s.Pairs, Pair{K: randString(r), V: float64(r.IntN(3))})
	}
	if r.IntN(2) == 0 {
		s.Bytes = []byte(randString(r))
	}
	s.Arr = [3]int16{int16(r.IntN(100)), 0, -1}
	if r.IntN(2) == 0 {
		s.Nested = map[string][]*Base{}
		for i := range r.IntN(6) {
			var bs []*Base
			for range r.IntN(4) {
				if r.IntN(3) == 0 {
					bs = append(bs, nil)
				} else {
					bs = append(bs, &Base{Kind: randString(r)})
				}
			}
			s.Nested[fmt.Sprint(i)] = bs
		}
	}
	if r.IntN(2) == 0 {
		t := time.Unix(r.Int64N(1<<33), 0).UTC()
		s.When = &t
	}
	for range r.IntN(8) {
		switch r.IntN(4) {
		case 0:
			s.Any = append(s.Any, r.IntN(300))
		case 1:
			s.Any = append(s.Any, randString(r))
		case 2:
			s.Any = append(s.Any, map[string]any{"x": []any{1, "y"}})
		default:
			s.Any = append(s.Any, nil)
		}
	}
	return s
}

// TestDecodeAcceptsWhatMsgpackWrites: values of a type with inlined,
// renamed, aliased, skipped, omitted and array-encoded fields, pointers,
// nested maps of slices of pointers and interfaces, written by msgpack,
// decode through Decode exactly as msgpack.Unmarshal decodes them: the
// walk refuses nothing legitimate.
func TestDecodeAcceptsWhatMsgpackWrites(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for i := range 2000 {
		in := randShape(r)
		data, err := msgpack.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var got, want Shape
		if err := msgpacksafe.Decode(data, &got, msgpacksafe.Limits{}); err != nil {
			t.Fatalf("value %d (%d bytes): %v", i, len(data), err)
		}
		if err := msgpack.Unmarshal(data, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("value %d: Decode = %+v, Unmarshal = %+v", i, got, want)
		}
		// As a slice of them, and under their old field name.
		if i%100 == 0 {
			many := []Shape{in, randShape(r), {}}
			data, _ := msgpack.Marshal(many)
			var back []Shape
			if err := msgpacksafe.Decode(data, &back, msgpacksafe.Limits{}); err != nil || len(back) != 3 {
				t.Fatalf("[]Shape: %d, %v", len(back), err)
			}
		}
	}
	old, _ := msgpack.Marshal(map[string]any{"old": 5})
	var s Shape
	if err := msgpacksafe.Decode(old, &s, msgpacksafe.Limits{}); err != nil || s.Old != 5 {
		t.Fatalf("alias: %+v, %v", s.Old, err)
	}
}
