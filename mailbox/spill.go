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

	"github.com/sluicehq/sluice/internal/store"
)

// Spill store errors, for errors.Is.
var (
	ErrSpillFull = errors.New("mailbox: spill full")
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
	Bytes    int64
}

// Queues lists the store's spill queues.
func (s *SpillStore) Queues() ([]QueueInfo, error) {
	var out []QueueInfo
	err := s.db.View(func(tx *bolt.Tx) error {
		root := tx.Bucket(spillBucket)
		if root == nil {
			return nil
		}
		return root.ForEachBucket(func(name []byte) error {
			qi := QueueInfo{Name: string(name)}
			_ = root.Bucket(name).ForEach(func(_, v []byte) error {
				qi.Messages++
				qi.Bytes += int64(len(v))
				return nil
			})
			out = append(out, qi)
			return nil
		})
	})
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
	// MaxBytes caps the encoded bytes in the queue (0: no cap). When it is
	// reached, new messages are dropped and counted as ReasonSpillFull until
	// the actor catches up: memory stays bounded and nothing blocks.
	MaxBytes int64
	// CommitEvery is how many spilled messages share one transaction (group
	// commit, one fsync). Default 1024; a group also commits at 1 MiB.
	CommitEvery int
	// Keep delivers the messages found in the queue when the mailbox opens
	// (a standalone actor restarting after a crash: at-least-once). Without
	// it the queue starts empty.
	Keep bool
}

func (o *SpillOptions) validate() error {
	switch {
	case o.Store == nil:
		return errors.New("mailbox: spill: no store")
	case o.Queue == "":
		return errors.New("mailbox: spill: empty queue name")
	case o.Codec == nil:
		return fmt.Errorf("mailbox: spill queue %q: no codec", o.Queue)
	case o.MaxBytes < 0 || o.CommitEvery < 0:
		return fmt.Errorf("mailbox: spill queue %q: MaxBytes and CommitEvery must not be negative", o.Queue)
	}
	return nil
}

const groupBytes = 1 << 20

type spilled struct {
	seq  uint64
	msg  any
	data []byte
	n    int
	ctl  bool
	size int // entrySize: the bytes of its value in the bucket
}

// entrySize is the size of a spill entry's value: the flags byte, the record
// count and the encoded message. SpillBytes and MaxBytes count these bytes.
func entrySize(n, dataLen int) int {
	var buf [binary.MaxVarintLen64]byte
	return 1 + binary.PutUvarint(buf[:], uint64(n)) + dataLen
}

type inflight struct {
	seq  uint64
	size int
}

// spillQueue is a FIFO of encoded messages in a bbolt bucket, written in
// groups. Keys are big-endian sequence numbers; a value is a flags byte, the
// record count (uvarint) and the encoded message.
type spillQueue struct {
	opts     *SpillOptions
	name     []byte
	every    int
	nextSeq  uint64
	readSeq  uint64 // first key not yet read back
	unread   int    // committed messages not yet read back
	unreadN  int    // their records
	diskSize int64  // bytes of committed messages not yet deleted
	wbuf     []spilled
	wbufSize int
	wbufN    int
	reading  []inflight // read back, not yet processed
	ackSeq   uint64     // highest processed key
	deleted  uint64     // keys up to this were deleted
}

