package state

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/maphash"
	"io"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unsafe"
)

// The memory backend's changelog (Spec.Changelog): incremental checkpoints
// of a Mem, as Flink's changelog state backend takes them. A checkpoint
// writes one file under
//
//	Changelog/<operator>/<instance>/<checkpoint>-<random>.base   every key and value
//	Changelog/<operator>/<instance>/<checkpoint>-<random>.delta  the keys changed since the
//	                                                            previous checkpoint (puts and
//	                                                            tombstones), naming it
//
// and the checkpoint records a handle: the chain of files (a base, then
// the deltas after it, each with its size and CRC) that together are the
// table as of the checkpoint. A base is written instead of a delta after
// MaxChain deltas, when the deltas since the base pass half of its size,
// when more than a quarter of the keys were updated or deleted (and,
// untracked, in up to 4 intervals after such ones: resetTracking), and
// after a restore; so a
// recovery reads one base and a bounded chain. Committed keeps the files
// of the newest Retain checkpoints (and of those in flight) and removes
// every other file of the instance's directory.
//
// A file:
//
//	"SLCL" | version (1 byte) | kind (4 base, 2 delta; 1 the base written before; 3 the disk backend's delta, disk_delta.go)
//	| checkpoint id (8) | previous file's id (8, 0 for a base) | records (8) | records... | CRC-32C of everything before (4)
//	record of a delta (and of a kind 1 base, whose records are appends in Order):
//	        op (1 append, 2 update, 3 delete) | uvarint key length | key | (not for delete) uvarint value length | value
//	records of a base (kind 4): layout (1 byte) | every key and value in the map's order | every key again, in Order
//	        layout 1 (8-byte keys and values): key (8) | value (8); the order's keys as uvarints of the zigzagged
//	        difference from the key before (from 0 for the first)
//	        layout 0: uvarint key length | key | uvarint value length | value; the order's: uvarint key length | key
//
// A base is written in the map's order so that writing it reads the map
// from start to end, without a lookup of each key (a lookup misses the
// cache: on a table of 1 M keys the lookups in Order were most of a
// checkpoint's time); Order follows, so that a restore keeps it.
//
// A handle: "SLCH" | version | checkpoint id (8) | uvarint files | per file: uvarint path length | path
// (relative to the job's changelog directory) | uvarint size | CRC (4) | then a CRC-32C of the handle (4).
// An inline chain (what a savepoint keeps, see Inline): "SLCI" | version | uvarint files | per file:
// uvarint length | the file's bytes.
//
// Every byte read back is checked: lengths against what is left, the
// chain's kinds and links, each file's size and CRC; a failure is an
// *Error whose cause is ErrChangelog.

// ErrChangelog is the cause of an Error for a memory-backend checkpoint
// (handle, inline chain, base or delta file) that does not decode:
// truncated, damaged, foreign, out of chain, or of a newer version.
var ErrChangelog = errors.New("bad changelog checkpoint")

// DefaultMaxChain is how many deltas may follow a base before the next
// checkpoint writes a base again.
const DefaultMaxChain = 10

const (
	changelogVersion = 1
	kindBase         = 1 // every key and value, in Order (written before kindBaseMap)
	kindDelta        = 2
	kindBaseMap      = 4 // every key and value in the map's order, then Order
	layoutGeneric    = 0 // kindBaseMap's records: lengths and encodings
	layoutFixed      = 1 // ... 8-byte keys and values
	opAppend         = 1
	opUpdate         = 2
	opDelete         = 3
	fileHeader       = 4 + 1 + 1 + 8 + 8 + 8
	maxChainFiles    = 1024
	maxPath          = 1024
	// maxFile bounds a changelog file read back (64 GiB).
	maxFile = 1 << 36
)

var (
	fileMagic   = []byte("SLCL")
	handleMagic = []byte("SLCH")
	inlineMagic = []byte("SLCI")
	clTable     = crc32.MakeTable(crc32.Castagnoli)
)

// dirty flags of a changed key (Mem.dirty)
const (
	wasPresent = 1 << iota // the key had a value at the last checkpoint
	removed                // ... and was deleted since (from its place in Order)
)

// changelog is a Mem's incremental checkpointing.
type changelog struct {
	root     string // the job's changelog directory (handle paths are relative to it)
	rel      string // the instance's directory, relative to root
	dir      string // root/rel
	maxChain int
	retain   int
	chain    []fileRef // the last snapshot's chain: a base, then deltas
	base     int64     // its base's size
	deltas   int64     // the size of its deltas
	snaps    []snapRec // snapshots retained or in flight
	inst     int
	parts    int
	swept    bool    // instance 0 removed the directories of instances >= parts
	buf      []byte  // the last file encoded (reused once it is written)
	flight   *flight // the file being written (SnapshotLater), nil when none
}

type fileRef struct {
	Path string // relative to the job's changelog directory
	Size int64
	CRC  uint32
	id   uint64 // the checkpoint that wrote it (read from the file)
}

