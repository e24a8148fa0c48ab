package nexmark

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// The event file holds one event a line as a JSON object whose first key is
// "type" ("person", "auction" or "bid"), followed by the event's fields in a
// fixed order:
//
//	{"type":"person","id":..,"name":..,"emailAddress":..,"creditCard":..,"city":..,"state":..,"dateTime":..,"extra":..}
//	{"type":"auction","id":..,"itemName":..,"description":..,"initialBid":..,"reserve":..,"dateTime":..,"expires":..,"seller":..,"category":..,"extra":..}
//	{"type":"bid","auction":..,"bidder":..,"price":..,"dateTime":..,"extra":..}
//
// Times are integer ms since the Unix epoch and prices integer cents.

// AppendJSON appends ev as one JSON object of the event file, without a
// newline, and returns the extended buffer. Strings are escaped as
// encoding/json does (without its HTML escaping). An Event with no field
// set is appended as {}, which the reader refuses.
func AppendJSON(dst []byte, ev Event) []byte {
	switch {
	case ev.Person != nil:
		p := ev.Person
		dst = append(dst, `{"type":"person","id":`...)
		dst = strconv.AppendInt(dst, p.ID, 10)
		dst = appendStringField(dst, `,"name":`, p.Name)
		dst = appendStringField(dst, `,"emailAddress":`, p.EmailAddress)
		dst = appendStringField(dst, `,"creditCard":`, p.CreditCard)
		dst = appendStringField(dst, `,"city":`, p.City)
		dst = appendStringField(dst, `,"state":`, p.State)
		dst = appendIntField(dst, `,"dateTime":`, p.DateTime)
		dst = appendStringField(dst, `,"extra":`, p.Extra)
	case ev.Auction != nil:
		a := ev.Auction
		dst = append(dst, `{"type":"auction","id":`...)
		dst = strconv.AppendInt(dst, a.ID, 10)
		dst = appendStringField(dst, `,"itemName":`, a.ItemName)
		dst = appendStringField(dst, `,"description":`, a.Description)
		dst = appendIntField(dst, `,"initialBid":`, a.InitialBid)
		dst = appendIntField(dst, `,"reserve":`, a.Reserve)
		dst = appendIntField(dst, `,"dateTime":`, a.DateTime)
		dst = appendIntField(dst, `,"expires":`, a.Expires)
		dst = appendIntField(dst, `,"seller":`, a.Seller)
		dst = appendIntField(dst, `,"category":`, a.Category)
		dst = appendStringField(dst, `,"extra":`, a.Extra)
	case ev.Bid != nil:
		b := ev.Bid
		dst = append(dst, `{"type":"bid","auction":`...)
		dst = strconv.AppendInt(dst, b.Auction, 10)
		dst = appendIntField(dst, `,"bidder":`, b.Bidder)
		dst = appendIntField(dst, `,"price":`, b.Price)
		dst = appendIntField(dst, `,"dateTime":`, b.DateTime)
		dst = appendStringField(dst, `,"extra":`, b.Extra)
	default:
		return append(dst, "{}"...)
	}
	return append(dst, '}')
}

func appendIntField(dst []byte, key string, v int64) []byte {
	return strconv.AppendInt(append(dst, key...), v, 10)
}

func appendStringField(dst []byte, key, s string) []byte {
	return jsonAppendString(append(dst, key...), s)
}

const jsonHex = "0123456789abcdef"

// Writer writes events to an event file, buffered. Call Flush at the end.
type Writer struct {
	w   *bufio.Writer
	buf []byte
}

// NewWriter returns a Writer to w with a buffer of 256 KiB.
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: bufio.NewWriterSize(w, 256<<10), buf: make([]byte, 0, 1024)}
}

// Write writes ev as one line.
func (w *Writer) Write(ev Event) error {
	w.buf = append(AppendJSON(w.buf[:0], ev), '\n')
	_, err := w.w.Write(w.buf)
	return err
}

// Flush writes the buffered lines to the underlying writer.
func (w *Writer) Flush() error { return w.w.Flush() }

// ErrMalformed is wrapped by every error about a line's content, so that
// errors.Is(err, ErrMalformed) tells a bad line from an I/O error.
var ErrMalformed = errors.New("malformed event")

// LineError is an error of the event file reader about one line.
type LineError struct {
	Line int64 // 1-based
	Err  error // wraps ErrMalformed
}

