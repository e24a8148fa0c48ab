package nexmark

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// Events for the model tests. Times are small multiples of ms from the epoch,
// so the window bounds are easy to read.

func modelP(id int64, name, city, state string, t int64) Event {
	return Event{Person: &Person{ID: id, Name: name, City: city, State: state, DateTime: t}}
}

func modelA(id, seller, category, t, expires, reserve int64) Event {
	return Event{Auction: &Auction{ID: id, Seller: seller, Category: category, DateTime: t, Expires: expires, Reserve: reserve}}
}

func modelB(auction, bidder, price, t int64) Event {
	return Event{Bid: &Bid{Auction: auction, Bidder: bidder, Price: price, DateTime: t}}
}

// modelCheck compares a model's output with the expected results and also
// checks that the model does not depend on the order of its input (it is
// run again on the input reversed).
func modelCheck[T any](t *testing.T, model func([]Event) []T, in []Event, want []T) {
	t.Helper()
	got := model(in)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	rev := slices.Clone(in)
	slices.Reverse(rev)
	if got := model(rev); !reflect.DeepEqual(got, want) {
		t.Errorf("input reversed: got  %+v\nwant %+v", got, want)
	}
}

func TestModelQ0(t *testing.T) {
	p := modelP(1, "a", "b", "OR", 5)
	a := modelA(2, 1, 10, 5, 10, 0)
	b := modelB(2, 1, 100, 3)
	b2 := modelB(2, 1, 100, 5)
	modelCheck(t, ModelQ0, []Event{b2, a, p, b}, []Event{b, p, a, b2})
}

func TestModelQ1Q2(t *testing.T) {
	in := []Event{
		modelP(1, "a", "b", "OR", 0),
		modelB(246, 7, 199, 10), // 199·89 = 17711
		modelA(123, 1, 10, 0, 10, 0),
		modelB(123, 8, 100, 11),
		modelB(124, 9, 1, 12), // 89/100 rounds down to 0
		modelB(0, 9, 1000, 13),
	}
	t.Run("q1", func(t *testing.T) {
		modelCheck(t, ModelQ1, in, []Q1{
			{Auction: 0, Bidder: 9, Price: 890, DateTime: 13},
			{Auction: 123, Bidder: 8, Price: 89, DateTime: 11},
			{Auction: 124, Bidder: 9, Price: 0, DateTime: 12},
			{Auction: 246, Bidder: 7, Price: 177, DateTime: 10},
		})
	})
	t.Run("q2", func(t *testing.T) {
		modelCheck(t, ModelQ2, in, []Q2{{Auction: 0, Price: 1000}, {Auction: 123, Price: 100}, {Auction: 246, Price: 199}})
	})
}

