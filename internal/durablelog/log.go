// Package durablelog is an append-only log of byte records in a bbolt
// store: the storage of operators.DurableIngress. Append returns only once
// its records are durable (committed and fsync'd by bbolt); concurrent
// appends share one transaction (group commit: the first waiting appender
// commits everything queued, the others wait for it, so no goroutine runs
// behind the log). Every record has an offset, counted from 0 and never
// reused; a reader reads from any offset still kept, and Trim drops the
// records before an offset once nothing will read them again (a completed
// checkpoint covers them). Close ends the stream durably: readers reach the
// end after the last record, also after a restart.
//
// Back-pressure: Capacity bounds the records appended and not yet read
// (Read advances the read position); Append waits for room, honouring its
// context, and TryAppend fails with ErrFull.
//
//	l, err := durablelog.Open(db, "orders", 4096)
//	first, err := l.Append(ctx, [][]byte{rec1, rec2}) // durable on return
//	r := l.Reader(0)
//	n, err := r.Read(buf) // io.EOF after Close and the last record
package durablelog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// The log's errors, for errors.Is.
var (
	ErrFull   = errors.New("durable log: full")
	ErrClosed = errors.New("durable log: closed")
	// ErrTrimmed: a reader asked for a record that was trimmed.
	ErrTrimmed = errors.New("durable log: offset trimmed")
)

// rootBucket holds one bucket per log: its records in its "records"
// bucket, and the keys first (the trim point), closed and format. In
// format 2 (logs created since it) each appended batch is one group under
// the 8-byte big-endian offset of its first record (encodeGroup), so an
// append writes one key a batch and a trim deletes one a batch; in format
// 1 (a log without the format key that already holds records) each record
// is under its own offset, and such a log keeps that format.
var (
	rootBucket = []byte("sluice.ingress")
	recBucket  = []byte("records")
	firstKey   = []byte("first")
	closedKey  = []byte("closed")
	formatKey  = []byte("format")
)

// ErrCorrupt: a group of records in the store does not decode.
var ErrCorrupt = errors.New("durable log: corrupt group")

// Log is one named log in a store. It is safe for concurrent use.
type Log struct {
	db       *bolt.DB
	name     []byte
	capacity int64
	token    chan struct{} // held by the appender that commits

	mu      sync.Mutex
	pending []*batch
	next    int64         // the offset the next record gets (committed records: [first, next))
	first   int64         // the first record kept
	read    int64         // the read position (how far the reader has read)
	queued  int64         // records in pending batches, reserved against capacity
	closing bool          // Close was called: append nothing more
	closed  bool          // ended durably
	grouped bool          // format 2: one key per appended batch (else one per record)
	changed chan struct{} // closed and replaced when next, read or closed change
}

type batch struct {
	recs  [][]byte
	done  chan struct{}
	first int64
	err   error
}

