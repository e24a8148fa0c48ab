package nexmark

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The result types of the queries. Each has
//
//   - JSON tags with the field names of the query's output line (q0 outputs
//     the events themselves and has no result type);
//   - msgpack tags with the same names (all fields are exported, so msgpack
//     encodes them as they are);
//   - AppendJSON, which appends the result as one JSON object, fields in the
//     order listed for the query, without a trailing newline. It writes the
//     same bytes as encoding/json with HTML escaping turned off (see
//     jsonAppendString and jsonAppendFloat);
//   - Compare, the canonical order of the results, which Sorted uses to
//     compare a topology's output (an interleaving of its parallel
//     instances) with the query's model.

// Q1 is a bid with its price converted to euros (q1).
type Q1 struct {
	Auction  int64 `json:"auction" msgpack:"auction"`
	Bidder   int64 `json:"bidder" msgpack:"bidder"`
	Price    int64 `json:"price" msgpack:"price"` // bid price·89/100, integer division
	DateTime int64 `json:"dateTime" msgpack:"dateTime"`
}

// AppendJSON appends r as {"auction":..,"bidder":..,"price":..,"dateTime":..}.
func (r Q1) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"auction":`...)
	dst = strconv.AppendInt(dst, r.Auction, 10)
	dst = append(dst, `,"bidder":`...)
	dst = strconv.AppendInt(dst, r.Bidder, 10)
	dst = append(dst, `,"price":`...)
	dst = strconv.AppendInt(dst, r.Price, 10)
	dst = append(dst, `,"dateTime":`...)
	dst = strconv.AppendInt(dst, r.DateTime, 10)
	return append(dst, '}')
}

// Compare orders by Auction, Bidder, Price, DateTime.
func (r Q1) Compare(o Q1) int {
	return cmp.Or(cmp.Compare(r.Auction, o.Auction), cmp.Compare(r.Bidder, o.Bidder),
		cmp.Compare(r.Price, o.Price), cmp.Compare(r.DateTime, o.DateTime))
}

// Q2 is a bid on a selected auction (q2).
type Q2 struct {
	Auction int64 `json:"auction" msgpack:"auction"`
	Price   int64 `json:"price" msgpack:"price"`
}

// AppendJSON appends r as {"auction":..,"price":..}.
func (r Q2) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"auction":`...)
	dst = strconv.AppendInt(dst, r.Auction, 10)
	dst = append(dst, `,"price":`...)
	dst = strconv.AppendInt(dst, r.Price, 10)
	return append(dst, '}')
}

// Compare orders by Auction, Price.
func (r Q2) Compare(o Q2) int {
	return cmp.Or(cmp.Compare(r.Auction, o.Auction), cmp.Compare(r.Price, o.Price))
}

// Q3 is a match of the q3 join: the seller's name, city and state, and the
// auction's id.
type Q3 struct {
	Name  string `json:"name" msgpack:"name"`
	City  string `json:"city" msgpack:"city"`
	State string `json:"state" msgpack:"state"`
	ID    int64  `json:"id" msgpack:"id"` // auction id
}

// AppendJSON appends r as {"name":..,"city":..,"state":..,"id":..}.
func (r Q3) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"name":`...)
	dst = jsonAppendString(dst, r.Name)
	dst = append(dst, `,"city":`...)
	dst = jsonAppendString(dst, r.City)
	dst = append(dst, `,"state":`...)
	dst = jsonAppendString(dst, r.State)
	dst = append(dst, `,"id":`...)
	dst = strconv.AppendInt(dst, r.ID, 10)
	return append(dst, '}')
}

// Compare orders by ID, Name, City, State.
func (r Q3) Compare(o Q3) int {
	return cmp.Or(cmp.Compare(r.ID, o.ID), strings.Compare(r.Name, o.Name),
		strings.Compare(r.City, o.City), strings.Compare(r.State, o.State))
}

// Q4 is the average winning price of a category's auctions (q4).
type Q4 struct {
	Category int64   `json:"category" msgpack:"category"`
	AvgPrice float64 `json:"avgPrice" msgpack:"avgPrice"` // cents
}

// AppendJSON appends r as {"category":..,"avgPrice":..}.
func (r Q4) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"category":`...)
	dst = strconv.AppendInt(dst, r.Category, 10)
	dst = append(dst, `,"avgPrice":`...)
	dst = jsonAppendFloat(dst, r.AvgPrice)
	return append(dst, '}')
}

