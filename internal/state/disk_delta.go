package state

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"
	"github.com/vmihailenco/msgpack/v5"
)

// The disk backend's incremental checkpoints by deltas. pebble's own
// incremental checkpoint (link the sstables, count the new ones) writes far
// more than the keys that changed: a key space updated at random overlaps
// every file of the level below L0, so each L0 compaction rewrites that
// level whole, and those files are new to the next checkpoint (at 10 M keys
// with 1 % changed between checkpoints, 12 % of a full checkpoint's bytes
// on average). So, as the memory backend's changelog does, the table tracks
// the keys put or deleted since its last checkpoint and a checkpoint writes
// either
//
//	chk/<checkpoint>-<instance>/   a base: pebble's checkpoint (the cache written back,
//	                               the memtable flushed, sstables linked) and SLUICE-STATE
//
// or
//
//	chk/<checkpoint>-<instance>/   a delta: SLUICE-DELTA, the changed keys' values and
//	                               tombstones, and SLUICE-STATE listing it
//
// The changed-key set holds each key's value as last put (shared with
// the cache, which counts it) or as last written back (counted in the
// set's bytes), so a delta reads neither the cache nor the database (at
// 10 M keys the cache lookups were half of a delta's CPU); it writes
// nothing back, flushes nothing. SLUICE-DELTA is a changelog file
// (the memory backend's format, kind 3) whose records are the database's
// own bytes (key group and encoded key; the stored value, with its time
// under a TTL): op 3 (delete) records first, then op 2 (set), in no
// particular order within each. A base is taken at a table's first checkpoint (after a restore
// too), after MaxChain deltas, when the deltas since the base pass half of
// its bytes, and when the keys changed since the last checkpoint outgrow
// the tracking's budget (an eighth of the table's): tracking then stops
// until the next checkpoint, a base.
//
// The handle of a checkpoint with deltas is of version 3 (version 4 for a
// savepoint's copy): the base's directory and checksum as in versions 1
// and 2, and the deltas', in order. A build that reads only versions 1 and
// 2 refuses it, naming the version.

const (
	kindDiskDelta = 3
	deltaName     = "SLUICE-DELTA"
)

// link is a delta of a handle: its directory ("<checkpoint>-<instance>"
// under chk) and its manifest's checksum; in a savepoint's copy (version
// 4) Rel, its place inside the savepoint, and Abs, where it is now.
type link struct {
	Dir string `msgpack:"dir"`
	CRC uint32 `msgpack:"crc"`
	Rel string `msgpack:"rel,omitempty"`
	Abs string `msgpack:"abs,omitempty"`
}

// diskInc is a disk table's change tracking and its last chain.
type diskInc[K comparable, V any] struct {
	track      bool
	chg        map[K]change[V]
	chgBytes   int64
	limit      int64
	base       link // the last base (Dir empty: none in this run)
	baseID     uint64
	baseBytes  int64
	deltas     []link // after it, through the last snapshot
	deltaBytes int64
	lastID     uint64 // the last snapshot's checkpoint
}

// change is a changed key's current value: as put (counted in the cache,
// heap 0), or as last written back to the database (heap: what v points
// to, counted in chgBytes), so that a delta reads no other map.
type change[V any] struct {
	v    V
	at   int64
	heap int64 // what v points to (counted in chgBytes)
	gone bool
}

// changed records that k was put or deleted (e: its new entry). flat says
// that K and V point to nothing (no heap to release): one map operation.
func (c *diskInc[K, V]) changed(k K, e entry[V], flat bool) {
	if !c.track {
		return
	}
	ch := change[V]{v: e.v, at: e.at, gone: e.gone}
	if flat {
		n := len(c.chg)
		c.chg[k] = ch
		if len(c.chg) > n {
			c.cost(k, nil)
		}
		return
	}
	old, ok := c.chg[k]
	c.chg[k] = ch
	if !ok {
		c.cost(k, nil)
	}
	c.chgBytes -= old.heap // the value it replaces no longer held here
}

// wrote records the value of k written back to the database, for a key
// changed since the last checkpoint (or any, with insert: a deletion made
// in the database alone); heap is what e.v points to (Disk.sizeOf's
// share of it beside the slot).
func (c *diskInc[K, V]) wrote(k K, e entry[V], heap int64, insert bool) {
	if !c.track {
		return
	}
	old, ok := c.chg[k]
	if !ok && !insert {
		return // not changed since the checkpoint (dirty from before it)
	}
	c.chg[k] = change[V]{v: e.v, at: e.at, heap: heap, gone: e.gone}
	if !ok {
		c.cost(k, nil)
	}
	c.chgBytes += heap - old.heap
	if c.chgBytes > c.limit {
		c.overflow()
	}
}

