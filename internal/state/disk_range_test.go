package state_test

import (
	"slices"
	"testing"

	"github.com/sluicehq/sluice/internal/state"
)

// TestDiskRange: a range scan of one key group sees the entries written
// back and those only in the cache, not the deleted, in encoded-key order,
// within its bounds, and stops when told.
func TestDiskRange(t *testing.T) {
	d, err := state.OpenDisk[string, struct{}](state.Spec{Dir: t.TempDir(), Budget: 4 << 10}, "timers", 0, 1,
		func(k string) uint64 { return uint64(k[0]) }, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	})
	var want []string
	for i := range 3000 { // many times the cache: most written back
		for _, g := range []byte{3, 4} {
			k := string([]byte{g, byte(i >> 8), byte(i)})
			d.Put(k, struct{}{}, false)
			if g == 3 && i%3 != 0 {
				want = append(want, k)
			}
		}
	}
	for i := 0; i < 3000; i += 3 {
		d.Delete(string([]byte{3, byte(i >> 8), byte(i)}))
	}
	scan := func(g int, from, to []byte, n int) []string {
		var got []string
		d.Range(g, from, to, func(k string, _ struct{}) bool {
			got = append(got, k)
			return len(got) < n
		})
		return got
	}
	if got := scan(3, nil, nil, 1<<30); !slices.Equal(got, want) {
		t.Fatalf("group 3: %d entries, want %d (first %q)", len(got), len(want), got[:min(3, len(got))])
	}
	if got := scan(3, []byte{3, 1}, []byte{3, 2}, 1<<30); len(got) != 171 || got[0] != "\x03\x01\x00" {
		t.Fatalf("group 3 from 0x0100 to 0x0200: %d entries, first %q; want 171 from \"\\x03\\x01\\x00\"", len(got), got[0])
	}
	if got := scan(4, nil, nil, 5); len(got) != 5 || got[4] != "\x04\x00\x04" {
		t.Fatalf("group 4, the first 5: %q", got)
	}
	if got := scan(5, nil, nil, 1<<30); len(got) != 0 {
		t.Fatalf("group 5: %d entries, want none", len(got))
	}
	if n := d.CacheLen(); n > 4<<10/16 { // an entry takes more than 16 bytes of the budget
		t.Fatalf("cache of %d entries under a 4 KiB budget", n)
	}
}

// TableOp places a lone table (MapTables' -1) and a bundle's first table
// at the operator's own directory, the others beside it.
func TestTableOp(t *testing.T) {
	for _, c := range []struct {
		j    int
		want string
	}{{-1, "count"}, {0, "count"}, {1, "count~1"}, {2, "count~2"}} {
		if got := state.TableOp("count", c.j); got != c.want {
			t.Errorf("TableOp(count, %d) = %q, want %q", c.j, got, c.want)
		}
	}
}