func openSpillQueue(o *SpillOptions) (*spillQueue, int, error) {
	q := &spillQueue{opts: o, name: []byte(o.Queue), every: o.CommitEvery, nextSeq: 1, readSeq: 1}
	if q.every == 0 {
		q.every = 1024
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
		first := true
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if len(k) != 8 || len(v) < 2 {
				return fmt.Errorf("key %x: not a spill entry", k)
			}
			seq := binary.BigEndian.Uint64(k)
			n, w := binary.Uvarint(v[1:])
			if w <= 0 {
				return fmt.Errorf("seq %d: corrupt entry header", seq)
			}
			if first {
				q.readSeq, first = seq, false
			}
			q.nextSeq = seq + 1
			q.unread++
			q.unreadN += int(n)
			q.diskSize += int64(len(v))
			recovered += int(n)
		}
		q.deleted = q.readSeq - 1
		q.ackSeq = q.deleted
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("mailbox: spill queue %q in %s: %w", o.Queue, o.Store.Path(), err)
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
	if !ctl && q.opts.MaxBytes > 0 && q.bytes()+int64(size) > q.opts.MaxBytes {
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

// commit writes the pending group and deletes processed messages, in one
// transaction. On failure the group is discarded (memory stays bounded): the
// caller counts its wbufN records as lost.
func (q *spillQueue) commit() error {
	if len(q.wbuf) == 0 && q.ackSeq <= q.deleted {
		return nil
	}
	err := q.opts.Store.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(spillBucket).Bucket(q.name)
		if b == nil {
			return errors.New("queue bucket vanished")
		}
		var key [8]byte
		for _, s := range q.wbuf {
			binary.BigEndian.PutUint64(key[:], s.seq)
			v := make([]byte, 1, 1+binary.MaxVarintLen64+len(s.data))
			if s.ctl {
				v[0] = 1
			}
			v = binary.AppendUvarint(v, uint64(s.n))
			v = append(v, s.data...)
			if err := b.Put(key[:], v); err != nil {
				return err
			}
		}
		if q.ackSeq > q.deleted {
			// Collect the keys first: Cursor.Delete followed by Next skips
			// the following key when the leaf was already modified in this
			// transaction (as the Puts above do), which would leave
			// processed messages on disk to be delivered again.
			var done [][]byte
			c := b.Cursor()
			binary.BigEndian.PutUint64(key[:], q.deleted+1)
			for k, _ := c.Seek(key[:]); k != nil && binary.BigEndian.Uint64(k) <= q.ackSeq; k, _ = c.Next() {
				done = append(done, bytes.Clone(k))
			}
			for _, k := range done {
				if err := b.Delete(k); err != nil {
					return err
				}
			}
		}
		return nil
	})
	wrote := q.wbuf
	q.wbuf, q.wbufSize, q.wbufN = nil, 0, 0
	if err != nil {
		return fmt.Errorf("mailbox: spill queue %q in %s: commit: %w", q.opts.Queue, q.opts.Store.Path(), err)
	}
	if len(wrote) > 0 && q.unread == 0 {
		q.readSeq = wrote[0].seq
	}
	for _, s := range wrote {
		q.unread++
		q.unreadN += s.n
		q.diskSize += int64(s.size)
	}
	q.deleted = q.ackSeq
	return nil
}

