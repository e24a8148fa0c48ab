package supervision

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/internal/store"
)

// deadLetterBucket is the top-level bucket of dead letters in a store file:
// keys are big-endian sequence numbers, values encodeDeadLetter's bytes.
var deadLetterBucket = []byte("deadletters")

// BoltDeadLetters is a DeadLetterStore in a bbolt database, in its
// top-level "deadletters" bucket (one sluice store file holds it with the
// spill queues and journals). Every Add is its own transaction: dead
// letters are rare, and each one is durable when Add returns.
type BoltDeadLetters struct {
	db       *bolt.DB
	file     *store.File // set when OpenDeadLetters opened the file
	readOnly bool
}

// NewBoltDeadLetters keeps dead letters in db, which the caller owns and
// closes. On a writable db it creates the bucket; a read-only db without
// one reads as empty.
func NewBoltDeadLetters(db *bolt.DB) (*BoltDeadLetters, error) {
	s := &BoltDeadLetters{db: db, readOnly: db.IsReadOnly()}
	if s.readOnly {
		return s, nil
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(deadLetterBucket)
		return err
	}); err != nil {
		return nil, fmt.Errorf("supervision: dead letters in %s: create bucket: %w", db.Path(), err)
	}
	return s, nil
}

// OpenDeadLetters opens or creates the sluice store file at path (see
// package internal/store: mode 0600, a foreign, newer or corrupt file is
// refused and left as it was) and keeps dead letters in it. Close closes
// the file.
func OpenDeadLetters(path string) (*BoltDeadLetters, error) {
	f, err := store.Open(path)
	if err != nil {
		return nil, fmt.Errorf("supervision: dead letters: %w", err)
	}
	s, err := NewBoltDeadLetters(f.DB)
	if err != nil {
		f.Close()
		return nil, err
	}
	s.file = f
	return s, nil
}

// OpenDeadLettersReadOnly opens an existing sluice store file read-only
// (bbolt takes a shared lock, and nothing is written to the file, not even
// the marker of a fresh store): for inspecting dead letters. A missing,
// foreign, newer or corrupt file is refused with an error naming it and
// wrapping os.ErrNotExist or store's ErrForeign, ErrNewer, ErrCorrupt or
// ErrLocked. Writes return an error wrapping ErrReadOnly.
func OpenDeadLettersReadOnly(path string) (*BoltDeadLetters, error) {
	f, _, err := store.OpenReadOnly(path)
	if err != nil {
		return nil, fmt.Errorf("supervision: dead letters: %w", err)
	}
	return &BoltDeadLetters{db: f.DB, file: f, readOnly: true}, nil
}

// Close closes the file if OpenDeadLetters or OpenDeadLettersReadOnly
// opened it.
func (s *BoltDeadLetters) Close() error {
	if s.file != nil {
		return s.file.Close()
	}
	return nil
}

// Path is the store file's name.
func (s *BoltDeadLetters) Path() string { return s.db.Path() }

func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

func (s *BoltDeadLetters) errorf(kind error, format string, args ...any) error {
	return errorf(kind, "supervision: dead letters in %s: "+format, append([]any{s.Path()}, args...)...)
}

func (s *BoltDeadLetters) update(what string, fn func(b *bolt.Bucket) error) error {
	if s.readOnly {
		return s.errorf(ErrReadOnly, "%s: the store is open read-only", what)
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(deadLetterBucket)
		if err != nil {
			return err
		}
		return fn(b)
	})
	if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrCorrupt) {
		return fmt.Errorf("supervision: dead letters in %s: %s: %w", s.Path(), what, err)
	}
	return err
}

// view runs fn with the bucket, or not at all when the store has none (a
// read-only store file without dead letters).
func (s *BoltDeadLetters) view(fn func(b *bolt.Bucket) error) error {
	return s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(deadLetterBucket)
		if b == nil {
			return nil
		}
		return fn(b)
	})
}

