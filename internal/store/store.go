// Package store opens sluice's store files: bbolt databases that carry a
// format marker and version, so that a file written by another program, by a
// newer sluice, or damaged, is refused with an error that names it, and is
// never modified.
//
// Packages keep their data in top-level buckets of their own (the spill
// queues of package mailbox, the journals of package persistence); the
// "sluice" bucket holds the format marker.
package store

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Version is the store format this build writes and reads.
const Version = 1

var (
	metaBucket = []byte("sluice")
	formatKey  = []byte("format")
	versionKey = []byte("version")
	formatName = []byte("sluice-store")
)

// Errors, for errors.Is.
var (
	ErrForeign = errors.New("not a sluice store (written by another program)")
	ErrNewer   = errors.New("written by a newer sluice (format version too new)")
	ErrCorrupt = errors.New("corrupt or not a bbolt database")
	ErrLocked  = errors.New("locked by another process")
)

// File is an open store file.
type File struct {
	DB   *bolt.DB
	Path string
}

// DefaultCheckUpTo is the largest file whose B+tree Open checks in full
// (Options.CheckUpTo): 64 MiB, a fraction of a second to read.
const DefaultCheckUpTo = 64 << 20

// Options tune OpenWith.
type Options struct {
	// CheckUpTo: an existing file up to this many bytes gets a full
	// consistency check before it is opened for writing (every bucket
	// and key read, then bbolt's tx.Check: page references, the freelist,
	// key order); a damaged page is refused with ErrCorrupt instead of
	// panicking the first reader. 0: DefaultCheckUpTo; negative: never.
	// Larger files can be checked on demand with Check (sluice store
	// check FILE).
	CheckUpTo int64
	// Existing: the caller expects a store there (it has written one
	// before, say a restore from a checkpoint): a missing or empty (0
	// bytes) file is refused with ErrCorrupt instead of initialised as a
	// new store.
	Existing bool
}

// Open opens or creates the store at path (mode 0600) with the default
// Options: an existing file is first checked read-only, so that a foreign,
// newer or corrupt file is refused without a single byte written to it,
// and up to DefaultCheckUpTo its B+tree is checked in full. A missing or
// empty file becomes a new store; use OpenWith with Options.Existing where
// one is expected.
func Open(path string) (*File, error) { return OpenWith(path, Options{}) }

// OpenWith is Open with options.
func OpenWith(path string, o Options) (f *File, err error) {
	// bbolt reads the file through a memory map: a page beyond the end of a
	// damaged file faults, which would kill the process. Make such a fault a
	// panic on this goroutine, and the panic an error.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil { // bbolt can panic on some damaged files
			f, err = nil, fmt.Errorf("store %s: %w: %v", path, ErrCorrupt, r)
		}
	}()
	st, statErr := os.Stat(path)
	switch {
	case statErr == nil && st.IsDir():
		return nil, fmt.Errorf("store %s: is a directory", path)
	case statErr == nil && st.Size() > 0:
		if err := check(path, st.Size(), o.checkUpTo()); err != nil {
			return nil, err
		}
	case statErr == nil && o.Existing:
		return nil, fmt.Errorf("store %s: %w: empty file (0 bytes) where a store is expected", path, ErrCorrupt)
	case errors.Is(statErr, os.ErrNotExist) && o.Existing:
		return nil, fmt.Errorf("store %s: %w: missing where a store is expected", path, ErrCorrupt)
	case statErr != nil && !errors.Is(statErr, os.ErrNotExist):
		return nil, fmt.Errorf("store %s: %w", path, statErr)
	}
	opts := &bolt.Options{Timeout: time.Second}
	if strconv.IntSize == 64 { // a 32-bit process keeps its address space
		opts.InitialMmapSize = initialMmap
	}
	db, err := bolt.Open(path, 0o600, opts)
	if err != nil {
		return nil, describe(path, err)
	}
	if opts.InitialMmapSize > 0 {
		db.AllocSize = allocStep
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		if tx.Bucket(metaBucket) != nil {
			return nil
		}
		if err := tx.ForEach(func([]byte, *bolt.Bucket) error { return ErrForeign }); err != nil {
			return err
		}
		b, err := tx.CreateBucket(metaBucket)
		if err != nil {
			return err
		}
		if err := b.Put(formatKey, formatName); err != nil {
			return err
		}
		return b.Put(versionKey, []byte{Version})
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("store %s: %w", path, err)
	}
	return &File{DB: db, Path: path}, nil
}

