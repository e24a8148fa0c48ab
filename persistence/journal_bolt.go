package persistence

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
)

// Group commit and compaction limits.
const (
	// A transaction takes the appends queued while the previous one
	// committed, up to these many events or bytes.
	maxGroupEvents = 1 << 14
	maxGroupBytes  = 8 << 20
	queueLen       = 1024
	// The log is compacted into the journals of the ids once it holds this
	// many events or bytes (and before a Replay or DeleteTo, and at Close).
	compactEvents = 1 << 16
	compactBytes  = 32 << 20
	replayChunk   = 1024 // events read per read transaction during Replay
)

// BoltJournal is a Journal in a bbolt database. Safe for concurrent use.
//
// Appends from many goroutines are group-committed: a writer goroutine,
// owned by the journal, gathers the appends queued while it was busy into
// one transaction, so that they share one fsync. Each append stays atomic,
// and one that fails (a sequence conflict, a write error) does not fail the
// others of its group.
//
// A group is written as one record at the end of a log, so that a commit
// costs a few pages however many persistence ids it touches; the highest
// sequence number of each id is updated in the same transaction. The
// writer later compacts the log into the journals of the ids, which Replay
// reads (a bucket per id, holding runs of consecutive events keyed by the
// sequence number of their first): when the log is large, before a Replay
// or DeleteTo, and at Close. A crash between the two loses nothing: the log
// is compacted when the file is next used.
//
// Close stops the writer; the database stays open.
type BoltJournal struct {
	db    *bolt.DB
	where string // " in FILE", for errors

	mu     sync.RWMutex // held for reading while queueing; Close takes it
	closed bool
	reqs   chan *appendReq
	done   chan struct{} // closed when the writer has exited

	// Owned by the writer.
	logEvents, logBytes int
	closeErr            error // of the last compaction, read by Close after the writer exits
	// highest caches the highest sequence numbers the writer has read or
	// written, valid while the log's sequence is logSeq: a change means
	// another writer used the file, and the cache is dropped.
	highest map[string]uint64
	logSeq  uint64

	// Shared with readers: the log position through which the last
	// compaction went, when it left entries behind (a damaged file).
	stuck atomic.Uint64

	appends, events, commits, failed, compactions atomic.Uint64

	pool sync.Pool // of *appendReq, with their buffers and channels
}

// JournalStats counts a BoltJournal's work since it was created.
type JournalStats struct {
	Appends     uint64 // Append calls committed
	Events      uint64 // events committed
	Commits     uint64 // group transactions committed, one fsync each (unless the DB has NoSync)
	Failed      uint64 // Append calls that reached the writer and failed
	Compactions uint64 // compactions of the log into the journals of the ids
}

// appendReq is a request for the writer: an append, a compaction of the
// log, or a delete (of the events of id up to first).
type appendReq struct {
	kind  reqKind
	id    string
	first uint64
	recs  [][]byte
	size  int
	done  chan error // buffered: the writer never waits for the caller
	err   error
	buf   []byte // holds recs; kept with r in the pool
}

type reqKind uint8

const (
	appendKind reqKind = iota
	compactKind
	deleteKind
)

// NewBoltJournal returns a journal in db's "journal" bucket and starts its
// writer; Close stops it. db is typically the system's store
// (actors.System.DB) and stays open after Close. Share one BoltJournal per
// database: a second one is safe, but commits apart from the first.
func NewBoltJournal(db *bolt.DB) (*BoltJournal, error) {
	if db == nil {
		return nil, errors.New("persistence: journal: nil bbolt database")
	}
	j := newBoltJournal(db)
	go j.run()
	return j, nil
}

// newBoltJournal returns a journal whose writer is not started yet.
func newBoltJournal(db *bolt.DB) *BoltJournal {
	return &BoltJournal{
		db:      db,
		where:   " in " + db.Path(),
		reqs:    make(chan *appendReq, queueLen),
		done:    make(chan struct{}),
		highest: map[string]uint64{},
		pool:    sync.Pool{New: func() any { return &appendReq{done: make(chan error, 1)} }},
	}
}

// maxCached bounds the writer's cache of highest sequence numbers.
const maxCached = 1 << 16

// Path returns the store's file name.
func (j *BoltJournal) Path() string { return j.db.Path() }

// Stats returns the journal's counters.
func (j *BoltJournal) Stats() JournalStats {
	return JournalStats{Appends: j.appends.Load(), Events: j.events.Load(), Commits: j.commits.Load(),
		Failed: j.failed.Load(), Compactions: j.compactions.Load()}
}

