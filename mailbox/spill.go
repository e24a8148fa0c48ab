package mailbox

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
	"github.com/sluicehq/sluice/internal/store"
)

// Spill store errors, for errors.Is.
var (
	ErrSpillFull = errors.New("mailbox: spill full")
	// ErrSpillCorrupt: a group of spilled messages read back from the store
	// does not parse (damaged on disk, or by SpillOptions.WrapIO in a
	// test). The error names the queue, the store file and the sequence
	// number; the messages that cannot be read are counted as dropped
	// (ReasonUnspillable).
	ErrSpillCorrupt = errors.New("mailbox: spill: corrupt group")
	// ErrForeignFile, ErrNewerFile, ErrCorruptFile and ErrLockedFile describe
	// a store file that cannot be used. Nothing in it is changed.
	ErrForeignFile = store.ErrForeign
	ErrNewerFile   = store.ErrNewer
	ErrCorruptFile = store.ErrCorrupt
	ErrLockedFile  = store.ErrLocked
)

func isSpillFull(err error) bool { return errors.Is(err, ErrSpillFull) }

var spillBucket = []byte("spill")

// SpillStore holds the spill queues of many mailboxes in one bbolt file.
type SpillStore struct {
	db   *bolt.DB
	file *store.File // set when the store opened the file itself
}

// OpenSpillStore opens or creates the store file at path (mode 0600). A file
// written by another program, by a newer sluice, or damaged is refused with
// an error that names it, and is left as it was.
func OpenSpillStore(path string) (*SpillStore, error) {
	f, err := store.Open(path)
	if err != nil {
		return nil, fmt.Errorf("mailbox: spill: %w", err)
	}
	return &SpillStore{db: f.DB, file: f}, nil
}

// NewSpillStore uses an already open bbolt database (sluice's store file)
// for spill queues, in its "spill" bucket.
func NewSpillStore(db *bolt.DB) *SpillStore { return &SpillStore{db: db} }

// Close closes the file if OpenSpillStore opened it.
func (s *SpillStore) Close() error {
	if s.file != nil {
		return s.file.Close()
	}
	return nil
}

// Path is the store's file name.
func (s *SpillStore) Path() string { return s.db.Path() }

// QueueInfo describes one spill queue in a store.
type QueueInfo struct {
	Name     string
	Messages int
	Groups   int // messages are stored in groups, one bbolt value each
	Bytes    int64
	// Damaged counts the groups that do not parse; their messages are not
	// in Messages (Queues reports each in its error).
	Damaged int
}

// Queues lists the store's spill queues. Damaged groups are counted in
// QueueInfo.Damaged and reported in the error (wrapping ErrSpillCorrupt,
// naming the queue and the group), along with the list.
func (s *SpillStore) Queues() ([]QueueInfo, error) {
	var out []QueueInfo
	var errs []error
	err := s.db.View(func(tx *bolt.Tx) error {
		root := tx.Bucket(spillBucket)
		if root == nil {
			return nil
		}
		return root.ForEachBucket(func(name []byte) error {
			qi := QueueInfo{Name: string(name)}
			_ = root.Bucket(name).ForEach(func(k, v []byte) error {
				qi.Groups++
				qi.Bytes += int64(len(v))
				msgs, _, err := scanGroup(v)
				if err == nil && len(k) != 8 {
					err = fmt.Errorf("key %x is not a group's", k)
				}
				if err != nil {
					qi.Damaged++
					errs = append(errs, fmt.Errorf("queue %q, group %x: %w: %w", name, k, ErrSpillCorrupt, err))
					return nil
				}
				qi.Messages += msgs
				return nil
			})
			out = append(out, qi)
			return nil
		})
	})
	if err == nil && len(errs) > 0 {
		err = fmt.Errorf("mailbox: spill store %s: %w", s.Path(), errors.Join(errs...))
	}
	return out, err
}

// DeleteQueue removes a spill queue and its messages.
func (s *SpillStore) DeleteQueue(name string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		root := tx.Bucket(spillBucket)
		if root == nil || root.Bucket([]byte(name)) == nil {
			return nil
		}
		return root.DeleteBucket([]byte(name))
	})
}