type snapRec struct {
	id        uint64
	files     []fileRef
	committed bool
	restored  bool // the checkpoint a restore read (perhaps another run's, at another parallelism)
}

// OpenChangelog is instance inst's (of parts) memory table whose
// checkpoints are incremental: files under spec.Changelog/<op>/<inst> (see
// the changelog's format above). owns tells Restore which keys belong to a
// range of key groups. Instance 0 also removes the directories of
// instances parts and above (a run at a higher parallelism left them) once
// its retained checkpoints are all its own.
func OpenChangelog[K comparable, V any](spec Spec, op string, inst, parts int, owns func(k K, lo, hi int) bool) (*Mem[K, V], error) {
	if spec.MaxChain <= 0 {
		spec.MaxChain = DefaultMaxChain
	}
	if spec.Retain <= 0 {
		spec.Retain = DefaultRetain
	}
	rel := filepath.Join(url.PathEscape(op), strconv.Itoa(inst))
	l := &changelog{root: spec.Changelog, rel: rel, dir: filepath.Join(spec.Changelog, rel), maxChain: spec.MaxChain, retain: spec.Retain,
		inst: inst, parts: parts}
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		return nil, &Error{Path: l.dir, Err: err}
	}
	m := NewMem[K, V](owns)
	m.log, m.kc, m.vc = l, newCodec[K]("key of "+op), newCodec[V]("state of "+op)
	m.full = true
	return m, nil
}

// Changed records that k was just put (existed: it had a value before)
// into M and, when it had none, appended to Order, by a caller that writes
// M and Order itself (the keyed stage's loop). A table without a changelog
// ignores it.
func (m *Mem[K, V]) Changed(k K, existed bool) {
	if m.track {
		m.touch(k, existed)
	}
}

func (m *Mem[K, V]) touch(k K, existed bool) {
	if !existed {
		m.fresh++ // appended to Order
	}
	if _, ok := m.dirty[k]; ok {
		return
	}
	if !existed {
		m.dirty[k] = 0 // appended: in the delta's tail, never past the limit
		return
	}
	m.dirty[k] = wasPresent
	if m.changed++; m.changed > m.limit {
		m.overflow()
	}
}

// deleted records that k, which has a value, is about to be deleted.
func (m *Mem[K, V]) deleted(k K) {
	f, ok := m.dirty[k]
	switch {
	case !ok:
		m.dirty[k] = wasPresent | removed
		if m.changed++; m.changed > m.limit {
			m.overflow()
		}
	case f == wasPresent:
		m.dirty[k] = wasPresent | removed
	default: // its place in Order is in the appended tail
		m.fresh--
	}
}

// overflow stops tracking changes: so many keys changed that the next
// checkpoint writes a base. The dirty map is kept to be cleared and
// filled again.
func (m *Mem[K, V]) overflow() {
	m.track, m.full, m.fresh, m.changed, m.over = false, true, 0, 0, true
}

// maxSkip bounds how many intervals in a row go untracked after
// intervals that overflowed (resetTracking).
const maxSkip = 4

// resetTracking starts tracking the changes after a snapshot, unless the
// intervals before overflowed (more than a quarter of the keys changed):
// then the next ones go untracked and end in a base, as they would have
// after paying for tracking a quarter of the keys. After n tracked
// intervals in a row that overflowed, min(n, maxSkip) go untracked; a
// tracked one that does not overflow ends the run.
func (m *Mem[K, V]) resetTracking() {
	switch {
	case m.over: // the tracked interval that ended overflowed
		m.overs++
		m.skip = min(m.overs, maxSkip)
	case !m.skipping: // a tracked one that did not
		m.overs = 0
	}
	m.over, m.fresh, m.changed = false, 0, 0
	if m.skip > 0 {
		m.skip--
		m.skipping, m.track, m.full = true, false, true
		return
	}
	m.skipping, m.track, m.full = false, true, false
	m.limit = max(len(m.M)/4, 256)
	if m.dirty == nil {
		m.dirty = make(map[K]uint8)
	} else {
		clear(m.dirty)
	}
}