// Close commits the appends already queued, compacts the log, stops the
// writer and waits for it. Later calls fail with ErrClosed. The database
// stays open; if it was closed first, the log is compacted when the file is
// next used.
func (j *BoltJournal) Close() error {
	j.mu.Lock()
	if !j.closed {
		j.closed = true
		close(j.reqs)
	}
	j.mu.Unlock()
	<-j.done
	return j.closeErr
}

func (j *BoltJournal) isClosed() bool {
	j.mu.RLock()
	defer j.mu.RUnlock()
	return j.closed
}

func (j *BoltJournal) closedErr(id, op string) error {
	return errorf(ErrClosed, "persistence: journal %q%s: %s: closed", id, j.where, op)
}

// Append implements Journal: it returns when the events are durable, or
// with the reason they were not written. ctx bounds the wait for a place in
// the writer's queue; once queued, an append is committed or fails, and
// Append waits to report which.
func (j *BoltJournal) Append(ctx context.Context, id string, events []Event) error {
	if err := checkBatch(id, j.where, events); err != nil {
		return err
	}
	if len(events) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("persistence: journal %q%s: append seq %d: nothing written: %w", id, j.where, events[0].Seq, context.Cause(ctx))
	}
	r, err := j.request(id, events)
	if err != nil {
		return err
	}
	err = j.submit(ctx, r, "append")
	j.release(r) // the writer is done with it, or never had it
	return err
}

// submit queues r for the writer and waits for its outcome.
func (j *BoltJournal) submit(ctx context.Context, r *appendReq, op string) error {
	j.mu.RLock()
	if j.closed {
		j.mu.RUnlock()
		return j.closedErr(r.id, op)
	}
	select {
	case j.reqs <- r:
		j.mu.RUnlock()
	case <-ctx.Done():
		j.mu.RUnlock()
		return fmt.Errorf("persistence: journal %q%s: %s: nothing done: %w", r.id, j.where, op, context.Cause(ctx))
	}
	return <-r.done
}

// request encodes an append for the writer: its events' records, in one
// buffer.
func (j *BoltJournal) request(id string, events []Event) (*appendReq, error) {
	size := 0
	for _, e := range events {
		size += eventRecordSize(e)
	}
	r := j.pool.Get().(*appendReq)
	r.kind, r.id, r.first, r.size, r.err = appendKind, id, events[0].Seq, len(id)+16, nil
	buf := slices.Grow(r.buf[:0], size)
	r.recs = r.recs[:0]
	for _, e := range events {
		start := len(buf)
		buf = appendEvent(buf, e)
		r.recs = append(r.recs, buf[start:len(buf):len(buf)])
		r.size += len(buf) - start + 5
	}
	r.buf = buf
	for i, rec := range r.recs {
		if len(rec) > maxGroupBytes {
			j.release(r)
			return nil, fmt.Errorf("persistence: journal %q%s: append seq %d: event of %d bytes (at most %d)", id, j.where, events[i].Seq, len(rec), maxGroupBytes)
		}
	}
	return r, nil
}

// release returns r to the pool, unless it holds a large buffer.
func (j *BoltJournal) release(r *appendReq) {
	if cap(r.buf) > 64<<10 || cap(r.recs) > 1024 {
		return
	}
	clear(r.recs)
	r.recs, r.id = r.recs[:0], ""
	j.pool.Put(r)
}

// run is the writer: it takes the first queued request and every other one
// queued meanwhile, commits the appends among them in one transaction,
// compacts the log when asked or when it has grown, and then deletes. So a
// compaction or a delete sees every append queued before it, and a delete
// finds every event it should delete compacted (none left in the log).
func (j *BoltJournal) run() {
	defer close(j.done)
	var group, compacts, deletes []*appendReq
	take := func(r *appendReq) {
		switch r.kind {
		case compactKind:
			compacts = append(compacts, r)
		case deleteKind:
			deletes = append(deletes, r)
		default:
			group = append(group, r)
		}
	}
	for r := range j.reqs {
		group, compacts, deletes = group[:0], compacts[:0], deletes[:0]
		take(r)
		events, size := len(r.recs), r.size
	fill:
		for events < maxGroupEvents && size < maxGroupBytes {
			select {
			case r, ok := <-j.reqs:
				if !ok {
					break fill
				}
				take(r)
				events, size = events+len(r.recs), size+r.size
			default:
				break fill
			}
		}
		if len(group) > 0 {
			j.commit(group)
		}
		if len(compacts)+len(deletes) > 0 || j.logEvents >= compactEvents || j.logBytes >= compactBytes {
			var err error
			if len(compacts)+len(deletes) == 0 || j.logPending() {
				err = j.compact()
			}
			for _, c := range compacts {
				c.done <- err
			}
			for _, d := range deletes {
				if err != nil {
					d.done <- err
				} else {
					d.done <- j.deleteTo(d.id, d.first)
				}
			}
		}
		clear(group)
		clear(compacts)
		clear(deletes)
	}
	if j.logPending() {
		// When the database was closed first, the log stays and is
		// compacted when the file is next used.
		if err := j.compact(); err != nil && !errors.Is(err, bolt.ErrDatabaseNotOpen) {
			j.closeErr = err
		}
	}
}

