package mailbox_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
	mst "github.com/sluicehq/sluice/internal/msgpacksafe/msgpacksafetest"
	"github.com/sluicehq/sluice/mailbox"
)

// spilled returns a TypeCodec for mst.Record and the encoding of body as
// a spilled Record (its type tag, then body).
func spilled(t testing.TB, body []byte) (*mailbox.TypeCodec, []byte) {
	t.Helper()
	c := mailbox.NewTypeCodec().Register("click", mst.Record{})
	good, err := c.Encode(mst.Sample())
	if err != nil {
		t.Fatal(err)
	}
	tag := good[:len(good)-len(mst.Encoded())]
	return c, append(append([]byte(nil), tag...), body...)
}

// Spilled messages of a realistic type decode through msgpacksafe.Decode.
func TestTypeCodecHostile(t *testing.T) {
	c, good := spilled(t, mst.Encoded())
	if v, err := c.Decode(good); err != nil || v.(mst.Record).User.ID != "u1" {
		t.Fatalf("a good record: %v, %v", v, err)
	}
	_, data := spilled(t, mst.NilTime())
	_, err := c.Decode(data)
	if !errors.Is(err, msgpacksafe.ErrMalformed) || !strings.Contains(err.Error(), ".Steps[0].At") || !strings.Contains(err.Error(), `"click"`) {
		t.Fatalf("nil time.Time: %v, want ErrMalformed naming the type and .Steps[0].At", err)
	}
	_, data = spilled(t, mst.HugeHeader())
	if _, err := c.Decode(data); !errors.Is(err, msgpacksafe.ErrMalformed) {
		t.Fatalf("huge header: %v", err)
	}
	_, data = spilled(t, mst.OneMiB())
	n := mst.Allocated(func() { _, err = c.Decode(data) })
	if !errors.Is(err, msgpacksafe.ErrTooLarge) || n >= 8<<20 {
		t.Fatalf("1 MiB of one-byte elements: %v, %d bytes allocated, want ErrTooLarge and < 8 MiB", err, n)
	}
	t.Logf("1 MiB hostile spill record: %d bytes allocated", n)
}

// FuzzTypeCodecRecord: a spilled realistic record from any bytes.
func FuzzTypeCodecRecord(f *testing.F) {
	c, _ := spilled(f, nil)
	for _, s := range mst.Seeds() {
		_, d := spilled(f, s)
		f.Add(d)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := c.Decode(data)
		if err != nil {
			return
		}
		if _, err := msgpack.Marshal(v); err != nil {
			t.Fatalf("decoded %T does not encode: %v", v, err)
		}
	})
}