// QueueNames lists the names of the store's spill queues, without reading
// their messages.
func (s *SpillStore) QueueNames() ([]string, error) {
	var out []string
	err := s.db.View(func(tx *bolt.Tx) error {
		root := tx.Bucket(spillBucket)
		if root == nil {
			return nil
		}
		return root.ForEachBucket(func(name []byte) error {
			out = append(out, string(name))
			return nil
		})
	})
	return out, err
}

// SpillRange names the messages of a spill queue from sequence number From
// to To, both included (Mailbox.QueuedAndSpillRange). The zero range names
// none.
type SpillRange struct {
	Queue    string
	From, To uint64
}

// Empty says whether the range names no message.
func (r SpillRange) Empty() bool { return r.Queue == "" || r.To < r.From }

// ReadRange returns the encoded data messages (not the control messages)
// of queue whose sequence numbers lie in r, in order, as the codec encoded
// them. A message of the range that is missing (its group deleted) is an
// error wrapping ErrSpillCorrupt that names the queue and the sequence
// number; so is a group that does not parse. It only reads the store.
func (s *SpillStore) ReadRange(r SpillRange) ([][]byte, error) {
	var out [][]byte
	err := s.EachInRange(r, func(data []byte, ctl bool) error {
		if !ctl {
			out = append(out, bytes.Clone(data))
		}
		return nil
	})
	return out, err
}

// EachInRange calls fn with every message of queue whose sequence number
// lies in r, data and control messages alike, in order, as the codec
// encoded them (ctl says which): one at a time, without holding the range
// in memory. data is valid during the call only. It fails as ReadRange
// does, or with fn's error, which it returns as it is.
func (s *SpillStore) EachInRange(r SpillRange, fn func(data []byte, ctl bool) error) error {
	if r.Empty() {
		return nil
	}
	var fnErr error
	err := s.db.View(func(tx *bolt.Tx) error {
		root := tx.Bucket(spillBucket)
		var bk *bolt.Bucket
		if root != nil {
			bk = root.Bucket([]byte(r.Queue))
		}
		if bk == nil {
			return fmt.Errorf("%w: no queue", ErrSpillCorrupt)
		}
		var k [8]byte
		binary.BigEndian.PutUint64(k[:], r.From)
		c := bk.Cursor()
		kb, v := c.Seek(k[:])
		if kb == nil || binary.BigEndian.Uint64(kb) > r.From {
			kb, v = c.Prev() // the group that holds From starts before it
		}
		next := r.From // the sequence number expected next
		for ; kb != nil && next <= r.To; kb, v = c.Next() {
			if len(kb) != 8 {
				return fmt.Errorf("%w: key %x is not a group's", ErrSpillCorrupt, kb)
			}
			seq := binary.BigEndian.Uint64(kb)
			for len(v) > 0 && seq <= r.To {
				ctl, _, data, rest, err := nextEntry(v)
				if err != nil {
					return fmt.Errorf("%w: group %d: %w", ErrSpillCorrupt, binary.BigEndian.Uint64(kb), err)
				}
				if seq >= r.From {
					if seq != next {
						return fmt.Errorf("%w: message %d missing", ErrSpillCorrupt, next)
					}
					next++
					if err := fn(data, ctl); err != nil {
						fnErr = err
						return err
					}
				}
				seq++
				v = rest
			}
		}
		if next <= r.To {
			return fmt.Errorf("%w: message %d missing", ErrSpillCorrupt, next)
		}
		return nil
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return fmt.Errorf("mailbox: spill queue %q in %s: read messages %d to %d: %w", r.Queue, s.Path(), r.From, r.To, err)
	}
	return nil
}

// Codec turns messages into bytes for the spill and back.
type Codec interface {
	Encode(msg any) ([]byte, error)
	Decode(data []byte) (any, error)
}

// SpillOptions configures OverflowSpill.
type SpillOptions struct {
	// Store holds the queue. Required.
	Store *SpillStore
	// Queue names this mailbox's queue in the store; unique per mailbox.
	Queue string
	// Codec encodes spilled messages. Required.
	Codec Codec
	// MaxBytes caps the encoded bytes in the queue: 0 means
	// DefaultSpillMaxBytes (1 GiB), a negative value no cap (the disk is
	// the limit). When it is reached, new messages are dropped and counted
	// as ReasonSpillFull until the actor catches up: the disk stays bounded
	// and nothing blocks.
	MaxBytes int64
	// CommitEvery is how many spilled messages share one transaction (group
	// commit, one fsync). Default 4096; a group also commits at 1 MiB.
	CommitEvery int
	// Keep delivers the messages found in the queue when the mailbox opens
	// (a standalone actor restarting after a crash: at-least-once). Without
	// it the queue starts empty.
	Keep bool
	// WrapIO, when set, wraps the queue's access to its store (see SpillIO)
	// once, when the mailbox opens: for tests that make writes fail or
	// reads come back damaged (mailboxtest.FaultySpill). Nil: the store as
	// it is.
	WrapIO func(SpillIO) SpillIO
}

// SpillIO is a spill queue's access to its store once the queue is open:
// writing groups of messages and deleting processed ones, and reading
// groups back. The store's bbolt file implements it; SpillOptions.WrapIO
// puts a wrapper around it.
//
// What the mailbox does with a failure: a failed Commit loses the group's
// records, which are counted as dropped (ReasonUnspillable) and reported
// through Config.OnError, while its control messages stay in memory to be
// delivered in order (they are never dropped); a failed or damaged Load
// gives up the records it cannot read, counted and reported the same way,
// and the actor goes on with the rest. Memory stays bounded either way.
type SpillIO interface {
	// Commit stores group (when not nil) under key and deletes the groups
	// under the keys in del, in one transaction: all of it or nothing.
	Commit(queue string, key uint64, group []byte, del []uint64) error
	// Load returns the first group whose key is at or after from, and its
	// key. The bytes are the caller's.
	Load(queue string, from uint64) (key uint64, group []byte, err error)
}

// boltIO is SpillIO on the store's bbolt file.
type boltIO struct {
	st    *SpillStore
	loads int // groups read, for releasing mapped pages
}

func (b *boltIO) Commit(queue string, key uint64, group []byte, del []uint64) error {
	return b.st.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(spillBucket).Bucket([]byte(queue))
		if bk == nil {
			return errors.New("queue bucket vanished")
		}
		var k [8]byte
		if group != nil {
			binary.BigEndian.PutUint64(k[:], key)
			if err := bk.Put(k[:], group); err != nil {
				return err
			}
		}
		for _, d := range del {
			binary.BigEndian.PutUint64(k[:], d)
			if err := bk.Delete(k[:]); err != nil {
				return err
			}
		}
		return nil
	})
}