// snapshotChangelog encodes the checkpoint's base or delta and returns
// the handle of its chain; the file is written and synced before it
// returns, unless durable is set: then a goroutine of the table's writes
// it and calls durable once the file is in place (nil) or failed (see
// SnapshotLater). Either way at most one write is in flight: a snapshot
// waits for the one before.
func (m *Mem[K, V]) snapshotChangelog(id uint64, durable func(error)) ([]byte, bool, error) {
	l := m.log
	if err := l.wait(); err != nil {
		// The last write failed (its checkpoint failed with it): its file
		// may be missing, so nothing may follow it.
		l.chain = nil
	}
	base := m.full || len(l.chain) == 0 || len(l.chain) > l.maxChain || l.deltas > l.base/2
	kind, prev := byte(kindBaseMap), uint64(0)
	if !base {
		kind, prev = kindDelta, l.chain[len(l.chain)-1].id
	}
	data, err := m.encode(l.buf[:0], id, kind, prev)
	if err != nil {
		return nil, false, err
	}
	l.buf = data
	ref, name := l.name(id, kind, data)
	if durable == nil {
		if err := l.write(name, data); err != nil {
			return nil, false, err
		}
	}
	if base {
		l.chain, l.base, l.deltas = []fileRef{ref}, ref.Size, 0
	} else {
		l.chain = append(l.chain[:len(l.chain):len(l.chain)], ref)
		l.deltas += ref.Size
	}
	l.snaps = append(l.snaps, snapRec{id: id, files: l.chain})
	m.resetTracking()
	h := encodeHandle(id, l.chain)
	if durable == nil {
		return h, false, nil
	}
	f := &flight{name: name, done: make(chan struct{})}
	l.flight = f
	go func() {
		f.err = l.write(name, data)
		durable(f.err) // before done: Close returns once this goroutine has
		close(f.done)
	}()
	return h, true, nil
}

// SnapshotLater is Snapshot whose file, with a changelog, is written and
// synced after it returns, on a goroutine of the table's: the table is
// captured (encoded) before it returns, so that the caller may change it
// at once. later says that a write is under way: durable is then called
// once, from that goroutine, when the file is in place and synced (nil)
// or could not be (the checkpoint must fail); the checkpoint is not
// complete before. Without a changelog it is Snapshot (later false,
// durable not called). The next snapshot, Committed's removal of files
// and Close wait for the write.
func (m *Mem[K, V]) SnapshotLater(id uint64, durable func(error)) (b []byte, later bool, err error) {
	if m.log == nil || durable == nil {
		b, err := m.Snapshot(id)
		return b, false, err
	}
	return m.snapshotChangelog(id, durable)
}

// flight is a file being written by the table's goroutine.
type flight struct {
	name string // the file's name in the instance's directory
	done chan struct{}
	err  error // set before done is closed
}

// wait waits for the write in flight, if any, and returns its error.
func (l *changelog) wait() error {
	f := l.flight
	if f == nil {
		return nil
	}
	<-f.done
	l.flight = nil
	return f.err
}

// LastChain reports the last snapshot's chain: its files and whether the
// last file is a base (for tests and benchmarks).
func (m *Mem[K, V]) LastChain() (files int, lastBytes int64, base bool) {
	if m.log == nil || len(m.log.chain) == 0 {
		return 0, 0, false
	}
	c := m.log.chain
	return len(c), c[len(c)-1].Size, len(c) == 1
}

// name names checkpoint id's file of data (its CRC appended) and returns
// its reference.
func (l *changelog) name(id uint64, kind byte, data []byte) (fileRef, string) {
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	ext := ".base"
	if kind == kindDelta {
		ext = ".delta"
	}
	name := fmt.Sprintf("%020d-%s%s", id, hex.EncodeToString(rnd[:]), ext)
	return fileRef{Path: filepath.ToSlash(filepath.Join(l.rel, name)), Size: int64(len(data)),
		CRC: binary.BigEndian.Uint32(data[len(data)-4:]), id: id}, name
}

// write writes a file of the instance's directory: under a temporary
// name, synced, then renamed in place and the directory synced.
func (l *changelog) write(name string, data []byte) error {
	path := filepath.Join(l.dir, name)
	fail := func(err error) error {
		_ = os.Remove(path + ".tmp")
		return &Error{Path: path, Err: err}
	}
	f, err := os.Create(path + ".tmp")
	if err != nil {
		return fail(err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fail(err)
	}
	if err := f.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return fail(err)
	}
	if d, err := os.Open(l.dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// encode appends the checkpoint's file to b, its CRC last: every key and
// value in the map's order then the keys in Order (kind base in map
// order), or the changes since the last snapshot (delta).
func (m *Mem[K, V]) encode(b []byte, id uint64, kind byte, prev uint64) ([]byte, error) {
	// A delta: its tombstones, then the updates of keys in place, then
	// the keys appended to Order since (the tail of Order, in order).
	var dels, updates []K
	var appended []K
	n := len(m.M)
	if kind == kindDelta {
		for k, fl := range m.dirty {
			if fl&removed != 0 {
				dels = append(dels, k)
			} else if fl&wasPresent != 0 {
				updates = append(updates, k)
			}
		}
		appended = m.Order[len(m.Order)-m.fresh:]
		n = len(dels) + len(updates) + len(appended)
	} else if len(m.M) != len(m.Order) {
		return b, fmt.Errorf("memory table of %d keys with %d in its order", len(m.M), len(m.Order))
	}
	fixed := m.kc.fixed() && m.vc.fixed()
	if kind == kindBaseMap && fixed && cap(b)-len(b) < fileHeader+1+n*18+4 {
		b = slices.Grow(b, fileHeader+1+n*19+4) // 16 bytes a record, an order's key in 1 to 3 mostly
	}
	start := len(b)
	b = append(b, fileMagic...)
	b = append(b, changelogVersion, kind)
	b = binary.BigEndian.AppendUint64(b, id)
	b = binary.BigEndian.AppendUint64(b, prev)
	b = binary.BigEndian.AppendUint64(b, uint64(n))
	var err error
	if kind == kindBaseMap {
		if fixed {
			b = append(b, layoutFixed)
			for k, v := range m.M {
				b = binary.BigEndian.AppendUint64(b, *(*uint64)(unsafe.Pointer(&k)))
				b = binary.BigEndian.AppendUint64(b, *(*uint64)(unsafe.Pointer(&v)))
			}
			var last uint64
			for _, k := range m.Order {
				u := *(*uint64)(unsafe.Pointer(&k))
				d := int64(u - last)
				b = binary.AppendUvarint(b, uint64(d<<1)^uint64(d>>63))
				last = u
			}
		} else {
			b = append(b, layoutGeneric)
			for k, v := range m.M {
				if b, err = m.appendKV(b, k, &v); err != nil {
					return b, err
				}
			}
			for _, k := range m.Order {
				if b, err = m.appendKV(b, k, nil); err != nil {
					return b, err
				}
			}
		}
	} else {
		for _, k := range dels {
			b = append(b, opDelete)
			if b, err = m.appendKV(b, k, nil); err != nil {
				return b, err
			}
		}
		for _, k := range updates {
			v := m.M[k]
			b = append(b, opUpdate)
			if b, err = m.appendKV(b, k, &v); err != nil {
				return b, err
			}
		}
		for _, k := range appended {
			v := m.M[k]
			b = append(b, opAppend)
			if b, err = m.appendKV(b, k, &v); err != nil {
				return b, err
			}
		}
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start:], clTable)), nil
}