// Error gives the line number and what is wrong with the line.
func (e *LineError) Error() string {
	return fmt.Sprintf("nexmark: event file line %d: %v", e.Line, e.Err)
}

// Unwrap returns Err, so that errors.Is(err, ErrMalformed) holds.
func (e *LineError) Unwrap() error { return e.Err }

// ReaderOptions configure a Reader.
type ReaderOptions struct {
	// SkipMalformed skips malformed lines, counting them (Reader.Skipped),
	// instead of returning an error for the first one.
	SkipMalformed bool
}

// Reader reads events from an event file, one a line. Blank lines are
// ignored. A line may have more keys than its type needs (they are
// ignored) and keys in any order, but must have all of its type's keys
// with values of the right JSON type; times, ids and prices must be
// integers.
type Reader struct {
	r       *bufio.Reader
	opts    ReaderOptions
	line    int64
	skipped int64
	long    []byte // a line longer than the buffer, assembled
	dec     lineDecoder
}

// NewReader returns a Reader of r.
func NewReader(r io.Reader, opts ReaderOptions) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 256<<10), opts: opts}
}

// Skipped returns the number of malformed lines skipped so far.
func (r *Reader) Skipped() int64 { return r.skipped }

// Line returns the number of the last line read (1-based).
func (r *Reader) Line() int64 { return r.line }

// Next returns the next event, io.EOF after the last one, a *LineError for a
// malformed line (unless SkipMalformed; Next may be called again to go on
// with the next line), or the underlying reader's error.
func (r *Reader) Next() (Event, error) {
	for {
		line, err := r.readLine()
		if err != nil {
			return Event{}, err
		}
		r.line++
		if blankLine(line) {
			continue
		}
		ev, derr := r.dec.decode(line)
		if derr == nil {
			return ev, nil
		}
		if !r.opts.SkipMalformed {
			return Event{}, &LineError{Line: r.line, Err: derr}
		}
		r.skipped++
	}
}

// readLine returns the next line without its line break (a last line may
// lack one), or io.EOF after the last line; the slice is valid until the
// next call.
func (r *Reader) readLine() ([]byte, error) {
	line, err := r.r.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		r.long = append(r.long[:0], line...)
		for err == bufio.ErrBufferFull {
			line, err = r.r.ReadSlice('\n')
			r.long = append(r.long, line...)
		}
		line = r.long
	}
	if err != nil && err != io.EOF {
		return nil, err
	}
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		return line, nil
	}
	if len(line) == 0 {
		return nil, io.EOF
	}
	return line, nil // the last line, without a line break; EOF comes next
}

// blankLine reports whether b holds only spaces and tabs.
func blankLine(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\r' {
			return false
		}
	}
	return true
}

// DecodeLine decodes one line of an event file (without its line break).
// Its errors wrap ErrMalformed.
func DecodeLine(line []byte) (Event, error) {
	var d lineDecoder
	return d.decode(line)
}

// The slots of the keys the decoder knows: their indexes in eventKeys and
// in the decoder's values; slot i is bit 1<<i of a set of keys.
const (
	slotType = iota
	slotID
	slotName
	slotEmail
	slotCard
	slotCity
	slotState
	slotDateTime
	slotExtra
	slotItemName
	slotDescription
	slotInitialBid
	slotReserve
	slotExpires
	slotSeller
	slotCategory
	slotAuction
	slotBidder
	slotPrice
	numSlots
)

// The keys of each event type, as sets.
const (
	personBits = 1<<slotType | 1<<slotID | 1<<slotName | 1<<slotEmail | 1<<slotCard |
		1<<slotCity | 1<<slotState | 1<<slotDateTime | 1<<slotExtra
	auctionBits = 1<<slotType | 1<<slotID | 1<<slotItemName | 1<<slotDescription | 1<<slotInitialBid |
		1<<slotReserve | 1<<slotDateTime | 1<<slotExpires | 1<<slotSeller | 1<<slotCategory | 1<<slotExtra
	bidBits = 1<<slotType | 1<<slotAuction | 1<<slotBidder | 1<<slotPrice | 1<<slotDateTime | 1<<slotExtra
)

type eventKeyInfo struct {
	name  string
	isStr bool
}

