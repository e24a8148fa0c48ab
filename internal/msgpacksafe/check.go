// Package msgpacksafe is the one decode path for msgpack bytes that come
// from the network or a file. Decode checks the input along the
// destination type before msgpack sees it, then decodes and recovers any
// panic:
//
//	var o Order
//	err := msgpacksafe.Decode(data, &o, msgpacksafe.Limits{Source: "peer n2"})
//	// err is nil, or an *Error that names the type, the source, the
//	// field path and byte offset, and wraps ErrMalformed, ErrTooLarge or
//	// ErrPanic.
//
// What it refuses before decoding: lengths the data cannot hold (msgpack
// v5.4 allocates a slice as long as an array header says,
// vmihailenco/msgpack#401); nesting deeper than MaxDepth; a nil where the
// type cannot take one (msgpack v5.4.1 panics on a nil time.Time); and a
// decoded size over the budget: slice counts times the destination
// element's size, map tables, pointer targets and strings, estimated as
// msgpack allocates them, together may be at most Limits.Factor (6) times
// the input plus Limits.Slack (1 MiB), so a 1 MiB array of one-byte
// elements meant for a slice of 300-byte structs is refused instead of
// allocating 600 MB. Bytes after the value are refused too.
//
// Scanner reads a message of a fixed shape field by field without
// reflection or allocation, for the hand-written decoders of the
// runtime's hot messages; they leave any form it does not read to Decode.
//
// Check is the older, type-blind structural check (lengths and nesting
// only); new code calls Decode.
package msgpacksafe

import "fmt"

// MaxDepth bounds the nesting of a decoded message.
const MaxDepth = 1000

// Check walks one msgpack value without decoding it, and refuses
// lengths that the data cannot hold (every element of an array or map takes
// at least a byte, a string or binary its length) and nesting deeper than
// MaxDepth. msgpack v5.4 allocates a slice as long as an array header
// says before reading its elements (vmihailenco/msgpack#401), so a damaged
// entry of a few bytes could otherwise make it allocate gigabytes and kill
// the process.
func Check(data []byte) error {
	i := 0
	// length reads a big-endian length of n bytes.
	length := func(n int) (uint64, error) {
		if len(data)-i < n {
			return 0, fmt.Errorf("msgpack: truncated header at byte %d", i)
		}
		var v uint64
		for _, b := range data[i : i+n] {
			v = v<<8 | uint64(b)
		}
		i += n
		return v, nil
	}
	stack := []uint64{1} // values still to read, per nesting level
	var pending uint64 = 1
	for len(stack) > 0 {
		if stack[len(stack)-1] == 0 {
			stack = stack[:len(stack)-1]
			continue
		}
		if i >= len(data) {
			return fmt.Errorf("msgpack: truncated: %d values missing", pending)
		}
		stack[len(stack)-1]--
		pending--
		c := data[i]
		i++
		var skip, elems uint64
		var err error
		switch {
		case c <= 0x7f || c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3: // fixint, nil, bool
		case c <= 0x8f:
			elems = 2 * uint64(c&0x0f)
		case c <= 0x9f:
			elems = uint64(c & 0x0f)
		case c <= 0xbf:
			skip = uint64(c & 0x1f)
		case c == 0xc4 || c == 0xd9: // bin8, str8
			skip, err = length(1)
		case c == 0xc5 || c == 0xda:
			skip, err = length(2)
		case c == 0xc6 || c == 0xdb:
			skip, err = length(4)
		case c == 0xc7, c == 0xc8, c == 0xc9: // ext: length, type, data
			skip, err = length(1 << (c - 0xc7))
			skip++
		case c >= 0xca && c <= 0xd3: // float32/64, uint8-64, int8-64
			skip = [...]uint64{4, 8, 1, 2, 4, 8, 1, 2, 4, 8}[c-0xca]
		case c >= 0xd4 && c <= 0xd8: // fixext: type, data
			skip = 1 + 1<<(c-0xd4)
		case c == 0xdc:
			elems, err = length(2)
		case c == 0xdd:
			elems, err = length(4)
		case c == 0xde:
			elems, err = length(2)
			elems *= 2
		case c == 0xdf:
			elems, err = length(4)
			elems *= 2
		default: // 0xc1
			return fmt.Errorf("msgpack: invalid code %#x at byte %d", c, i-1)
		}
		if err != nil {
			return err
		}
		left := uint64(len(data) - i)
		if skip > left {
			return fmt.Errorf("msgpack: length %d at byte %d exceeds the %d bytes left", skip, i, left)
		}
		i += int(skip)
		left -= skip
		if elems > 0 {
			if pending+elems > left {
				return fmt.Errorf("msgpack: %d elements at byte %d exceed the %d bytes left", elems, i, left)
			}
			if len(stack) > MaxDepth {
				return fmt.Errorf("msgpack: nested deeper than %d", MaxDepth)
			}
			pending += elems
			stack = append(stack, elems)
		}
	}
	return nil
}