func (c *diskInc[K, V]) cost(k K, _ *V) {
	c.chgBytes += keyCost[K, V](k)
	if c.chgBytes > c.limit {
		c.overflow()
	}
}

// overflow stops tracking: the next checkpoint is a base.
func (c *diskInc[K, V]) overflow() {
	c.track, c.chg, c.chgBytes = false, nil, 0
}

// keyCost estimates a tracked key's memory: the key and its change, a
// string key's bytes, and its share of the map.
func keyCost[K comparable, V any](k K) int64 {
	n := int64(unsafe.Sizeof(k)) + int64(unsafe.Sizeof(change[V]{})) + 16
	if s, ok := any(k).(string); ok {
		n += int64(len(s))
	}
	return n
}

// restart starts tracking the changes after a snapshot.
func (c *diskInc[K, V]) restart(budget int64) {
	c.track, c.chgBytes, c.limit = true, 0, max(budget/8, 64<<10)
	if c.chg == nil {
		c.chg = map[K]change[V]{}
	} else {
		clear(c.chg)
	}
}

// reset forgets the chain (after a restore: the next snapshot is a base).
func (c *diskInc[K, V]) reset() {
	*c = diskInc[K, V]{}
}

// canDelta says whether the next snapshot may be a delta.
func (c *diskInc[K, V]) canDelta(maxChain int) bool {
	return c.track && c.base.Dir != "" && len(c.deltas) < maxChain && c.deltaBytes <= c.baseBytes/2
}

// handle is the handle of the last snapshot's chain.
func (c *diskInc[K, V]) handle(ttl bool) ([]byte, error) {
	if len(c.deltas) == 0 {
		return msgpack.Marshal(&handle{V: 1, Dir: c.base.Dir, CRC: c.base.CRC, TTL: ttl})
	}
	return msgpack.Marshal(&handle{V: 3, Dir: c.base.Dir, CRC: c.base.CRC, TTL: ttl, Deltas: c.deltas})
}

// based records a base snapshot.
func (c *diskInc[K, V]) based(id uint64, name string, crc uint32, bytes int64, budget int64) {
	c.base, c.baseID, c.baseBytes = link{Dir: name, CRC: crc}, id, bytes
	c.deltas, c.deltaBytes, c.lastID = nil, 0, id
	c.restart(budget)
}

// snapshotDelta writes checkpoint id as a delta: the keys changed since
// the last snapshot, read from the cache or the database.
func (d *Disk[K, V]) snapshotDelta(id uint64) ([]byte, error) {
	c := &d.inc
	chk := filepath.Join(d.opDir, "chk")
	name := fmt.Sprintf("%d-%d", id, d.inst)
	final, tmp := filepath.Join(chk, name), filepath.Join(chk, name+".tmp")
	_ = os.RemoveAll(tmp)
	_ = os.RemoveAll(final)
	// Tombstones first, then sets (the order the decoder requires), each
	// key's value as the change set holds it (as put or deleted, or as
	// written back since).
	out := make([]byte, fileHeader, fileHeader+len(c.chg)*32)
	copy(out, fileMagic)
	out[4], out[5] = changelogVersion, kindDiskDelta
	binary.BigEndian.PutUint64(out[6:], id)
	binary.BigEndian.PutUint64(out[14:], c.lastID)
	// One pass over the changed keys: tombstones into out, sets into
	// sets, appended after them.
	sets := make([]byte, 0, len(c.chg)*24)
	var n uint64
	rec := func(k K, gone bool, v []byte) {
		d.kbuf = d.key(d.kbuf[:0], k)
		if gone {
			out = append(out, opDelete)
			out = binary.AppendUvarint(out, uint64(len(d.kbuf)))
			out = append(out, d.kbuf...)
		} else {
			sets = append(sets, opUpdate)
			sets = binary.AppendUvarint(sets, uint64(len(d.kbuf)))
			sets = append(sets, d.kbuf...)
			sets = binary.AppendUvarint(sets, uint64(len(v)))
			sets = append(sets, v...)
		}
		n++
	}
	for k, ch := range c.chg {
		if ch.gone {
			rec(k, true, nil)
			continue
		}
		d.vbuf = d.appendStored(d.vbuf[:0], entry[V]{v: ch.v, at: ch.at})
		rec(k, false, d.vbuf)
	}
	out = append(out, sets...)
	binary.BigEndian.PutUint64(out[22:], n)
	sum := crc32.Checksum(out, clTable)
	out = binary.BigEndian.AppendUint32(out, sum)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, &Error{Path: tmp, Err: err}
	}
	fail := func(p string, err error) ([]byte, error) {
		_ = os.RemoveAll(tmp)
		return nil, &Error{Path: p, Err: err}
	}
	if err := writeSync(filepath.Join(tmp, deltaName), out); err != nil {
		return fail(filepath.Join(tmp, deltaName), err)
	}
	// The delta file's CRC-32C over all its bytes (the manifest's check),
	// beside the one it ends with (the changelog format's).
	m := &manifest{ID: id, Inst: d.inst, Files: []fileInfo{{Name: deltaName, Size: int64(len(out)), CRC: crc32.Checksum(out, castagnoli)}}}
	crc, err := writeManifest(tmp, m)
	if err != nil {
		return fail(filepath.Join(tmp, manifestName), err)
	}
	syncDir(tmp)
	if err := os.Rename(tmp, final); err != nil {
		return fail(final, err)
	}
	syncDir(chk)
	c.deltas = append(c.deltas[:len(c.deltas):len(c.deltas)], link{Dir: name, CRC: crc})
	c.deltaBytes += int64(len(out))
	c.lastID = id
	c.restart(d.spec.Budget)
	d.Stats.LastBytes, d.Stats.LastNew, d.Stats.LastDelta = c.baseBytes+c.deltaBytes, int64(len(out)), true
	return c.handle(d.ttl > 0)
}

