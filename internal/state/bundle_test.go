package state_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/internal/state"
)

func TestBundleMapTables(t *testing.T) {
	b, err := state.Bundle([]byte("meta"), []byte("one"), []byte("two"))
	if err != nil {
		t.Fatal(err)
	}
	if !state.IsBundle(b) || state.IsBundle([]byte("one")) {
		t.Fatal("IsBundle")
	}
	out, err := state.MapTables(b, func(i int, t []byte) ([]byte, error) {
		if i == 1 {
			return append(bytes.Clone(t), '!'), nil
		}
		return t, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	meta, tabs, err := state.Unbundle(out)
	if err != nil || string(meta) != "meta" || len(tabs) != 2 || string(tabs[0]) != "one" || string(tabs[1]) != "two!" {
		t.Fatalf("mapped bundle: %q %q %v", meta, tabs, err)
	}
	plain, err := state.MapTables([]byte("x"), func(i int, t []byte) ([]byte, error) {
		if i != -1 {
			t2 := "index " + string(rune('0'+i))
			return []byte(t2), nil
		}
		return []byte("plain"), nil
	})
	if err != nil || string(plain) != "plain" {
		t.Fatalf("a plain state: %q %v", plain, err)
	}
	if _, _, err := state.Unbundle(b[:len(b)-3]); err == nil {
		t.Fatal("a truncated bundle decodes")
	}
	if _, _, err := state.Unbundle([]byte("nope")); !errors.Is(err, state.ErrCorrupt) {
		t.Fatalf("not a bundle: %v", err)
	}
}

// FuzzUnbundle: hostile bytes after the bundle's header are refused with an
// error, never a panic, and what decodes re-encodes to a bundle.
func FuzzUnbundle(f *testing.F) {
	good, _ := state.Bundle([]byte("\x83\xa1v\x02\xa2wm\x05\xa1w\x90"), []byte("SLUICE-CHANGELOG"), []byte{0x84, 0xa1, 'v', 0x01})
	f.Add(good)
	f.Add(append([]byte("SLUICE-BUNDLE\x01"), 0x82, 0xa1, 'm', 0xc4, 0xff))
	f.Add(append([]byte("SLUICE-BUNDLE\x01"), 0x82, 0xa1, 't', 0xdd, 0xff, 0xff, 0xff, 0xff))
	f.Fuzz(func(t *testing.T, data []byte) {
		meta, tabs, err := state.Unbundle(data)
		if err != nil {
			return
		}
		b, err := state.Bundle(meta, tabs...)
		if err != nil || !state.IsBundle(b) {
			t.Fatalf("re-encode: %v", err)
		}
	})
}
