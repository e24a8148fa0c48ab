package msgpacksafe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Scanner reads the msgpack values of a message of a fixed, known shape
// one at a time, without reflection: the hand-written decoders of the
// runtime's own hot messages (records and credits between processes) read
// their fields with it. It never panics and allocates nothing: the strings
// and bytes it returns alias the input. Every read checks the data left;
// the first failure sticks (later reads return zero values) and Err
// returns it as an *Error wrapping ErrMalformed, with the byte offset.
//
//	s := msgpacksafe.NewScanner(data, "peer n2")
//	for n := s.MapLen(); n > 0 && s.Err() == nil; n-- {
//		switch string(s.Str()) {
//		case "Seq":
//			seq = s.Uint()
//		...
//		}
//	}
//	err := s.End() // nil, or the first failure, or bytes after the value
//
// It reads only the encodings it names (a map header, a string, an
// integer, binary or nil); a decoder that meets anything else in bytes
// from an older or other encoder falls back to Decode, which decides.
type Scanner struct {
	data   []byte
	i      int
	source string
	err    *Error
}

// NewScanner returns a Scanner over data; source names where the bytes
// came from in errors.
func NewScanner(data []byte, source string) Scanner {
	return Scanner{data: data, source: source}
}

// Err is nil, or the first failure as an *Error wrapping ErrMalformed.
func (s *Scanner) Err() error {
	if s.err == nil {
		return nil
	}
	return s.err
}

// End is Err, or an error when bytes are left after what was read.
func (s *Scanner) End() error {
	if s.err == nil && s.i != len(s.data) {
		s.fail(fmt.Errorf("%d bytes after the value", len(s.data)-s.i))
	}
	return s.Err()
}

func (s *Scanner) fail(err error) {
	if s.err == nil {
		s.err = &Error{Source: s.source, Offset: s.i, Kind: ErrMalformed, Err: err}
	}
}

// errScanTruncated: the data ends inside a value.
var errScanTruncated = errors.New("truncated")

// take returns the next n bytes, or nil (and fails) when fewer are left.
func (s *Scanner) take(n uint64) []byte {
	if s.err != nil {
		return nil
	}
	if uint64(len(s.data)-s.i) < n {
		s.fail(fmt.Errorf("%w: %d bytes wanted, %d left", errScanTruncated, n, len(s.data)-s.i))
		return nil
	}
	b := s.data[s.i : s.i+int(n)]
	s.i += int(n)
	return b
}

// code returns the next value's first byte (0xc1, never a valid code,
// after a failure).
func (s *Scanner) code() byte {
	b := s.take(1)
	if b == nil {
		return 0xc1
	}
	return b[0]
}

