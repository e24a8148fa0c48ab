package supervision

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/internal/store"
)

// deadLetterBucket is the top-level bucket of dead letters in a store file:
// keys are big-endian sequence numbers, values encodeDeadLetter's bytes.
// usageBucket holds, under usageKey, the count and bytes of the dead
// letters and the count dropped at the cap (three big-endian uint64s),
// kept in the same transactions.
var (
	deadLetterBucket = []byte("deadletters")
	usageBucket      = []byte("deadletters.usage")
	usageKey         = []byte("usage")
)

// Defaults of BoltOptions.
const (
	DefaultMaxDeadLetters     = 100_000
	DefaultMaxDeadLetterBytes = 256 << 20
)

// WhenFull says what Add does at a BoltDeadLetters' cap.
type WhenFull int

const (
	// FailWhenFull: Add returns an error wrapping ErrFull; the operator
	// that dead-lettered the record fails (its job restarts or fails, by
	// its supervision). Nothing is lost without a trace. The default.
	FailWhenFull WhenFull = iota
	// DropWhenFull: Add drops the dead letter, returns Seq 0 and a nil
	// error, and counts it (Usage().Dropped, kept in the file).
	DropWhenFull
)

// BoltOptions bound a BoltDeadLetters.
type BoltOptions struct {
	// MaxCount caps the dead letters kept (0: DefaultMaxDeadLetters;
	// negative: no cap).
	MaxCount int
	// MaxBytes caps their stored bytes (0: DefaultMaxDeadLetterBytes;
	// negative: no cap).
	MaxBytes int64
	// WhenFull chooses between a failed Add and a counted drop at the cap.
	WhenFull WhenFull
}

func (o BoltOptions) withDefaults() (BoltOptions, error) {
	if o.WhenFull != FailWhenFull && o.WhenFull != DropWhenFull {
		return o, errorf(ErrInvalidConfig, "supervision: dead letters: WhenFull %d", o.WhenFull)
	}
	if o.MaxCount == 0 {
		o.MaxCount = DefaultMaxDeadLetters
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxDeadLetterBytes
	}
	return o, nil
}

// Usage is what a BoltDeadLetters holds, and what it dropped at its cap.
type Usage struct {
	Count   int
	Bytes   int64
	Dropped uint64
}

// BoltDeadLetters is a DeadLetterStore in a bbolt database, in its
// top-level "deadletters" bucket (one sluice store file holds it with the
// spill queues and journals). Each dead letter is durable when Add
// returns; concurrent Adds share one transaction (group commit: the first
// caller commits for everyone waiting, without delay), so parallel
// operator instances do not pay an fsync each. The store is capped
// (BoltOptions: count and bytes, then a failed Add or a counted drop).
type BoltDeadLetters struct {
	db       *bolt.DB
	file     *store.File // set when OpenDeadLetters opened the file
	readOnly bool
	opts     BoltOptions

	mu      sync.Mutex
	pending []*addReq // Adds waiting for a commit
	leading bool      // an Add is committing for the others

	commits atomic.Uint64 // write transactions of Add, for tests
}

// addReq is one Add waiting for its group's commit.
type addReq struct {
	v    []byte
	seq  uint64
	err  error
	done chan struct{} // closed when committed (or failed)
	lead chan struct{} // signalled when this Add is to commit next
}

// NewBoltDeadLetters keeps dead letters in db, which the caller owns and
// closes, with the default caps. On a writable db it creates the bucket;
// a read-only db without one reads as empty.
func NewBoltDeadLetters(db *bolt.DB) (*BoltDeadLetters, error) {
	return NewBoltDeadLettersWith(db, BoltOptions{})
}

// NewBoltDeadLettersWith is NewBoltDeadLetters with caps of its own.
func NewBoltDeadLettersWith(db *bolt.DB, opts BoltOptions) (*BoltDeadLetters, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &BoltDeadLetters{db: db, readOnly: db.IsReadOnly(), opts: opts}
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
	return OpenDeadLettersWith(path, BoltOptions{})
}