// appendStored appends an entry's value as the database stores it.
func (d *Disk[K, V]) appendStored(b []byte, e entry[V]) []byte {
	if d.ttl > 0 {
		b = binary.BigEndian.AppendUint64(b, uint64(e.at))
	}
	b, err := d.vc.append(b, e.v)
	if err != nil {
		d.fail(err)
	}
	return b
}

// writeManifest writes dir's SLUICE-STATE for m, fsync'd, and returns
// the checksum the handle records.
func writeManifest(dir string, m *manifest) (uint32, error) {
	body, err := msgpack.Marshal(m)
	if err != nil {
		return 0, err
	}
	crc := crc32.Checksum(body, castagnoli)
	out := append([]byte(manifestMagic), body...)
	out = append(out, byte(crc>>24), byte(crc>>16), byte(crc>>8), byte(crc))
	return crc, writeSync(filepath.Join(dir, manifestName), out)
}

// deltaRecords checks a disk delta file (a changelog file of kind 3)
// whole and gives each record to fn (when not nil): op 3 (delete, v nil)
// or 2 (set), k and v the database's bytes. Every length is checked
// against what is left, the ops' order, each key's group; a failure
// wraps ErrChangelog and says where.
func deltaRecords(data []byte, fn func(op byte, k, v []byte) error) (chainFile, error) {
	c, err := openFile(data)
	if err != nil {
		return c, err
	}
	if c.kind != kindDiskDelta {
		return c, fmt.Errorf("%w: a changelog file of kind %d, not a disk state delta (kind %d)", ErrChangelog, c.kind, kindDiskDelta)
	}
	r := c.r
	last := byte(opDelete)
	for range c.count {
		op, kb, ok := r.opKey()
		if !ok {
			break
		}
		if op != opDelete && op != opUpdate || op > last {
			r.fail("op %d after op %d (a disk delta holds deletes, then sets)", op, last)
			break
		}
		last = op
		if len(kb) < 1 || kb[0] >= 128 {
			r.fail("key %x: not a key group and key", kb)
			break
		}
		var vb []byte
		if op == opUpdate {
			if vb, ok = r.value(); !ok {
				break
			}
		}
		if fn != nil {
			if err := fn(op, kb, vb); err != nil {
				return c, err
			}
		}
	}
	if r.err == nil && r.i != len(r.b) {
		r.fail("%d bytes after the records", len(r.b)-r.i)
	}
	return c, r.err
}

