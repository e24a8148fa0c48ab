package cluster

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
	"github.com/sluicehq/sluice/persistence"
)

// Hostile replicated-log entries: they come from another node (an
// appendRequest) or from the log's file, and are decoded again later, on
// the application's goroutine (Node.Stats) and on takeover.

func entryAllocated(data []byte) (uint64, error) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, _, err := decodeEntry(data)
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, err
}

func TestDecodeEntryHostile(t *testing.T) {
	// nil where the checkpoint's time is (msgpack v5.4.1 panics on it).
	for _, e := range []struct {
		kind byte
		v    any
		path string
	}{
		{entryRecord, map[string]any{"Checkpoint": map[string]any{"ID": 1, "Time": nil}}, ".Checkpoint.Time"},
		{entryCheckpoint, map[string]any{"ID": 1, "Time": nil}, ".Time"},
	} {
		b, err := msgpack.Marshal(e.v)
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = decodeEntry(append([]byte{e.kind}, b...))
		var me *msgpacksafe.Error
		if !errors.As(err, &me) || me.Path != e.path || !strings.Contains(err.Error(), "replicated log entry") {
			t.Fatalf("nil time, entry kind %d: %v", e.kind, err)
		}
	}
	// 1 MiB of one-byte elements for the run's copies (strings), and an
	// array header of 2^32-1 elements in five bytes.
	const n = 1 << 20
	big := []byte{entryRecord, 0x81, 0xa3, 'R', 'u', 'n', 0x81, 0xa6, 'C', 'o', 'p', 'i', 'e', 's', 0xdd, n >> 24, n >> 16 & 0xff, n >> 8 & 0xff, n & 0xff}
	for range n {
		big = append(big, 0xa0) // ""
	}
	a, err := entryAllocated(big)
	t.Logf("1 MiB of empty strings for Run.Copies: %d bytes allocated, err %v", a, err)
	if a >= 8<<20 || !errors.Is(err, msgpacksafe.ErrTooLarge) {
		t.Fatalf("1 MiB entry allocated %d bytes, err %v", a, err)
	}
	huge := []byte{entryRecord, 0x81, 0xa3, 'R', 'u', 'n', 0x81, 0xa6, 'C', 'o', 'p', 'i', 'e', 's', 0xdd, 0xff, 0xff, 0xff, 0xff}
	if a, err := entryAllocated(huge); !errors.Is(err, msgpacksafe.ErrMalformed) || a > 1<<16 {
		t.Fatalf("2^32-1 copies in 5 bytes: %v, %d bytes allocated", err, a)
	}
}

func FuzzDecodeEntry(f *testing.F) {
	cp := &persistence.Checkpoint{ID: 7, Time: time.Unix(7, 0).UTC(), States: map[string][]byte{"s": {1}}, Offsets: map[string]int64{"o": 9}}
	run := &runRecord{Coordinator: "a", CoordinatorID: "a.1", Copies: []string{"a", "b", "c"}, Running: true,
		Options: runOptionsRecord{Initial: time.Second, MaxRestarts: 3}}
	data, err := encodeRecord(cp, run)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte{entryClear})
	b, _ := msgpack.Marshal(map[string]any{"ID": 1, "Time": nil})
	f.Add(append([]byte{entryCheckpoint}, b...))
	f.Fuzz(func(t *testing.T, data []byte) {
		cp, _, err := decodeEntry(data)
		if err == nil && cp != nil && cp.States == nil {
			t.Fatal("a checkpoint without its states map")
		}
	})
}
