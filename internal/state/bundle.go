package state

import (
	"bytes"
	"fmt"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
)

// A bundle is the checkpointed state of an operator instance that keeps
// more beside its tables: a small record of its own (a window stage's
// event time and open windows) and the Snapshot of each of its tables (a
// memory table's map or changelog handle, a disk table's handle). The
// engine reaches the tables inside, to copy a disk checkpoint into a
// savepoint or inline a changelog chain, through MapTables.
//
//	bundleMagic, then msgpack of bundle
var bundleMagic = []byte("SLUICE-BUNDLE\x01")

type bundle struct {
	Meta   []byte   `msgpack:"m"`
	Tables [][]byte `msgpack:"t"`
}

// Bundle joins an operator instance's record and its tables' snapshots
// into the state its checkpoint keeps.
func Bundle(meta []byte, tables ...[]byte) ([]byte, error) {
	// msgpack's bytes for the bundle, written by hand into one buffer of
	// the right size (a whole map's snapshot is megabytes: encoding it
	// into a growing buffer and copying that behind the magic copied it
	// three times).
	n := len(bundleMagic) + 16 + len(meta)
	for _, t := range tables {
		n += 5 + len(t)
	}
	b := append(make([]byte, 0, n), bundleMagic...)
	b = append(b, 0x82, 0xa1, 'm') // {m: meta, t: tables}
	b = appendBytes(b, meta)
	b = append(b, 0xa1, 't')
	if tables == nil {
		return append(b, 0xc0), nil
	}
	b = msgpacksafe.AppendArrayLen(b, len(tables))
	for _, t := range tables {
		b = appendBytes(b, t)
	}
	return b, nil
}

// appendBytes is msgpack's EncodeBytes.
func appendBytes(b, v []byte) []byte {
	if v == nil {
		return append(b, 0xc0)
	}
	return append(msgpacksafe.AppendBinHeader(b, len(v)), v...)
}

// IsBundle says whether b is a Bundle.
func IsBundle(b []byte) bool { return bytes.HasPrefix(b, bundleMagic) }

// Unbundle splits a Bundle into the record and the tables' snapshots; it
// refuses bytes that are none, or are damaged.
func Unbundle(b []byte) (meta []byte, tables [][]byte, err error) {
	if !IsBundle(b) {
		return nil, nil, fmt.Errorf("bundled state: %w: no %q header", ErrCorrupt, bundleMagic[:len(bundleMagic)-1])
	}
	var bu bundle
	if err := msgpacksafe.Decode(b[len(bundleMagic):], &bu, msgpacksafe.Limits{Source: "bundled state", Factor: 4}); err != nil {
		return nil, nil, err
	}
	return bu.Meta, bu.Tables, nil
}

// MapTables returns b with each of its tables' snapshots replaced by what
// f returns for it (i its place in the bundle) when b is a Bundle, or
// f(-1, b) when it is not: the engine's savepoint code applies what it does
// to a table's snapshot alike to the plain state of an aggregation and to
// each table of a bundle.
func MapTables(b []byte, f func(i int, table []byte) ([]byte, error)) ([]byte, error) {
	if !IsBundle(b) {
		return f(-1, b)
	}
	meta, tables, err := Unbundle(b)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(tables))
	changed := false
	for i, t := range tables {
		if out[i], err = f(i, t); err != nil {
			return nil, err
		}
		changed = changed || !bytes.Equal(out[i], t)
	}
	if !changed {
		return b, nil
	}
	return Bundle(meta, out...)
}
