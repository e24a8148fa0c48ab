package persistence

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
	mst "github.com/sluicehq/sluice/internal/msgpacksafe/msgpacksafetest"
)

// Events and snapshots of a realistic type decode through
// msgpacksafe.Decode: a nil time.Time, a huge header and 1 MiB of
// one-byte elements are refused with an error naming where, allocating
// little, never panicking.
func TestHostileEventsAndSnapshots(t *testing.T) {
	r := NewRegistry().Register("click", mst.Record{}).Register("click-ptr", &mst.Record{})
	decoders := map[string]func([]byte) error{
		"event": func(b []byte) error { _, err := r.Decode("click", b); return err },
		"event *T": func(b []byte) error {
			_, err := r.Decode("click-ptr", b)
			return err
		},
		"snapshot": func(b []byte) error { var s mst.Record; return decodeState(b, &s) },
	}
	for name, decode := range decoders {
		t.Run(name, func(t *testing.T) {
			if err := decode(mst.Encoded()); err != nil {
				t.Fatalf("a good record: %v", err)
			}
			err := decode(mst.NilTime())
			if !errors.Is(err, msgpacksafe.ErrMalformed) || !strings.Contains(err.Error(), ".Steps[0].At") {
				t.Fatalf("nil time.Time: %v, want ErrMalformed naming .Steps[0].At", err)
			}
			if err := decode(mst.NilTimeInMap()); !errors.Is(err, msgpacksafe.ErrMalformed) {
				t.Fatalf("nil time.Time in a map: %v", err)
			}
			if err := decode(mst.HugeHeader()); !errors.Is(err, msgpacksafe.ErrMalformed) {
				t.Fatalf("huge header: %v", err)
			}
			data := mst.OneMiB()
			n := mst.Allocated(func() { err = decode(data) })
			if !errors.Is(err, msgpacksafe.ErrTooLarge) || n >= 8<<20 {
				t.Fatalf("1 MiB of one-byte elements: %v, %d bytes allocated, want ErrTooLarge and < 8 MiB", err, n)
			}
			t.Logf("1 MiB hostile input: %d bytes allocated", n)
		})
	}
	if _, err := r.Decode("click", mst.NilTime()); !errors.Is(err, ErrDecode) {
		t.Fatalf("event error %v does not wrap ErrDecode", err)
	}
}

// FuzzDecodeRecordEvent: an event of a realistic type from any bytes.
func FuzzDecodeRecordEvent(f *testing.F) {
	r := NewRegistry().Register("click", mst.Record{})
	for _, s := range mst.Seeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if v, err := r.Decode("click", data); err == nil {
			if _, ok := v.(mst.Record); !ok {
				t.Fatalf("decoded to %T", v)
			}
		}
	})
}

// FuzzDecodeRecordSnapshot: a snapshot of a realistic state type.
func FuzzDecodeRecordSnapshot(f *testing.F) {
	for _, s := range mst.Seeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var s mst.Record
		_ = decodeState(data, &s)
	})
}