// decode decodes the value stored under key k.
func (s *BoltDeadLetters) decode(k, v []byte) (DeadLetter, error) {
	if len(k) != 8 {
		return DeadLetter{}, s.errorf(ErrCorrupt, "key %x: not a sequence number", k)
	}
	seq := binary.BigEndian.Uint64(k)
	d, err := decodeDeadLetter(v) // copies the payload out of the transaction
	if err != nil {
		return DeadLetter{}, s.errorf(ErrCorrupt, "seq %d: decode: %w", seq, err)
	}
	d.Seq = seq
	return d, nil
}

// Add implements DeadLetterStore.
func (s *BoltDeadLetters) Add(d DeadLetter) (uint64, error) {
	var seq uint64
	err := s.update("add", func(b *bolt.Bucket) error {
		var err error
		if seq, err = b.NextSequence(); err != nil {
			return err
		}
		v, err := encodeDeadLetter(d)
		if err != nil {
			return fmt.Errorf("encode: %w", err)
		}
		return b.Put(seqKey(seq), v)
	})
	if err != nil {
		return 0, err
	}
	return seq, nil
}

// Get implements DeadLetterStore.
func (s *BoltDeadLetters) Get(seq uint64) (DeadLetter, error) {
	var d DeadLetter
	found := false
	err := s.view(func(b *bolt.Bucket) error {
		k := seqKey(seq)
		v := b.Get(k)
		if v == nil {
			return nil
		}
		found = true
		var err error
		d, err = s.decode(k, v)
		return err
	})
	if err != nil {
		return DeadLetter{}, err
	}
	if !found {
		return DeadLetter{}, s.errorf(ErrNotFound, "seq %d: not found", seq)
	}
	return d, nil
}

// List implements DeadLetterStore. It decodes the records in order until it
// has limit that pass f.
func (s *BoltDeadLetters) List(f Filter, limit int) ([]DeadLetter, error) {
	var out []DeadLetter
	var bad []error
	err := s.view(func(b *bolt.Bucket) error {
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if limit > 0 && len(out) >= limit {
				break
			}
			d, err := s.decode(k, v)
			if err != nil {
				bad = append(bad, err)
				continue
			}
			if f.Match(d) {
				out = append(out, d)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("supervision: dead letters in %s: list: %w", s.Path(), err)
	}
	return out, errors.Join(bad...)
}

// Delete implements DeadLetterStore. It removes the record whether it
// decodes or not.
func (s *BoltDeadLetters) Delete(seq uint64) error {
	return s.update(fmt.Sprintf("delete seq %d", seq), func(b *bolt.Bucket) error {
		k := seqKey(seq)
		if b.Get(k) == nil {
			return s.errorf(ErrNotFound, "seq %d: not found", seq)
		}
		return b.Delete(k)
	})
}

// Purge implements DeadLetterStore. With a filter, records that do not
// decode cannot be matched: they stay, and are reported in the error
// (wrapping ErrCorrupt) while the matching ones are removed.
func (s *BoltDeadLetters) Purge(f Filter) (int, error) {
	var doomed [][]byte
	var bad []error
	err := s.update("purge", func(b *bolt.Bucket) error {
		doomed, bad = doomed[:0], bad[:0] // bbolt may not retry, but stay idempotent
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if !f.empty() {
				d, err := s.decode(k, v)
				if err != nil {
					bad = append(bad, err)
					continue
				}
				if !f.Match(d) {
					continue
				}
			}
			doomed = append(doomed, bytes.Clone(k))
		}
		// Deleting while a cursor walks the bucket skips keys: delete after.
		for _, k := range doomed {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return len(doomed), errors.Join(bad...)
}

// Len implements DeadLetterStore.
func (s *BoltDeadLetters) Len() (int, error) {
	n := 0
	err := s.view(func(b *bolt.Bucket) error {
		n = b.Stats().KeyN
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("supervision: dead letters in %s: len: %w", s.Path(), err)
	}
	return n, nil
}