// Compare orders by Category, AvgPrice.
func (r Q4) Compare(o Q4) int {
	return cmp.Or(cmp.Compare(r.Category, o.Category), cmp.Compare(r.AvgPrice, o.AvgPrice))
}

// Q5 is an auction with the most bids of a sliding window (q5).
type Q5 struct {
	WindowStart int64 `json:"windowStart" msgpack:"windowStart"`
	WindowEnd   int64 `json:"windowEnd" msgpack:"windowEnd"`
	Auction     int64 `json:"auction" msgpack:"auction"`
	Count       int64 `json:"count" msgpack:"count"`
}

// AppendJSON appends r as {"windowStart":..,"windowEnd":..,"auction":..,"count":..}.
func (r Q5) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"windowStart":`...)
	dst = strconv.AppendInt(dst, r.WindowStart, 10)
	dst = append(dst, `,"windowEnd":`...)
	dst = strconv.AppendInt(dst, r.WindowEnd, 10)
	dst = append(dst, `,"auction":`...)
	dst = strconv.AppendInt(dst, r.Auction, 10)
	dst = append(dst, `,"count":`...)
	dst = strconv.AppendInt(dst, r.Count, 10)
	return append(dst, '}')
}

// Compare orders by WindowStart, WindowEnd, Auction, Count.
func (r Q5) Compare(o Q5) int {
	return cmp.Or(cmp.Compare(r.WindowStart, o.WindowStart), cmp.Compare(r.WindowEnd, o.WindowEnd),
		cmp.Compare(r.Auction, o.Auction), cmp.Compare(r.Count, o.Count))
}

// Q6 is the average price of a seller's last 10 winning bids (q6).
type Q6 struct {
	Seller   int64   `json:"seller" msgpack:"seller"`
	AvgPrice float64 `json:"avgPrice" msgpack:"avgPrice"` // cents
}

// AppendJSON appends r as {"seller":..,"avgPrice":..}.
func (r Q6) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"seller":`...)
	dst = strconv.AppendInt(dst, r.Seller, 10)
	dst = append(dst, `,"avgPrice":`...)
	dst = jsonAppendFloat(dst, r.AvgPrice)
	return append(dst, '}')
}

// Compare orders by Seller, AvgPrice.
func (r Q6) Compare(o Q6) int {
	return cmp.Or(cmp.Compare(r.Seller, o.Seller), cmp.Compare(r.AvgPrice, o.AvgPrice))
}

// Q7 is a bid with the highest price of a tumbling window (q7).
type Q7 struct {
	WindowStart int64 `json:"windowStart" msgpack:"windowStart"`
	WindowEnd   int64 `json:"windowEnd" msgpack:"windowEnd"`
	Auction     int64 `json:"auction" msgpack:"auction"`
	Bidder      int64 `json:"bidder" msgpack:"bidder"`
	Price       int64 `json:"price" msgpack:"price"`
	DateTime    int64 `json:"dateTime" msgpack:"dateTime"`
}

// AppendJSON appends r as
// {"windowStart":..,"windowEnd":..,"auction":..,"bidder":..,"price":..,"dateTime":..}.
func (r Q7) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"windowStart":`...)
	dst = strconv.AppendInt(dst, r.WindowStart, 10)
	dst = append(dst, `,"windowEnd":`...)
	dst = strconv.AppendInt(dst, r.WindowEnd, 10)
	dst = append(dst, `,"auction":`...)
	dst = strconv.AppendInt(dst, r.Auction, 10)
	dst = append(dst, `,"bidder":`...)
	dst = strconv.AppendInt(dst, r.Bidder, 10)
	dst = append(dst, `,"price":`...)
	dst = strconv.AppendInt(dst, r.Price, 10)
	dst = append(dst, `,"dateTime":`...)
	dst = strconv.AppendInt(dst, r.DateTime, 10)
	return append(dst, '}')
}

// Compare orders by WindowStart, WindowEnd, Auction, Bidder, Price, DateTime.
func (r Q7) Compare(o Q7) int {
	return cmp.Or(cmp.Compare(r.WindowStart, o.WindowStart), cmp.Compare(r.WindowEnd, o.WindowEnd),
		cmp.Compare(r.Auction, o.Auction), cmp.Compare(r.Bidder, o.Bidder),
		cmp.Compare(r.Price, o.Price), cmp.Compare(r.DateTime, o.DateTime))
}

// Q8 is a person who created an auction in the tumbling window in which
// they joined (q8).
type Q8 struct {
	ID          int64  `json:"id" msgpack:"id"` // person id
	Name        string `json:"name" msgpack:"name"`
	WindowStart int64  `json:"windowStart" msgpack:"windowStart"`
}

// AppendJSON appends r as {"id":..,"name":..,"windowStart":..}.
func (r Q8) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"id":`...)
	dst = strconv.AppendInt(dst, r.ID, 10)
	dst = append(dst, `,"name":`...)
	dst = jsonAppendString(dst, r.Name)
	dst = append(dst, `,"windowStart":`...)
	dst = strconv.AppendInt(dst, r.WindowStart, 10)
	return append(dst, '}')
}

