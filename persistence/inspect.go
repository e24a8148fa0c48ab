package persistence

import (
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Inventory is what a store file holds: the journals, snapshots and
// checkpoints, as Inspect found them.
type Inventory struct {
	Journals    []JournalInfo    // by persistence id
	Log         LogInfo          // the journal's log, not compacted yet
	Snapshots   []SnapshotInfo   // by persistence id, then seq
	Checkpoints []CheckpointInfo // by job
}

// JournalInfo describes the journal of one persistence id.
type JournalInfo struct {
	ID      string
	Lowest  uint64 // the first event kept (0: none kept)
	Highest uint64 // the highest sequence number ever appended
	Events  int    // events kept
	Bytes   int64  // their encoded size
	Damaged int    // runs of events that do not decode (not counted in Events)
}

// LogInfo describes the journal's log: the group commits not yet compacted
// into the journals of their ids (their events are counted there too).
type LogInfo struct {
	Entries int
	Events  int
	Bytes   int64
	Damaged int // entries that do not decode
}

// SnapshotInfo describes one stored snapshot.
type SnapshotInfo struct {
	ID   string
	Seq  uint64
	Size int // bytes of state
	Time time.Time
	Err  error // set when the record does not decode
}

// CheckpointInfo describes the newest completed checkpoint of a job.
type CheckpointInfo struct {
	Job     string
	ID      uint64
	Time    time.Time
	States  int   // operator instance states
	Offsets int   // source partition offsets
	Bytes   int   // the record's size
	Err     error // set when the record does not decode
}

// Inspect reads what db holds, in one read transaction: it never writes, so
// it works on a database opened read-only. A record that does not decode is
// reported in its entry's Err; a damaged layout (a key that is not a
// sequence number) is an error.
func Inspect(db *bolt.DB) (*Inventory, error) {
	inv := &Inventory{}
	err := db.View(func(tx *bolt.Tx) error {
		if err := inspectJournals(tx, inv); err != nil {
			return err
		}
		if err := inspectSnapshots(tx, inv); err != nil {
			return err
		}
		return inspectCheckpoints(tx, inv)
	})
	if err != nil {
		return nil, fmt.Errorf("persistence: inspect %s: %w", db.Path(), err)
	}
	return inv, nil
}

func inspectJournals(tx *bolt.Tx, inv *Inventory) error {
	root := tx.Bucket(journalBucket)
	if root == nil {
		return nil
	}
	byID := map[string]*JournalInfo{}
	get := func(id string) *JournalInfo {
		if ji := byID[id]; ji != nil {
			return ji
		}
		ji := &JournalInfo{ID: id}
		byID[id] = ji
		return ji
	}
	if h := root.Bucket(highestBucket); h != nil {
		if err := h.ForEach(func(k, v []byte) error {
			seq, err := readHighest(v)
			if err != nil {
				return fmt.Errorf("journal %q: highest seq: %w", k, err)
			}
			get(string(k)).Highest = seq
			return nil
		}); err != nil {
			return err
		}
	}
	if ev := root.Bucket(eventsBucket); ev != nil {
		if err := ev.ForEachBucket(func(name []byte) error {
			ji := get(string(name))
			return ev.Bucket(name).ForEach(func(k, v []byte) error {
				seq, err := keySeq(k)
				if err != nil {
					return fmt.Errorf("journal %q: %w", name, err)
				}
				recs, err := decodeRun(v)
				if err != nil {
					ji.Damaged++
					return nil
				}
				if ji.Events == 0 || seq < ji.Lowest {
					ji.Lowest = seq
				}
				ji.Events += len(recs)
				ji.Bytes += int64(len(v))
				return nil
			})
		}); err != nil {
			return err
		}
	}
	if log := root.Bucket(logBucket); log != nil {
		if err := log.ForEach(func(k, v []byte) error {
			if _, err := keySeq(k); err != nil {
				return fmt.Errorf("journal log: %w", err)
			}
			inv.Log.Entries++
			inv.Log.Bytes += int64(len(v))
			apps, err := decodeGroup(v)
			if err != nil {
				inv.Log.Damaged++
				return nil
			}
			for _, a := range apps {
				ji := get(a.id)
				if ji.Events == 0 || a.first < ji.Lowest {
					ji.Lowest = a.first
				}
				ji.Events += len(a.recs)
				inv.Log.Events += len(a.recs)
				for _, r := range a.recs {
					ji.Bytes += int64(len(r))
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	for _, ji := range byID {
		inv.Journals = append(inv.Journals, *ji)
	}
	slices.SortFunc(inv.Journals, func(a, b JournalInfo) int { return strings.Compare(a.ID, b.ID) })
	return nil
}

func inspectSnapshots(tx *bolt.Tx, inv *Inventory) error {
	root := tx.Bucket(snapshotsBucket)
	if root == nil {
		return nil
	}
	return root.ForEachBucket(func(name []byte) error {
		return root.Bucket(name).ForEach(func(k, v []byte) error {
			seq, err := keySeq(k)
			if err != nil {
				return fmt.Errorf("snapshot %q: %w", name, err)
			}
			si := SnapshotInfo{ID: string(name), Seq: seq, Size: len(v)}
			if s, err := decodeSnapshot(v); err != nil {
				si.Err = err
			} else {
				si.Size, si.Time = len(s.Data), s.Time
			}
			inv.Snapshots = append(inv.Snapshots, si)
			return nil
		})
	})
}

func inspectCheckpoints(tx *bolt.Tx, inv *Inventory) error {
	root := tx.Bucket(checkpointsBucket)
	if root == nil {
		return nil
	}
	return root.ForEachBucket(func(name []byte) error {
		k, v := root.Bucket(name).Cursor().Last()
		if k == nil {
			return nil
		}
		id, err := keySeq(k)
		if err != nil {
			return fmt.Errorf("job %q: %w", name, err)
		}
		ci := CheckpointInfo{Job: string(name), ID: id, Bytes: len(v)}
		if cp, err := decodeCheckpoint(v); err != nil {
			ci.Err = err
		} else {
			ci.Time, ci.States, ci.Offsets = cp.Time, len(cp.States), len(cp.Offsets)
		}
		inv.Checkpoints = append(inv.Checkpoints, ci)
		return nil
	})
}
