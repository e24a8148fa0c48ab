package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
)

// Disk is the disk backend: a pebble database per operator instance under
//
//	Dir/<operator>/live/<instance>-<random>   the working database
//	Dir/<operator>/chk/<checkpoint>-<instance> a checkpoint: hard links to the
//	                                          database's sstables, copies of its
//	                                          small files, and SLUICE-STATE
//
// with a write-back cache of hot keys in front of it (half of
// Spec.Budget, each entry counted at the Go heap it takes: sizer.go). A key is stored as its key group (one byte) and its encoded
// bytes, so a key group is a range of the database. The database has no
// write-ahead log: what survives a crash is the last completed checkpoint,
// which a restore copies into a fresh working database.
type Disk[K comparable, V any] struct {
	spec        Spec
	opDir, live string
	inst, parts int
	hash        func(K) uint64
	kc          codec[K]
	vc          codec[V]
	db          *pebble.DB
	it          *pebble.Iterator // the reader of misses (nil: none open)
	misses      int              // since the last write to the database
	bcache      *pebble.Cache
	m           map[K]entry[V]
	bytes       int64 // the cache's entries' sizes, summed (entry.size)
	wb          int64 // the write-back cache's budget
	slot        int64 // an entry's slot in m (slotBytes)
	flat        bool  // K and V point to nothing: every entry costs slot
	ksz         top[K]
	vsz         top[V]
	kbuf, vbuf  []byte
	onErr       func(error)
	last        *manifest // the previous snapshot's (checksums reused)
	snapped     bool      // a snapshot was taken since the table opened
	ttl         int64     // StateTTL in nanoseconds (0: none); see SetTTL
	now         func() int64
	expired     func(K, V)
	inc         diskInc[K, V] // the changes since the last checkpoint, its chain (disk_delta.go)
	Stats       DiskStats
}

// DiskStats counts what a disk table did.
type DiskStats struct {
	Evicted   int64 // entries dropped from the cache
	Loaded    int64 // entries read from the database into the cache
	LastBytes int64 // the last checkpoint's files
	LastNew   int64 // of which new since the checkpoint before (written)
	LastDelta bool  // the last checkpoint was a delta (of the keys changed), not a base
	Expired   int64 // entries forgotten by their TTL
}

type entry[V any] struct {
	v     V
	at    int64 // when v was put (with a TTL), on the table's clock
	size  int32 // the bytes counted for it in Disk.bytes (Disk.sizeOf when it was put or loaded)
	dirty bool
	gone  bool
}

// sizeOf is the bytes a cached entry of k and *v (nil: a deletion)
// takes: its slot in the map and what k and *v point to (sizer.go).
func (d *Disk[K, V]) sizeOf(k *K, v *V) int32 {
	if d.flat {
		return int32(d.slot)
	}
	n := d.slot + d.ksz.heap(k)
	if v != nil {
		n += d.vsz.heap(v)
	}
	return int32(min(n, math.MaxInt32))
}

// set caches e as k's entry in place of old (the zero entry: none), and
// counts it.
func (d *Disk[K, V]) set(k K, e entry[V], old entry[V]) {
	if e.gone {
		e.size = d.sizeOf(&k, nil)
	} else {
		e.size = d.sizeOf(&k, &e.v)
	}
	d.m[k] = e
	d.bytes += int64(e.size) - int64(old.size)
}

// SetTTL makes the table forget a key's value ttl after it was last put
// (Flink's state TTL on its write time): Get and All no longer return it,
// and Expire removes it from the database. now is the job's clock (Unix
// nanoseconds); expired, if not nil, is given every entry the table
// forgets by its TTL, once (an aggregation emitting at the end emits it).
// Each value is stored with the time it was put, so the times are
// checkpointed with it: a table with a TTL restores only a checkpoint
// taken with one. Call it before Restore and before the first Put.
func (d *Disk[K, V]) SetTTL(ttl time.Duration, now func() int64, expired func(K, V)) {
	d.ttl, d.now, d.expired = int64(ttl), now, expired
}

// dead says whether a value put at at has outlived the TTL by now.
func (d *Disk[K, V]) dead(at, now int64) bool { return d.ttl > 0 && now-at >= d.ttl }

// forget drops k's expired value v (old: its cache entry, the zero entry
// if it was not cached): k is deleted (from the database at the next
// write-back) and the hook told.
func (d *Disk[K, V]) forget(k K, v V, old entry[V]) {
	d.set(k, entry[V]{gone: true, dirty: true}, old)
	d.inc.changed(k, entry[V]{gone: true}, d.flat)
	d.Stats.Expired++
	if d.expired != nil {
		d.expired(k, v)
	}
}

