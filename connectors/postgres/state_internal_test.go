package postgres

import (
	"errors"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
	mst "github.com/sluicehq/sluice/internal/msgpacksafe/msgpacksafetest"
)

// The sink's checkpointed state (staged records of the user's type)
// decodes through msgpacksafe.Decode.
func TestDecodeStateHostile(t *testing.T) {
	good, err := msgpack.Marshal(state[mst.Record]{Version: stateVersion, ID: 3, Pos: 2,
		Segs: []segment[mst.Record]{{ID: 1, From: 0, Recs: []mst.Record{mst.Sample(), mst.Sample()}}}})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := decodeState[mst.Record](good); err != nil || st.Segs[0].Recs[1].User.ID != "u1" {
		t.Fatalf("a good state: %+v, %v", st, err)
	}
	// {"s": [{"r": [<record>]}]} around each hostile record.
	wrap := func(rec []byte) []byte {
		return append([]byte{0x81, 0xa1, 's', 0x91, 0x81, 0xa1, 'r', 0x91}, rec...)
	}
	_, err = decodeState[mst.Record](wrap(mst.NilTime()))
	if !errors.Is(err, msgpacksafe.ErrMalformed) || !strings.Contains(err.Error(), ".s[0].r[0].Steps[0].At") {
		t.Fatalf("nil time.Time: %v, want ErrMalformed naming .s[0].r[0].Steps[0].At", err)
	}
	if _, err := decodeState[mst.Record](wrap(mst.HugeHeader())); !errors.Is(err, msgpacksafe.ErrMalformed) {
		t.Fatalf("huge header: %v", err)
	}
	data := wrap(mst.OneMiB())
	n := mst.Allocated(func() { _, err = decodeState[mst.Record](data) })
	if !errors.Is(err, msgpacksafe.ErrTooLarge) || n >= 8<<20 {
		t.Fatalf("1 MiB of one-byte elements: %v, %d bytes allocated, want ErrTooLarge and < 8 MiB", err, n)
	}
	t.Logf("1 MiB hostile state: %d bytes allocated", n)
}

// FuzzDecodeStateRecord: the sink state of a realistic record type.
func FuzzDecodeStateRecord(f *testing.F) {
	good, _ := msgpack.Marshal(state[mst.Record]{Version: stateVersion, Segs: []segment[mst.Record]{{Recs: []mst.Record{mst.Sample()}}}})
	f.Add(good)
	for _, s := range mst.Seeds() {
		f.Add(append([]byte{0x81, 0xa1, 's', 0x91, 0x81, 0xa1, 'r', 0x91}, s...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = decodeState[mst.Record](data)
	})
}