// Open opens (or creates) the log name in db. capacity bounds the records
// appended and not yet read (at least 1).
func Open(db *bolt.DB, name string, capacity int) (*Log, error) {
	if name == "" {
		return nil, errors.New("durable log: empty name")
	}
	l := &Log{db: db, name: []byte(name), capacity: int64(max(1, capacity)), token: make(chan struct{}, 1), changed: make(chan struct{})}
	err := db.Update(func(tx *bolt.Tx) error {
		root, err := tx.CreateBucketIfNotExists(rootBucket)
		if err != nil {
			return err
		}
		b, err := root.CreateBucketIfNotExists(l.name)
		if err != nil {
			return err
		}
		recs, err := b.CreateBucketIfNotExists(recBucket)
		if err != nil {
			return err
		}
		l.next = int64(recs.Sequence())
		if v := b.Get(firstKey); v != nil {
			if len(v) != 8 {
				return fmt.Errorf("key %q: %d bytes, want 8", firstKey, len(v))
			}
			l.first = int64(binary.BigEndian.Uint64(v))
		}
		if l.first > l.next || l.first < 0 || l.next < 0 {
			return fmt.Errorf("trim point %d beyond the end %d", l.first, l.next)
		}
		l.closed = b.Get(closedKey) != nil
		switch f := b.Get(formatKey); {
		case f == nil:
			if k, _ := recs.Cursor().First(); k != nil || l.next > 0 {
				return nil // format 1: a log of an earlier version
			}
			l.grouped = true
			return b.Put(formatKey, []byte{2})
		case len(f) == 1 && f[0] == 2:
			l.grouped = true
		default:
			return fmt.Errorf("format %v: this build reads formats 1 and 2", f)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("durable log %q: open: %w", name, err)
	}
	l.read = l.first
	return l, nil
}

// Append appends recs and returns the offset of the first once they are
// durable. It waits while the log holds Capacity unread records (a batch
// larger than that waits for the reader to catch up completely), until ctx
// ends; once its records are queued for the store it waits for the commit
// whatever ctx says, as they may already be durable.
func (l *Log) Append(ctx context.Context, recs [][]byte) (int64, error) {
	b, err := l.reserve(ctx, recs, true)
	if err != nil {
		return 0, err
	}
	return l.await(b)
}

// TryAppend is Append that fails with ErrFull instead of waiting for room.
func (l *Log) TryAppend(recs [][]byte) (int64, error) {
	b, err := l.reserve(context.Background(), recs, false)
	if err != nil {
		return 0, err
	}
	return l.await(b)
}

// reserve queues recs once there is room for them.
func (l *Log) reserve(ctx context.Context, recs [][]byte, wait bool) (*batch, error) {
	n := int64(len(recs))
	l.mu.Lock()
	for {
		if l.closing || l.closed {
			l.mu.Unlock()
			return nil, fmt.Errorf("durable log %q: append: %w", l.name, ErrClosed)
		}
		unread := l.next + l.queued - l.read
		if unread == 0 || unread+n <= l.capacity {
			break
		}
		if !wait {
			l.mu.Unlock()
			return nil, fmt.Errorf("durable log %q: %d unread records: %w", l.name, unread, ErrFull)
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("durable log %q: append: %w", l.name, context.Cause(ctx))
		}
		l.mu.Lock()
	}
	b := &batch{recs: recs, done: make(chan struct{})}
	l.pending = append(l.pending, b)
	l.queued += n
	l.mu.Unlock()
	return b, nil
}

// await waits until b is committed, committing the queued batches itself
// when no other appender is.
func (l *Log) await(b *batch) (int64, error) {
	for {
		select {
		case <-b.done:
			return b.first, b.err
		case l.token <- struct{}{}:
			l.commitPending()
			<-l.token
		}
	}
}

// commitPending writes every queued batch in one transaction.
func (l *Log) commitPending() {
	l.mu.Lock()
	bs := l.pending
	l.pending = nil
	next := l.next
	l.mu.Unlock()
	if len(bs) == 0 {
		return
	}
	var n int64
	err := l.db.Update(func(tx *bolt.Tx) error {
		recs := tx.Bucket(rootBucket).Bucket(l.name).Bucket(recBucket)
		if recs == nil {
			return errors.New("its bucket is gone")
		}
		recs.FillPercent = 1 // keys only ever grow: fill pages before splitting them
		off := next
		for _, b := range bs {
			if l.grouped {
				if len(b.recs) > 0 {
					if err := recs.Put(offsetKey(off), encodeGroup(b.recs)); err != nil {
						return err
					}
				}
				off += int64(len(b.recs))
				continue
			}
			for _, r := range b.recs {
				if err := recs.Put(offsetKey(off), r); err != nil {
					return err
				}
				off++
			}
		}
		n = off - next
		return recs.SetSequence(uint64(off))
	})
	l.mu.Lock()
	off := next
	for _, b := range bs {
		l.queued -= int64(len(b.recs))
		if err != nil {
			b.err = fmt.Errorf("durable log %q: append: %w", l.name, err)
		} else {
			b.first = off
			off += int64(len(b.recs))
		}
		close(b.done)
	}
	if err == nil {
		l.next += n
	}
	l.notify()
	l.mu.Unlock()
}

// notify wakes everyone waiting for a change; l.mu is held.
func (l *Log) notify() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// Close ends the log durably: readers reach the end after its last record,
// and appends fail with ErrClosed. Appends in progress finish first.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closing = true
	l.notify()
	l.mu.Unlock()
	l.token <- struct{}{} // no commit runs; queued batches commit here
	defer func() { <-l.token }()
	l.commitPending()
	err := l.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(rootBucket).Bucket(l.name).Put(closedKey, []byte{1})
	})
	if err != nil {
		return fmt.Errorf("durable log %q: close: %w", l.name, err)
	}
	l.mu.Lock()
	l.closed = true
	l.notify()
	l.mu.Unlock()
	return nil
}

