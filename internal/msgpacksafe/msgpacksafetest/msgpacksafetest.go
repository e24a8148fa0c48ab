// Package msgpacksafetest has a realistic record type and hostile inputs
// for the hostile-input tests and fuzz targets of every decoder built on
// msgpacksafe.Decode:
//
//	data := msgpacksafetest.OneMiB() // a Record whose Steps are 1 MiB of one-byte elements
//	n := msgpacksafetest.Allocated(func() { _, err = codec.Decode(data) })
//	// err wraps msgpacksafe.ErrTooLarge; n < 8 MiB
package msgpacksafetest

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// Record is a realistic record: a time, a pointer, a map of structs, a
// nested struct and a slice of structs of about 300 bytes each.
type Record struct {
	At      time.Time
	User    *User
	Props   map[string]User
	Session struct {
		ID    string
		Start time.Time
	}
	Steps []Step
}

// User is a struct with a time, behind a pointer and in a map.
type User struct {
	ID   string
	Seen time.Time
}

// Step is a large element: a slice of them is where amplification hurts.
type Step struct {
	URL string
	At  time.Time
	Ms  [32]int64
}

// Sample returns a Record with every field set.
func Sample() Record {
	r := Record{At: time.Date(2026, 12, 1, 8, 0, 0, 7, time.UTC),
		User:  &User{ID: "u1", Seen: time.Unix(100, 0).UTC()},
		Props: map[string]User{"referrer": {ID: "u2"}},
		Steps: []Step{{URL: "/", At: time.Unix(101, 0).UTC()}, {URL: "/cart"}}}
	r.Session.ID, r.Session.Start = "s1", time.Unix(99, 0).UTC()
	return r
}

// Encoded returns the msgpack encoding of Sample.
func Encoded() []byte {
	b, err := msgpack.Marshal(Sample())
	if err != nil {
		panic(err)
	}
	return b
}

// NilTime is a Record whose Steps[0].At is nil: msgpack v5.4.1 panics on
// it. The nil is at byte NilTimeOffset.
func NilTime() []byte {
	return []byte{0x81, 0xa5, 'S', 't', 'e', 'p', 's', 0x91, 0x81, 0xa2, 'A', 't', 0xc0}
}

// NilTimeOffset is where NilTime's nil is.
const NilTimeOffset = 12

// NilTimeInMap is a Record whose Props["x"].Seen is nil.
func NilTimeInMap() []byte {
	return []byte{0x81, 0xa5, 'P', 'r', 'o', 'p', 's', 0x81, 0xa1, 'x', 0x81, 0xa4, 'S', 'e', 'e', 'n', 0xc0}
}

// HugeHeader is a Record whose Steps array header claims 2^32-1 elements.
func HugeHeader() []byte {
	return []byte{0x81, 0xa5, 'S', 't', 'e', 'p', 's', 0xdd, 0xff, 0xff, 0xff, 0xff, 0x80}
}

// OneMiB is a Record of 1 MiB whose Steps are one-byte elements (empty
// maps): about 300 MB decoded without a decoded-size budget.
func OneMiB() []byte {
	prefix := []byte{0x81, 0xa5, 'S', 't', 'e', 'p', 's', 0xdd, 0, 0, 0, 0}
	n := 1<<20 - len(prefix)
	binary.BigEndian.PutUint32(prefix[8:], uint32(n))
	return append(prefix, bytes.Repeat([]byte{0x80}, n)...)
}

// Seeds are inputs for a fuzz target of a Record decoder.
func Seeds() [][]byte {
	small := OneMiB()[:4096]
	return [][]byte{Encoded(), NilTime(), NilTimeInMap(), HugeHeader(), small, {0xc0}, {}}
}

// Allocated returns the bytes fn allocates (runtime.MemStats.TotalAlloc).
func Allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