// OpenDisk opens instance inst's table of operator op under spec.Dir.
// hash is KeyBy's hash of a key; onErr is called with an I/O or decoding
// failure (the operator fails: it should not return).
func OpenDisk[K comparable, V any](spec Spec, op string, inst, parts int, hash func(K) uint64, onErr func(error)) (*Disk[K, V], error) {
	if spec.Budget <= 0 {
		spec.Budget = DefaultBudget
	}
	if spec.Retain <= 0 {
		spec.Retain = DefaultRetain
	}
	d := &Disk[K, V]{spec: spec, opDir: filepath.Join(spec.Dir, url.PathEscape(op)), inst: inst, parts: parts, hash: hash,
		kc: newCodec[K]("key of " + op), vc: newCodec[V]("state of " + op), m: map[K]entry[V]{}, onErr: onErr,
		slot: slotBytes[K, V]()}
	ss := sizers{}
	d.ksz, d.vsz = newTop[K](ss), newTop[V](ss)
	d.flat = d.ksz.kind == reflect.Invalid && d.vsz.kind == reflect.Invalid
	for _, sub := range []string{"live", "chk"} {
		if err := os.MkdirAll(filepath.Join(d.opDir, sub), 0o755); err != nil {
			return nil, &Error{Path: d.opDir, Err: err}
		}
	}
	removeUnlocked(filepath.Join(d.opDir, "live"))
	live, err := os.MkdirTemp(filepath.Join(d.opDir, "live"), strconv.Itoa(inst)+"-")
	if err != nil {
		return nil, &Error{Path: d.opDir, Err: err}
	}
	d.live = live
	d.wb = spec.Budget / 2
	if err := d.open(); err != nil {
		return nil, err
	}
	return d, nil
}

// removeUnlocked removes the working databases no process holds (left by
// a process that died): pebble holds an flock on LOCK while it is open.
func removeUnlocked(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if _, err := os.Stat(filepath.Join(p, "LOCK")); err != nil {
			// No LOCK: not opened yet (another instance of this process
			// about to open it). Left alone.
			continue
		}
		// pebble's lock: held in this process (its table of locked files)
		// or in another (an fcntl lock).
		l, err := vfs.Default.Lock(filepath.Join(p, "LOCK"))
		if err != nil {
			continue
		}
		l.Close()
		_ = os.RemoveAll(p)
	}
}

func (d *Disk[K, V]) open() error {
	db, err := d.openAt(d.live)
	if err != nil {
		return err
	}
	d.db = db
	return nil
}