// Trim drops the records before offset (they will not be read again).
func (l *Log) Trim(offset int64) error {
	l.mu.Lock()
	first, next := l.first, l.next
	l.mu.Unlock()
	if offset <= first {
		return nil
	}
	if offset > next {
		return fmt.Errorf("durable log %q: trim to %d beyond the end %d", l.name, offset, next)
	}
	err := l.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(rootBucket).Bucket(l.name)
		c := b.Bucket(recBucket).Cursor()
		for k, v := c.First(); k != nil && int64(binary.BigEndian.Uint64(k)) < offset; k, v = c.Next() {
			if l.grouped {
				n, err := groupLen(v)
				if err != nil {
					return fmt.Errorf("group at %d: %w", binary.BigEndian.Uint64(k), err)
				}
				if int64(binary.BigEndian.Uint64(k))+int64(n) > offset {
					break // the group holds records kept: it stays whole
				}
			}
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return b.Put(firstKey, offsetKey(offset))
	})
	if err != nil {
		return fmt.Errorf("durable log %q: trim to %d: %w", l.name, offset, err)
	}
	l.mu.Lock()
	l.first = max(l.first, offset)
	l.mu.Unlock()
	return nil
}

// Stats are a log's positions.
type Stats struct {
	First, Next, Read int64 // first kept, next to append, the read position
	Closed            bool
}

// Stats returns the log's positions now.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{First: l.first, Next: l.next, Read: l.read, Closed: l.closed}
}

// Reader reads the log from offset. The log counts one reader's position
// for its capacity: the last one opened.
func (l *Log) Reader(offset int64) (*Reader, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if offset < l.first || offset > l.next {
		return nil, fmt.Errorf("durable log %q: read from %d, kept [%d, %d): %w", l.name, offset, l.first, l.next, ErrTrimmed)
	}
	l.read = offset
	l.notify()
	return &Reader{l: l, off: offset}, nil
}

// Reader reads a log in order. Its methods are for one goroutine at a time.
type Reader struct {
	l    *Log
	off  int64
	hint groupHint
}

// groupHint is where the last Read stopped inside a group of format 2:
// the group's first offset, and the offset and byte position of the next
// record in it, so that the next Read starts there instead of walking the
// group's records from its start again (a source reads 256 records at a
// time from groups of up to 4 096).
type groupHint struct {
	first, at int64
	pos       int // bytes into the group's value; 0: no hint
}

// Read fills buf with the records from the reader's offset (the slices
// are copies) and returns how many; 0, nil when none is committed yet, and
// 0, io.EOF after the last record of a closed log.
func (r *Reader) Read(buf [][]byte) (int, error) {
	l := r.l
	l.mu.Lock()
	next, closed := l.next, l.closed
	l.mu.Unlock()
	if r.off >= next {
		if closed {
			return 0, io.EOF
		}
		return 0, nil
	}
	want := min(int64(len(buf)), next-r.off)
	n := 0
	err := l.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(rootBucket).Bucket(l.name).Bucket(recBucket).Cursor()
		if l.grouped {
			var err error
			n, err = readGroups(c, r.off, buf[:want], &r.hint)
			return err
		}
		for k, v := c.Seek(offsetKey(r.off)); k != nil && int64(n) < want; k, v = c.Next() {
			if got := int64(binary.BigEndian.Uint64(k)); got != r.off+int64(n) {
				return fmt.Errorf("record %d missing (found %d): %w", r.off+int64(n), got, ErrTrimmed)
			}
			buf[n] = append([]byte(nil), v...)
			n++
		}
		if int64(n) < want {
			return fmt.Errorf("records %d to %d missing: %w", r.off+int64(n), r.off+want, ErrTrimmed)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("durable log %q: read at %d: %w", l.name, r.off, err)
	}
	r.off += int64(n)
	l.mu.Lock()
	l.read = max(l.read, r.off)
	l.notify()
	l.mu.Unlock()
	return n, nil
}

// Offset is the offset of the next record the reader reads.
func (r *Reader) Offset() int64 { return r.off }