// read brings back up to maxRecords records, and at least one message when
// force is set (the memory holds no data, so even a message larger than
// maxRecords must come in): first committed messages from disk, then the
// pending group straight from memory. Entries that no longer decode are
// skipped and reported by their record counts in dropped; so are committed
// messages that cannot be read at all (a failed read transaction, a vanished
// bucket), which are given up rather than retried forever.
func (q *spillQueue) read(maxRecords int, force bool) (got []entry, dropped []int, err error) {
	total := 0
	if q.unread > 0 {
		var errs []error
		took, full := 0, false
		verr := q.opts.Store.db.View(func(tx *bolt.Tx) error {
			b := tx.Bucket(spillBucket).Bucket(q.name)
			if b == nil {
				return errors.New("queue bucket vanished")
			}
			c := b.Cursor()
			var key [8]byte
			binary.BigEndian.PutUint64(key[:], q.readSeq)
			for k, v := c.Seek(key[:]); k != nil && q.unread > 0; k, v = c.Next() {
				seq := binary.BigEndian.Uint64(k)
				n, w := binary.Uvarint(v[1:])
				if (total > 0 || !force) && total+int(n) > maxRecords {
					full = true
					break
				}
				took++
				q.readSeq = seq + 1
				q.unread--
				q.unreadN -= int(n)
				q.reading = append(q.reading, inflight{seq, len(v)})
				total += int(n)
				if w <= 0 {
					errs = append(errs, fmt.Errorf("seq %d: corrupt entry header", seq))
					dropped = append(dropped, 0)
					continue
				}
				msg, derr := q.opts.Codec.Decode(bytes.Clone(v[1+w:]))
				if derr != nil {
					errs = append(errs, fmt.Errorf("seq %d: decode: %w", seq, derr))
					dropped = append(dropped, int(n))
					continue
				}
				got = append(got, entry{msg: msg, n: int(n), ctl: v[0]&1 == 1, seq: seq})
			}
			return nil
		})
		if verr != nil {
			errs = append(errs, verr)
		}
		if took == 0 && !full && q.unread > 0 {
			errs = append(errs, fmt.Errorf("%d committed messages (%d records) cannot be read: given up", q.unread, q.unreadN))
			dropped = append(dropped, q.unreadN)
			q.unread, q.unreadN = 0, 0
		}
		if len(errs) > 0 {
			err = fmt.Errorf("mailbox: spill queue %q in %s: %w", q.opts.Queue, q.opts.Store.Path(), errors.Join(errs...))
		}
		if total > 0 || q.unread > 0 {
			return got, dropped, err
		}
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
	q.wbuf = append(q.wbuf[:0:0], q.wbuf[i:]...)
	return got, dropped, err
}

// ack records that the message with key seq was processed and says whether
// a commit is due: processed messages are deleted in groups.
func (q *spillQueue) ack(seq uint64) bool {
	if seq > q.ackSeq {
		q.ackSeq = seq
	}
	for len(q.reading) > 0 && q.reading[0].seq <= q.ackSeq {
		q.diskSize -= int64(q.reading[0].size)
		q.reading = q.reading[1:]
	}
	return q.ackSeq-q.deleted >= uint64(q.every) || (!q.active() && len(q.reading) == 0)
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
	body, err := msgpack.Marshal(msg)
	if err != nil {
		return nil, err
	}
	out := binary.AppendUvarint(nil, uint64(len(name)))
	out = append(out, name...)
	return append(out, body...), nil
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
	if err := checkMsgpack(data[w+int(l):]); err != nil {
		return nil, fmt.Errorf("type %q: %w", name, err)
	}
	ptr := t.Kind() == reflect.Pointer
	base := t
	if ptr {
		base = t.Elem()
	}
	v := reflect.New(base)
	if err := msgpack.Unmarshal(data[w+int(l):], v.Interface()); err != nil {
		return nil, fmt.Errorf("type %q: %w", name, err)
	}
	if ptr {
		return v.Interface(), nil
	}
	return v.Elem().Interface(), nil
}

// maxMsgpackDepth bounds the nesting of a decoded message.
const maxMsgpackDepth = 1000

// checkMsgpack walks one msgpack value without decoding it, and refuses
// lengths that the data cannot hold (every element of an array or map takes
// at least a byte, a string or binary its length) and nesting deeper than
// maxMsgpackDepth. msgpack v5.4 allocates a slice as long as an array header
// says before reading its elements (vmihailenco/msgpack#401), so a damaged
// entry of a few bytes could otherwise make it allocate gigabytes and kill
// the process.
func checkMsgpack(data []byte) error {
	i := 0
	// length reads a big-endian length of n bytes.
	length := func(n int) (uint64, error) {
		if len(data)-i < n {
			return 0, fmt.Errorf("msgpack: truncated header at byte %d", i)
		}
		var v uint64
		for _, b := range data[i : i+n] {
			v = v<<8 | uint64(b)
		}
		i += n
		return v, nil
	}
	stack := []uint64{1} // values still to read, per nesting level
	var pending uint64 = 1
	for len(stack) > 0 {
		if stack[len(stack)-1] == 0 {
			stack = stack[:len(stack)-1]
			continue
		}
		if i >= len(data) {
			return fmt.Errorf("msgpack: truncated: %d values missing", pending)
		}
		stack[len(stack)-1]--
		pending--
		c := data[i]
		i++
		var skip, elems uint64
		var err error
		switch {
		case c <= 0x7f || c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3: // fixint, nil, bool
		case c <= 0x8f:
			elems = 2 * uint64(c&0x0f)
		case c <= 0x9f:
			elems = uint64(c & 0x0f)
		case c <= 0xbf:
			skip = uint64(c & 0x1f)
		case c == 0xc4 || c == 0xd9: // bin8, str8
			skip, err = length(1)
		case c == 0xc5 || c == 0xda:
			skip, err = length(2)
		case c == 0xc6 || c == 0xdb:
			skip, err = length(4)
		case c == 0xc7, c == 0xc8, c == 0xc9: // ext: length, type, data
			skip, err = length(1 << (c - 0xc7))
			skip++
		case c >= 0xca && c <= 0xd3: // float32/64, uint8-64, int8-64
			skip = [...]uint64{4, 8, 1, 2, 4, 8, 1, 2, 4, 8}[c-0xca]
		case c >= 0xd4 && c <= 0xd8: // fixext: type, data
			skip = 1 + 1<<(c-0xd4)
		case c == 0xdc:
			elems, err = length(2)
		case c == 0xdd:
			elems, err = length(4)
		case c == 0xde:
			elems, err = length(2)
			elems *= 2
		case c == 0xdf:
			elems, err = length(4)
			elems *= 2
		default: // 0xc1
			return fmt.Errorf("msgpack: invalid code %#x at byte %d", c, i-1)
		}
		if err != nil {
			return err
		}
		left := uint64(len(data) - i)
		if skip > left {
			return fmt.Errorf("msgpack: length %d at byte %d exceeds the %d bytes left", skip, i, left)
		}
		i += int(skip)
		left -= skip
		if elems > 0 {
			if pending+elems > left {
				return fmt.Errorf("msgpack: %d elements at byte %d exceed the %d bytes left", elems, i, left)
			}
			if len(stack) > maxMsgpackDepth {
				return fmt.Errorf("msgpack: nested deeper than %d", maxMsgpackDepth)
			}
			pending += elems
			stack = append(stack, elems)
		}
	}
	return nil
}