// errPartial aborts a transaction in which an append failed after writing
// part of its changes.
type errPartial struct{ err error }

func (e errPartial) Error() string { return e.err.Error() }

// commit writes a group in one transaction and tells each append its
// outcome. An append refused before it wrote anything (a sequence conflict)
// fails alone and the others commit. When the transaction itself fails (an
// append failed half-way, or the commit did), each append is retried in a
// transaction of its own, so that one bad append cannot fail the others.
func (j *BoltJournal) commit(group []*appendReq) {
	var record []byte
	err := j.db.Update(func(tx *bolt.Tx) error {
		root, err := tx.CreateBucketIfNotExists(journalBucket)
		if err != nil {
			return err
		}
		highest, err := root.CreateBucketIfNotExists(highestBucket)
		if err != nil {
			return err
		}
		log, err := root.CreateBucketIfNotExists(logBucket)
		if err != nil {
			return err
		}
		if log.Sequence() != j.logSeq || len(j.highest) > maxCached {
			clear(j.highest) // another writer was here, or the cache is full
		}
		// The cache is updated as the transaction goes; it is dropped if
		// the transaction fails.
		ok := make([]*appendReq, 0, len(group))
		// The keys and values given to Put must stay valid until the
		// commit: one allocation holds them all.
		arenaSize := 0
		for _, r := range group {
			arenaSize += len(r.id) + 8
		}
		arena := make([]byte, 0, arenaSize)
		for _, r := range group {
			r.err = nil
			h, cached := j.highest[r.id]
			if !cached {
				if h, err = readHighest(highest.Get([]byte(r.id))); err != nil {
					r.err = errorf(ErrDecode, "persistence: journal %q%s: highest seq: %v", r.id, j.where, err)
					continue
				}
			}
			if r.first != h+1 {
				j.highest[r.id] = h
				r.err = seqConflict(r.id, j.where, r.first, h)
				continue
			}
			last := r.first + uint64(len(r.recs)) - 1
			arena = append(arena, r.id...)
			key := arena[len(arena)-len(r.id):]
			arena = binary.BigEndian.AppendUint64(arena, last)
			if err := highest.Put(key, arena[len(arena)-8:]); err != nil {
				return errPartial{fmt.Errorf("highest seq: %w", err)}
			}
			j.highest[r.id] = last
			ok = append(ok, r)
		}
		if len(ok) == 0 {
			return nil
		}
		// Log positions come from the bucket's sequence, which deletes
		// never lower.
		pos, err := log.NextSequence()
		if err != nil {
			return errPartial{fmt.Errorf("log: %w", err)}
		}
		record = encodeGroup(ok)
		if err := log.Put(seqKey(pos), record); err != nil {
			return errPartial{fmt.Errorf("log: %w", err)}
		}
		j.logSeq = pos
		return nil
	})
	if err != nil {
		clear(j.highest)
		j.logSeq = 0
	}
	if err != nil && len(group) > 1 {
		for _, r := range group {
			j.commit([]*appendReq{r})
		}
		return
	}
	if err == nil {
		j.commits.Add(1)
		j.logBytes += len(record)
	}
	for _, r := range group {
		if err != nil {
			var p errPartial
			if errors.As(err, &p) {
				err = p.err
			}
			r.err = fmt.Errorf("persistence: journal %q%s: append seq %d: nothing written: %w", r.id, j.where, r.first, err)
		}
		if r.err != nil {
			j.failed.Add(1)
		} else {
			j.appends.Add(1)
			j.events.Add(uint64(len(r.recs)))
			j.logEvents += len(r.recs)
		}
		r.done <- r.err
	}
}

