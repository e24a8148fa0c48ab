package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/cluster/replication"
)

// The replicated logs of a node live in its store (the System's bbolt
// file), one bucket each:
//
//	cluster-logs/<log>/meta           promised epoch, base index, base epoch (3 × 8 bytes)
//	cluster-logs/<log>/entries/<idx>  epoch (8 bytes) + the entry's data
//
// A node holds one copy of each log it leads or replicates: the leader
// appends to it, a replica applies appends to it, and a node that takes
// over a job leads the log it held as a replica.
var (
	logsBucket    = []byte("cluster-logs")
	metaKey       = []byte("meta")
	entriesBucket = []byte("entries")
)

// ErrFenced: a newer leader (a higher epoch) owns the log; this node no
// longer writes to it.
var ErrFenced = errors.New("cluster: fenced by a newer leader")

type logMeta struct{ promised, baseIndex, baseEpoch uint64 }

func (m logMeta) encode() []byte {
	b := make([]byte, 24)
	binary.BigEndian.PutUint64(b, m.promised)
	binary.BigEndian.PutUint64(b[8:], m.baseIndex)
	binary.BigEndian.PutUint64(b[16:], m.baseEpoch)
	return b
}

func idxKey(i uint64) []byte { return binary.BigEndian.AppendUint64(nil, i) }

type logStore struct{ db *bolt.DB }

// logTx is one log inside a transaction; it is a replication.FollowerLog.
type logTx struct {
	name    string
	b       *bolt.Bucket // nil: the log does not exist (read-only tx)
	entries *bolt.Bucket
	meta    logMeta
}

func openLog(tx *bolt.Tx, name string) (*logTx, error) {
	l := &logTx{name: name}
	root := tx.Bucket(logsBucket)
	if tx.Writable() {
		var err error
		if root, err = tx.CreateBucketIfNotExists(logsBucket); err != nil {
			return nil, err
		}
		if l.b, err = root.CreateBucketIfNotExists([]byte(name)); err != nil {
			return nil, err
		}
		if l.entries, err = l.b.CreateBucketIfNotExists(entriesBucket); err != nil {
			return nil, err
		}
	} else if root != nil {
		if l.b = root.Bucket([]byte(name)); l.b != nil {
			l.entries = l.b.Bucket(entriesBucket)
		}
	}
	if l.b == nil {
		return l, nil
	}
	if v := l.b.Get(metaKey); v != nil {
		if len(v) != 24 {
			return nil, fmt.Errorf("log %q: damaged meta record (%d bytes)", name, len(v))
		}
		l.meta = logMeta{binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:]), binary.BigEndian.Uint64(v[16:])}
	}
	return l, nil
}

func (l *logTx) saveMeta() error { return l.b.Put(metaKey, l.meta.encode()) }

func (l *logTx) Promised() uint64       { return l.meta.promised }
func (l *logTx) Base() (uint64, uint64) { return l.meta.baseIndex, l.meta.baseEpoch }
func (l *logTx) Last() uint64 {
	if l.entries != nil {
		if k, _ := l.entries.Cursor().Last(); k != nil {
			return binary.BigEndian.Uint64(k)
		}
	}
	return l.meta.baseIndex
}

func (l *logTx) EpochAt(i uint64) (uint64, bool) {
	if l.entries == nil {
		return 0, false
	}
	v := l.entries.Get(idxKey(i))
	if len(v) < 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(v), true
}

func (l *logTx) entry(i uint64) (replication.Entry, bool) {
	if l.entries == nil {
		return replication.Entry{}, false
	}
	v := l.entries.Get(idxKey(i))
	if len(v) < 8 {
		return replication.Entry{}, false
	}
	return replication.Entry{Index: i, Epoch: binary.BigEndian.Uint64(v), Data: append([]byte(nil), v[8:]...)}, true
}

func (l *logTx) put(e replication.Entry) error {
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(e.Data)), e.Epoch)
	return l.entries.Put(idxKey(e.Index), append(v, e.Data...))
}

