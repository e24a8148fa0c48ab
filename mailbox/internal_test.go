package mailbox

import (
	"github.com/sluicehq/sluice/internal/msgpacksafe"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// checkMsgpack is msgpacksafe's structural check, which these tests hold
// to every encoding (TypeCodec.Decode decodes with msgpacksafe.Decode).
func checkMsgpack(data []byte) error { return msgpacksafe.Check(data) }

// TestCheckMsgpackAcceptsEncodings: everything msgpack encodes passes the
// check that TypeCodec.Decode makes before decoding.
func TestCheckMsgpackAcceptsEncodings(t *testing.T) {
	type inner struct {
		A []int
		B map[string]any
	}
	values := []any{
		nil, true, false, 0, 1, -1, 127, 128, -32, -33, 255, 256, 65535, 65536, math.MaxInt64, math.MinInt64,
		uint64(math.MaxUint64), float32(1.5), 2.25, "", "short", strings.Repeat("s", 40), strings.Repeat("m", 300),
		strings.Repeat("l", 70_000), []byte{}, []byte("bin"), make([]byte, 300), make([]byte, 70_000),
		[]int{}, make([]int, 15), make([]int, 16), make([]int, 70_000), map[string]int{}, map[string]int{"a": 1},
		time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC), time.Unix(1, 0), time.Unix(1<<40, 0),
		[]any{[]any{[]any{}}, map[string]any{"x": []any{1, "y", nil}}},
		inner{A: []int{1, 2, 3}, B: map[string]any{"k": []byte("v"), "t": time.Unix(5, 7)}},
		&inner{},
	}
	big := map[int]int{}
	for i := range 70_000 {
		big[i] = i
	}
	values = append(values, big)
	for _, v := range values {
		data, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkMsgpack(data); err != nil {
			t.Errorf("checkMsgpack(encoding of %T) = %v", v, err)
		}
		for n := range min(len(data), 64) { // a truncated value is refused
			if checkMsgpack(data[:n]) == nil {
				t.Errorf("checkMsgpack(first %d of %d bytes of %T) accepted a truncated value", n, len(data), v)
			}
		}
	}
}

func TestCheckMsgpackRefusesImpossibleLengths(t *testing.T) {
	for _, data := range [][]byte{
		{0xdd, 0xff, 0xff, 0xff, 0xff},             // array32 of 4G elements
		{0xdf, 0x7f, 0xff, 0xff, 0xff, 1, 2, 3, 4}, // map32
		{0xdc, 0x00, 0x03, 1, 2},                   // array16 of 3, 2 bytes left
		{0x93, 1, 2},                               // fixarray of 3
		{0x92, 0x92, 1, 2},                         // the outer array needs one more
		{0xdb, 0xff, 0xff, 0xff, 0xff, 'a'},        // str32
		{0xc6, 0x00, 0x00, 0x01, 0x00},             // bin32 of 256
		{0xc9, 0x00, 0x00, 0x00, 0x08, 0x01},       // ext32
		{0xd8, 0x01, 0x02},                         // fixext16
		{0xc1},                                     // never used
		[]byte(strings.Repeat("\x91", msgpacksafe.MaxDepth+2) + "\x01"),
	} {
		if err := checkMsgpack(data); err == nil {
			t.Errorf("checkMsgpack(% x) accepted it", data)
		}
	}
}

// TestDropOldestCompactsEvictedEntries: evicted entries do not pile up in
// the queue behind a control message at its head.
func TestDropOldestCompactsEvictedEntries(t *testing.T) {
	m, err := New(DropOldest(4)) // never started: nothing is consumed
	if err != nil {
		t.Fatal(err)
	}
	ctl := testControl{}
	m.TryPut(ctl)
	const n = 2_000
	for i := range n {
		m.TryPut(i)
		m.TryPut(ctl)
		if m.mem.len() > 2*(4+2*(i+1)) {
			t.Fatalf("after %d messages the queue holds %d entries for 4 records and %d control messages", i+1, m.mem.len(), i+2)
		}
	}
	dead := 0
	for i := range m.mem.len() {
		if m.mem.at(i).dead {
			dead++
		}
	}
	if dead != m.dead || m.UserMessageCount() != m.mem.len()-dead || m.UserMessageCount() != 4+n+1 {
		t.Fatalf("dead entries %d, counted %d; UserMessageCount %d, want %d", dead, m.dead, m.UserMessageCount(), 4+n+1)
	}

	m, _ = New(DropOldest(4))
	for i := range 100_000 {
		m.TryPut(i)
	}
	if m.mem.len() != 4 || m.dead != 0 {
		t.Fatalf("without control messages: %d entries, %d dead; want 4 live ones", m.mem.len(), m.dead)
	}
}

type testControl struct{}

func (testControl) IsControl() bool { return true }