// compact moves the log's events into the journals of their ids, in one
// transaction, and deletes the log entries it moved. A log entry that does
// not decode, or whose events cannot be stored (a damaged file: a bucket
// where an event goes), stays in the log, and Replay reports it.
func (j *BoltJournal) compact() error {
	left, through, err := j.compactTx(false)
	if err != nil {
		// Something in the way of an event (a damaged file): again, with
		// every entry checked first, leaving those that cannot move.
		left, through, err = j.compactTx(true)
	}
	if err != nil {
		j.logEvents, j.logBytes = 0, 0 // try again after as much again
		return fmt.Errorf("persistence: journal%s: compact the log: %w", j.where, err)
	}
	j.compactions.Add(1)
	j.logEvents, j.logBytes = 0, 0
	if left > 0 {
		j.stuck.Store(through)
	} else {
		j.stuck.Store(0)
	}
	return nil
}

// compactTx is one compaction. The events are gathered by id and written
// one journal at a time, in id order, each journal's in sequence order.
func (j *BoltJournal) compactTx(careful bool) (left int, through uint64, err error) {
	err = j.db.Update(func(tx *bolt.Tx) error {
		left, through = 0, 0
		log := logBucketOf(tx)
		if log == nil {
			return nil
		}
		events, err := tx.Bucket(journalBucket).CreateBucketIfNotExists(eventsBucket)
		if err != nil {
			return err
		}
		byID := map[string][]logAppend{}
		var done [][]byte
		c := log.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			pos, err := keySeq(k)
			if err != nil {
				left++
				continue
			}
			through = pos
			// The records are slices of v, valid in this transaction; bbolt
			// copies what it was given to Put before it remaps the file.
			apps, err := decodeGroup(v)
			if err != nil || (careful && !movable(events, apps)) {
				left++
				continue
			}
			for _, a := range apps {
				byID[a.id] = append(byID[a.id], a)
			}
			done = append(done, append([]byte(nil), k...))
		}
		for _, id := range slices.Sorted(maps.Keys(byID)) {
			b, err := events.CreateBucketIfNotExists([]byte(id))
			if err != nil {
				return fmt.Errorf("journal %q: %w", id, err)
			}
			if err := writeRuns(b, byID[id]); err != nil {
				return fmt.Errorf("journal %q: %w", id, err)
			}
		}
		for _, k := range done {
			if err := log.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	return left, through, err
}

// writeRuns stores the events of apps, which follow one another, in runs.
func writeRuns(b *bolt.Bucket, apps []logAppend) error {
	var run [][]byte
	var first uint64
	size := 0
	flush := func() error {
		if len(run) == 0 {
			return nil
		}
		if err := b.Put(seqKey(first), encodeRun(run)); err != nil {
			return fmt.Errorf("seq %d: %w", first, err)
		}
		run, size = run[:0], 0
		return nil
	}
	for _, a := range apps {
		for i, rec := range a.recs {
			seq := a.first + uint64(i)
			if len(run) > 0 && (seq != first+uint64(len(run)) || len(run) >= runEvents || size+len(rec) > runBytes) {
				if err := flush(); err != nil {
					return err
				}
			}
			if len(run) == 0 {
				first = seq
			}
			run = append(run, rec)
			size += len(rec)
		}
	}
	return flush()
}

// movable says whether the events of apps can be stored in their journals:
// only a damaged file has a value where a journal's bucket goes, or a bucket
// where an event goes.
func movable(events *bolt.Bucket, apps []logAppend) bool {
	for _, a := range apps {
		b := events.Bucket([]byte(a.id))
		if b == nil {
			if events.Get([]byte(a.id)) != nil {
				return false
			}
			continue
		}
		last := a.first + uint64(len(a.recs)) - 1
		c := b.Cursor()
		for k, v := c.Seek(seqKey(a.first)); k != nil; k, v = c.Next() {
			if seq, err := keySeq(k); err != nil || seq > last {
				break
			}
			if v == nil { // a bucket where a run of these events would go
				return false
			}
		}
	}
	return true
}

// compactFirst has the writer compact the log when it holds records, so
// that the journals of the ids hold every event appended so far.
func (j *BoltJournal) compactFirst(ctx context.Context, id, op string) error {
	if !j.logPending() {
		return nil
	}
	return j.submit(ctx, &appendReq{kind: compactKind, id: id, done: make(chan error, 1)}, op)
}

// logPending says whether the log holds entries (written by this journal,
// by another on the same database, or before a crash).
func (j *BoltJournal) logPending() bool {
	pending := false
	_ = j.db.View(func(tx *bolt.Tx) error {
		if log := logBucketOf(tx); log != nil {
			k, _ := log.Cursor().First()
			pending = k != nil
		}
		return nil
	})
	return pending
}

func readHighest(v []byte) (uint64, error) {
	if v == nil {
		return 0, nil
	}
	return keySeq(v)
}

func logBucketOf(tx *bolt.Tx) *bolt.Bucket {
	if root := tx.Bucket(journalBucket); root != nil {
		return root.Bucket(logBucket)
	}
	return nil
}

// journalBuckets returns the events bucket of id and the highest bucket;
// either is nil when absent.
func journalBuckets(tx *bolt.Tx, id string) (events, highest *bolt.Bucket) {
	root := tx.Bucket(journalBucket)
	if root == nil {
		return nil, nil
	}
	if e := root.Bucket(eventsBucket); e != nil {
		events = e.Bucket([]byte(id))
	}
	return events, root.Bucket(highestBucket)
}

// checkLeftovers reports the log records that compaction left behind (a
// damaged file) and that may hold events of id from..to: a record that does
// not decode may hold anyone's.
func (j *BoltJournal) checkLeftovers(id string, from, to uint64) error {
	through := j.stuck.Load()
	if through == 0 {
		return nil
	}
	return j.db.View(func(tx *bolt.Tx) error {
		log := logBucketOf(tx)
		if log == nil {
			return nil
		}
		c := log.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			pos, err := keySeq(k)
			if err != nil {
				return &DecodeError{File: j.db.Path(), What: "log entry", ID: id, Err: err}
			}
			if pos > through {
				return nil // appended since the compaction
			}
			apps, err := decodeGroup(v)
			if err != nil {
				return &DecodeError{File: j.db.Path(), What: "log entry", ID: id, Seq: pos, Err: err}
			}
			for _, a := range apps {
				last := a.first + uint64(len(a.recs)) - 1
				if a.id == id && a.first <= to && last >= from {
					return &DecodeError{File: j.db.Path(), What: "event", ID: id, Seq: a.first,
						Err: fmt.Errorf("events %d to %d are in log entry %d, which cannot be moved into the journal (a damaged file)", a.first, last, pos)}
				}
			}
		}
		return nil
	})
}

// Replay implements Journal. Events are read in chunks, each in a read
// transaction of its own, and fn runs outside them: a slow fn does not hold
// the database, and may call the journal. A record that does not decode
// stops the replay, after the events before it, with a *DecodeError.
func (j *BoltJournal) Replay(ctx context.Context, id string, from, to uint64, limit int, fn func(Event) error) error {
	if j.isClosed() {
		return j.closedErr(id, "replay")
	}
	if limit == 0 || from > to {
		return nil
	}
	if err := j.compactFirst(ctx, id, "replay"); err != nil {
		return err
	}
	if err := j.checkLeftovers(id, from, to); err != nil {
		return err
	}
	next, left := from, limit
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("persistence: journal %q%s: replay from seq %d: %w", id, j.where, next, context.Cause(ctx))
		}
		chunk := replayChunk
		if left > 0 && left < chunk {
			chunk = left
		}
		var out []Event
		var bad error
		err := j.db.View(func(tx *bolt.Tx) error {
			b, _ := journalBuckets(tx, id)
			if b == nil {
				return nil
			}
			c := b.Cursor()
			k, v := seekRun(c, next)
			for ; k != nil && len(out) < chunk; k, v = c.Next() {
				first, err := keySeq(k)
				if err != nil {
					bad = &DecodeError{File: j.db.Path(), What: "event", ID: id, Seq: next, Err: err}
					return nil
				}
				if first > to {
					return nil
				}
				recs, err := decodeRun(v)
				if err != nil {
					bad = &DecodeError{File: j.db.Path(), What: "event", ID: id, Seq: first, Err: fmt.Errorf("the run of events from seq %d: %w", first, err)}
					return nil
				}
				for i, rec := range recs {
					seq := first + uint64(i)
					if seq < next {
						continue
					}
					if seq > to || len(out) == chunk {
						return nil
					}
					e, err := decodeEvent(rec) // copies: rec is valid only in the transaction
					if err != nil {
						bad = &DecodeError{File: j.db.Path(), What: "event", ID: id, Seq: seq, Err: err}
						return nil
					}
					e.Seq = seq
					out = append(out, e)
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("persistence: journal %q%s: replay from seq %d: %w", id, j.where, next, err)
		}
		for _, e := range out {
			if err := fn(e); err != nil {
				return err
			}
		}
		if bad != nil {
			return bad
		}
		if len(out) < chunk {
			return nil
		}
		last := out[len(out)-1].Seq
		if last >= to {
			return nil
		}
		next = last + 1
		if left > 0 {
			if left -= len(out); left == 0 {
				return nil
			}
		}
	}
}

// seekRun positions c on the run that holds seq, or else the first run
// after it. A run that does not decode just before seq might hold it: it is
// chosen, so that Replay reports it.
func seekRun(c *bolt.Cursor, seq uint64) (k, v []byte) {
	k, v = c.Seek(seqKey(seq))
	if k != nil {
		if first, err := keySeq(k); err != nil || first == seq {
			return k, v
		}
	}
	var pk, pv []byte
	if k == nil {
		pk, pv = c.Last()
	} else {
		pk, pv = c.Prev()
	}
	if pk == nil {
		return c.Seek(seqKey(seq))
	}
	first, err := keySeq(pk)
	if err != nil {
		return c.Seek(seqKey(seq))
	}
	recs, err := decodeRun(pv)
	if err != nil || first+uint64(len(recs)) > seq {
		return pk, pv
	}
	return c.Seek(seqKey(seq))
}

// HighestSeq implements Journal.
func (j *BoltJournal) HighestSeq(ctx context.Context, id string) (uint64, error) {
	if j.isClosed() {
		return 0, j.closedErr(id, "highest seq")
	}
	var h uint64
	err := j.db.View(func(tx *bolt.Tx) error {
		_, highest := journalBuckets(tx, id)
		if highest == nil {
			return nil
		}
		var err error
		if h, err = readHighest(highest.Get([]byte(id))); err != nil {
			return errorf(ErrDecode, "%v", err)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("persistence: journal %q%s: highest seq: %w", id, j.where, err)
	}
	return h, nil
}

// DeleteTo implements Journal. The highest sequence number is kept.
// It runs on the writer, after the appends queued before it, and after
// compacting the log.
func (j *BoltJournal) DeleteTo(ctx context.Context, id string, to uint64) error {
	return j.submit(ctx, &appendReq{kind: deleteKind, id: id, first: to, done: make(chan error, 1)}, "delete")
}

func (j *BoltJournal) deleteTo(id string, to uint64) error {
	err := j.db.Update(func(tx *bolt.Tx) error {
		b, _ := journalBuckets(tx, id)
		if b == nil {
			return nil
		}
		return deleteRunsTo(tx.Bucket(journalBucket).Bucket(eventsBucket), b, id, to)
	})
	if err != nil {
		return fmt.Errorf("persistence: journal %q%s: delete to seq %d: %w", id, j.where, to, err)
	}
	return nil
}

// deleteRunsTo removes the events of b up to to, and b itself (from
// parent, under name) when nothing is left in it. A run that holds to is
// cut: its events after to become a run of their own.
func deleteRunsTo(parent, b *bolt.Bucket, name string, to uint64) error {
	var doomed [][]byte
	var tail []byte
	c := b.Cursor()
	k, v := c.First()
	for ; k != nil; k, v = c.Next() {
		first, err := keySeq(k)
		if err != nil {
			return err
		}
		if first > to {
			break
		}
		recs, err := decodeRun(v)
		if err != nil {
			return fmt.Errorf("the run of events from seq %d: %w", first, err)
		}
		doomed = append(doomed, append([]byte(nil), k...))
		if last := first + uint64(len(recs)) - 1; last > to {
			tail = encodeRun(recs[to+1-first:]) // a copy: recs go with the run
			break
		}
	}
	if k == nil {
		return parent.DeleteBucket([]byte(name))
	}
	for _, k := range doomed {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	if tail != nil {
		return b.Put(seqKey(to+1), tail)
	}
	return nil
}

// deleteTo removes the keys of b up to to, and b itself (from parent, under
// name) when nothing is left in it.
func deleteTo(parent, b *bolt.Bucket, name string, to uint64) error {
	var doomed [][]byte
	c := b.Cursor()
	k, _ := c.First()
	for ; k != nil; k, _ = c.Next() {
		seq, err := keySeq(k)
		if err != nil {
			return err
		}
		if seq > to {
			break
		}
		doomed = append(doomed, append([]byte(nil), k...))
	}
	if k == nil { // everything goes
		return parent.DeleteBucket([]byte(name))
	}
	for _, k := range doomed {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