func (b *boltIO) Load(queue string, from uint64) (key uint64, group []byte, err error) {
	err = b.st.db.View(func(tx *bolt.Tx) error {
		bk := tx.Bucket(spillBucket).Bucket([]byte(queue))
		if bk == nil {
			return errors.New("queue bucket vanished")
		}
		var k [8]byte
		binary.BigEndian.PutUint64(k[:], from)
		kb, v := bk.Cursor().Seek(k[:])
		if kb == nil {
			return errors.New("committed group missing")
		}
		key, group = binary.BigEndian.Uint64(kb), bytes.Clone(v)
		// The group was copied out: its pages of the memory map need not
		// stay resident. Without this, reading a spill of gigabytes back
		// would show as gigabytes of RSS (file pages, but counted).
		if b.loads++; b.loads%dropMappedEvery == 0 {
			_ = store.DropMapped(tx) // advisory: a failure costs only RSS
		}
		return nil
	})
	return key, group, err
}

func (o *SpillOptions) validate() error {
	switch {
	case o.Store == nil:
		return errors.New("mailbox: spill: no store")
	case o.Queue == "":
		return errors.New("mailbox: spill: empty queue name")
	case o.Codec == nil:
		return fmt.Errorf("mailbox: spill queue %q: no codec", o.Queue)
	case o.CommitEvery < 0:
		return fmt.Errorf("mailbox: spill queue %q: CommitEvery must not be negative", o.Queue)
	}
	return nil
}

// DefaultSpillMaxBytes is the cap of a spill queue whose
// SpillOptions.MaxBytes is 0: 1 GiB of encoded messages.
const DefaultSpillMaxBytes = 1 << 30