// appendKV appends uvarint key length | key and, unless v is nil,
// uvarint value length | value.
func (m *Mem[K, V]) appendKV(b []byte, k K, v *V) ([]byte, error) {
	var err error
	at := len(b)
	b = append(b, 0) // the length, moved once known
	if b, err = m.kc.append(b, k); err != nil {
		return b, err
	}
	b = putLen(b, at)
	if v == nil {
		return b, nil
	}
	at = len(b)
	b = append(b, 0)
	if b, err = m.vc.appendPtr(b, v); err != nil {
		return b, err
	}
	return putLen(b, at), nil
}

// putLen writes the uvarint length of b[at+1:] at b[at], where one byte
// was left for it, moving the bytes when the length takes more.
func putLen(b []byte, at int) []byte {
	n := len(b) - at - 1
	if n < 0x80 {
		b[at] = byte(n)
		return b
	}
	var l [binary.MaxVarintLen64]byte
	w := binary.PutUvarint(l[:], uint64(n))
	b = append(b, l[:w-1]...)
	copy(b[at+w:], b[at+1:at+1+n])
	copy(b[at:], l[:w])
	return b
}

// committed keeps the files of the newest Retain committed snapshots and
// of those after id, and removes every other file of the directory.
func (l *changelog) committed(id uint64) {
	kept := 0
	var keep []snapRec
	for i := len(l.snaps) - 1; i >= 0; i-- {
		s := l.snaps[i]
		if s.id == id {
			s.committed = true
		}
		switch {
		case s.id > id:
			keep = append(keep, s)
		case s.committed && kept < l.retain:
			keep = append(keep, s)
			kept++
		}
	}
	for i, j := 0, len(keep)-1; i < j; i, j = i+1, j-1 {
		keep[i], keep[j] = keep[j], keep[i]
	}
	l.snaps = keep
	if kept == 0 {
		return // nothing known to be committed: nothing removed
	}
	refs := map[string]bool{}
	if f := l.flight; f != nil {
		refs[filepath.ToSlash(filepath.Join(l.rel, f.name+".tmp"))] = true // being written
	}
	for _, s := range keep {
		for _, f := range s.files {
			refs[f.Path] = true
		}
	}
	ents, err := os.ReadDir(l.dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !refs[filepath.ToSlash(filepath.Join(l.rel, e.Name()))] {
			_ = os.Remove(filepath.Join(l.dir, e.Name()))
		}
	}
	if l.inst == 0 && !l.swept && !slices.ContainsFunc(keep, func(s snapRec) bool { return s.restored }) {
		l.swept = true
		opDir := filepath.Dir(l.dir)
		ents, _ := os.ReadDir(opDir)
		for _, e := range ents {
			if n, err := strconv.Atoi(e.Name()); err == nil && n >= l.parts && e.IsDir() && e.Name() == strconv.Itoa(n) {
				_ = os.RemoveAll(filepath.Join(opDir, e.Name()))
			}
		}
	}
}

// Committed says that checkpoint id is complete: with a changelog, the
// files no retained checkpoint needs are removed (not the one being
// written, whose checkpoint is later).
func (m *Mem[K, V]) Committed(id uint64) {
	if m.log != nil {
		m.log.committed(id)
	}
}

