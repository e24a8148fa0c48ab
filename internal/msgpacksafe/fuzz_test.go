package msgpacksafe_test

import (
	"errors"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
)

// FuzzDecode: Decode into a realistic record type (times, pointers,
// maps, nested structs, slices of structs, an interface) never panics,
// returns only *Error, and what it accepts msgpack decodes the same way.
func FuzzDecode(f *testing.F) {
	good, _ := msgpack.Marshal(sampleOrder())
	f.Add(good)
	f.Add([]byte{0x81, 0xa5, 'I', 't', 'e', 'm', 's', 0x91, 0x81, 0xa2, 'A', 't', 0xc0}) // nil time.Time
	f.Add([]byte{0x81, 0xa2, 'A', 't', 0xc0})
	f.Add([]byte{0x81, 0xa5, 'I', 't', 'e', 'm', 's', 0xdd, 0xff, 0xff, 0xff, 0xff, 0x80}) // huge array header
	f.Add([]byte{0x81, 0xa5, 'A', 't', 't', 'r', 's', 0xdf, 0x7f, 0xff, 0xff, 0xff})       // huge map header
	f.Add([]byte{0x81, 0xa4, 'S', 'h', 'i', 'p', 0x81, 0xa5, 'S', 'i', 'n', 'c', 'e', 0xd6, 0xff, 0, 0, 0, 1})
	f.Add([]byte{0x81, 0xa3, 'A', 'n', 'y', 0xdc, 0x00, 0x03, 0x80, 0x90, 0xc0})
	f.Add(hostile(4096, 0x80))
	f.Fuzz(func(t *testing.T, data []byte) {
		var o Order
		err := msgpacksafe.Decode(data, &o, msgpacksafe.Limits{Source: "fuzz"})
		if err != nil {
			var e *msgpacksafe.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T %v is not an *Error", err, err)
			}
			return
		}
		// Accepted: msgpack itself decodes it (no panic after the check).
		var again Order
		if err := msgpack.Unmarshal(data, &again); err != nil {
			t.Fatalf("Decode accepted what msgpack.Unmarshal refuses: %v", err)
		}
	})
}

// FuzzDecodeNode: a recursive type.
func FuzzDecodeNode(f *testing.F) {
	tree, _ := msgpack.Marshal(Node{Val: 1, Kids: []Node{{Val: 2}}})
	f.Add(tree)
	f.Add(hostile(4096, 0x80))
	f.Add([]byte{0x81, 0xa4, 'K', 'i', 'd', 's', 0xdd, 0x00, 0x10, 0x00, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		var n []Node
		if err := msgpacksafe.Decode(data, &n, msgpacksafe.Limits{}); err != nil {
			var e *msgpacksafe.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T %v is not an *Error", err, err)
			}
		}
	})
}

// FuzzScanner: the Scanner never panics, fails only with an *Error
// wrapping ErrMalformed, and reads a map of strings to integers and
// binary data as msgpack does; the appenders write what msgpack reads.
func FuzzScanner(f *testing.F) {
	f.Add(msgpacksafe.AppendInt(msgpacksafe.AppendStr(msgpacksafe.AppendMapLen(nil, 1), "n"), -70000))
	f.Add(msgpacksafe.AppendBin(msgpacksafe.AppendStr(msgpacksafe.AppendMapLen(nil, 1), "b"), []byte("data")))
	f.Add([]byte{0x82, 0xa1, 'a', 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xa1, 'b', 0xc4, 0x02, 1})
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		s := msgpacksafe.NewScanner(data, "fuzz")
		got := map[string]any{}
		for n := s.MapLen(); n > 0 && s.Err() == nil; n-- {
			k := string(s.Str())
			if len(k) > 0 && k[0] == 'b' {
				got[k] = s.Bin()
			} else {
				got[k] = s.Int()
			}
		}
		if err := s.End(); err != nil {
			var e *msgpacksafe.Error
			if !errors.As(err, &e) || !errors.Is(err, msgpacksafe.ErrMalformed) || e.Offset < 0 || e.Offset > len(data) {
				t.Fatalf("error %T %v: want an *Error wrapping ErrMalformed at an offset in the input", err, err)
			}
			return
		}
		// Read: the appenders write it again, and msgpack reads both alike.
		out := msgpacksafe.AppendMapLen(nil, len(got))
		for k, v := range got {
			out = msgpacksafe.AppendStr(out, k)
			switch v := v.(type) {
			case int64:
				out = msgpacksafe.AppendInt(out, v)
			case []byte:
				out = msgpacksafe.AppendBin(out, v)
			}
		}
		var a, b map[string]any
		if err := msgpack.Unmarshal(out, &a); err != nil {
			t.Fatalf("msgpack does not read what the appenders wrote (% x): %v", out, err)
		}
		if err := msgpack.Unmarshal(data, &b); err != nil {
			t.Fatalf("msgpack does not read what the Scanner read: %v", err)
		}
		if len(a) != len(b) {
			t.Fatalf("msgpack reads %v from the input, %v from the appenders'", b, a)
		}
	})
}
