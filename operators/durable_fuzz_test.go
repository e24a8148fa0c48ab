package operators_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/durablelog"
	"github.com/sluicehq/sluice/operators"
)

// order is a realistic record type for the durable ingress's decoder.
type order struct {
	ID    int64
	At    time.Time
	Buyer *struct{ Name string }
	Items map[string]int
	Lines []struct {
		SKU string
		Qty int
	}
}

// FuzzDurableIngressRecord: whatever bytes a record of the log holds (a
// damaged or foreign store file), the ingress's reader returns a record or
// an error naming the ingress and the record's offset, and never panics.
func FuzzDurableIngressRecord(f *testing.F) {
	good, _ := msgpack.Marshal(&order{ID: 7, At: time.Unix(1, 0).UTC(), Buyer: &struct{ Name string }{"x"}, Items: map[string]int{"a": 1}})
	f.Add(good)
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff}) // a map of 4 G entries
	f.Add([]byte{0xc0})
	f.Add(good[:len(good)/2])
	ctx := context.Background()
	sys, err := actors.NewSystem(actors.Config{Name: f.Name()})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { sys.Stop(ctx) })
	db, err := sys.DB()
	if err != nil {
		f.Fatal(err)
	}
	n := 0
	f.Fuzz(func(t *testing.T, rec []byte) {
		n++
		name := fmt.Sprintf("fuzz-%d", n)
		raw, err := durablelog.Open(db, name, 10)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Append(ctx, [][]byte{rec}); err != nil {
			t.Fatal(err)
		}
		in, err := operators.NewDurableIngress[order](sys, name, operators.DurableIngressConfig{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := in.Open(ctx, 0, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]order, 1)
		if k, err := r.Read(buf); err != nil && !containsAll(err.Error(), name, "record 0") {
			t.Fatalf("error %q does not name the ingress and the record", err)
		} else if err == nil && k != 1 {
			t.Fatalf("read %d records, want 1", k)
		}
	})
}