// Close waits for the file being written, if any (SnapshotLater: its
// outcome went to durable).
func (m *Mem[K, V]) Close() error {
	if m.log != nil {
		// The write's error, if any, went to its durable callback,
		// which failed the instance: Close only waits for the goroutine.
		_ = m.log.wait()
	}
	return nil
}

func encodeHandle(id uint64, files []fileRef) []byte {
	b := append([]byte(nil), handleMagic...)
	b = append(b, changelogVersion)
	b = binary.BigEndian.AppendUint64(b, id)
	b = binary.AppendUvarint(b, uint64(len(files)))
	for _, f := range files {
		b = binary.AppendUvarint(b, uint64(len(f.Path)))
		b = append(b, f.Path...)
		b = binary.AppendUvarint(b, uint64(f.Size))
		b = binary.BigEndian.AppendUint32(b, f.CRC)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, clTable))
}

// reader reads a changelog encoding, bounded by its bytes.
type reader struct {
	b   []byte
	i   int
	err error
}

func (r *reader) fail(format string, a ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: byte %d: %s", ErrChangelog, r.i, fmt.Sprintf(format, a...))
	}
}

func (r *reader) uvarint(what string, limit uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.i:])
	if n <= 0 {
		r.fail("%s: truncated or overlong length", what)
		return 0
	}
	if v > limit {
		r.fail("%s: %d, at most %d", what, v, limit)
		return 0
	}
	r.i += n
	return v
}

func (r *reader) bytes(what string, n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)-r.i) {
		r.fail("%s: %d bytes, %d left", what, n, len(r.b)-r.i)
		return nil
	}
	s := r.b[r.i : r.i+int(n)]
	r.i += int(n)
	return s
}

// opKey reads a record's op and key (ok false: they are not all there,
// r.err says where).
func (r *reader) opKey() (op byte, key []byte, ok bool) {
	ob := r.bytes("op", 1)
	key = r.bytes("key", r.uvarint("key length", maxFile))
	if r.err != nil {
		return 0, nil, false
	}
	return ob[0], key, true
}

// value reads a record's value (ok false: it is not all there).
func (r *reader) value() (v []byte, ok bool) {
	v = r.bytes("value", r.uvarint("value length", maxFile))
	return v, r.err == nil
}

func (r *reader) u64(what string) uint64 {
	b := r.bytes(what, 8)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

func (r *reader) u32(what string) uint32 {
	b := r.bytes(what, 4)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}

// magic checks the encoding's magic and version.
func (r *reader) magic(magic []byte, what string) {
	if len(r.b) < len(magic)+1 || !bytes.Equal(r.b[:len(magic)], magic) {
		r.fail("not a %s", what)
		return
	}
	if v := r.b[len(magic)]; v != changelogVersion {
		r.fail("%s of format version %d: this sluice reads version %d", what, v, changelogVersion)
		return
	}
	r.i = len(magic) + 1
}

func decodeHandle(b []byte) (uint64, []fileRef, error) {
	r := &reader{b: b}
	r.magic(handleMagic, "changelog handle")
	if r.err == nil && len(b) >= 4 && crc32.Checksum(b[:len(b)-4], clTable) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		r.fail("changelog handle: CRC mismatch")
	}
	id := r.u64("checkpoint id")
	n := r.uvarint("files", maxChainFiles)
	var files []fileRef
	for range n {
		if r.err != nil {
			break
		}
		p := string(r.bytes("path", r.uvarint("path length", maxPath)))
		size := r.uvarint("size", maxFile)
		crc := r.u32("crc")
		if r.err == nil && (!filepath.IsLocal(filepath.FromSlash(p)) || strings.Contains(p, "\\")) {
			r.fail("path %q is not inside the changelog directory", p)
		}
		files = append(files, fileRef{Path: p, Size: int64(size), CRC: crc})
	}
	if r.err == nil && n == 0 {
		r.fail("no files")
	}
	if r.err == nil && r.i != len(b)-4 {
		r.fail("%d bytes after the files", len(b)-4-r.i)
	}
	return id, files, r.err
}

// IsChangelog says whether a checkpoint's state is a memory table's
// changelog handle (whose files Inline copies into a savepoint).
func IsChangelog(b []byte) bool { return bytes.HasPrefix(b, handleMagic) }

// Inline returns the state of a checkpoint with its changelog's files in
// it: a handle's chain read from root (the job's changelog directory),
// checked, and copied, so that a savepoint holds all it needs. A state
// that is not a handle is returned as it is.
func Inline(b []byte, root string) ([]byte, error) {
	if !IsChangelog(b) {
		return b, nil
	}
	files, err := readChain(b, root)
	if err != nil {
		return nil, err
	}
	out := append([]byte(nil), inlineMagic...)
	out = append(out, changelogVersion)
	out = binary.AppendUvarint(out, uint64(len(files)))
	for _, f := range files {
		out = binary.AppendUvarint(out, uint64(len(f)))
		out = append(out, f...)
	}
	return out, nil
}