// OpenDeadLettersWith is OpenDeadLetters with caps of its own.
func OpenDeadLettersWith(path string, opts BoltOptions) (*BoltDeadLetters, error) {
	f, err := store.Open(path)
	if err != nil {
		return nil, fmt.Errorf("supervision: dead letters: %w", err)
	}
	s, err := NewBoltDeadLettersWith(f.DB, opts)
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
	opts, _ := BoltOptions{}.withDefaults()
	return &BoltDeadLetters{db: f.DB, file: f, readOnly: true, opts: opts}, nil
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

func (s *BoltDeadLetters) update(what string, fn func(b *bolt.Bucket, u *Usage) error) error {
	if s.readOnly {
		return s.errorf(ErrReadOnly, "%s: the store is open read-only", what)
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(deadLetterBucket)
		if err != nil {
			return err
		}
		ub, err := tx.CreateBucketIfNotExists(usageBucket)
		if err != nil {
			return err
		}
		u := readUsage(b, ub)
		if err := fn(b, &u); err != nil {
			return err
		}
		return ub.Put(usageKey, writeUsage(u))
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

// readUsage returns the usage recorded in ub, or counts it in b (a file
// written before usage was recorded).
func readUsage(b, ub *bolt.Bucket) Usage {
	if v := ub.Get(usageKey); len(v) == 24 {
		return Usage{Count: int(binary.BigEndian.Uint64(v)), Bytes: int64(binary.BigEndian.Uint64(v[8:])),
			Dropped: binary.BigEndian.Uint64(v[16:])}
	}
	var u Usage
	_ = b.ForEach(func(_, v []byte) error {
		u.Count++
		u.Bytes += int64(len(v))
		return nil
	})
	return u
}

func writeUsage(u Usage) []byte {
	v := binary.BigEndian.AppendUint64(nil, uint64(max(u.Count, 0)))
	v = binary.BigEndian.AppendUint64(v, uint64(max(u.Bytes, 0)))
	return binary.BigEndian.AppendUint64(v, u.Dropped)
}

// Usage returns what the store holds and what it dropped at its cap.
func (s *BoltDeadLetters) Usage() (Usage, error) {
	var u Usage
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(deadLetterBucket)
		if b == nil {
			return nil
		}
		if ub := tx.Bucket(usageBucket); ub != nil {
			u = readUsage(b, ub)
			return nil
		}
		u = readUsage(b, b) // no usage recorded: count
		return nil
	})
	if err != nil {
		return Usage{}, fmt.Errorf("supervision: dead letters in %s: usage: %w", s.Path(), err)
	}
	return u, nil
}

// Add implements DeadLetterStore. At the cap it fails with ErrFull or
// drops the dead letter (Seq 0, counted in Usage().Dropped), as
// BoltOptions.WhenFull says.
func (s *BoltDeadLetters) Add(d DeadLetter) (uint64, error) {
	if s.readOnly {
		return 0, s.errorf(ErrReadOnly, "add: the store is open read-only")
	}
	v, err := encodeDeadLetter(d)
	if err != nil {
		return 0, s.errorf(ErrInvalidConfig, "add: encode: %w", err)
	}
	r := &addReq{v: v, done: make(chan struct{}), lead: make(chan struct{}, 1)}
	s.mu.Lock()
	s.pending = append(s.pending, r)
	if s.leading {
		s.mu.Unlock()
		select {
		case <-r.done:
			return r.seq, r.err
		case <-r.lead: // the previous committer handed over to r
		}
		s.mu.Lock()
	}
	s.leading = true
	batch := s.pending
	s.pending = nil
	s.mu.Unlock()

	s.commit(batch)

	s.mu.Lock()
	if len(s.pending) > 0 {
		s.pending[0].lead <- struct{}{} // the first waiter commits next
	} else {
		s.leading = false
	}
	s.mu.Unlock()
	return r.seq, r.err
}

// commit adds a group of dead letters in one transaction and tells each
// of its Adds.
func (s *BoltDeadLetters) commit(batch []*addReq) {
	s.commits.Add(1)
	err := s.update("add", func(b *bolt.Bucket, u *Usage) error {
		for _, r := range batch {
			r.seq, r.err = 0, nil // bbolt does not retry, but stay idempotent
			if (s.opts.MaxCount > 0 && u.Count+1 > s.opts.MaxCount) || (s.opts.MaxBytes > 0 && u.Bytes+int64(len(r.v)) > s.opts.MaxBytes) {
				if s.opts.WhenFull == DropWhenFull {
					u.Dropped++
					continue
				}
				r.err = s.errorf(ErrFull, "full at its cap of %d dead letters or %d bytes (holds %d, %d bytes)",
					s.opts.MaxCount, s.opts.MaxBytes, u.Count, u.Bytes)
				continue
			}
			seq, err := b.NextSequence()
			if err != nil {
				return err
			}
			if err := b.Put(seqKey(seq), r.v); err != nil {
				return err
			}
			r.seq = seq
			u.Count++
			u.Bytes += int64(len(r.v))
		}
		return nil
	})
	for _, r := range batch {
		if err != nil {
			r.seq, r.err = 0, err
		}
		close(r.done)
	}
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
	return s.update(fmt.Sprintf("delete seq %d", seq), func(b *bolt.Bucket, u *Usage) error {
		k := seqKey(seq)
		v := b.Get(k)
		if v == nil {
			return s.errorf(ErrNotFound, "seq %d: not found", seq)
		}
		u.Count--
		u.Bytes -= int64(len(v))
		return b.Delete(k)
	})
}

// Purge implements DeadLetterStore. With a filter, records that do not
// decode cannot be matched: they stay, and are reported in the error
// (wrapping ErrCorrupt) while the matching ones are removed.
func (s *BoltDeadLetters) Purge(f Filter) (int, error) {
	var doomed [][]byte
	var bad []error
	err := s.update("purge", func(b *bolt.Bucket, u *Usage) error {
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
			u.Count--
			u.Bytes -= int64(len(v))
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
