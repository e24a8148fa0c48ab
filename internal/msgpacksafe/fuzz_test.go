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
