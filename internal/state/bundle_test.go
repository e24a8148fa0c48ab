package state_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/internal/state"
)

func TestBundle(t *testing.T) {
	b := state.Bundle([]byte("own"), []byte("table"))
	own, tab, err := state.Unbundle(b)
	if err != nil || string(own) != "own" || string(tab) != "table" {
		t.Fatalf("Unbundle: %q %q %v", own, tab, err)
	}
	if got := state.TableOf(b); string(got) != "table" {
		t.Fatalf("TableOf: %q", got)
	}
	if got := state.TableOf([]byte("plain")); string(got) != "plain" {
		t.Fatalf("TableOf of a table's snapshot: %q", got)
	}
	out, err := state.MapTable(b, func(t []byte) ([]byte, error) { return append([]byte("new "), t...), nil })
	if _, tab, _ := state.Unbundle(out); err != nil || string(tab) != "new table" {
		t.Fatalf("MapTable: %q %v", tab, err)
	}
	for name, bad := range map[string][]byte{
		"no version":    []byte("SLBN"),
		"newer version": []byte("SLBN\x02\x00"),
		"bad length":    []byte("SLBN\x01\xff"),
		"long own part": []byte("SLBN\x01\x09abc"),
	} {
		if _, _, err := state.Unbundle(bad); !errors.Is(err, state.ErrBundle) {
			t.Errorf("%s: %v, want ErrBundle", name, err)
		}
		if state.TableOf(bad) != nil {
			t.Errorf("%s: TableOf is not nil", name)
		}
	}
}

func FuzzUnbundle(f *testing.F) {
	f.Add(state.Bundle([]byte{0x81, 0xa2, 'w', 'm', 0x01}, []byte{0x82, 0xa1, 'k', 0x90, 0xa1, 'a', 0x90}))
	f.Add([]byte("SLBN\x01\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		own, tab, err := state.Unbundle(data)
		if err != nil {
			return
		}
		if again := state.Bundle(own, tab); !bytes.Equal(again, data) && len(own) > 0 {
			// a non-minimal uvarint may spell the same length: only the parts must survive
			o2, t2, err := state.Unbundle(again)
			if err != nil || !bytes.Equal(o2, own) || !bytes.Equal(t2, tab) {
				t.Fatalf("re-bundled: %q %q %v", o2, t2, err)
			}
		}
	})
}