// eventKeys lists every key the decoder knows, by slot.
var eventKeys = [numSlots]eventKeyInfo{
	slotType: {"type", true}, slotID: {"id", false}, slotName: {"name", true},
	slotEmail: {"emailAddress", true}, slotCard: {"creditCard", true}, slotCity: {"city", true},
	slotState: {"state", true}, slotDateTime: {"dateTime", false}, slotExtra: {"extra", true},
	slotItemName: {"itemName", true}, slotDescription: {"description", true},
	slotInitialBid: {"initialBid", false}, slotReserve: {"reserve", false},
	slotExpires: {"expires", false}, slotSeller: {"seller", false}, slotCategory: {"category", false},
	slotAuction: {"auction", false}, slotBidder: {"bidder", false}, slotPrice: {"price", false},
}

// eventKeySlot returns the index in eventKeys of the key k, or -1.
func eventKeySlot(k []byte) int {
	for i := range eventKeys {
		if string(k) == eventKeys[i].name {
			return i
		}
	}
	return -1
}

// lineDecoder parses one flat JSON object of the event file. Its scratch
// buffers are reused from line to line; decoded strings share one
// allocation per event.
type lineDecoder struct {
	data   []byte
	pos    int
	strs   []byte           // unescaped string values, back to back
	span   [numSlots][2]int // string values: [start, end) in strs
	ints   [numSlots]int64  // integer values
	seen   int              // set of keys seen, as bits
	key    []byte           // the current key, unescaped
	tmpKey []byte           // a skipped string, unescaped
}

func (d *lineDecoder) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

func (d *lineDecoder) syntax(what string) error {
	if d.pos >= len(d.data) {
		return d.errorf("invalid JSON: %s, found end of line", what)
	}
	return d.errorf("invalid JSON: %s, found %q at column %d", what, d.data[d.pos], d.pos+1)
}

func (d *lineDecoder) skipSpace() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\r', '\n':
			d.pos++
		default:
			return
		}
	}
}

func (d *lineDecoder) decode(line []byte) (Event, error) {
	d.data, d.pos, d.seen = line, 0, 0
	d.strs = d.strs[:0]
	d.skipSpace()
	if d.pos >= len(d.data) || d.data[d.pos] != '{' {
		return Event{}, d.syntax("want an object '{'")
	}
	d.pos++
	d.skipSpace()
	if d.pos < len(d.data) && d.data[d.pos] == '}' {
		d.pos++
	} else {
		for {
			d.skipSpace()
			var err error
			if d.key, err = d.parseString(d.key[:0]); err != nil {
				return Event{}, err
			}
			d.skipSpace()
			if d.pos >= len(d.data) || d.data[d.pos] != ':' {
				return Event{}, d.syntax("want ':' after a key")
			}
			d.pos++
			d.skipSpace()
			if err := d.parseValue(eventKeySlot(d.key)); err != nil {
				return Event{}, err
			}
			d.skipSpace()
			if d.pos < len(d.data) && d.data[d.pos] == ',' {
				d.pos++
				continue
			}
			if d.pos < len(d.data) && d.data[d.pos] == '}' {
				d.pos++
				break
			}
			return Event{}, d.syntax("want ',' or '}' after a value")
		}
	}
	d.skipSpace()
	if d.pos < len(d.data) {
		return Event{}, d.syntax("want the end of the line after the object")
	}
	return d.build()
}

// parseValue parses the value of the key in slot (-1: unknown, skipped).
func (d *lineDecoder) parseValue(slot int) error {
	if slot < 0 {
		return d.skipValue(0)
	}
	k := eventKeys[slot]
	if d.pos >= len(d.data) {
		return d.syntax("want a value")
	}
	if k.isStr {
		if d.data[d.pos] != '"' {
			if err := d.skipValue(0); err != nil {
				return err
			}
			return d.errorf("key %q: want a string", k.name)
		}
		start := len(d.strs)
		var err error
		if d.strs, err = d.parseString(d.strs); err != nil {
			return err
		}
		d.span[slot] = [2]int{start, len(d.strs)}
	} else {
		c := d.data[d.pos]
		if c != '-' && (c < '0' || c > '9') {
			if err := d.skipValue(0); err != nil {
				return err
			}
			return d.errorf("key %q: want an integer", k.name)
		}
		v, err := d.parseInt(k.name)
		if err != nil {
			return err
		}
		d.ints[slot] = v
	}
	d.seen |= 1 << slot
	return nil
}