// maxBytes is the queue's cap in bytes, 0 for none.
func (o *SpillOptions) maxBytes() int64 {
	switch {
	case o.MaxBytes == 0:
		return DefaultSpillMaxBytes
	case o.MaxBytes < 0:
		return 0
	}
	return o.MaxBytes
}

const groupBytes = 1 << 20

// dropMappedEvery is how many group reads pass between releases of the
// store's mapped pages.
const dropMappedEvery = 4

// deleteEvery: processed groups are deleted on their own once this many
// have gathered.
const deleteEvery = 4

type spilled struct {
	seq  uint64
	msg  any
	data []byte
	n    int
	ctl  bool
	size int // entrySize: the bytes of its entry in the group
}

// entrySize is the size of a spill entry within its group: the flags byte,
// the record count, the data length and the encoded message. SpillBytes and
// MaxBytes count these bytes.
func entrySize(n, dataLen int) int {
	var buf [binary.MaxVarintLen64]byte
	return 1 + binary.PutUvarint(buf[:], uint64(n)) + binary.PutUvarint(buf[:], uint64(dataLen)) + dataLen
}

func appendEntry(dst []byte, s spilled) []byte {
	flags := byte(0)
	if s.ctl {
		flags = 1
	}
	dst = append(dst, flags)
	dst = binary.AppendUvarint(dst, uint64(s.n))
	dst = binary.AppendUvarint(dst, uint64(len(s.data)))
	return append(dst, s.data...)
}

// maxEntryRecords bounds the record count of one spilled message (a batch):
// a damaged count must not make Posted or SpillPending negative or wrap
// the sums of a queue's records.
const maxEntryRecords = 1<<31 - 1

// nextEntry splits the first entry off a group's bytes.
func nextEntry(b []byte) (ctl bool, n int, data, rest []byte, err error) {
	if len(b) < 3 {
		return false, 0, nil, nil, errors.New("truncated entry")
	}
	rn, w1 := binary.Uvarint(b[1:])
	if w1 <= 0 {
		return false, 0, nil, nil, errors.New("corrupt record count")
	}
	if rn > maxEntryRecords {
		return false, 0, nil, nil, fmt.Errorf("record count %d: more than a message can hold (%d)", rn, maxEntryRecords)
	}
	l, w2 := binary.Uvarint(b[1+w1:])
	if w2 <= 0 || uint64(len(b)-1-w1-w2) < l {
		return false, 0, nil, nil, errors.New("corrupt entry length")
	}
	start := 1 + w1 + w2
	return b[0]&1 == 1, int(rn), b[start : start+int(l)], b[start+int(l):], nil
}

// scanGroup counts a group's messages and records.
func scanGroup(v []byte) (msgs, records int, err error) {
	for len(v) > 0 {
		_, n, _, rest, err := nextEntry(v)
		if err != nil {
			return msgs, records, err
		}
		msgs++
		records += n
		v = rest
	}
	return msgs, records, nil
}

// group is a group of messages on disk that has been read back, at least in
// part, and whose messages are not all processed yet.
type group struct {
	key  uint64 // the sequence number of its first message
	last uint64 // of its last message
	size int
}

// spillQueue is a FIFO of encoded messages in a bbolt bucket. Messages are
// written in groups, one bbolt value per group (key: the big-endian sequence
// number of its first message), so that a group costs one Put, one read and
// one Delete however many messages it holds. A group is deleted once all its
// messages have been processed.
type spillQueue struct {
	opts     *SpillOptions
	io       SpillIO
	name     []byte
	every    int
	nextSeq  uint64
	readKey  uint64 // groups with keys from here on are not read yet
	unread   int    // committed messages not yet handed out
	unreadN  int    // their records
	diskSize int64  // bytes of committed groups not yet deleted
	wbuf     []spilled
	wbufSize int
	wbufN    int
	cur      []byte   // the rest of the group being handed out (a copy)
	curSeq   uint64   // the sequence number of cur's first entry
	reading  []group  // read back, not all processed
	ackSeq   uint64   // highest processed sequence number
	doomed   []uint64 // keys of processed groups, deleted at the next commit
	floor    uint64   // groups holding messages from here on are kept (0: none): see Mailbox.PinSpill
}