// be reads a big-endian unsigned integer of n (1, 2, 4 or 8) bytes.
func (s *Scanner) be(n uint64) uint64 {
	b := s.take(n)
	switch len(b) {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.BigEndian.Uint16(b))
	case 4:
		return uint64(binary.BigEndian.Uint32(b))
	case 8:
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

// wrong fails on a code of another kind than want.
func (s *Scanner) wrong(c byte, want string) {
	s.i--
	s.fail(fmt.Errorf("code %#x where %s was expected", c, want))
}

// MapLen reads a map header and returns its number of entries, which the
// data left can hold (each entry takes at least two bytes).
func (s *Scanner) MapLen() int {
	c := s.code()
	var n uint64
	switch {
	case s.err != nil:
		return 0
	case c >= 0x80 && c <= 0x8f:
		n = uint64(c & 0x0f)
	case c == 0xde:
		n = s.be(2)
	case c == 0xdf:
		n = s.be(4)
	default:
		s.wrong(c, "a map")
		return 0
	}
	if s.err == nil && n > uint64(len(s.data)-s.i)/2 {
		s.fail(fmt.Errorf("a map of %d entries in the %d bytes left", n, len(s.data)-s.i))
	}
	if s.err != nil {
		return 0
	}
	return int(n)
}

// Str reads a string and returns its bytes (aliasing the input).
func (s *Scanner) Str() []byte {
	c := s.code()
	switch {
	case s.err != nil:
		return nil
	case c >= 0xa0 && c <= 0xbf:
		return s.take(uint64(c & 0x1f))
	case c == 0xd9:
		return s.take(s.be(1))
	case c == 0xda:
		return s.take(s.be(2))
	case c == 0xdb:
		return s.take(s.be(4))
	}
	s.wrong(c, "a string")
	return nil
}

// Bin reads binary data (aliasing the input), or nil for a msgpack nil.
func (s *Scanner) Bin() []byte {
	c := s.code()
	switch {
	case s.err != nil:
		return nil
	case c == 0xc0:
		return nil
	case c == 0xc4:
		return s.take(s.be(1))
	case c == 0xc5:
		return s.take(s.be(2))
	case c == 0xc6:
		return s.take(s.be(4))
	}
	s.wrong(c, "binary data")
	return nil
}

// Int reads an integer of any msgpack encoding that fits an int64.
func (s *Scanner) Int() int64 {
	at := s.i
	c := s.code()
	switch {
	case s.err != nil:
		return 0
	case c <= 0x7f:
		return int64(c)
	case c >= 0xe0:
		return int64(int8(c))
	case c >= 0xcc && c <= 0xcf: // uint 8, 16, 32, 64
		v := s.be(1 << (c - 0xcc))
		if v > math.MaxInt64 && s.err == nil {
			s.i = at
			s.fail(fmt.Errorf("integer %d out of the range of an int64", v))
			return 0
		}
		return int64(v)
	case c == 0xd0:
		return int64(int8(s.be(1)))
	case c == 0xd1:
		return int64(int16(s.be(2)))
	case c == 0xd2:
		return int64(int32(s.be(4)))
	case c == 0xd3:
		return int64(s.be(8))
	}
	s.wrong(c, "an integer")
	return 0
}

// Uint reads a non-negative integer of any msgpack encoding.
func (s *Scanner) Uint() uint64 {
	c := s.code()
	switch {
	case s.err != nil:
		return 0
	case c <= 0x7f:
		return uint64(c)
	case c >= 0xcc && c <= 0xcf:
		return s.be(1 << (c - 0xcc))
	}
	s.wrong(c, "an unsigned integer")
	return 0
}

// AppendMapLen appends a map header of n entries.
func AppendMapLen(b []byte, n int) []byte { return appendLen(b, n, 0x80, 0xde, 0xdf) }

// AppendArrayLen appends an array header of n elements.
func AppendArrayLen(b []byte, n int) []byte { return appendLen(b, n, 0x90, 0xdc, 0xdd) }

// appendLen appends a map or array header: fix|n under 16, else code16
// or code32 and n's 2 or 4 bytes.
func appendLen(b []byte, n int, fix, code16, code32 byte) []byte {
	switch {
	case n < 16:
		return append(b, fix|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, code16), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, code32), uint32(n))
}

// AppendStr appends s as a msgpack string.
func AppendStr(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

// AppendBin appends p as msgpack binary data (nil as a msgpack nil).
func AppendBin(b, p []byte) []byte {
	if p == nil {
		return append(b, 0xc0)
	}
	return append(AppendBinHeader(b, len(p)), p...)
}

// AppendBinHeader appends the header of n bytes of binary data (at most
// 5 bytes), which the caller appends after it.
func AppendBinHeader(b []byte, n int) []byte {
	switch {
	case n <= math.MaxUint8:
		return append(b, 0xc4, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xc5), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xc6), uint32(n))
}

// AppendUint appends v in its shortest msgpack encoding.
func AppendUint(b []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
}

// AppendInt appends v in its shortest msgpack encoding.
func AppendInt(b []byte, v int64) []byte {
	switch {
	case v >= 0:
		return AppendUint(b, uint64(v))
	case v >= -32:
		return append(b, byte(int8(v)))
	case v >= math.MinInt8:
		return append(b, 0xd0, byte(int8(v)))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(int16(v)))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(int32(v)))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(v))
}
