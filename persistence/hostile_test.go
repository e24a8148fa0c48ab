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

// A run or log entry of 1 MiB of two-byte records (empty binaries) made
// the framing allocate a 24-byte slice header per record, 12 times the
// input; it is refused within the budget.
func TestHostileRunAndGroup(t *testing.T) {
	const n = (1<<20 - 16) / 2
	body := make([]byte, 0, 2*n)
	for range n {
		body = append(body, 0xc4, 0x00)
	}
	arr := func(k int) []byte { return []byte{0xdd, byte(k >> 24), byte(k >> 16), byte(k >> 8), byte(k)} }
	run := append(append([]byte{0x92, recordVersion}, arr(n)...), body...)
	var err error
	got := mst.Allocated(func() { _, err = decodeRun(run) })
	if err == nil || !strings.Contains(err.Error(), "budget") || got >= 8<<20 {
		t.Fatalf("decodeRun: %v, %d bytes allocated; want refused within the budget, < 8 MiB", err, got)
	}
	group := append(append([]byte{0x92, recordVersion, 0x91, 0x93, 0xa1, 'a', 0x01}, arr(n)...), body...)
	got = mst.Allocated(func() { _, err = decodeGroup(group) })
	if err == nil || !strings.Contains(err.Error(), "budget") || got >= 8<<20 {
		t.Fatalf("decodeGroup: %v, %d bytes allocated; want refused within the budget, < 8 MiB", err, got)
	}
	// What this package writes passes.
	rec := encodeEvent(Event{Type: "e", Data: []byte{0xc0}})
	if _, err := decodeRun(encodeRun([][]byte{rec, rec, rec})); err != nil {
		t.Fatal(err)
	}
}