// parseInt parses a JSON number that must be an integer fitting int64.
func (d *lineDecoder) parseInt(key string) (int64, error) {
	start := d.pos
	if d.data[d.pos] == '-' {
		d.pos++
	}
	digits := d.pos
	for d.pos < len(d.data) && d.data[d.pos] >= '0' && d.data[d.pos] <= '9' {
		d.pos++
	}
	if d.pos == digits {
		return 0, d.syntax("want a digit")
	}
	if d.data[digits] == '0' && d.pos-digits > 1 {
		return 0, d.errorf("invalid JSON: number %q has a leading zero", d.data[start:d.pos])
	}
	if d.pos < len(d.data) && (d.data[d.pos] == '.' || d.data[d.pos] == 'e' || d.data[d.pos] == 'E') {
		if err := d.skipNumberTail(); err != nil {
			return 0, err
		}
		return 0, d.errorf("key %q: want an integer, got %s", key, d.data[start:d.pos])
	}
	v, err := strconv.ParseInt(string(d.data[start:d.pos]), 10, 64)
	if err != nil {
		return 0, d.errorf("key %q: %s does not fit 64 bits", key, d.data[start:d.pos])
	}
	return v, nil
}

// skipNumberTail skips a fraction and an exponent.
func (d *lineDecoder) skipNumberTail() error {
	if d.pos < len(d.data) && d.data[d.pos] == '.' {
		d.pos++
		n := d.pos
		for d.pos < len(d.data) && d.data[d.pos] >= '0' && d.data[d.pos] <= '9' {
			d.pos++
		}
		if d.pos == n {
			return d.syntax("want a digit after '.'")
		}
	}
	if d.pos < len(d.data) && (d.data[d.pos] == 'e' || d.data[d.pos] == 'E') {
		d.pos++
		if d.pos < len(d.data) && (d.data[d.pos] == '+' || d.data[d.pos] == '-') {
			d.pos++
		}
		n := d.pos
		for d.pos < len(d.data) && d.data[d.pos] >= '0' && d.data[d.pos] <= '9' {
			d.pos++
		}
		if d.pos == n {
			return d.syntax("want a digit in the exponent")
		}
	}
	return nil
}

// maxSkipDepth bounds the nesting of skipped values.
const maxSkipDepth = 100

// skipValue skips any JSON value (of an unknown key).
func (d *lineDecoder) skipValue(depth int) error {
	if depth > maxSkipDepth {
		return d.errorf("invalid JSON: nested more than %d deep", maxSkipDepth)
	}
	if d.pos >= len(d.data) {
		return d.syntax("want a value")
	}
	switch c := d.data[d.pos]; {
	case c == '"':
		var err error
		d.tmpKey, err = d.parseString(d.tmpKey[:0])
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		if c == '-' {
			d.pos++
		}
		n := d.pos
		for d.pos < len(d.data) && d.data[d.pos] >= '0' && d.data[d.pos] <= '9' {
			d.pos++
		}
		if d.pos == n {
			return d.syntax("want a digit")
		}
		if d.data[n] == '0' && d.pos-n > 1 {
			return d.errorf("invalid JSON: number with a leading zero at column %d", n+1)
		}
		return d.skipNumberTail()
	case c == '{' || c == '[':
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		d.pos++
		d.skipSpace()
		if d.pos < len(d.data) && d.data[d.pos] == end {
			d.pos++
			return nil
		}
		for {
			d.skipSpace()
			if c == '{' {
				var err error
				if d.tmpKey, err = d.parseString(d.tmpKey[:0]); err != nil {
					return err
				}
				d.skipSpace()
				if d.pos >= len(d.data) || d.data[d.pos] != ':' {
					return d.syntax("want ':' after a key")
				}
				d.pos++
				d.skipSpace()
			}
			if err := d.skipValue(depth + 1); err != nil {
				return err
			}
			d.skipSpace()
			if d.pos < len(d.data) && d.data[d.pos] == ',' {
				d.pos++
				continue
			}
			if d.pos < len(d.data) && d.data[d.pos] == end {
				d.pos++
				return nil
			}
			return d.syntax(fmt.Sprintf("want ',' or '%c'", end))
		}
	default:
		for _, lit := range [...]string{"true", "false", "null"} {
			if len(d.data)-d.pos >= len(lit) && string(d.data[d.pos:d.pos+len(lit)]) == lit {
				d.pos += len(lit)
				return nil
			}
		}
		return d.syntax("want a value")
	}
}