// Wait blocks until Read may return records or the end, or ctx ends.
func (r *Reader) Wait(ctx context.Context) error {
	for {
		l := r.l
		l.mu.Lock()
		if r.off < l.next || l.closed {
			l.mu.Unlock()
			return nil
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func offsetKey(off int64) []byte {
	var key [8]byte
	binary.BigEndian.PutUint64(key[:], uint64(off))
	return key[:]
}

// encodeGroup encodes a batch of records: the count, then each record's
// length and bytes, all lengths as uvarints.
func encodeGroup(recs [][]byte) []byte {
	size := binary.MaxVarintLen64
	for _, r := range recs {
		size += binary.MaxVarintLen64 + len(r)
	}
	out := make([]byte, 0, size)
	out = binary.AppendUvarint(out, uint64(len(recs)))
	for _, r := range recs {
		out = binary.AppendUvarint(out, uint64(len(r)))
		out = append(out, r...)
	}
	return out
}

// groupLen is the number of records a group says it holds, checked
// against its size (every record takes at least a byte).
func groupLen(v []byte) (int, error) {
	n, k := binary.Uvarint(v)
	if k <= 0 || n == 0 || n > uint64(len(v)-k) {
		return 0, fmt.Errorf("%w: count %d in %d bytes", ErrCorrupt, n, len(v))
	}
	return int(n), nil
}

// groupIter walks the records of a group without copying them.
type groupIter struct {
	v    []byte
	left int
}

func newGroupIter(v []byte) (groupIter, error) {
	n, err := groupLen(v)
	if err != nil {
		return groupIter{}, err
	}
	_, k := binary.Uvarint(v)
	return groupIter{v: v[k:], left: n}, nil
}

// next returns the group's next record (aliasing the store's bytes).
func (g *groupIter) next() ([]byte, error) {
	if g.left == 0 {
		return nil, fmt.Errorf("%w: no record left", ErrCorrupt)
	}
	size, k := binary.Uvarint(g.v)
	if k <= 0 || size > uint64(len(g.v)-k) {
		return nil, fmt.Errorf("%w: a record of %d bytes in the %d left", ErrCorrupt, size, len(g.v))
	}
	r := g.v[k : k+int(size)]
	g.v = g.v[k+int(size):]
	g.left--
	if g.left == 0 && len(g.v) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last record", ErrCorrupt, len(g.v))
	}
	return r, nil
}

// readGroups copies into buf the records from offset off on, from the
// groups of format 2, and returns how many (len(buf) unless some are
// missing, which is an error). hint, when it points at off, says where in
// its group to start; it is updated to where this read stopped.
func readGroups(c *bolt.Cursor, off int64, buf [][]byte, hint *groupHint) (int, error) {
	var k, v []byte
	if hint.pos > 0 && hint.at == off {
		k, v = c.Seek(offsetKey(hint.first))
		if k == nil || int64(binary.BigEndian.Uint64(k)) != hint.first {
			*hint = groupHint{} // trimmed meanwhile: look it up
		}
	}
	if hint.pos == 0 || hint.at != off {
		k, v = c.Seek(offsetKey(off))
		if k == nil || int64(binary.BigEndian.Uint64(k)) > off {
			k, v = c.Prev() // the group that holds off starts before it
		}
	}
	n := 0
	for ; k != nil && n < len(buf); k, v = c.Next() {
		first, pos := int64(binary.BigEndian.Uint64(k)), off+int64(n)
		if first > pos {
			return n, fmt.Errorf("record %d missing (the next group starts at %d): %w", pos, first, ErrTrimmed)
		}
		g, err := newGroupIter(v)
		if err != nil {
			return n, fmt.Errorf("group at %d: %w", first, err)
		}
		if first+int64(g.left) <= pos {
			continue // a group that ends before off
		}
		i := first
		if hint.pos > 0 && hint.first == first && hint.at == pos && hint.pos < len(v) && pos > first && pos < first+int64(g.left) {
			// resume where the last read stopped (the group's bytes
			// are as they were: a group is written once)
			g = groupIter{v: v[hint.pos:], left: g.left - int(pos-first)}
			i = pos
		}
		for ; g.left > 0 && n < len(buf); i++ {
			r, err := g.next()
			if err != nil {
				return n, fmt.Errorf("group at %d, record %d: %w", first, i, err)
			}
			if i >= pos {
				buf[n] = append([]byte(nil), r...)
				n++
			}
		}
		if g.left > 0 {
			*hint = groupHint{first: first, at: i, pos: len(v) - len(g.v)}
		} else {
			*hint = groupHint{}
		}
	}
	if n < len(buf) {
		return n, fmt.Errorf("records %d to %d missing: %w", off+int64(n), off+int64(len(buf)), ErrTrimmed)
	}
	return n, nil
}