func (o Options) checkUpTo() int64 {
	if o.CheckUpTo == 0 {
		return DefaultCheckUpTo
	}
	return o.CheckUpTo
}

// check opens an existing file of size bytes read-only and verifies its
// marker, and its B+tree when size is at most upTo.
func check(path string, size, upTo int64) error {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return describe(path, err)
	}
	defer db.Close()
	return db.View(func(tx *bolt.Tx) error {
		if _, err := verify(tx, path, size, true); err != nil {
			return err
		}
		if upTo >= 0 && size <= upTo {
			return consistent(tx, path)
		}
		return nil
	})
}

// verify checks a store's marker and version inside a read transaction.
// A fresh bbolt file without buckets passes when fresh is allowed.
func verify(tx *bolt.Tx, path string, size int64, fresh bool) (version int, err error) {
	// The metadata says how many pages the file holds; a truncated file
	// has fewer, and reading one of the missing pages would fault.
	if tx.Size() > size {
		return 0, fmt.Errorf("store %s: %w: truncated: %d bytes, its metadata needs %d", path, ErrCorrupt, size, tx.Size())
	}
	meta := tx.Bucket(metaBucket)
	if meta == nil {
		empty := true
		_ = tx.ForEach(func([]byte, *bolt.Bucket) error { empty = false; return nil })
		if empty && fresh {
			return 0, nil // a fresh bbolt file: ours to initialise
		}
		return 0, fmt.Errorf("store %s: %w: it has no %q bucket", path, ErrForeign, metaBucket)
	}
	if !bytes.Equal(meta.Get(formatKey), formatName) {
		return 0, fmt.Errorf("store %s: %w: format marker %q", path, ErrForeign, meta.Get(formatKey))
	}
	v := meta.Get(versionKey)
	if len(v) != 1 {
		return 0, fmt.Errorf("store %s: %w: unreadable format version", path, ErrCorrupt)
	}
	if v[0] > Version {
		return 0, fmt.Errorf("store %s: %w: version %d, this build reads up to %d", path, ErrNewer, v[0], Version)
	}
	return int(v[0]), nil
}