// deleteFrom removes the entries with index >= from.
func (l *logTx) deleteFrom(from uint64) error {
	c := l.entries.Cursor()
	for k, _ := c.Seek(idxKey(from)); k != nil; k, _ = c.Seek(idxKey(from)) {
		if err := l.entries.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// compact drops the entries before first, keeping the one at first.
func (l *logTx) compact(first uint64) error {
	if first <= l.meta.baseIndex+1 || first > l.Last() {
		return nil
	}
	baseEpoch, ok := l.EpochAt(first - 1)
	if !ok {
		return fmt.Errorf("log %q: compact before %d: entry %d missing", l.name, first, first-1)
	}
	c := l.entries.Cursor()
	for k, _ := c.First(); k != nil && binary.BigEndian.Uint64(k) < first; k, _ = c.First() {
		if err := l.entries.Delete(k); err != nil {
			return err
		}
	}
	l.meta.baseIndex, l.meta.baseEpoch = first-1, baseEpoch
	return l.saveMeta()
}

// info describes the log for a leader taking office.
func (l *logTx) info() replication.LogInfo {
	info := replication.LogInfo{First: l.meta.baseIndex + 1, Last: l.Last()}
	if l.meta.baseIndex > 0 {
		info.Epochs = append(info.Epochs, replication.EpochStart{Epoch: l.meta.baseEpoch, Start: l.meta.baseIndex})
	}
	if l.entries != nil {
		c := l.entries.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			e := binary.BigEndian.Uint64(v)
			if n := len(info.Epochs); n == 0 || info.Epochs[n-1].Epoch != e {
				info.Epochs = append(info.Epochs, replication.EpochStart{Epoch: e, Start: binary.BigEndian.Uint64(k)})
			}
		}
	}
	return info
}

func (s *logStore) update(name string, fn func(*logTx) error) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		l, err := openLog(tx, name)
		if err != nil {
			return err
		}
		return fn(l)
	})
}

func (s *logStore) view(name string, fn func(*logTx) error) error {
	return s.db.View(func(tx *bolt.Tx) error {
		l, err := openLog(tx, name)
		if err != nil {
			return err
		}
		return fn(l)
	})
}

// takeOffice promises the next epoch of the log to this node as its leader
// and returns it with the log's info.
func (s *logStore) takeOffice(name string) (epoch uint64, info replication.LogInfo, err error) {
	err = s.update(name, func(l *logTx) error {
		if l.meta.promised >= replication.Limit-1 {
			return fmt.Errorf("%w: the log promised epoch %d", replication.ErrOutOfRange, l.meta.promised)
		}
		l.meta.promised++
		epoch = l.meta.promised
		info = l.info()
		return l.saveMeta()
	})
	return epoch, info, err
}

// takeOfficeAt makes this node (named self) the leader of the log in
// epoch, which a majority of its copies promised it (see vote): this
// node's own promise must still be that one.
func (s *logStore) takeOfficeAt(name string, epoch uint64, self string) error {
	return s.update(name, func(l *logTx) error {
		if v := l.vote(); l.meta.promised != epoch || v.epoch != epoch || v.candidate != self {
			return fmt.Errorf("%w: epoch %d was won here, the log has promised %d to %q since", ErrFenced, epoch, v.epoch, v.candidate)
		}
		return nil
	})
}

// info returns the log's info (for a leader taking office).
func (s *logStore) info(name string) (info replication.LogInfo) {
	_ = s.view(name, func(l *logTx) error {
		info = l.info()
		return nil
	})
	return info
}

// appendEntry appends the entry build returns as the leader of epoch;
// build sees the data of the last entry first (nil when none), and its
// error refuses the append.
func (s *logStore) appendEntry(name string, epoch uint64, build func(last []byte) ([]byte, error)) (index uint64, err error) {
	err = s.update(name, func(l *logTx) error {
		if l.meta.promised > epoch {
			return fmt.Errorf("%w (epoch %d, the log promised %d)", ErrFenced, epoch, l.meta.promised)
		}
		last := l.Last()
		var prev []byte
		if e, ok := l.entry(last); ok {
			prev = e.Data
		}
		data, err := build(prev)
		if err != nil {
			return err
		}
		if last >= replication.Limit-1 || epoch >= replication.Limit {
			return fmt.Errorf("%w: entry %d of epoch %d", replication.ErrOutOfRange, last+1, epoch)
		}
		index = last + 1
		return l.put(replication.Entry{Index: index, Epoch: epoch, Data: data})
	})
	return index, err
}