// readChain reads and checks the files of a handle from root.
func readChain(b []byte, root string) ([][]byte, error) {
	_, refs, err := decodeHandle(b)
	if err != nil {
		return nil, &Error{Path: "changelog handle", Err: err}
	}
	if root == "" {
		return nil, &Error{Path: refs[0].Path, Err: fmt.Errorf("%w: a changelog checkpoint, but the memory backend has no changelog directory (operators.MemoryState().Changelog)", ErrChangelog)}
	}
	out := make([][]byte, len(refs))
	for i, f := range refs {
		p := filepath.Join(root, filepath.FromSlash(f.Path))
		data, err := readBounded(p, f.Size)
		if err != nil {
			return nil, &Error{Path: p, Err: err}
		}
		if int64(len(data)) != f.Size {
			return nil, &Error{Path: p, Err: fmt.Errorf("%w: %d bytes, the checkpoint says %d", ErrChangelog, len(data), f.Size)}
		}
		if len(data) < 4 || crc32.Checksum(data[:len(data)-4], clTable) != f.CRC {
			return nil, &Error{Path: p, Err: fmt.Errorf("%w: CRC mismatch", ErrChangelog)}
		}
		out[i] = data
	}
	return out, nil
}

// readBounded reads a file that should be of size bytes: one of another
// size is refused before anything is read or allocated.
func readBounded(p string, size int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() != size {
		return nil, fmt.Errorf("%w: %d bytes, the checkpoint says %d", ErrChangelog, st.Size(), size)
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, fmt.Errorf("%w: read: %v", ErrChangelog, err)
	}
	return data, nil
}

func decodeInline(b []byte) ([][]byte, error) {
	r := &reader{b: b}
	r.magic(inlineMagic, "inline changelog")
	n := r.uvarint("files", maxChainFiles)
	var files [][]byte
	for range n {
		f := r.bytes("file", r.uvarint("file length", uint64(len(b))))
		if r.err != nil {
			break
		}
		files = append(files, f)
	}
	if r.err == nil && n == 0 {
		r.fail("no files")
	}
	if r.err == nil && r.i != len(b) {
		r.fail("%d bytes after the files", len(b)-r.i)
	}
	if r.err != nil {
		return nil, &Error{Path: "inline changelog", Err: r.err}
	}
	return files, nil
}

// chainFile is a decoded file's header; its records follow from rec.
type chainFile struct {
	kind     byte
	id, prev uint64
	count    uint64
	r        *reader
}

func openFile(data []byte) (chainFile, error) {
	r := &reader{b: data}
	r.magic(fileMagic, "changelog file")
	if r.err == nil && (len(data) < fileHeader+4 || crc32.Checksum(data[:len(data)-4], clTable) != binary.BigEndian.Uint32(data[len(data)-4:])) {
		r.fail("CRC mismatch or truncated")
	}
	var c chainFile
	if kb := r.bytes("kind", 1); kb != nil {
		c.kind = kb[0]
	}
	c.id, c.prev = r.u64("checkpoint id"), r.u64("previous id")
	c.count = r.u64("records")
	if r.err == nil && c.kind != kindBase && c.kind != kindBaseMap && c.kind != kindDelta && c.kind != kindDiskDelta {
		r.fail("kind %d", c.kind)
	}
	if r.err == nil && c.count > uint64(len(data)-fileHeader)/3 {
		r.fail("%d records in %d bytes", c.count, len(data))
	}
	r.b = data[:max(len(data)-4, 0)]
	c.r = r
	return c, r.err
}

