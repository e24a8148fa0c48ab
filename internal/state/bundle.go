package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// A bundle is the checkpointed state of a stage that keeps, beside its
// Table, a little state of its own (a join's or Process's event time,
// Process's timers): the stage's own bytes and the table's snapshot (the
// memory backend's map, a changelog handle or a disk handle). The engine
// treats the table's part as it treats a keyed aggregation's whole state
// (a savepoint copies the disk checkpoint a handle names, or inlines a
// changelog's chain): see TableOf and MapTable.
//
//	"SLBN" version(1) uvarint(len(extra)) extra table

var bundleMagic = []byte("SLBN")

const bundleVersion = 1

// ErrBundle is the cause of a bundle that cannot be read.
var ErrBundle = errors.New("bad state bundle")

// maxBundleExtra bounds a bundle's own part (its timers, kept in memory).
const maxBundleExtra = 1 << 30

// Bundle encodes a stage's own state extra and its table's snapshot.
func Bundle(extra, table []byte) []byte {
	b := make([]byte, 0, len(bundleMagic)+1+binary.MaxVarintLen64+len(extra)+len(table))
	b = append(b, bundleMagic...)
	b = append(b, bundleVersion)
	b = binary.AppendUvarint(b, uint64(len(extra)))
	b = append(b, extra...)
	return append(b, table...)
}

// IsBundle reports whether b is a bundle (of any version).
func IsBundle(b []byte) bool { return bytes.HasPrefix(b, bundleMagic) }

// Unbundle splits a bundle into the stage's part and the table's. The
// parts alias b. A newer version or a damaged length is an error wrapping
// ErrBundle.
func Unbundle(b []byte) (extra, table []byte, err error) {
	if !IsBundle(b) {
		return nil, nil, fmt.Errorf("%w: no %q prefix", ErrBundle, bundleMagic)
	}
	r := b[len(bundleMagic):]
	if len(r) < 1 {
		return nil, nil, fmt.Errorf("%w: truncated before its version", ErrBundle)
	}
	if r[0] != bundleVersion {
		return nil, nil, fmt.Errorf("%w: version %d (this build reads %d; a newer sluice wrote it?)", ErrBundle, r[0], bundleVersion)
	}
	r = r[1:]
	n, w := binary.Uvarint(r)
	if w <= 0 {
		return nil, nil, fmt.Errorf("%w: bad length of its own part", ErrBundle)
	}
	r = r[w:]
	if n > maxBundleExtra || n > uint64(len(r)) {
		return nil, nil, fmt.Errorf("%w: its own part says %d bytes, %d left", ErrBundle, n, len(r))
	}
	return r[:n:n], r[n:], nil
}

// TableOf is the table's part of a bundle, or b itself when it is not one
// (a keyed aggregation's state), or nil for a damaged bundle.
func TableOf(b []byte) []byte {
	if !IsBundle(b) {
		return b
	}
	_, t, err := Unbundle(b)
	if err != nil {
		return nil
	}
	return t
}

// MapTable replaces the table's part of b (a bundle, or a table's
// snapshot by itself) with f's result.
func MapTable(b []byte, f func(table []byte) ([]byte, error)) ([]byte, error) {
	if !IsBundle(b) {
		return f(b)
	}
	extra, t, err := Unbundle(b)
	if err != nil {
		return nil, err
	}
	out, err := f(t)
	if err != nil {
		return nil, err
	}
	return Bundle(extra, out), nil
}

// ResolveAny is ResolveDisk of b's table part (b a bundle or a table's
// snapshot): disk says whether that part is a disk handle.
func ResolveAny(b []byte, spDir string) (out []byte, disk bool, err error) {
	out, err = MapTable(b, func(t []byte) ([]byte, error) {
		r, d, err := ResolveDisk(t, spDir)
		disk = d
		return r, err
	})
	return out, disk, err
}