// parseString parses a JSON string at d.pos and appends its unescaped value
// to dst. Invalid UTF-8 and lone surrogates become U+FFFD, as with
// encoding/json.
func (d *lineDecoder) parseString(dst []byte) ([]byte, error) {
	if d.pos >= len(d.data) || d.data[d.pos] != '"' {
		return dst, d.syntax("want a string")
	}
	d.pos++
	for {
		start := d.pos
		for d.pos < len(d.data) {
			c := d.data[d.pos]
			if c == '"' || c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
				break
			}
			d.pos++
		}
		dst = append(dst, d.data[start:d.pos]...)
		if d.pos >= len(d.data) {
			return dst, d.errorf("invalid JSON: unterminated string")
		}
		switch c := d.data[d.pos]; {
		case c == '"':
			d.pos++
			return dst, nil
		case c < 0x20:
			return dst, d.errorf("invalid JSON: control character %#02x in a string at column %d", c, d.pos+1)
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(d.data[d.pos:])
			if r == utf8.RuneError && size == 1 {
				dst = utf8.AppendRune(dst, utf8.RuneError)
			} else {
				dst = append(dst, d.data[d.pos:d.pos+size]...)
			}
			d.pos += size
		default: // backslash
			if d.pos+1 >= len(d.data) {
				return dst, d.errorf("invalid JSON: unterminated string")
			}
			e := d.data[d.pos+1]
			d.pos += 2
			switch e {
			case '"', '\\', '/':
				dst = append(dst, e)
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r, ok := d.hex4()
				if !ok {
					return dst, d.errorf("invalid JSON: bad \\u escape at column %d", d.pos-1)
				}
				if utf16.IsSurrogate(r) {
					r2 := utf8.RuneError
					save := d.pos
					if d.pos+1 < len(d.data) && d.data[d.pos] == '\\' && d.data[d.pos+1] == 'u' {
						d.pos += 2
						if lo, ok := d.hex4(); ok {
							if dec := utf16.DecodeRune(r, lo); dec != utf8.RuneError {
								r2 = dec
							}
						}
						if r2 == utf8.RuneError {
							d.pos = save // the next escape stands on its own
						}
					}
					r = r2
				}
				dst = utf8.AppendRune(dst, r)
			default:
				return dst, d.errorf("invalid JSON: bad escape \\%c at column %d", e, d.pos-1)
			}
		}
	}
}

// hex4 parses 4 hex digits at d.pos.
func (d *lineDecoder) hex4() (rune, bool) {
	if len(d.data)-d.pos < 4 {
		return 0, false
	}
	var r rune
	for _, c := range d.data[d.pos : d.pos+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	d.pos += 4
	return r, true
}

// build makes the event from the decoded keys.
func (d *lineDecoder) build() (Event, error) {
	if d.seen&(1<<slotType) == 0 {
		return Event{}, d.errorf(`missing key "type"`)
	}
	typ := d.strs[d.span[slotType][0]:d.span[slotType][1]]
	var want int
	switch string(typ) {
	case "person":
		want = personBits
	case "auction":
		want = auctionBits
	case "bid":
		want = bidBits
	default:
		return Event{}, d.errorf("unknown type %q (want person, auction or bid)", typ)
	}
	if missing := want &^ d.seen; missing != 0 {
		for slot, k := range eventKeys {
			if missing&(1<<slot) != 0 {
				return Event{}, d.errorf("%s: missing key %q", typ, k.name)
			}
		}
	}
	all := string(d.strs) // one allocation for all of the event's strings
	s := func(slot int) string { return all[d.span[slot][0]:d.span[slot][1]] }
	switch want {
	case personBits:
		return Event{Person: &Person{
			ID: d.ints[slotID], Name: s(slotName), EmailAddress: s(slotEmail), CreditCard: s(slotCard),
			City: s(slotCity), State: s(slotState), DateTime: d.ints[slotDateTime], Extra: s(slotExtra),
		}}, nil
	case auctionBits:
		return Event{Auction: &Auction{
			ID: d.ints[slotID], ItemName: s(slotItemName), Description: s(slotDescription),
			InitialBid: d.ints[slotInitialBid], Reserve: d.ints[slotReserve], DateTime: d.ints[slotDateTime],
			Expires: d.ints[slotExpires], Seller: d.ints[slotSeller], Category: d.ints[slotCategory], Extra: s(slotExtra),
		}}, nil
	default:
		return Event{Bid: &Bid{
			Auction: d.ints[slotAuction], Bidder: d.ints[slotBidder], Price: d.ints[slotPrice],
			DateTime: d.ints[slotDateTime], Extra: s(slotExtra),
		}}, nil
	}
}