// applyChain applies one instance's chain (a base, then deltas) to M and
// Order, keeping only the keys in groups [lo, hi) unless all.
func (m *Mem[K, V]) applyChain(files [][]byte, M map[K]V, order []K, lo, hi int, all bool) (map[K]V, []K, error) {
	var prev uint64
	for i, data := range files {
		c, err := openFile(data)
		if err == nil {
			switch {
			case c.kind == kindDiskDelta:
				err = fmt.Errorf("%w: a disk state delta, not the memory backend's", ErrChangelog)
			case i == 0 && c.kind != kindBase && c.kind != kindBaseMap:
				err = fmt.Errorf("%w: the chain starts with a delta", ErrChangelog)
			case i > 0 && c.kind != kindDelta:
				err = fmt.Errorf("%w: file %d of the chain is a base", ErrChangelog, i+1)
			case i > 0 && c.prev != prev:
				err = fmt.Errorf("%w: file %d of the chain follows checkpoint %d, not %d", ErrChangelog, i+1, c.prev, prev)
			}
		}
		if err != nil {
			return M, order, fmt.Errorf("file %d of %d: %w", i+1, len(files), err)
		}
		prev = c.id
		if c.kind == kindBaseMap {
			if M == nil {
				M, order = make(map[K]V, c.count), make([]K, 0, c.count)
			}
			if order, err = m.applyBaseMap(c, M, order, lo, hi, all); err != nil {
				return M, order, fmt.Errorf("file %d of %d: %w", i+1, len(files), err)
			}
			continue
		}
		if i == 0 && all && M == nil {
			M, order = make(map[K]V, c.count), make([]K, 0, c.count)
			if m.kc.fixed() && m.vc.fixed() { // 8-byte keys and values: records of 19 bytes
				var err error
				if order, err = baseFixed(c, M, order); err != nil {
					return M, order, fmt.Errorf("file 1 of %d: %w", len(files), err)
				}
				continue
			}
		}
		var gone map[K]bool
		r := c.r
		last := byte(opDelete) // a file's ops: tombstones, updates, appends (a base: appends)
		if c.kind == kindBase {
			last = opAppend
		}
		for range c.count {
			op, kb, ok := r.opKey()
			if !ok {
				break
			}
			if op < opAppend || op > last {
				r.fail("op %d after op %d", op, last)
				break
			}
			if op != opDelete && gone != nil {
				order, gone = without(order, gone), nil
			}
			last = op
			k, err := m.kc.decode(kb)
			if err != nil {
				r.fail("key: %v", err)
				break
			}
			var v V
			if op != opDelete {
				vb, ok := r.value()
				if !ok {
					break
				}
				if v, err = m.vc.decode(vb); err != nil {
					r.fail("value: %v", err)
					break
				}
			}
			if !all && !m.owns(k, lo, hi) {
				continue
			}
			if op == opAppend && all { // one map operation: a new key grows the map
				n := len(M)
				M[k] = v
				if len(M) > n {
					order = append(order, k)
					continue
				}
				r.fail("op %d of a key that is present", op)
				break
			}
			_, present := M[k]
			switch {
			case op == opAppend && !present:
				M[k] = v
				order = append(order, k)
			case op == opUpdate && present:
				M[k] = v
			case op == opDelete && present:
				delete(M, k)
				if gone == nil {
					gone = map[K]bool{}
				}
				gone[k] = true
			case op == opAppend && !all && i == 0:
				// a key of another instance's state too: the first kept
			default:
				r.fail("op %d of a key that is %s", op, map[bool]string{true: "present", false: "absent"}[present])
			}
			if r.err != nil {
				break
			}
		}
		if r.err == nil && r.i != len(r.b) {
			r.fail("%d bytes after the records", len(r.b)-r.i)
		}
		if r.err != nil {
			return M, order, fmt.Errorf("file %d of %d: %w", i+1, len(files), r.err)
		}
		if gone != nil {
			order = without(order, gone)
		}
	}
	return M, order, nil
}

// applyBaseMap reads a base in map order (kindBaseMap) into M and order:
// its records, then its order, which must name each of its keys once.
// Unless all, only the keys of groups [lo, hi) are kept, and a key that M
// has already (another instance's state, read before) keeps its value.
func (m *Mem[K, V]) applyBaseMap(c chainFile, M map[K]V, order []K, lo, hi int, all bool) ([]K, error) {
	r := c.r
	lb := r.bytes("layout", 1)
	if r.err != nil {
		return order, r.err
	}
	layout := lb[0]
	switch {
	case layout != layoutFixed && layout != layoutGeneric:
		r.fail("layout %d", layout)
	case layout == layoutFixed && !(m.kc.fixed() && m.vc.fixed()):
		r.fail("a base of 8-byte keys and values, not this table's")
	case layout == layoutFixed && c.count > uint64(len(r.b)-r.i)/17:
		r.fail("%d records of 16 bytes and more in %d bytes", c.count, len(r.b)-r.i)
	}
	if r.err != nil {
		return order, r.err
	}
	fixed := layout == layoutFixed
	keyBytes := func() ([]byte, bool) {
		kb := r.bytes("key", r.uvarint("key length", maxFile))
		return kb, r.err == nil
	}
	kdec, vdec := m.kc.decode, m.vc.decode
	key := func() (K, bool) { return baseField(r, fixed, "key", kdec, keyBytes) }
	record := func() (k K, v V, ok bool) {
		if k, ok = key(); ok {
			v, ok = baseField(r, fixed, "value", vdec, r.value)
		}
		return k, v, ok
	}
	var last uint64 // the order's previous key (8-byte keys: zigzag deltas)
	orderKey := func() (K, bool) {
		if !fixed {
			return key()
		}
		var k K
		z := r.uvarint("key of the order", math.MaxUint64)
		if r.err != nil {
			return k, false
		}
		last += uint64(int64(z>>1) ^ -int64(z&1))
		*(*uint64)(unsafe.Pointer(&k)) = last
		return k, true
	}
	if all && len(M) == 0 {
		return applyBaseMapFresh(c, M, order, record, orderKey)
	}
	mine := make(map[K]struct{}, min(c.count, 1<<20)) // the keys this base put into M, until its order names them
	for range c.count {
		k, v, ok := record()
		if !ok {
			break
		}
		if !all && !m.owns(k, lo, hi) {
			continue
		}
		if _, dup := mine[k]; dup {
			r.fail("a key twice in a base")
			break
		}
		if _, kept := M[k]; kept {
			continue // another instance's state has it (the first kept)
		}
		M[k] = v
		mine[k] = struct{}{}
	}
	for j := uint64(0); j < c.count && r.err == nil; j++ {
		k, ok := orderKey()
		if !ok {
			break
		}
		if _, ok := mine[k]; ok {
			delete(mine, k)
			order = append(order, k)
			continue
		}
		if all || m.owns(k, lo, hi) {
			if _, kept := M[k]; !kept || all {
				r.fail("the order names a key that is not in the base, or twice")
			}
		}
	}
	if r.err == nil && len(mine) > 0 {
		r.fail("%d keys of the base missing from its order", len(mine))
	}
	if r.err == nil && r.i != len(r.b) {
		r.fail("%d bytes after the records", len(r.b)-r.i)
	}
	return order, r.err
}

