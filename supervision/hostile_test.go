package supervision

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
	mst "github.com/sluicehq/sluice/internal/msgpacksafe/msgpacksafetest"
)

// Stored dead letters and their payloads decode through
// msgpacksafe.Decode: a nil time, a huge header and 1 MiB of one-byte
// elements are refused, naming where, allocating little.
func TestDeadLetterHostile(t *testing.T) {
	// {"time": nil}: msgpack v5.4.1 panicked on it.
	_, err := decodeDeadLetter([]byte{deadLetterFormat, 0x81, 0xa4, 't', 'i', 'm', 'e', 0xc0})
	if !errors.Is(err, msgpacksafe.ErrMalformed) || !strings.Contains(err.Error(), ".time") || !strings.Contains(err.Error(), "dead-letter record") {
		t.Fatalf("nil time: %v, want ErrMalformed naming .time and the dead-letter record", err)
	}
	if _, err := decodeDeadLetter(append([]byte{deadLetterFormat}, 0xdf, 0xff, 0xff, 0xff, 0xff)); !errors.Is(err, msgpacksafe.ErrMalformed) {
		t.Fatalf("huge map header: %v", err)
	}
	// A payload of 1 MiB: an array of one-byte elements, decoded into
	// []any (16 bytes each) and a record's steps.
	arr := make([]byte, 5, 1<<20)
	arr[0] = 0xdd
	binary.BigEndian.PutUint32(arr[1:], 1<<20-5)
	arr = append(arr, bytes.Repeat([]byte{0x01}, 1<<20-5)...)
	for name, payload := range map[string][]byte{"array of fixints": arr, "record": mst.OneMiB()} {
		var err error
		n := mst.Allocated(func() { _, err = DeadLetter{Seq: 4, Payload: payload}.DecodePayload() })
		if !errors.Is(err, msgpacksafe.ErrTooLarge) || n >= 8<<20 || !strings.Contains(err.Error(), "dead letter 4") {
			t.Fatalf("%s: %v, %d bytes allocated, want ErrTooLarge naming dead letter 4, < 8 MiB", name, err, n)
		}
		t.Logf("1 MiB hostile payload (%s): %d bytes allocated", name, n)
	}
	if _, err := (DeadLetter{Payload: []byte("{}")}).DecodePayload(); err == nil {
		t.Fatal("text payload decoded")
	}
}