// Used is how many bytes of the store at path its pages take, by its
// metadata (bbolt's high-water mark), opened with OpenReadOnly: the file
// itself may be longer, since bbolt grows it ahead of its pages. A test
// that damages a file cuts it short of Used.
func Used(path string) (int64, error) {
	f, _, err := OpenReadOnly(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var used int64
	err = f.DB.View(func(tx *bolt.Tx) error { used = tx.Size(); return nil })
	return used, err
}

// OpenReadOnly opens an existing store for reading only, for inspection
// (sluice store inspect, sluice deadletters list): nothing is ever written
// to the file, and a foreign, newer, damaged, empty or missing file is
// refused with the same errors as Open (its B+tree is checked up to
// DefaultCheckUpTo). It returns the file's format version.
func OpenReadOnly(path string) (f *File, version int, err error) {
	return openReadOnly(path, DefaultCheckUpTo)
}

// openReadOnly is OpenReadOnly, checking the B+tree of files up to upTo
// bytes.
func openReadOnly(path string, upTo int64) (f *File, version int, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	var db *bolt.DB
	defer func() {
		if r := recover(); r != nil {
			if db != nil {
				db.Close()
			}
			f, err = nil, fmt.Errorf("store %s: %w: %v", path, ErrCorrupt, r)
		}
	}()
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return nil, 0, fmt.Errorf("store %s: %w", path, err)
	case st.IsDir():
		return nil, 0, fmt.Errorf("store %s: is a directory", path)
	case st.Size() == 0:
		return nil, 0, fmt.Errorf("store %s: %w: empty file", path, ErrForeign)
	}
	db, err = bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return nil, 0, describe(path, err)
	}
	err = db.View(func(tx *bolt.Tx) error {
		if version, err = verify(tx, path, st.Size(), false); err != nil {
			return err
		}
		if st.Size() <= upTo {
			return consistent(tx, path)
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, 0, err
	}
	return &File{DB: db, Path: path}, version, nil
}

// describe classifies an error of bolt.Open. Errors of the operating system
// (open, lock, stat, mmap) are passed on; bbolt's own errors are about the
// file's content: invalid or mismatched meta pages, a bad checksum, a file too
// small to hold its meta pages.
func describe(path string, err error) error {
	var pathErr *fs.PathError
	var errno syscall.Errno
	switch {
	case errors.Is(err, bolt.ErrTimeout):
		return fmt.Errorf("store %s: %w", path, ErrLocked)
	case errors.As(err, &pathErr), errors.As(err, &errno):
		return fmt.Errorf("store %s: %w", path, err)
	}
	return fmt.Errorf("store %s: %w: %v", path, ErrCorrupt, err)
}

// Close closes the file.
func (f *File) Close() error { return f.DB.Close() }

// Check checks the store at path in full, whatever its size, read-only:
// its marker and version, then every bucket and key read (a damaged page
// panics or faults bbolt, made an error here), then bbolt's consistency
// check (tx.Check: page references, the freelist, key order). A damaged
// file is an error wrapping ErrCorrupt that lists what was found.
func Check(path string) error {
	f, _, err := openReadOnly(path, math.MaxInt64)
	if err != nil {
		return err
	}
	return f.Close()
}

// maxReported bounds the problems a consistency check lists.
const maxReported = 10

// consistent reads every bucket and key of tx, then runs bbolt's tx.Check.
// The reading comes first and runs on the caller's goroutine, which has
// debug.SetPanicOnFault set and recovers: a page reference beyond the file
// or a garbled element panics there instead of in tx.Check's goroutine,
// where a fault could not be recovered.
func consistent(tx *bolt.Tx, path string) error {
	if err := walk(tx); err != nil {
		return fmt.Errorf("store %s: %w: %w", path, ErrCorrupt, err)
	}
	var found []error
	n := 0
	for err := range tx.Check() {
		if n++; n <= maxReported {
			found = append(found, err)
		}
	}
	if n == 0 {
		return nil
	}
	if n > maxReported {
		found = append(found, fmt.Errorf("and %d more", n-maxReported))
	}
	return fmt.Errorf("store %s: %w: consistency check: %w", path, ErrCorrupt, errors.Join(found...))
}

// walk reads every key and value of every bucket, nested ones included,
// touching their first and last bytes.
func walk(tx *bolt.Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("reading the B+tree: %v", r)
		}
	}()
	var sum byte
	touch := func(b []byte) {
		if len(b) > 0 {
			sum ^= b[0] ^ b[len(b)-1]
		}
	}
	var visit func(b *bolt.Bucket, path string, depth int) error
	visit = func(b *bolt.Bucket, path string, depth int) error {
		if depth > 64 {
			return fmt.Errorf("bucket %s: nested deeper than 64", path)
		}
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			touch(k)
			touch(v)
			if v != nil {
				continue
			}
			child := b.Bucket(k)
			if child == nil {
				return fmt.Errorf("bucket %s: key %q holds neither a value nor a bucket", path, k)
			}
			if err := visit(child, path+"/"+string(k), depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	err = tx.ForEach(func(name []byte, b *bolt.Bucket) error {
		touch(name)
		return visit(b, string(name), 0)
	})
	_ = sum
	return err
}