// baseField reads a key or value of a base in map order: 8 bytes big
// endian in the fixed layout, else the bytes raw gives, decoded by dec.
func baseField[T any](r *reader, fixed bool, what string, dec func([]byte) (T, error), raw func() ([]byte, bool)) (T, bool) {
	var x T
	if fixed {
		b := r.bytes(what, 8)
		if b == nil {
			return x, false
		}
		*(*uint64)(unsafe.Pointer(&x)) = binary.BigEndian.Uint64(b)
		return x, true
	}
	b, ok := raw()
	if !ok {
		return x, false
	}
	x, err := dec(b)
	if err != nil {
		r.fail("%s: %v", what, err)
		return x, false
	}
	return x, true
}

// applyBaseMapFresh is applyBaseMap into an empty M keeping every key (a
// restore at the same parallelism), without applyBaseMap's set of the
// base's keys (with 10 M keys that set made a recovery 5 times slower) and
// without a lookup in M per key of the order: each record must grow M by
// one (no key twice), and the sums of a seeded hash of the keys over the
// records and over the order's count keys must agree, so that the order is
// a permutation of the base's keys (a key of the order not in the base, or
// named twice in place of another, changes the sum unless hashes collide:
// about 2^-64 with a seed drawn at each restore, which the file's writer
// cannot know). The order is read in sequence, the map touched once a key.
func applyBaseMapFresh[K comparable, V any](c chainFile, M map[K]V, order []K, record func() (K, V, bool), orderKey func() (K, bool)) ([]K, error) {
	r := c.r
	seed := maphash.MakeSeed()
	var sum uint64
	for range c.count {
		k, v, ok := record()
		if !ok {
			break
		}
		n := len(M)
		M[k] = v
		if len(M) == n {
			r.fail("a key twice in a base")
			break
		}
		sum += maphash.Comparable(seed, k)
	}
	for j := uint64(0); j < c.count && r.err == nil; j++ {
		k, ok := orderKey()
		if !ok {
			break
		}
		sum -= maphash.Comparable(seed, k)
		order = append(order, k)
	}
	if r.err == nil && sum != 0 {
		r.fail("the order is not a permutation of the base's keys")
	}
	if r.err == nil && r.i != len(r.b) {
		r.fail("%d bytes after the records", len(r.b)-r.i)
	}
	return order, r.err
}

// baseFixed reads a base of 8-byte keys and values (op 1, length 8, key,
// length 8, value) into an empty M and order.
func baseFixed[K comparable, V any](c chainFile, M map[K]V, order []K) ([]K, error) {
	const size = 1 + 1 + 8 + 1 + 8
	b := c.r.b[c.r.i:]
	if uint64(len(b)) != c.count*size {
		return order, fmt.Errorf("%w: %d records in %d bytes: not all of 19 bytes", ErrChangelog, c.count, len(b))
	}
	for off := 0; off < len(b); off += size {
		rec := b[off : off+size : off+size]
		if rec[0] != opAppend || rec[1] != 8 || rec[10] != 8 {
			return order, fmt.Errorf("%w: byte %d: not an append of an 8-byte key and value", ErrChangelog, fileHeader+off)
		}
		var k K
		var v V
		*(*uint64)(unsafe.Pointer(&k)) = binary.BigEndian.Uint64(rec[2:10])
		*(*uint64)(unsafe.Pointer(&v)) = binary.BigEndian.Uint64(rec[11:19])
		n := len(M)
		M[k] = v
		if len(M) == n {
			return order, fmt.Errorf("%w: byte %d: a key twice in a base", ErrChangelog, fileHeader+off)
		}
		order = append(order, k)
	}
	return order, nil
}

// without is order without the keys of gone.
func without[K comparable](order []K, gone map[K]bool) []K {
	j := 0
	for _, k := range order {
		if !gone[k] {
			order[j] = k
			j++
		}
	}
	clear(order[j:])
	return order[:j]
}