// chainOf checks a handle's base and deltas (opDir: the operator's
// directory, for versions 1 and 3) and returns the base's directory and
// the deltas' files, read and checked.
func chainOf(h *handle, opDir string) (string, [][]byte, error) {
	dir, err := h.location(opDir)
	if err != nil {
		return "", nil, err
	}
	if err := verifyDir(dir, h.CRC); err != nil {
		return "", nil, err
	}
	prev := listChkOne(h.Dir).id
	files := make([][]byte, len(h.Deltas))
	for i, l := range h.Deltas {
		ddir, err := h.deltaLocation(opDir, l)
		if err != nil {
			return "", nil, err
		}
		if err := verifyDir(ddir, l.CRC); err != nil {
			return "", nil, err
		}
		p := filepath.Join(ddir, deltaName)
		data, err := os.ReadFile(p)
		if err != nil {
			return "", nil, &Error{Path: p, Err: fmt.Errorf("%w: %v", ErrCorrupt, err)}
		}
		c, err := deltaRecords(data, nil)
		if err == nil {
			switch id := listChkOne(l.Dir).id; {
			case c.id != id:
				err = fmt.Errorf("%w: the delta of checkpoint %d, in the directory of checkpoint %d", ErrChangelog, c.id, id)
			case c.prev != prev:
				err = fmt.Errorf("%w: delta %d of %d follows checkpoint %d, not %d (out of chain)", ErrChangelog, i+1, len(h.Deltas), c.prev, prev)
			}
		}
		if err != nil {
			return "", nil, &Error{Path: p, Err: fmt.Errorf("%w: %w", ErrCorrupt, err)}
		}
		prev = c.id
		files[i] = data
	}
	return dir, files, nil
}

// deltaLocation is the directory of a handle's delta l.
func (h *handle) deltaLocation(opDir string, l link) (string, error) {
	if listChkOne(l.Dir) == nil {
		return "", fmt.Errorf("disk state handle: bad delta directory %q", l.Dir)
	}
	if h.V == 3 {
		return filepath.Join(opDir, "chk", l.Dir), nil
	}
	if !filepath.IsLocal(l.Rel) || !filepath.IsAbs(l.Abs) {
		return "", fmt.Errorf("disk state handle of a savepoint (delta %q): not resolved against its savepoint (%q)", l.Rel, l.Abs)
	}
	return l.Abs, nil
}

// applyDelta applies a checked delta file to db, only the keys of groups
// [lo, hi).
func applyDelta(db *pebble.DB, path string, data []byte, lo, hi int) error {
	b := db.NewBatch()
	_, err := deltaRecords(data, func(op byte, k, v []byte) error {
		if int(k[0]) < lo || int(k[0]) >= hi {
			return nil
		}
		var err error
		if op == opDelete {
			err = b.Delete(k, nil)
		} else {
			err = b.Set(k, v, nil)
		}
		if err == nil && b.Len() > 1<<20 { // under half a memtable: inserted, not a flushable batch of its own
			if err = b.Commit(pebble.NoSync); err == nil {
				b.Close()
				b = db.NewBatch()
			}
		}
		return err
	})
	if err == nil {
		err = b.Commit(pebble.NoSync)
	}
	b.Close()
	if err != nil {
		return &Error{Path: path, Err: err}
	}
	return nil
}

// retainChains removes the checkpoint directories of chk that no
// retained checkpoint needs: for each instance (this table's, or every
// one for instance 0), those older than the oldest base a retained
// checkpoint of the instance's chains on, and, for an instance without a
// retained checkpoint (one a rescale left), those older than the oldest
// retained.
func retainChains(chk string, all []chkName, keep []uint64, mine func(inst int) bool) {
	byInst := map[int][]chkName{}
	for _, c := range all {
		if mine(c.inst) {
			byInst[c.inst] = append(byInst[c.inst], c)
		}
	}
	for _, cs := range byInst {
		has := map[uint64]bool{}
		var bases []uint64
		for _, c := range cs {
			if c.tmp {
				continue
			}
			has[c.id] = true
			if _, err := os.Stat(filepath.Join(chk, c.name, deltaName)); err != nil {
				bases = append(bases, c.id)
			}
		}
		lowest := keep[0]
		for _, x := range keep {
			if !has[x] {
				continue
			}
			b, found := uint64(0), false
			for _, id := range bases {
				if id <= x && (!found || id > b) {
					b, found = id, true
				}
			}
			if !found {
				b = 0 // no base found: keep every older directory
			}
			lowest = min(lowest, b)
		}
		for _, c := range cs {
			if c.id < lowest {
				_ = os.RemoveAll(filepath.Join(chk, c.name))
			}
		}
	}
}