func openSpillQueue(o *SpillOptions) (*spillQueue, int, error) {
	q := &spillQueue{opts: o, name: []byte(o.Queue), every: o.CommitEvery, nextSeq: 1}
	if q.every == 0 {
		q.every = 4096
	}
	recovered := 0
	err := o.Store.db.Update(func(tx *bolt.Tx) error {
		root, err := tx.CreateBucketIfNotExists(spillBucket)
		if err != nil {
			return err
		}
		if !o.Keep && root.Bucket(q.name) != nil {
			if err := root.DeleteBucket(q.name); err != nil {
				return err
			}
		}
		b, err := root.CreateBucketIfNotExists(q.name)
		if err != nil {
			return err
		}
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if len(k) != 8 {
				return fmt.Errorf("key %x: not a spill group", k)
			}
			key := binary.BigEndian.Uint64(k)
			msgs, records, err := scanGroup(v)
			if err != nil {
				return fmt.Errorf("group %d: %w", key, err)
			}
			q.nextSeq = key + uint64(msgs)
			q.unread += msgs
			q.unreadN += records
			q.diskSize += int64(len(v))
			recovered += records
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("mailbox: spill queue %q in %s: %w", o.Queue, o.Store.Path(), err)
	}
	q.io = &boltIO{st: o.Store}
	if o.WrapIO != nil {
		q.io = o.WrapIO(q.io)
	}
	return q, recovered, nil
}

func (q *spillQueue) active() bool         { return q.unread > 0 || len(q.wbuf) > 0 }
func (q *spillQueue) pendingMessages() int { return q.unread + len(q.wbuf) }
func (q *spillQueue) bytes() int64         { return q.diskSize + int64(q.wbufSize) }

// write adds a message to the pending group. MaxBytes does not apply to
// control messages: they are never dropped, and must stay in order with the
// data spilled before them.
func (q *spillQueue) write(msg any, n int, ctl bool) error {
	data, err := q.opts.Codec.Encode(msg)
	if err != nil {
		return fmt.Errorf("mailbox: spill queue %q: encode %T: %w", q.opts.Queue, msg, err)
	}
	size := entrySize(n, len(data))
	if limit := q.opts.maxBytes(); !ctl && limit > 0 && q.bytes()+int64(size) > limit {
		return ErrSpillFull
	}
	q.wbuf = append(q.wbuf, spilled{seq: q.nextSeq, msg: msg, data: data, n: n, ctl: ctl, size: size})
	q.nextSeq++
	q.wbufSize += size
	q.wbufN += n
	return nil
}

// groupFull says whether the pending group is due to be committed.
func (q *spillQueue) groupFull() bool {
	return len(q.wbuf) >= q.every || q.wbufSize >= groupBytes
}

// commit writes the pending group and deletes processed groups, in one
// transaction. On failure the group's records are discarded (memory stays
// bounded): the caller counts its wbufN records as lost. Its control
// messages are kept, renumbered in the place of the group, to go out with
// the next commit or straight from memory: they are never dropped.
func (q *spillQueue) commit() error {
	if len(q.wbuf) == 0 && len(q.doomed) == 0 {
		return nil
	}
	var value []byte
	var key uint64
	if len(q.wbuf) > 0 {
		value = make([]byte, 0, q.wbufSize)
		for _, s := range q.wbuf {
			value = appendEntry(value, s)
		}
		key = q.wbuf[0].seq
	}
	err := q.io.Commit(q.opts.Queue, key, value, q.doomed)
	msgs, records := len(q.wbuf), q.wbufN
	if err != nil {
		kept := q.wbuf[:0]
		size := 0
		for _, s := range q.wbuf {
			if s.ctl {
				s.seq = key + uint64(len(kept))
				kept = append(kept, s)
				size += s.size
			}
		}
		clear(q.wbuf[len(kept):])
		q.wbuf, q.wbufSize, q.wbufN = kept, size, 0
		if len(q.wbuf) > 0 {
			q.nextSeq = key + uint64(len(q.wbuf))
		}
		return fmt.Errorf("mailbox: spill queue %q in %s: commit %d messages (%d records): %w",
			q.opts.Queue, q.opts.Store.Path(), msgs, records, err)
	}
	clear(q.wbuf) // keep the array for the next group, not the messages
	q.wbuf, q.wbufSize, q.wbufN = q.wbuf[:0], 0, 0
	q.doomed = nil
	q.unread += msgs
	q.unreadN += records
	q.diskSize += int64(len(value))
	return nil
}

// load reads the next committed group into cur.
func (q *spillQueue) load() error {
	first, v, err := q.io.Load(q.opts.Queue, q.readKey)
	if err != nil {
		return err
	}
	msgs, _, err := scanGroup(v)
	if err != nil {
		msgs = max(msgs, 1)
	}
	q.cur, q.curSeq = v, first
	q.readKey = first + 1
	q.reading = append(q.reading, group{key: first, last: first + uint64(msgs) - 1, size: len(v)})
	return nil
}

// read brings back up to maxRecords records, and at least one message when
// force is set (the memory holds no data, so even a message larger than
// maxRecords must come in): first committed messages from disk, then the
// pending group straight from memory. Entries that no longer decode are
// skipped and reported by their record counts in dropped; so are committed
// messages that cannot be read at all (a failed read, a vanished bucket,
// a damaged group), which are given up rather than retried forever.
func (q *spillQueue) read(maxRecords int, force bool) (got []entry, dropped []int, err error) {
	total := 0
	var errs []error
	for q.unread > 0 {
		if len(q.cur) == 0 {
			if lerr := q.load(); lerr != nil {
				errs = append(errs, lerr)
				break
			}
		}
		ctl, n, data, rest, perr := nextEntry(q.cur)
		if perr != nil {
			// The rest of this group cannot be parsed: give it up.
			errs = append(errs, fmt.Errorf("seq %d: %w: %w", q.curSeq, ErrSpillCorrupt, perr))
			break
		}
		if (total > 0 || !force) && total+n > maxRecords {
			if len(errs) > 0 {
				err = fmt.Errorf("mailbox: spill queue %q in %s: %w", q.opts.Queue, q.opts.Store.Path(), errors.Join(errs...))
			}
			return got, dropped, err
		}
		seq := q.curSeq
		q.cur, q.curSeq = rest, q.curSeq+1
		q.unread--
		q.unreadN -= n
		total += n
		msg, derr := q.opts.Codec.Decode(bytes.Clone(data))
		if derr != nil {
			errs = append(errs, fmt.Errorf("seq %d: decode: %w", seq, derr))
			dropped = append(dropped, n)
			continue
		}
		got = append(got, entry{msg: msg, n: n, ctl: ctl, seq: seq})
	}
	if len(errs) > 0 && q.unread > 0 && total == 0 {
		errs = append(errs, fmt.Errorf("%d committed messages (%d records) cannot be read: given up", q.unread, q.unreadN))
		dropped = append(dropped, q.unreadN)
		q.unread, q.unreadN, q.cur = 0, 0, nil
	}
	if len(errs) > 0 {
		err = fmt.Errorf("mailbox: spill queue %q in %s: %w", q.opts.Queue, q.opts.Store.Path(), errors.Join(errs...))
	}
	if total > 0 || q.unread > 0 {
		return got, dropped, err
	}
	// Nothing committed is left: take from the group not yet written.
	i := 0
	for ; i < len(q.wbuf); i++ {
		s := q.wbuf[i]
		if (total > 0 || !force) && total+s.n > maxRecords {
			break
		}
		total += s.n
		got = append(got, entry{msg: s.msg, n: s.n, ctl: s.ctl})
		q.wbufSize -= s.size
		q.wbufN -= s.n
	}
	n := copy(q.wbuf, q.wbuf[i:])
	clear(q.wbuf[n:])
	q.wbuf = q.wbuf[:n]
	return got, dropped, err
}

// pending returns the encoded messages not handed out yet, in order: the
// rest of cur, the committed groups not read yet, and wbuf; and the
// sequence number of the first committed one (0: none).
func (q *spillQueue) pending() (out [][]byte, first uint64, _ error) {
	left := q.unread
	if len(q.cur) > 0 && left > 0 {
		first = q.curSeq
	}
	for b := q.cur; len(b) > 0 && left > 0; left-- {
		_, _, data, rest, err := nextEntry(b)
		if err != nil {
			return out, first, fmt.Errorf("mailbox: spill queue %q: seq %d: %w: %w", q.opts.Queue, q.curSeq, ErrSpillCorrupt, err)
		}
		out = append(out, data)
		b = rest
	}
	for from := q.readKey; left > 0; {
		key, v, err := q.io.Load(q.opts.Queue, from)
		if err != nil {
			return out, first, fmt.Errorf("mailbox: spill queue %q in %s: %w", q.opts.Queue, q.opts.Store.Path(), err)
		}
		from = key + 1
		if first == 0 {
			first = key
		}
		for len(v) > 0 && left > 0 {
			_, _, data, rest, err := nextEntry(v)
			if err != nil {
				return out, first, fmt.Errorf("mailbox: spill queue %q: group %d: %w: %w", q.opts.Queue, key, ErrSpillCorrupt, err)
			}
			out = append(out, data)
			v = rest
			left--
		}
	}
	for _, w := range q.wbuf {
		out = append(out, w.data)
	}
	return out, first, nil
}

// ack records that the message with sequence number seq was processed and
// says whether a commit is due: fully processed groups are deleted with the
// next group of writes, or on their own once a few have gathered or the
// queue has emptied. A crash before the delete only redelivers
// (at-least-once).
func (q *spillQueue) ack(seq uint64) bool {
	if seq > q.ackSeq {
		q.ackSeq = seq
	}
	for len(q.reading) > 0 && q.reading[0].last <= q.ackSeq && !(len(q.reading) == 1 && len(q.cur) > 0) &&
		(q.floor == 0 || q.reading[0].last < q.floor) {
		q.doomed = append(q.doomed, q.reading[0].key)
		q.diskSize -= int64(q.reading[0].size)
		q.reading = q.reading[1:]
	}
	return len(q.doomed) >= deleteEvery || (len(q.doomed) > 0 && !q.active() && len(q.reading) == 0)
}

// TypeCodec encodes registered message types with msgpack, tagged with a
// name, and decodes only registered names: never into an arbitrary type.
type TypeCodec struct {
	mu     sync.RWMutex
	byName map[string]reflect.Type
	byType map[reflect.Type]string
}

// NewTypeCodec returns an empty codec.
func NewTypeCodec() *TypeCodec {
	return &TypeCodec{byName: map[string]reflect.Type{}, byType: map[reflect.Type]string{}}
}

// Register adds the type of example under name. Registering a pointer type
// encodes and decodes pointers; a value type, values.
func (c *TypeCodec) Register(name string, example any) *TypeCodec {
	t := reflect.TypeOf(example)
	c.mu.Lock()
	c.byName[name], c.byType[t] = t, name
	c.mu.Unlock()
	return c
}

// Encode implements Codec.
func (c *TypeCodec) Encode(msg any) ([]byte, error) {
	c.mu.RLock()
	name, ok := c.byType[reflect.TypeOf(msg)]
	c.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("type %T is not registered with the codec", msg)
	}
	var buf bytes.Buffer
	buf.Grow(len(name) + 32)
	var l [binary.MaxVarintLen64]byte
	buf.Write(l[:binary.PutUvarint(l[:], uint64(len(name)))])
	buf.WriteString(name)
	enc := msgpack.GetEncoder()
	enc.Reset(&buf)
	err := enc.Encode(msg)
	msgpack.PutEncoder(enc)
	if err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Decode implements Codec.
func (c *TypeCodec) Decode(data []byte) (any, error) {
	l, w := binary.Uvarint(data)
	if w <= 0 || uint64(len(data)-w) < l {
		return nil, errors.New("corrupt type tag")
	}
	name := string(data[w : w+int(l)])
	c.mu.RLock()
	t, ok := c.byName[name]
	c.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("type %q is not registered with the codec", name)
	}
	ptr := t.Kind() == reflect.Pointer
	base := t
	if ptr {
		base = t.Elem()
	}
	v := reflect.New(base)
	if err := msgpacksafe.Decode(data[w+int(l):], v.Interface(), msgpacksafe.Limits{Source: "spill"}); err != nil {
		return nil, fmt.Errorf("type %q: %w", name, err)
	}
	if ptr {
		return v.Interface(), nil
	}
	return v.Elem().Interface(), nil
}