func TestModelQ3(t *testing.T) {
	tests := []struct {
		name string
		in   []Event
		want []Q3
	}{
		{"person then auction", []Event{modelP(1, "Ann", "Bend", "OR", 0), modelA(10, 1, 10, 1, 2, 0)},
			[]Q3{{"Ann", "Bend", "OR", 10}}},
		{"auction before its person", []Event{modelA(11, 2, 10, 1, 2, 0), modelP(2, "Bo", "Boise", "ID", 5)},
			[]Q3{{"Bo", "Boise", "ID", 11}}},
		{"other category", []Event{modelP(1, "Ann", "Bend", "OR", 0), modelA(12, 1, 11, 1, 2, 0)}, nil},
		{"other state", []Event{modelP(3, "Cy", "Kent", "WA", 0), modelA(13, 3, 10, 1, 2, 0)}, nil},
		{"no person", []Event{modelA(14, 99, 10, 1, 2, 0)}, nil},
		{"two auctions of one seller", []Event{modelA(16, 4, 10, 1, 2, 0), modelP(4, "Di", "LA", "CA", 0), modelA(15, 4, 10, 3, 4, 0)},
			[]Q3{{"Di", "LA", "CA", 15}, {"Di", "LA", "CA", 16}}},
		{"seller is not the bidder", []Event{modelP(5, "Ed", "Bend", "OR", 0), modelB(17, 5, 100, 1), modelA(17, 6, 10, 0, 9, 0)}, nil},
		// Repeated ids: each auction once, with the first person of the id.
		{"an auction twice", []Event{modelP(7, "Fay", "Bend", "OR", 0), modelA(18, 7, 10, 1, 2, 0), modelA(18, 7, 10, 50, 60, 0)},
			[]Q3{{"Fay", "Bend", "OR", 18}}},
		{"a person twice", []Event{modelA(19, 8, 10, 1, 2, 0), modelP(8, "Gus", "Kent", "CA", 9), modelP(8, "Gus", "Kent", "CA", 3)},
			[]Q3{{"Gus", "Kent", "CA", 19}}},
		{"the earliest person of an id", []Event{modelP(9, "Hal", "Bend", "OR", 9), modelA(20, 9, 10, 1, 2, 0), modelP(9, "Ida", "Boise", "ID", 3)},
			[]Q3{{"Ida", "Boise", "ID", 20}}},
		{"the first person in a state", []Event{modelP(10, "Jo", "Kent", "WA", 0), modelA(21, 10, 10, 1, 2, 0), modelP(10, "Jo", "Bend", "OR", 3)},
			[]Q3{{"Jo", "Bend", "OR", 21}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { modelCheck(t, ModelQ3, tt.in, tt.want) })
	}
}

// modelWinInput is the input of the winning-bid tests (q4, q9).
var modelWinInput = []Event{
	// Auction 1 [1000, 2000], reserve 500: a bid before the start and one
	// after the end don't count; a bid exactly at the expiry does.
	modelB(1, 20, 10_000, 999),
	modelA(1, 100, 10, 1000, 2000, 500),
	modelB(1, 21, 600, 1000),
	modelB(1, 22, 700, 2000),
	modelB(1, 23, 9_999, 2001),
	// Auction 2, reserve 1000: below the reserve doesn't count, exactly the
	// reserve does; of equal prices the earliest bid wins, even when it
	// comes later in the input.
	modelA(2, 100, 10, 1000, 5000, 1000),
	modelB(2, 24, 999, 1500),
	modelB(2, 25, 1000, 1700),
	modelB(2, 26, 1000, 1600),
	// Auction 3: equal price and time, the smaller bidder wins.
	modelA(3, 101, 11, 0, 10_000, 100),
	modelB(3, 7, 300, 500),
	modelB(3, 5, 300, 500),
	modelB(3, 6, 200, 400),
	// Auction 4: no valid bid, no winner.
	modelA(4, 101, 11, 0, 10_000, 1000),
	modelB(4, 8, 999, 10),
	// Auctions 5 and 6 (category 12), their bids before them in the input.
	modelB(5, 9, 1234, 50),
	modelB(6, 9, 1235, 60),
	modelA(5, 102, 12, 0, 100, 1),
	modelA(6, 102, 12, 0, 100, 1),
	// A bid on an auction that isn't in the input.
	modelB(7, 9, 5000, 60),
}

func TestModelQ4(t *testing.T) {
	modelCheck(t, ModelQ4, modelWinInput, []Q4{
		{Category: 10, AvgPrice: 850},    // (700 + 1000) / 2
		{Category: 11, AvgPrice: 300},    // auction 4 has no winner
		{Category: 12, AvgPrice: 1234.5}, // (1234 + 1235) / 2
	})
}

func TestModelQ9(t *testing.T) {
	modelCheck(t, ModelQ9, modelWinInput, []Q9{
		{Auction: 1, Bidder: 22, Price: 700, DateTime: 2000},
		{Auction: 2, Bidder: 26, Price: 1000, DateTime: 1600},
		{Auction: 3, Bidder: 5, Price: 300, DateTime: 500},
		{Auction: 5, Bidder: 9, Price: 1234, DateTime: 50},
		{Auction: 6, Bidder: 9, Price: 1235, DateTime: 60},
	})
}

// TestModelQ9RepeatedAuction: of the auctions of one id the earliest
// counts, wherever it is in the input; a bid valid only for a later copy
// does not win, and the later copy's seller and category are not used.
func TestModelQ9RepeatedAuction(t *testing.T) {
	in := []Event{
		modelA(1, 100, 10, 5000, 9000, 1), // a later copy: ignored
		modelB(1, 20, 900, 6000),          // valid only for the later copy
		modelB(1, 21, 50, 1500),
		modelA(1, 101, 11, 1000, 2000, 1), // the first
		modelA(2, 102, 12, 100, 200, 1),   // same time: the one expiring first
		modelA(2, 103, 12, 100, 300, 1),
		modelB(2, 22, 70, 250), // valid only for the second copy
		modelB(2, 23, 60, 150),
	}
	modelCheck(t, ModelQ9, in, []Q9{{Auction: 1, Bidder: 21, Price: 50, DateTime: 1500}, {Auction: 2, Bidder: 23, Price: 60, DateTime: 150}})
	modelCheck(t, ModelQ4, in, []Q4{{Category: 11, AvgPrice: 50}, {Category: 12, AvgPrice: 60}})
	modelCheck(t, ModelQ6, in, []Q6{{Seller: 101, AvgPrice: 50}, {Seller: 102, AvgPrice: 60}})
}

// modelSold returns an auction of seller that expires at expires and its one
// valid bid at price.
func modelSold(id, seller, expires, price int64) []Event {
	return []Event{modelA(id, seller, 10, 0, expires, 1), modelB(id, 1, price, 0)}
}

func TestModelQ6(t *testing.T) {
	// Seller 100 has 12 winning bids; auction i expires at i s and sells for
	// 100·i, except auction 1, which expires at 12 s with auction 12 (the
	// tie goes by id). In order of expiry: 2, 3, …, 11, 1, 12; the last 10
	// are 4…11, 1, 12: (100·(4+…+11) + 100 + 1200) / 10 = 730.
	var in []Event
	for i := int64(12); i >= 1; i-- {
		expires := i * 1000
		if i == 1 {
			expires = 12_000
		}
		in = append(in, modelSold(i, 100, expires, 100*i)...)
	}
	in = append(in, modelSold(20, 200, 5000, 555)...)
	in = append(in, modelA(21, 300, 10, 0, 1000, 500), modelB(21, 1, 499, 10)) // no winner: no output for 300
	modelCheck(t, ModelQ6, in, []Q6{{Seller: 100, AvgPrice: 730}, {Seller: 200, AvgPrice: 555}})
}

func TestModelQ6Updates(t *testing.T) {
	var in []Event
	in = append(in, modelSold(50, 300, 3000, 100)...)
	in = append(in, modelSold(52, 300, 3000, 700)...)
	in = append(in, modelSold(51, 300, 1000, 400)...)
	in = append(in, modelSold(60, 200, 2000, 555)...)
	// By expiry: 51 (1 s), 60 (2 s), 50 and 52 (3 s, by id).
	modelCheck(t, ModelQ6Updates, in, []Q6{
		{Seller: 300, AvgPrice: 400},
		{Seller: 200, AvgPrice: 555},
		{Seller: 300, AvgPrice: 250},
		{Seller: 300, AvgPrice: 400},
	})
}

func TestModelQ5(t *testing.T) {
	in := []Event{
		modelB(1, 1, 1, 0),
		modelB(1, 1, 1, 4999),
		modelB(2, 1, 1, 5000), // on a boundary: in [0, 10 s) and [5 s, 15 s), not [-5 s, 5 s)
		modelB(2, 1, 1, 9999),
		modelB(3, 1, 1, 12_000),
		modelB(2, 1, 1, 14_999),
		modelP(1, "a", "b", "OR", 0), // not bids: no effect
		modelA(1, 1, 10, 0, 5, 0),
	}
	modelCheck(t, ModelQ5, in, []Q5{
		{WindowStart: -5000, WindowEnd: 5000, Auction: 1, Count: 2},
		{WindowStart: 0, WindowEnd: 10_000, Auction: 1, Count: 2}, // a tie: both
		{WindowStart: 0, WindowEnd: 10_000, Auction: 2, Count: 2},
		{WindowStart: 5000, WindowEnd: 15_000, Auction: 2, Count: 3},
		{WindowStart: 10_000, WindowEnd: 20_000, Auction: 2, Count: 1},
		{WindowStart: 10_000, WindowEnd: 20_000, Auction: 3, Count: 1},
	})
}

func TestModelQ7(t *testing.T) {
	in := []Event{
		modelB(1, 11, 5, 0),
		modelB(2, 12, 10, 9999),
		modelB(3, 13, 3, 10_000), // on the boundary: the next window
		modelB(4, 14, 3, 15_000),
		modelB(5, 15, 10, 5),
		modelB(6, 16, 100, 30_000),
	}
	modelCheck(t, ModelQ7, in, []Q7{
		{WindowStart: 0, WindowEnd: 10_000, Auction: 2, Bidder: 12, Price: 10, DateTime: 9999},
		{WindowStart: 0, WindowEnd: 10_000, Auction: 5, Bidder: 15, Price: 10, DateTime: 5},
		{WindowStart: 10_000, WindowEnd: 20_000, Auction: 3, Bidder: 13, Price: 3, DateTime: 10_000},
		{WindowStart: 10_000, WindowEnd: 20_000, Auction: 4, Bidder: 14, Price: 3, DateTime: 15_000},
		{WindowStart: 30_000, WindowEnd: 40_000, Auction: 6, Bidder: 16, Price: 100, DateTime: 30_000},
	})
}

func TestModelQ8(t *testing.T) {
	tests := []struct {
		name string
		in   []Event
		want []Q8
	}{
		{"same window, once for two auctions", []Event{modelP(1, "Ann", "", "", 1000), modelA(10, 1, 10, 9999, 0, 0), modelA(11, 1, 10, 5000, 0, 0)},
			[]Q8{{ID: 1, Name: "Ann", WindowStart: 0}}},
		{"different windows", []Event{modelP(2, "Bo", "", "", 9000), modelA(12, 2, 10, 10_000, 0, 0)}, nil},
		{"auction before the person", []Event{modelA(13, 3, 10, 25_000, 0, 0), modelP(3, "Cy", "", "", 20_000)},
			[]Q8{{ID: 3, Name: "Cy", WindowStart: 20_000}}},
		{"no person", []Event{modelA(14, 4, 10, 0, 0, 0)}, nil},
		{"no auction", []Event{modelP(5, "Di", "", "", 0), modelB(1, 5, 1, 0)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { modelCheck(t, ModelQ8, tt.in, tt.want) })
	}
}

func TestModelQ11(t *testing.T) {
	tests := []struct {
		name string
		in   []Event
		want []Q11
	}{
		{"gap below 10 s joins, 10 s splits", []Event{modelB(1, 1, 1, 0), modelB(1, 1, 1, 9999), modelB(1, 1, 1, 19_999), modelB(1, 1, 1, 25_000)},
			[]Q11{{Bidder: 1, Count: 2, SessionStart: 0, SessionEnd: 19_999}, {Bidder: 1, Count: 2, SessionStart: 19_999, SessionEnd: 35_000}}},
		{"exactly 10 s apart, out of order", []Event{modelB(1, 2, 1, 30_000), modelB(1, 2, 1, 10_000), modelB(1, 2, 1, 20_000)},
			[]Q11{{2, 1, 10_000, 20_000}, {2, 1, 20_000, 30_000}, {2, 1, 30_000, 40_000}}},
		{"a late bid merges two sessions", []Event{modelB(1, 3, 1, 0), modelB(1, 3, 1, 15_000), modelB(1, 3, 1, 7000)},
			[]Q11{{3, 3, 0, 25_000}}},
		{"equal times", []Event{modelB(1, 4, 1, 5), modelB(2, 4, 1, 5)}, []Q11{{4, 2, 5, 10_005}}},
		{"bidders apart", []Event{modelB(1, 5, 1, 0), modelB(1, 6, 1, 1), modelP(5, "a", "", "", 2)},
			[]Q11{{5, 1, 0, 10_000}, {6, 1, 1, 10_001}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { modelCheck(t, ModelQ11, tt.in, tt.want) })
	}
}

func TestModelWindows(t *testing.T) {
	tests := []struct {
		t      int64
		tumble int64
		slide  []int64
	}{
		{0, 0, []int64{0, -5000}},
		{4999, 0, []int64{0, -5000}},
		{5000, 0, []int64{5000, 0}},
		{9999, 0, []int64{5000, 0}},
		{10_000, 10_000, []int64{10_000, 5000}},
		{-1, -10_000, []int64{-5000, -10_000}},
		{-10_000, -10_000, []int64{-10_000, -15_000}},
	}
	for _, tt := range tests {
		if got := modelTumbleStart(tt.t, modelWindowSize); got != tt.tumble {
			t.Errorf("tumble start of %d = %d, want %d", tt.t, got, tt.tumble)
		}
		if got := modelSlideStarts(tt.t, modelWindowSize, modelWindowPeriod); !slices.Equal(got, tt.slide) {
			t.Errorf("slide starts of %d = %v, want %v", tt.t, got, tt.slide)
		}
	}
}

func TestModelLastPerKey(t *testing.T) {
	q4 := LastPerKeyQ4([]Q4{{11, 1}, {10, 2}, {11, 3}, {10, 1.5}})
	if want := []Q4{{10, 1.5}, {11, 3}}; !slices.Equal(q4, want) {
		t.Errorf("q4: got %v, want %v", q4, want)
	}
	q6 := LastPerKeyQ6([]Q6{{7, 1}, {7, 2}, {3, 9}})
	if want := []Q6{{3, 9}, {7, 2}}; !slices.Equal(q6, want) {
		t.Errorf("q6: got %v, want %v", q6, want)
	}
	if got := LastPerKeyQ4(nil); len(got) != 0 {
		t.Errorf("no updates: got %v", got)
	}
}

func TestModelSorted(t *testing.T) {
	in := []Q3{{"b", "", "", 2}, {"a", "", "", 2}, {"z", "", "", 1}}
	got := Sorted(in)
	if want := []Q3{{"z", "", "", 1}, {"a", "", "", 2}, {"b", "", "", 2}}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if in[0].Name != "b" {
		t.Errorf("Sorted changed its input")
	}
}

// modelResultJSON is one value of each result type with the JSON field
// names that nexmark.md gives for its query, in order.
var modelResultJSON = []struct {
	query  string
	value  interface{ AppendJSON([]byte) []byte }
	fields []string
}{
	{"q1", Q1{1, 2, 3, 4}, []string{"auction", "bidder", "price", "dateTime"}},
	{"q2", Q2{1, 2}, []string{"auction", "price"}},
	{"q3", Q3{"Peter \"P\" Shultz", "Bend\n", "<OR>&\u2028", 1000}, []string{"name", "city", "state", "id"}},
	{"q4", Q4{10, 1234567.5}, []string{"category", "avgPrice"}},
	{"q5", Q5{-5000, 5000, 7, 3}, []string{"windowStart", "windowEnd", "auction", "count"}},
	{"q6", Q6{1001, 1e21}, []string{"seller", "avgPrice"}},
	{"q7", Q7{0, 10_000, 1, 2, 3, 4}, []string{"windowStart", "windowEnd", "auction", "bidder", "price", "dateTime"}},
	{"q8", Q8{1000, "Kate \x00\xff Noris", 1436918400000}, []string{"id", "name", "windowStart"}},
	{"q9", Q9{math.MaxInt64, math.MinInt64, 3, 4}, []string{"auction", "bidder", "price", "dateTime"}},
	{"q11", Q11{1, 2, 3, 4}, []string{"bidder", "count", "sessionStart", "sessionEnd"}},
}

// modelEncodingJSON is v as encoding/json writes it with HTML escaping off.
func modelEncodingJSON(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func TestModelResultJSON(t *testing.T) {
	for _, tt := range modelResultJSON {
		t.Run(tt.query, func(t *testing.T) {
			got := tt.value.AppendJSON([]byte("prefix"))
			if !bytes.HasPrefix(got, []byte("prefix")) {
				t.Fatalf("AppendJSON lost dst: %s", got)
			}
			got = got[len("prefix"):]
			// The field names, in order.
			dec := json.NewDecoder(bytes.NewReader(got))
			var names []string
			if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
				t.Fatalf("%s: first token %v, %v", got, tok, err)
			}
			for dec.More() {
				tok, err := dec.Token()
				if err != nil {
					t.Fatalf("%s: %v", got, err)
				}
				names = append(names, tok.(string))
				var v any
				if err := dec.Decode(&v); err != nil {
					t.Fatalf("%s: %v", got, err)
				}
			}
			if !slices.Equal(names, tt.fields) {
				t.Errorf("fields %q, want %q", names, tt.fields)
			}
			// The same bytes as encoding/json (which reads the json tags).
			if want := modelEncodingJSON(t, tt.value); !bytes.Equal(got, want) {
				t.Errorf("AppendJSON:    %s\nencoding/json: %s", got, want)
			}
			// And back to the same value.
			back := reflect.New(reflect.TypeOf(tt.value))
			if err := json.Unmarshal(got, back.Interface()); err != nil {
				t.Fatal(err)
			}
			if got, want := back.Elem().Interface(), any(tt.value); tt.query != "q8" && got != want {
				t.Errorf("round trip: got %+v, want %+v", got, want)
			}
		})
	}
}

func TestModelResultMsgpack(t *testing.T) {
	for _, tt := range modelResultJSON {
		b, err := msgpack.Marshal(tt.value)
		if err != nil {
			t.Fatalf("%s: %v", tt.query, err)
		}
		back := reflect.New(reflect.TypeOf(tt.value))
		if err := msgpack.Unmarshal(b, back.Interface()); err != nil {
			t.Fatalf("%s: %v", tt.query, err)
		}
		if got := back.Elem().Interface(); got != any(tt.value) {
			t.Errorf("%s: got %+v, want %+v", tt.query, got, tt.value)
		}
	}
}

func TestModelJSONString(t *testing.T) {
	strs := []string{"", "plain", `"quoted" \ back`, "\b\f\n\r\t\x00\x1f\x7f", "héllo 世界 😀",
		"\u2028\u2029", "bad \xff\xfe utf8 \xe2\x82", "<&>", "\xed\xa0\x80 surrogate"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			switch rng.IntN(3) {
			case 0:
				b[i] = byte(rng.IntN(0x20))
			case 1:
				b[i] = byte(0x20 + rng.IntN(0x60))
			default:
				b[i] = byte(rng.IntN(256))
			}
		}
		strs = append(strs, string(b))
	}
	for _, s := range strs {
		got := jsonAppendString(nil, s)
		if want := modelEncodingJSON(t, s); !bytes.Equal(got, want) {
			t.Errorf("%q: got %s, want %s", s, got, want)
		}
	}
}

func TestModelJSONFloat(t *testing.T) {
	fs := []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 850, 1234.5, 1234567.5, 1e20, 1e21, 123456789012345678901234.0,
		1e-6, 1e-7, 1.5e-9, -2.5e-300, 1.0 / 3, math.MaxFloat64, math.SmallestNonzeroFloat64}
	for _, f := range fs {
		got := jsonAppendFloat(nil, f)
		if want := modelEncodingJSON(t, f); !bytes.Equal(got, want) {
			t.Errorf("%v: got %s, want %s", f, got, want)
		}
	}
	if got := string(jsonAppendFloat(nil, math.NaN())); got != "null" {
		t.Errorf("NaN: got %s", got)
	}
}

// modelRandomEvents returns n random events on few auctions, bidders and
// persons, with times in [0, span) on a 10 ms grid and prices below 100, so
// that joins, ties and windows have plenty to do. Person and auction ids
// repeat now and then.
func modelRandomEvents(seed uint64, n int, span int64) []Event {
	rng := rand.New(rand.NewPCG(seed, 0))
	states := []string{"OR", "ID", "CA", "WA"}
	persons, auctions := int64(n/50+1), int64(n/30+1)
	var evs []Event
	for range n {
		t := rng.Int64N(span/10) * 10
		switch r := rng.IntN(50); {
		case r < 1:
			evs = append(evs, modelP(1000+rng.Int64N(persons), fmt.Sprint("p", rng.IntN(3)), "c", states[rng.IntN(4)], t))
		case r < 4:
			evs = append(evs, modelA(1000+rng.Int64N(auctions), 1000+rng.Int64N(persons), 10+rng.Int64N(5),
				t, t+rng.Int64N(span/10+1), rng.Int64N(50)))
		default:
			evs = append(evs, modelB(1000+rng.Int64N(auctions), 1000+rng.Int64N(int64(n/20+1)), rng.Int64N(100), t))
		}
	}
	return evs
}

// TestModelQ9Brute checks the winning bids against a literal reading of the
// rule: for the first auction of each id, scan every bid.
func TestModelQ9Brute(t *testing.T) {
	evs := modelRandomEvents(3, 3000, 100_000)
	var want []Q9
	repeated := 0
	for i, ea := range evs {
		a := ea.Auction
		if a == nil {
			continue
		}
		first := true
		for j, eo := range evs {
			o := eo.Auction
			if o == nil || o.ID != a.ID || j == i {
				continue
			}
			// The earliest, then by expiry, seller, category and reserve;
			// of identical copies the first in the input.
			c := compareAuctionCopies(auctionInfoOf(a), auctionInfoOf(o))
			first = first && (c < 0 || c == 0 && i < j)
		}
		if !first {
			repeated++
			continue
		}
		var best *Bid
		for _, eb := range evs {
			b := eb.Bid
			if b == nil || b.Auction != a.ID || b.DateTime < a.DateTime || b.DateTime > a.Expires || b.Price < a.Reserve {
				continue
			}
			if best == nil || b.Price > best.Price ||
				b.Price == best.Price && (b.DateTime < best.DateTime || b.DateTime == best.DateTime && b.Bidder < best.Bidder) {
				best = b
			}
		}
		if best != nil {
			want = append(want, Q9{a.ID, best.Bidder, best.Price, best.DateTime})
		}
	}
	if len(want) < 20 || repeated < 5 {
		t.Fatalf("only %d winning bids and %d repeated auctions: the input is too thin", len(want), repeated)
	}
	modelCheck(t, ModelQ9, evs, Sorted(want))
}

// TestModelQ5Brute checks q5 against a scan of every window for every
// auction.
func TestModelQ5Brute(t *testing.T) {
	evs := modelRandomEvents(4, 3000, 60_000)
	var want []Q5
	for s := int64(-5000); s < 60_000; s += 5000 {
		counts := make(map[int64]int64)
		var most int64
		for _, e := range evs {
			if b := e.Bid; b != nil && s <= b.DateTime && b.DateTime < s+10_000 {
				counts[b.Auction]++
				most = max(most, counts[b.Auction])
			}
		}
		for a, n := range counts {
			if n == most {
				want = append(want, Q5{s, s + 10_000, a, n})
			}
		}
	}
	modelCheck(t, ModelQ5, evs, Sorted(want))
}

// TestModelLargeInput runs every model on 200 000 events and checks that
// each takes well under the 2 s budget (generously, for a loaded machine).
func TestModelLargeInput(t *testing.T) {
	if testing.Short() {
		t.Skip("large input")
	}
	evs := modelRandomEvents(5, 200_000, 1_000_000)
	models := []struct {
		name string
		run  func([]Event) int
	}{
		{"q0", func(e []Event) int { return len(ModelQ0(e)) }},
		{"q1", func(e []Event) int { return len(ModelQ1(e)) }},
		{"q2", func(e []Event) int { return len(ModelQ2(e)) }},
		{"q3", func(e []Event) int { return len(ModelQ3(e)) }},
		{"q4", func(e []Event) int { return len(ModelQ4(e)) }},
		{"q5", func(e []Event) int { return len(ModelQ5(e)) }},
		{"q6", func(e []Event) int { return len(ModelQ6(e)) }},
		{"q7", func(e []Event) int { return len(ModelQ7(e)) }},
		{"q8", func(e []Event) int { return len(ModelQ8(e)) }},
		{"q9", func(e []Event) int { return len(ModelQ9(e)) }},
		{"q11", func(e []Event) int { return len(ModelQ11(e)) }},
	}
	for _, m := range models {
		start := time.Now()
		n := m.run(evs)
		d := time.Since(start)
		t.Logf("%s: %d results in %v", m.name, n, d)
		if d > 10*time.Second {
			t.Errorf("%s took %v", m.name, d)
		}
	}
}