// Compare orders by WindowStart, ID, Name.
func (r Q8) Compare(o Q8) int {
	return cmp.Or(cmp.Compare(r.WindowStart, o.WindowStart), cmp.Compare(r.ID, o.ID),
		strings.Compare(r.Name, o.Name))
}

// Q9 is the winning bid of an auction (q9).
type Q9 struct {
	Auction  int64 `json:"auction" msgpack:"auction"`
	Bidder   int64 `json:"bidder" msgpack:"bidder"`
	Price    int64 `json:"price" msgpack:"price"`
	DateTime int64 `json:"dateTime" msgpack:"dateTime"`
}

// AppendJSON appends r as {"auction":..,"bidder":..,"price":..,"dateTime":..}.
func (r Q9) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"auction":`...)
	dst = strconv.AppendInt(dst, r.Auction, 10)
	dst = append(dst, `,"bidder":`...)
	dst = strconv.AppendInt(dst, r.Bidder, 10)
	dst = append(dst, `,"price":`...)
	dst = strconv.AppendInt(dst, r.Price, 10)
	dst = append(dst, `,"dateTime":`...)
	dst = strconv.AppendInt(dst, r.DateTime, 10)
	return append(dst, '}')
}

// Compare orders by Auction, Bidder, Price, DateTime.
func (r Q9) Compare(o Q9) int {
	return cmp.Or(cmp.Compare(r.Auction, o.Auction), cmp.Compare(r.Bidder, o.Bidder),
		cmp.Compare(r.Price, o.Price), cmp.Compare(r.DateTime, o.DateTime))
}

// Q11 is a bidder's session: its number of bids and its bounds (q11).
type Q11 struct {
	Bidder       int64 `json:"bidder" msgpack:"bidder"`
	Count        int64 `json:"count" msgpack:"count"`
	SessionStart int64 `json:"sessionStart" msgpack:"sessionStart"` // the first bid's time
	SessionEnd   int64 `json:"sessionEnd" msgpack:"sessionEnd"`     // the last bid's time + the gap
}

// AppendJSON appends r as {"bidder":..,"count":..,"sessionStart":..,"sessionEnd":..}.
func (r Q11) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"bidder":`...)
	dst = strconv.AppendInt(dst, r.Bidder, 10)
	dst = append(dst, `,"count":`...)
	dst = strconv.AppendInt(dst, r.Count, 10)
	dst = append(dst, `,"sessionStart":`...)
	dst = strconv.AppendInt(dst, r.SessionStart, 10)
	dst = append(dst, `,"sessionEnd":`...)
	dst = strconv.AppendInt(dst, r.SessionEnd, 10)
	return append(dst, '}')
}

// Compare orders by Bidder, SessionStart, SessionEnd, Count.
func (r Q11) Compare(o Q11) int {
	return cmp.Or(cmp.Compare(r.Bidder, o.Bidder), cmp.Compare(r.SessionStart, o.SessionStart),
		cmp.Compare(r.SessionEnd, o.SessionEnd), cmp.Compare(r.Count, o.Count))
}

// Comparer is a result type with a canonical order: Compare returns a
// negative number, zero or a positive number as r sorts before, with or
// after o. The order is total: results that compare equal are equal.
type Comparer[T any] interface {
	Compare(o T) int
}

// Sorted returns a copy of rs in canonical order. A topology's output and
// the query's model are equal as multisets if and only if their Sorted
// forms are equal (compare them with slices.Equal).
func Sorted[T Comparer[T]](rs []T) []T {
	out := slices.Clone(rs)
	slices.SortFunc(out, func(a, b T) int { return a.Compare(b) })
	return out
}

// SortedEvents returns a copy of evs in the canonical order of CompareEvents
// (q0's output order).
func SortedEvents(evs []Event) []Event {
	out := slices.Clone(evs)
	slices.SortFunc(out, CompareEvents)
	return out
}