// receive applies an append as a replica: Decide, then its decision, in one
// transaction; entries before the commit index are compacted away.
func (s *logStore) receive(name string, a replication.Append) (reply replication.Reply, err error) {
	err = s.update(name, func(l *logTx) error {
		d := replication.Decide(l, a)
		if d.Err != nil {
			return d.Err
		}
		reply = d.Reply
		if d.Promise > l.meta.promised {
			l.meta.promised = d.Promise
		}
		if d.Reset {
			if err := l.deleteFrom(0); err != nil {
				return err
			}
			l.meta.baseIndex, l.meta.baseEpoch = a.Prev, a.PrevEpoch
		}
		if d.Truncate {
			if err := l.deleteFrom(d.TruncateAfter + 1); err != nil {
				return err
			}
		}
		for _, e := range d.Append {
			if err := l.put(e); err != nil {
				return err
			}
		}
		if err := l.saveMeta(); err != nil {
			return err
		}
		if reply.Result == replication.OK && a.Commit > 0 {
			return l.compact(min(a.Commit, reply.Match))
		}
		return nil
	})
	return reply, err
}

func (s *logStore) entries(name string, from, to uint64) (out []replication.Entry, err error) {
	err = s.view(name, func(l *logTx) error {
		for i := from; i <= to && to >= from; i++ {
			e, ok := l.entry(i)
			if !ok {
				return fmt.Errorf("log %q: entry %d missing", name, i)
			}
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

func (s *logStore) compact(name string, first uint64) error {
	return s.update(name, func(l *logTx) error { return l.compact(first) })
}

// last returns the log's last entry, and false when it has none.
func (s *logStore) last(name string) (e replication.Entry, ok bool, err error) {
	err = s.view(name, func(l *logTx) error {
		e, ok = l.entry(l.Last())
		return nil
	})
	return e, ok, err
}

// HeldLog describes a replicated log a node holds, as leader or replica.
type HeldLog struct {
	Log string
	// Promised is the newest epoch the node accepted for it.
	Promised uint64
	// First and Last bound the entries it holds.
	First, Last uint64
	// LastEpoch is the epoch of the last entry.
	LastEpoch uint64
	// Checkpoint is the id of the newest checkpoint in a checkpoint log
	// (0: none, or cleared).
	Checkpoint uint64
	// Coordinator names the node that runs the job of a checkpoint log
	// ("" when the job was not run by Run), and Running says whether its
	// run goes on (if that node is lost, the copies elect another).
	Coordinator string
	Running     bool
	// Copies names the nodes that hold the log, as its last entry says:
	// a majority of them elects a new coordinator.
	Copies []string
}

// held lists the logs in the store.
func (s *logStore) held() (out []HeldLog, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		root := tx.Bucket(logsBucket)
		if root == nil {
			return nil
		}
		return root.ForEachBucket(func(k []byte) error {
			l, err := openLog(tx, string(k))
			if err != nil {
				return err
			}
			h := HeldLog{Log: string(k), Promised: l.meta.promised, First: l.meta.baseIndex + 1, Last: l.Last()}
			h.LastEpoch, _ = l.EpochAt(h.Last)
			if h.Last == l.meta.baseIndex {
				h.LastEpoch = l.meta.baseEpoch
			}
			if e, ok := l.entry(h.Last); ok && strings.HasPrefix(h.Log, "checkpoints/") {
				if cp, run, err := decodeEntry(e.Data); err == nil {
					if cp != nil {
						h.Checkpoint = cp.ID
					}
					if run != nil {
						h.Coordinator, h.Running, h.Copies = run.Coordinator, run.Running, run.Copies
					}
				}
			}
			out = append(out, h)
			return nil
		})
	})
	return out, err
}