// openAt opens the working database in dir.
func (d *Disk[K, V]) openAt(dir string) (*pebble.DB, error) {
	mt := memTableSize(d.spec.Budget)
	if d.bcache == nil {
		// pebble counts its memtables (up to three: the one written, one
		// being flushed, one kept for reuse) against the block cache: they
		// are added to it, or the blocks would get nothing.
		d.bcache = pebble.NewCache(blockCacheSize(d.spec.Budget) + 3*int64(mt))
	}
	// L0 keeps up to 8 flushed files before compacting them into the
	// levels below: each checkpoint's flush is one L0 file, so most
	// checkpoints add only it, and one in about eight pays for the
	// compaction (the bound on what a restore and a read go through).
	// Every level has bloom filters (10 bits a key, about 1 % false
	// positives): the Get of a key never written, most misses of a keyed
	// aggregation over many keys, reads no data block.
	//
	// Every level below L0 writes files of at most 8 MiB (pebble doubles
	// the target from level to level, to 128 MiB at the last): a file's
	// bloom filter is one block of 10 bits a key, which for a 128 MiB file
	// of small entries is about 6 MiB, read whole into the block cache for
	// a miss, where it evicts everything else. An 8 MiB file's filter is
	// a few hundred KiB.
	tuneMalloc()
	o := &pebble.Options{Cache: d.bcache, MemTableSize: mt, DisableWAL: true, Logger: quiet{},
		L0CompactionThreshold: 8, L0StopWritesThreshold: 32}
	for i := range o.Levels {
		o.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	for i := 1; i < len(o.TargetFileSizes); i++ {
		o.TargetFileSizes[i] = maxFileSize
	}
	db, err := pebble.Open(dir, o)
	if err != nil {
		return nil, &Error{Path: dir, Err: err}
	}
	register(db)
	return db, nil
}

// The budget's shares: half for the write-back cache of decoded entries,
// half for pebble's block cache (which must hold the bloom filters and
// indexes of the sstables, about 1.5 bytes a key, for a miss to stay
// cheap), and pebble's memtables beside them (up to three of a sixteenth
// each). The memtable is kept small beside the cache: an eviction writes
// a quarter of the cache in one batch, and pebble takes a batch over half
// a memtable as a sorted run of its own (flushed to one file) instead of
// inserting its entries one by one into the memtable's skiplist, the
// dearer way.
// maxFileSize is the largest sstable a disk table's compactions write.
const maxFileSize = 8 << 20

func blockCacheSize(budget int64) int64 { return max(budget/2, 8<<20) }

func memTableSize(budget int64) uint64 { return uint64(min(max(budget/16, 4<<20), 32<<20)) }

type quiet struct{}

func (quiet) Infof(string, ...any)  {}
func (quiet) Errorf(string, ...any) {}
func (quiet) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

func (d *Disk[K, V]) fail(err error) {
	if d.onErr != nil {
		d.onErr(err)
	}
	panic(err)
}

func (d *Disk[K, V]) key(b []byte, k K) []byte {
	b = append(b, byte(d.hash(k)%128))
	b, err := d.kc.append(b, k)
	if err != nil {
		d.fail(err)
	}
	return b
}

func (d *Disk[K, V]) Get(k K) (V, bool) {
	var zero V
	if e, ok := d.m[k]; ok {
		if !e.gone && d.ttl > 0 && d.dead(e.at, d.now()) {
			d.forget(k, e.v, e)
			d.maybeEvict()
			return zero, false
		}
		return e.v, !e.gone
	}
	d.kbuf = d.key(d.kbuf[:0], k)
	var val []byte
	var closer io.Closer
	if d.misses++; d.it == nil && d.misses <= oneShotMisses {
		var err error
		val, closer, err = d.db.Get(d.kbuf)
		if err == pebble.ErrNotFound {
			return zero, false
		}
		if err != nil {
			d.fail(&Error{Path: d.live, Err: err})
		}
	} else {
		it := d.reader()
		if !it.SeekPrefixGE(d.kbuf) || !bytes.Equal(it.Key(), d.kbuf) {
			if err := it.Error(); err != nil {
				d.fail(&Error{Path: d.live, Err: err})
			}
			return zero, false
		}
		var err error
		if val, err = it.ValueAndErr(); err != nil {
			d.fail(&Error{Path: d.live, Err: err})
		}
	}
	v, at := d.value(k, val)
	if closer != nil {
		closer.Close()
	}
	d.Stats.Loaded++
	if d.ttl > 0 && d.dead(at, d.now()) {
		d.forget(k, v, entry[V]{})
		d.maybeEvict()
		return zero, false
	}
	d.set(k, entry[V]{v: v, at: at}, entry[V]{})
	d.maybeEvict()
	return v, true
}

// value decodes a stored value of k: with a TTL, the time it was put (8
// bytes, big-endian) and the value.
func (d *Disk[K, V]) value(k K, b []byte) (V, int64) {
	var at int64
	if d.ttl > 0 {
		if len(b) < 8 {
			d.fail(&Error{Path: d.live, Err: fmt.Errorf("%w: value of key %v: %d bytes, too short for its time", ErrCorrupt, k, len(b))})
		}
		at, b = int64(binary.BigEndian.Uint64(b)), b[8:]
	}
	v, err := d.vc.decode(b)
	if err != nil {
		d.fail(&Error{Path: d.live, Err: fmt.Errorf("value of key %v: %w", k, err)})
	}
	return v, at
}

// reader is the iterator the cache's misses read through: one iterator
// for every Get until the next write to the database (an iterator sees
// the database as of its creation), seeking by prefix so that every
// level's bloom filter is consulted. pebble's own Get skips the filters
// of the last level (most of the keys): for the Get of a key never
// written, the common miss of a keyed aggregation over many keys, it
// reads a data block of the last level.
func (d *Disk[K, V]) reader() *pebble.Iterator {
	if d.it == nil {
		it, err := d.db.NewIter(&pebble.IterOptions{UseL6Filters: true})
		if err != nil {
			d.fail(&Error{Path: d.live, Err: err})
		}
		d.it = it
	}
	return d.it
}

// oneShotMisses is how many misses after a write to the database read
// with pebble's Get before the reader is opened: opening an iterator
// costs more than a Get, and a small cache writes back every few records.
const oneShotMisses = 32

// dropReader closes the reader: the database is about to change (a
// write, a flush, a restore) or close.
func (d *Disk[K, V]) dropReader() {
	d.misses = 0
	if d.it != nil {
		err := d.it.Close()
		d.it = nil
		if err != nil {
			d.fail(&Error{Path: d.live, Err: err})
		}
	}
}

// Put caches v as k's value. A pointer value may be the one Get
// returned, changed in place since: it is measured again.
func (d *Disk[K, V]) Put(k K, v V, _ bool) {
	e := entry[V]{v: v, dirty: true, size: int32(d.slot)}
	if d.ttl > 0 {
		e.at = d.now()
	}
	if d.flat {
		// Every entry of a flat table, a deletion's too, counts one slot:
		// the map's growth says whether k was there, without a lookup.
		n := len(d.m)
		d.m[k] = e
		if len(d.m) > n {
			d.bytes += int64(e.size)
		}
	} else {
		old := d.m[k]
		e.size = d.sizeOf(&k, &v)
		d.m[k] = e
		d.bytes += int64(e.size) - int64(old.size)
	}
	d.inc.changed(k, e, d.flat)
	d.maybeEvict()
}

func (d *Disk[K, V]) Delete(k K) {
	d.set(k, entry[V]{gone: true, dirty: true}, d.m[k])
	d.inc.changed(k, entry[V]{gone: true}, d.flat)
	d.maybeEvict()
}

// maybeEvict writes every dirty entry back and clears the cache once it
// is over its budget. The whole cache goes, not a share of it: a Go map
// emptied by clear keeps its slots empty, and one whose entries are
// deleted a few at a time fills with tombstones and grows (see slotBytes).
// A key still hot is read again from the database (most likely from the
// block cache).
func (d *Disk[K, V]) maybeEvict() {
	if d.bytes <= d.wb {
		return
	}
	b := d.db.NewBatch()
	for k, e := range d.m {
		if !e.dirty {
			continue
		}
		d.write(b, k, e)
		if b.Len() > 4<<20 {
			d.commit(b)
			b = d.db.NewBatch()
		}
	}
	d.Stats.Evicted += int64(len(d.m))
	clear(d.m)
	d.bytes = 0
	d.commit(b)
	trimMalloc()
}

func (d *Disk[K, V]) write(b *pebble.Batch, k K, e entry[V]) {
	d.inc.wrote(k, e, max(int64(e.size)-d.slot, 0), false)
	d.kbuf = d.key(d.kbuf[:0], k)
	var err error
	if e.gone {
		err = b.Delete(d.kbuf, nil)
	} else {
		d.vbuf = d.vbuf[:0]
		if d.ttl > 0 {
			d.vbuf = binary.BigEndian.AppendUint64(d.vbuf, uint64(e.at))
		}
		if d.vbuf, err = d.vc.appendPtr(d.vbuf, &e.v); err != nil {
			d.fail(err)
		}
		err = b.Set(d.kbuf, d.vbuf, nil)
	}
	if err != nil {
		d.fail(&Error{Path: d.live, Err: err})
	}
}

func (d *Disk[K, V]) commit(b *pebble.Batch) {
	d.dropReader()
	if err := b.Commit(pebble.NoSync); err != nil {
		d.fail(&Error{Path: d.live, Err: err})
	}
	b.Close()
}

// flush writes every dirty entry to the database; the cache keeps the
// entries, clean.
func (d *Disk[K, V]) flush() {
	b := d.db.NewBatch()
	for k, e := range d.m {
		if !e.dirty {
			continue
		}
		d.write(b, k, e)
		if e.gone {
			delete(d.m, k)
			d.bytes -= int64(e.size)
		} else {
			d.m[k] = entry[V]{v: e.v, at: e.at, size: e.size}
		}
		if b.Len() > 4<<20 {
			d.commit(b)
			b = d.db.NewBatch()
		}
	}
	d.commit(b)
}

// All yields every entry, by key group and encoded key, after writing
// the cache back; with a TTL, not those that outlived it (see Expire).
func (d *Disk[K, V]) All(yield func(K, V) bool) { d.scan(nil, yield) }

// scan yields the entries of the database that opts bounds (nil: every
// one), after writing the cache back; with a TTL, not those that
// outlived it.
func (d *Disk[K, V]) scan(opts *pebble.IterOptions, yield func(K, V) bool) {
	var now int64
	if d.ttl > 0 {
		now = d.now()
	}
	d.flush()
	it, err := d.db.NewIter(opts)
	if err != nil {
		d.fail(&Error{Path: d.live, Err: err})
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		kb := it.Key()
		if len(kb) < 1 {
			d.fail(&Error{Path: d.live, Err: fmt.Errorf("%w: empty key", ErrCorrupt)})
		}
		k, err := d.kc.decode(kb[1:])
		if err != nil {
			d.fail(&Error{Path: d.live, Err: err})
		}
		vb, err := it.ValueAndErr()
		if err != nil {
			d.fail(&Error{Path: d.live, Err: err})
		}
		v, at := d.value(k, vb)
		if d.dead(at, now) {
			continue
		}
		if !yield(k, v) {
			return
		}
	}
	if err := it.Error(); err != nil {
		d.fail(&Error{Path: d.live, Err: err})
	}
}

// Expire forgets every entry that outlived the TTL, in the cache and in
// the database (a scan of the whole table after writing the cache back:
// an aggregation with a TTL calls it once a TTL), telling SetTTL's hook
// of each, by key group and encoded key; the deletions are tombstones
// that pebble's compactions then drop with the values. It returns how
// many entries are left.
func (d *Disk[K, V]) Expire() (left int64) {
	if d.ttl <= 0 {
		return 0
	}
	now := d.now()
	d.flush() // the database holds every entry now (the cache a copy of some)
	it, err := d.db.NewIter(nil)
	if err != nil {
		d.fail(&Error{Path: d.live, Err: err})
	}
	b := d.db.NewBatch()
	for it.First(); it.Valid(); it.Next() {
		kb := it.Key()
		if len(kb) < 1 {
			d.fail(&Error{Path: d.live, Err: fmt.Errorf("%w: empty key", ErrCorrupt)})
		}
		vb, err := it.ValueAndErr()
		if err != nil {
			d.fail(&Error{Path: d.live, Err: err})
		}
		if len(vb) >= 8 && !d.dead(int64(binary.BigEndian.Uint64(vb)), now) {
			left++
			continue // the common case, decoded no further
		}
		k, err := d.kc.decode(kb[1:])
		if err != nil {
			d.fail(&Error{Path: d.live, Err: err})
		}
		v, _ := d.value(k, vb)
		if err := b.Delete(kb, nil); err != nil {
			d.fail(&Error{Path: d.live, Err: err})
		}
		if e, ok := d.m[k]; ok {
			delete(d.m, k)
			d.bytes -= int64(e.size)
		}
		d.inc.wrote(k, entry[V]{gone: true}, 0, true)
		d.Stats.Expired++
		if d.expired != nil {
			d.expired(k, v)
		}
		if b.Len() > 4<<20 {
			d.commit(b)
			b = d.db.NewBatch()
		}
	}
	if err := it.Error(); err != nil {
		d.fail(&Error{Path: d.live, Err: err})
	}
	if err := it.Close(); err != nil {
		d.fail(&Error{Path: d.live, Err: err})
	}
	d.commit(b)
	return left
}

// CacheBytes is the cache's size: its entries' slots and what their
// keys and values point to, each measured when it was put or loaded.
func (d *Disk[K, V]) CacheBytes() int64 { return d.bytes }

func (d *Disk[K, V]) Close() error {
	var err error
	if d.it != nil {
		err = d.it.Close()
		d.it = nil
	}
	if d.db != nil {
		unregister(d.db)
		if cerr := d.db.Close(); err == nil {
			err = cerr
		}
		d.db = nil
	}
	if d.bcache != nil {
		d.bcache.Unref()
		d.bcache = nil
	}
	if d.live != "" {
		if rerr := os.RemoveAll(d.live); err == nil {
			err = rerr
		}
	}
	return err
}

// The checkpoint's manifest, SLUICE-STATE: a magic line, then msgpack of
// manifest, then the CRC-32C of the msgpack (4 bytes, big-endian).
const (
	manifestName  = "SLUICE-STATE"
	manifestMagic = "sluice state checkpoint v1\n"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type manifest struct {
	ID    uint64     `msgpack:"id"`
	Inst  int        `msgpack:"inst"`
	Files []fileInfo `msgpack:"files"`
}

type fileInfo struct {
	Name string `msgpack:"n"`
	Size int64  `msgpack:"s"`
	CRC  uint32 `msgpack:"c"`
}

// handle is what a checkpoint keeps of a disk table.
type handle struct {
	V   int    `msgpack:"v"`
	Dir string `msgpack:"dir"`           // "<checkpoint>-<instance>" under chk
	CRC uint32 `msgpack:"crc"`           // of the manifest's body
	TTL bool   `msgpack:"ttl,omitempty"` // each value carries the time it was put (SetTTL)
	// Version 2 (a savepoint's copy, see ExportDisk): Rel is the copy's
	// directory inside the savepoint; Abs, set by ResolveDisk when the
	// savepoint is opened, is where it is now.
	Rel string `msgpack:"rel,omitempty"`
	Abs string `msgpack:"abs,omitempty"`
	// Versions 3 and 4 (a savepoint's copy): the deltas after the base,
	// in order (see disk_delta.go).
	Deltas []link `msgpack:"deltas,omitempty"`
}

func (d *Disk[K, V]) Snapshot(id uint64) ([]byte, error) { return d.snapshot(id, false) }

// SnapshotCopy is a full checkpoint: it copies every file instead of
// linking the sstables the previous checkpoints share (for comparisons).
func (d *Disk[K, V]) SnapshotCopy(id uint64) ([]byte, error) { return d.snapshot(id, true) }

func (d *Disk[K, V]) snapshot(id uint64, full bool) ([]byte, error) {
	chk := filepath.Join(d.opDir, "chk")
	if !d.snapped {
		d.snapped = true
		d.removeStale(chk, id)
	}
	maxChain := d.spec.MaxChain
	if maxChain <= 0 {
		maxChain = DefaultMaxChain
	}
	if !full && d.inc.canDelta(maxChain) {
		return d.snapshotDelta(id)
	}
	d.flush()
	if err := d.db.Flush(); err != nil {
		return nil, &Error{Path: d.live, Err: err}
	}
	name := fmt.Sprintf("%d-%d", id, d.inst)
	final, tmp := filepath.Join(chk, name), filepath.Join(chk, name+".tmp")
	_ = os.RemoveAll(tmp)
	_ = os.RemoveAll(final)
	if err := d.db.Checkpoint(tmp); err != nil {
		return nil, &Error{Path: tmp, Err: err}
	}
	ents, err := os.ReadDir(tmp)
	if err != nil {
		return nil, &Error{Path: tmp, Err: err}
	}
	prev := map[string]fileInfo{}
	if d.last != nil && !full {
		for _, f := range d.last.Files {
			prev[f.Name] = f
		}
	}
	m := &manifest{ID: id, Inst: d.inst}
	var total, fresh int64
	for _, e := range ents {
		p := filepath.Join(tmp, e.Name())
		st, err := os.Stat(p)
		if err != nil {
			return nil, &Error{Path: p, Err: err}
		}
		fi := fileInfo{Name: e.Name(), Size: st.Size()}
		total += fi.Size
		if old, ok := prev[fi.Name]; ok && old.Size == fi.Size && strings.HasSuffix(fi.Name, ".sst") {
			fi.CRC = old.CRC // an sstable never changes: the same file as before
		} else {
			fresh += fi.Size
			if full && strings.HasSuffix(fi.Name, ".sst") {
				if err := copyFile(p, p+".copy"); err != nil {
					return nil, &Error{Path: p, Err: err}
				}
				if err := os.Rename(p+".copy", p); err != nil {
					return nil, &Error{Path: p, Err: err}
				}
			}
			if fi.CRC, err = fileCRC(p); err != nil {
				return nil, &Error{Path: p, Err: err}
			}
		}
		m.Files = append(m.Files, fi)
	}
	crc, err := writeManifest(tmp, m)
	if err != nil {
		return nil, &Error{Path: filepath.Join(tmp, manifestName), Err: err}
	}
	if err := os.Rename(tmp, final); err != nil {
		return nil, &Error{Path: final, Err: err}
	}
	syncDir(chk)
	d.last = m
	d.Stats.LastBytes, d.Stats.LastNew, d.Stats.LastDelta = total, fresh, false
	d.inc.based(id, name, crc, total, d.spec.Budget)
	return d.inc.handle(d.ttl > 0)
}

// removeStale removes, before this table's first checkpoint, the
// checkpoints of its instance numbered id or more: an earlier run's
// (this run's are numbered from id on). Instance 0 does the same for the
// instances that no longer exist.
func (d *Disk[K, V]) removeStale(chk string, id uint64) {
	for _, c := range listChk(chk) {
		if c.id >= id && (c.inst == d.inst || (d.inst == 0 && c.inst >= d.parts)) {
			_ = os.RemoveAll(filepath.Join(chk, c.name))
		}
	}
}

type chkName struct {
	name string
	id   uint64
	inst int
	tmp  bool
}

func listChk(dir string) []chkName {
	ents, _ := os.ReadDir(dir)
	var out []chkName
	for _, e := range ents {
		n := e.Name()
		c := chkName{name: n}
		if s, ok := strings.CutSuffix(n, ".tmp"); ok {
			n, c.tmp = s, true
		}
		a, b, ok := strings.Cut(n, "-")
		if !ok {
			continue
		}
		var err1, err2 error
		c.id, err1 = strconv.ParseUint(a, 10, 64)
		c.inst, err2 = strconv.Atoi(b)
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, c)
	}
	return out
}

// Committed keeps the newest Retain checkpoints up to id, the base and
// deltas each chains on, and removes the older directories (instance 0
// removes every instance's).
func (d *Disk[K, V]) Committed(id uint64) {
	chk := filepath.Join(d.opDir, "chk")
	all := listChk(chk)
	var ids []uint64
	for _, c := range all {
		if c.id <= id && !c.tmp {
			ids = append(ids, c.id)
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if len(ids) <= d.spec.Retain {
		return
	}
	retainChains(chk, all, ids[len(ids)-d.spec.Retain:], func(inst int) bool { return inst == d.inst || d.inst == 0 })
}

// Restore rebuilds the working database from snapshots: at the same
// parallelism a copy of the checkpoint (sstables linked), after a rescale
// the key groups [lo, hi) of each.
func (d *Disk[K, V]) Restore(snaps [][]byte, lo, hi int) error {
	dirs := make([]string, len(snaps))
	deltas := make([][][]byte, len(snaps))
	for i, b := range snaps {
		dir, ds, err := d.verify(b)
		if err != nil {
			return wrapN(i, len(snaps), err)
		}
		dirs[i], deltas[i] = dir, ds
	}
	// The restored database is built in a new directory and opened before
	// the old one is closed and removed: every instance's OpenDisk removes
	// the working databases whose LOCK is free (removeUnlocked), so the
	// directory of one being rebuilt in place, its LOCK free between the
	// close and the open, was removed under it (links and all) by another
	// instance of the operator opening its table at the same time. A new
	// directory has no LOCK until it is opened: it is left alone.
	live, err := os.MkdirTemp(filepath.Join(d.opDir, "live"), strconv.Itoa(d.inst)+"-")
	if err != nil {
		return &Error{Path: d.opDir, Err: err}
	}
	whole := len(dirs) == 1 && lo <= 0 && hi == AllGroups
	if whole {
		if err := linkTree(dirs[0], live); err != nil {
			_ = os.RemoveAll(live)
			return err
		}
	}
	db, err := d.openAt(live)
	if err != nil {
		_ = os.RemoveAll(live)
		return err
	}
	if whole {
		for _, f := range deltas[0] {
			if err := applyDelta(db, live, f, 0, 128); err != nil {
				db.Close()
				_ = os.RemoveAll(live)
				return err
			}
		}
	}
	d.dropReader()
	old, oldLive := d.db, d.live
	d.db, d.live = db, live
	clear(d.m)
	d.bytes, d.last = 0, nil
	d.inc.reset()
	if old != nil {
		unregister(old)
		if err := old.Close(); err != nil {
			return &Error{Path: oldLive, Err: err}
		}
	}
	// Another instance's sweep may be removing it too (its LOCK is free
	// now): what either leaves, a later sweep removes.
	_ = os.RemoveAll(oldLive)
	if whole {
		return nil
	}
	lo, hi = max(lo, 0), min(hi, 128)
	for i, dir := range dirs {
		if err := d.copyGroups(dir, lo, hi); err != nil {
			return err
		}
		for _, f := range deltas[i] {
			if lo < hi {
				if err := applyDelta(d.db, d.live, f, lo, hi); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// copyGroups copies the key groups [lo, hi) of checkpoint dir into the
// working database, through a temporary copy of the checkpoint.
func (d *Disk[K, V]) copyGroups(dir string, lo, hi int) error {
	if lo >= hi {
		return nil
	}
	tmp, err := os.MkdirTemp(filepath.Join(d.opDir, "live"), "restore-")
	if err != nil {
		return &Error{Path: d.opDir, Err: err}
	}
	defer os.RemoveAll(tmp)
	_ = os.Remove(tmp)
	if err := linkTree(dir, tmp); err != nil {
		return err
	}
	src, err := pebble.Open(tmp, &pebble.Options{DisableWAL: true, Logger: quiet{}})
	if err != nil {
		return &Error{Path: dir, Err: err}
	}
	defer src.Close()
	it, err := src.NewIter(&pebble.IterOptions{LowerBound: []byte{byte(lo)}, UpperBound: []byte{byte(hi)}})
	if err != nil {
		return &Error{Path: dir, Err: err}
	}
	defer it.Close()
	b := d.db.NewBatch()
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return &Error{Path: dir, Err: err}
		}
		if err := b.Set(it.Key(), v, nil); err != nil {
			return &Error{Path: d.live, Err: err}
		}
		if b.Len() > 4<<20 {
			if err := b.Commit(pebble.NoSync); err != nil {
				return &Error{Path: d.live, Err: err}
			}
			b.Close()
			b = d.db.NewBatch()
		}
	}
	if err := it.Error(); err != nil {
		return &Error{Path: dir, Err: err}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return &Error{Path: d.live, Err: err}
	}
	return b.Close()
}

// verify checks a snapshot's handle and the checkpoint's files against
// its manifest (names, sizes, CRC-32C) and returns its base's directory
// and its deltas' files, checked (disk_delta.go).
func (d *Disk[K, V]) verify(b []byte) (string, [][]byte, error) {
	var h handle
	if err := msgpacksafe.Decode(b, &h, msgpacksafe.Limits{Source: "disk state handle", Factor: 4}); err != nil {
		return "", nil, err
	}
	dir, err := h.location(d.opDir)
	if err != nil {
		return "", nil, err
	}
	if h.TTL != (d.ttl > 0) {
		with := map[bool]string{false: "without", true: "with"}
		return "", nil, fmt.Errorf("disk state checkpoint %s was taken %s a StateTTL, and this operator runs %s one: its values cannot be read (restore it with the TTL setting it was taken with)",
			dir, with[h.TTL], with[d.ttl > 0])
	}
	return chainOf(&h, d.opDir)
}

// location is the directory of the checkpoint a handle names: under the
// operator's chk directory, or (version 2) a savepoint's copy.
func (h *handle) location(opDir string) (string, error) {
	if h.V < 1 || h.V > 4 {
		return "", fmt.Errorf("disk state handle version %d: this build reads versions 1 to 4", h.V)
	}
	if listChkOne(h.Dir) == nil {
		return "", fmt.Errorf("disk state handle: bad checkpoint directory %q", h.Dir)
	}
	if (h.V <= 2) != (len(h.Deltas) == 0) || len(h.Deltas) > maxChainFiles {
		return "", fmt.Errorf("disk state handle version %d with %d deltas", h.V, len(h.Deltas))
	}
	if h.V == 1 || h.V == 3 {
		return filepath.Join(opDir, "chk", h.Dir), nil
	}
	if !filepath.IsLocal(h.Rel) || !filepath.IsAbs(h.Abs) {
		return "", fmt.Errorf("disk state handle of a savepoint (directory %q): not resolved against its savepoint (%q)", h.Rel, h.Abs)
	}
	return h.Abs, nil
}

// verifyDir checks a checkpoint's directory against its manifest, and
// the manifest against crc (the checkpoint's record of it).
func verifyDir(dir string, crc uint32) error {
	mp := filepath.Join(dir, manifestName)
	raw, err := os.ReadFile(mp)
	if err != nil {
		return &Error{Path: mp, Err: err}
	}
	body, ok := bytes.CutPrefix(raw, []byte(manifestMagic))
	if !ok || len(body) < 4 {
		return &Error{Path: mp, Err: fmt.Errorf("%w: not a sluice state manifest, or truncated (%d bytes)", ErrCorrupt, len(raw))}
	}
	body, sum := body[:len(body)-4], body[len(body)-4:]
	sumOf := crc32.Checksum(body, castagnoli)
	if want := uint32(sum[0])<<24 | uint32(sum[1])<<16 | uint32(sum[2])<<8 | uint32(sum[3]); sumOf != want {
		return &Error{Path: mp, Err: fmt.Errorf("%w: checksum %08x, the manifest says %08x", ErrCorrupt, sumOf, want)}
	}
	if sumOf != crc {
		return &Error{Path: mp, Err: fmt.Errorf("%w: manifest checksum %08x, the checkpoint recorded %08x (another checkpoint's files)", ErrCorrupt, sumOf, crc)}
	}
	var m manifest
	if err := msgpacksafe.Decode(body, &m, msgpacksafe.Limits{Source: mp, Factor: 8}); err != nil {
		return &Error{Path: mp, Err: err}
	}
	for _, f := range m.Files {
		if f.Name == manifestName || f.Name != filepath.Base(f.Name) || f.Name == "." || f.Name == ".." {
			return &Error{Path: mp, Err: fmt.Errorf("%w: bad file name %q", ErrCorrupt, f.Name)}
		}
		p := filepath.Join(dir, f.Name)
		st, err := os.Stat(p)
		if err != nil {
			return &Error{Path: p, Err: fmt.Errorf("%w: %v", ErrCorrupt, err)}
		}
		if st.Size() != f.Size {
			return &Error{Path: p, Err: fmt.Errorf("%w: %d bytes, the manifest says %d (truncated?)", ErrCorrupt, st.Size(), f.Size)}
		}
		got, err := fileCRC(p)
		if err != nil {
			return &Error{Path: p, Err: err}
		}
		if got != f.CRC {
			return &Error{Path: p, Err: fmt.Errorf("%w: checksum %08x, the manifest says %08x", ErrCorrupt, got, f.CRC)}
		}
	}
	return nil
}

func listChkOne(name string) *chkName {
	if name != filepath.Base(name) {
		return nil
	}
	cs := listChkNames([]string{name})
	if len(cs) != 1 || cs[0].tmp {
		return nil
	}
	return &cs[0]
}

func listChkNames(names []string) []chkName {
	var out []chkName
	for _, n := range names {
		a, b, ok := strings.Cut(n, "-")
		if !ok {
			continue
		}
		id, err1 := strconv.ParseUint(a, 10, 64)
		inst, err2 := strconv.Atoi(b)
		if err1 != nil || err2 != nil || inst < 0 {
			continue
		}
		out = append(out, chkName{name: n, id: id, inst: inst})
	}
	return out
}

// linkTree makes dst a copy of checkpoint src: sstables hard-linked
// (copied where links fail), the other files copied (pebble appends to
// its MANIFEST), the sluice manifest left out.
func linkTree(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return &Error{Path: dst, Err: err}
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return &Error{Path: src, Err: err}
	}
	for _, e := range ents {
		if e.Name() == manifestName {
			continue
		}
		s, t := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		if strings.HasSuffix(e.Name(), ".sst") && os.Link(s, t) == nil {
			continue
		}
		if err := copyFile(s, t); err != nil {
			return &Error{Path: s, Err: err}
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func fileCRC(p string) (uint32, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	h := crc32.New(castagnoli)
	if _, err := io.Copy(h, f); err != nil {
		return 0, err
	}
	return h.Sum32(), nil
}

func writeSync(p string, b []byte) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(p string) {
	if f, err := os.Open(p); err == nil {
		_ = f.Sync()
		f.Close()
	}
}