// CompareEvents is the canonical order of events: by time, then persons
// before auctions before bids (before empty events), then by every field in
// declaration order. Events that compare equal have equal contents.
func CompareEvents(a, b Event) int {
	if c := cmp.Compare(a.Time(), b.Time()); c != 0 {
		return c
	}
	ka, kb := canonicalKind(a), canonicalKind(b)
	if ka != kb {
		return cmp.Compare(ka, kb)
	}
	switch ka {
	case 0:
		p, q := a.Person, b.Person
		return cmp.Or(cmp.Compare(p.ID, q.ID), strings.Compare(p.Name, q.Name),
			strings.Compare(p.EmailAddress, q.EmailAddress), strings.Compare(p.CreditCard, q.CreditCard),
			strings.Compare(p.City, q.City), strings.Compare(p.State, q.State),
			cmp.Compare(p.DateTime, q.DateTime), strings.Compare(p.Extra, q.Extra))
	case 1:
		p, q := a.Auction, b.Auction
		return cmp.Or(cmp.Compare(p.ID, q.ID), strings.Compare(p.ItemName, q.ItemName),
			strings.Compare(p.Description, q.Description), cmp.Compare(p.InitialBid, q.InitialBid),
			cmp.Compare(p.Reserve, q.Reserve), cmp.Compare(p.DateTime, q.DateTime),
			cmp.Compare(p.Expires, q.Expires), cmp.Compare(p.Seller, q.Seller),
			cmp.Compare(p.Category, q.Category), strings.Compare(p.Extra, q.Extra))
	case 2:
		p, q := a.Bid, b.Bid
		return cmp.Or(cmp.Compare(p.Auction, q.Auction), cmp.Compare(p.Bidder, q.Bidder),
			cmp.Compare(p.Price, q.Price), cmp.Compare(p.DateTime, q.DateTime),
			strings.Compare(p.Extra, q.Extra))
	}
	return 0
}

// canonicalKind numbers the kinds of CompareEvents: 0 person, 1 auction, 2 bid,
// 3 empty. It looks at the fields in the order of Event.Time.
func canonicalKind(e Event) int {
	switch {
	case e.Person != nil:
		return 0
	case e.Auction != nil:
		return 1
	case e.Bid != nil:
		return 2
	}
	return 3
}

// LastPerKeyQ4 reduces a stream of q4 updates to the last update of each
// category, in canonical order. The updates of one category must be in the
// order they were emitted (a topology keyed by category emits them from one
// instance, so interleaving the instances keeps that order).
func LastPerKeyQ4(updates []Q4) []Q4 {
	last := make(map[int64]Q4)
	for _, u := range updates {
		last[u.Category] = u
	}
	out := make([]Q4, 0, len(last))
	for _, u := range last {
		out = append(out, u)
	}
	slices.SortFunc(out, Q4.Compare)
	return out
}

// LastPerKeyQ6 reduces a stream of q6 updates to the last update of each
// seller, in canonical order. The updates of one seller must be in the order
// they were emitted (see LastPerKeyQ4).
func LastPerKeyQ6(updates []Q6) []Q6 {
	last := make(map[int64]Q6)
	for _, u := range updates {
		last[u.Seller] = u
	}
	out := make([]Q6, 0, len(last))
	for _, u := range last {
		out = append(out, u)
	}
	slices.SortFunc(out, Q6.Compare)
	return out
}

// jsonAppendString appends s as a JSON string, escaped as encoding/json
// escapes it with HTML escaping off: `"` and `\` with a backslash; \b, \f,
// \n, \r and \t in short form; other control characters below U+0020 as
// \u00XX; U+2028 and U+2029 as \u2028 and \u2029 (they end lines in
// JavaScript); each byte of invalid UTF-8 as \ufffd. Everything else is
// copied as it is. (strconv.Quote is not JSON: it writes \x.. and \U........
// escapes.)
func jsonAppendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0 // s[start:i] is pending, to copy as it is
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// jsonAppendFloat appends f as a JSON number, formatted as encoding/json
// formats a float64: the shortest decimal that parses back to f, in plain
// notation ('f') when 1e-6 ≤ |f| < 1e21 or f is zero, otherwise in exponent
// notation ('e') with a one-digit exponent kept short (1e-7, not 1e-07). So
// 1234567.5 is written 1234567.5, not 1.2345675e+06 as 'g' would write it.
// JSON has no NaN or infinities: those are written as null (the models never
// produce them).
func jsonAppendFloat(dst []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// Turn e-07 into e-7, as encoding/json does (positive exponents
		// here are at least 21).
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}
