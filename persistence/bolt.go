package persistence

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/internal/store"
)

// The layout of the bbolt stores, in top-level buckets of their own:
//
//	journal/log/<position>                 a log entry: the appends of one group commit
//	journal/events/<persistence id>/<seq>  an event record, moved from the log by compaction
//	journal/highest/<persistence id>       the highest sequence number ever appended
//	snapshots/<persistence id>/<seq>       a snapshot record
//	checkpoints/<job>/<checkpoint id>      a checkpoint record (the newest only)
//
// Sequence numbers, log positions and checkpoint ids are 8-byte big-endian keys, so that
// bbolt's order is theirs. The highest sequence number is kept apart from
// the events so that deleting events never lowers it.
var (
	journalBucket     = []byte("journal")
	eventsBucket      = []byte("events")
	highestBucket     = []byte("highest")
	logBucket         = []byte("log")
	snapshotsBucket   = []byte("snapshots")
	checkpointsBucket = []byte("checkpoints")
)

// ErrForeignFile, ErrNewerFile, ErrCorruptFile and ErrLockedFile describe a
// store file that Open refuses: written by another program, by a newer
// sluice, damaged, or held by another process. Nothing in it is changed.
var (
	ErrForeignFile = store.ErrForeign
	ErrNewerFile   = store.ErrNewer
	ErrCorruptFile = store.ErrCorrupt
	ErrLockedFile  = store.ErrLocked
)

// Store is the persistence of one store file: its journal, snapshots and
// checkpoints. Open it with Open; inside an actors.System, use the system's
// DB with NewBoltJournal, NewBoltSnapshotStore and NewBoltCheckpointStore
// instead.
type Store struct {
	file        *store.File
	journal     *BoltJournal
	snapshots   *BoltSnapshotStore
	checkpoints *BoltCheckpointStore
}

// Open opens or creates the store file at path (mode 0600) through sluice's
// store format: a file written by another program, by a newer sluice, or
// damaged, is refused with an error that names it, and is left as it was.
func Open(path string) (*Store, error) {
	f, err := store.Open(path)
	if err != nil {
		return nil, fmt.Errorf("persistence: %w", err)
	}
	s := &Store{file: f}
	s.journal, _ = NewBoltJournal(f.DB) // errors only for a nil DB
	s.snapshots, _ = NewBoltSnapshotStore(f.DB)
	s.checkpoints, _ = NewBoltCheckpointStore(f.DB)
	return s, nil
}

// Journal returns the store's journal.
func (s *Store) Journal() *BoltJournal { return s.journal }

// Snapshots returns the store's snapshots.
func (s *Store) Snapshots() *BoltSnapshotStore { return s.snapshots }

// Checkpoints returns the store's checkpoints.
func (s *Store) Checkpoints() *BoltCheckpointStore { return s.checkpoints }

// DB returns the open bbolt database.
func (s *Store) DB() *bolt.DB { return s.file.DB }

// Path returns the store's file name.
func (s *Store) Path() string { return s.file.Path }

// Close stops the journal, after committing the appends already queued, and
// closes the file.
func (s *Store) Close() error {
	return errors.Join(s.journal.Close(), s.file.Close())
}

// BoltSnapshotStore is a SnapshotStore in a bbolt database's "snapshots"
// bucket. Each Save is a transaction of its own. Safe for concurrent use.
type BoltSnapshotStore struct {
	db    *bolt.DB
	where string
}

// NewBoltSnapshotStore returns the snapshot store in db (typically the
// system's store, actors.System.DB).
func NewBoltSnapshotStore(db *bolt.DB) (*BoltSnapshotStore, error) {
	if db == nil {
		return nil, errors.New("persistence: snapshot store: nil bbolt database")
	}
	return &BoltSnapshotStore{db: db, where: " in " + db.Path()}, nil
}

// Save implements SnapshotStore. A snapshot with the Seq of an existing one
// replaces it.
func (s *BoltSnapshotStore) Save(ctx context.Context, id string, snap Snapshot) error {
	if err := checkID("snapshot store", id); err != nil {
		return err
	}
	rec := encodeSnapshot(snap)
	if len(rec) > bolt.MaxValueSize {
		return fmt.Errorf("persistence: snapshot %q seq %d%s: %d bytes (at most %d)", id, snap.Seq, s.where, len(rec), bolt.MaxValueSize)
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		root, err := tx.CreateBucketIfNotExists(snapshotsBucket)
		if err != nil {
			return err
		}
		b, err := root.CreateBucketIfNotExists([]byte(id))
		if err != nil {
			return err
		}
		return b.Put(seqKey(snap.Seq), rec)
	})
	if err != nil {
		return fmt.Errorf("persistence: snapshot %q seq %d%s: save: %w", id, snap.Seq, s.where, err)
	}
	return nil
}

// Latest implements SnapshotStore. A newest snapshot that does not decode
// is an error (a *DecodeError), not a reason to fall back to an older one.
func (s *BoltSnapshotStore) Latest(ctx context.Context, id string) (Snapshot, bool, error) {
	return s.Select(ctx, id, SnapshotCriteria{})
}

// Select implements SnapshotStore. It walks back from the newest snapshot
// at or below c.MaxSeq; one that does not decode is an error (a
// *DecodeError).
func (s *BoltSnapshotStore) Select(ctx context.Context, id string, c SnapshotCriteria) (snap Snapshot, ok bool, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		root := tx.Bucket(snapshotsBucket)
		if root == nil {
			return nil
		}
		b := root.Bucket([]byte(id))
		if b == nil {
			return nil
		}
		cur := b.Cursor()
		var k, v []byte
		switch {
		case c.MaxSeq == 0:
			k, v = cur.Last()
		default:
			want := seqKey(c.MaxSeq)
			k, v = cur.Seek(want) // the first key at or past MaxSeq
			switch {
			case k == nil: // every snapshot is below MaxSeq
				k, v = cur.Last()
			case !bytes.Equal(k, want):
				k, v = cur.Prev()
			}
		}
		for ; k != nil; k, v = cur.Prev() {
			seq, err := keySeq(k)
			if err != nil {
				return &DecodeError{File: s.db.Path(), What: "snapshot", ID: id, Err: err}
			}
			got, err := decodeSnapshot(v)
			if err != nil {
				return &DecodeError{File: s.db.Path(), What: "snapshot", ID: id, Seq: seq, Err: err}
			}
			got.Seq = seq
			if c.admits(got) {
				snap, ok = got, true
				return nil
			}
		}
		return nil
	})
	if err != nil {
		var de *DecodeError
		if errors.As(err, &de) {
			return Snapshot{}, false, err
		}
		return Snapshot{}, false, fmt.Errorf("persistence: snapshot %q%s: select: %w", id, s.where, err)
	}
	return snap, ok, nil
}

// Delete implements SnapshotStore.
func (s *BoltSnapshotStore) Delete(ctx context.Context, id string, seq uint64) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		root := tx.Bucket(snapshotsBucket)
		if root == nil {
			return nil
		}
		b := root.Bucket([]byte(id))
		if b == nil {
			return nil
		}
		return b.Delete(seqKey(seq))
	})
	if err != nil {
		return fmt.Errorf("persistence: snapshot %q seq %d%s: delete: %w", id, seq, s.where, err)
	}
	return nil
}

// DeleteTo implements SnapshotStore.
func (s *BoltSnapshotStore) DeleteTo(ctx context.Context, id string, to uint64) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		root := tx.Bucket(snapshotsBucket)
		if root == nil {
			return nil
		}
		b := root.Bucket([]byte(id))
		if b == nil {
			return nil
		}
		return deleteTo(root, b, id, to)
	})
	if err != nil {
		return fmt.Errorf("persistence: snapshot %q%s: delete to seq %d: %w", id, s.where, to, err)
	}
	return nil
}

// BoltCheckpointStore is a CheckpointStore in a bbolt database's
// "checkpoints" bucket. It keeps the newest completed checkpoint of each
// job. Safe for concurrent use.
type BoltCheckpointStore struct {
	db    *bolt.DB
	where string
}

// NewBoltCheckpointStore returns the checkpoint store in db (typically the
// system's store, actors.System.DB).
func NewBoltCheckpointStore(db *bolt.DB) (*BoltCheckpointStore, error) {
	if db == nil {
		return nil, errors.New("persistence: checkpoint store: nil bbolt database")
	}
	return &BoltCheckpointStore{db: db, where: " in " + db.Path()}, nil
}

// Complete implements CheckpointStore: in one transaction, it records cp
// and drops the job's older checkpoints. A checkpoint older than the job's
// newest is refused with ErrStaleCheckpoint; completing the newest again
// replaces it.
func (s *BoltCheckpointStore) Complete(ctx context.Context, job string, cp Checkpoint) error {
	if err := checkID("checkpoint store", job); err != nil {
		return err
	}
	rec := encodeCheckpoint(cp)
	if len(rec) > bolt.MaxValueSize {
		return fmt.Errorf("persistence: job %q checkpoint %d%s: %d bytes (at most %d)", job, cp.ID, s.where, len(rec), bolt.MaxValueSize)
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		root, err := tx.CreateBucketIfNotExists(checkpointsBucket)
		if err != nil {
			return err
		}
		b, err := root.CreateBucketIfNotExists([]byte(job))
		if err != nil {
			return err
		}
		if k, _ := b.Cursor().Last(); k != nil {
			newest, err := keySeq(k)
			if err != nil {
				return err
			}
			if cp.ID < newest {
				return staleCheckpoint(job, s.where, cp.ID, newest)
			}
		}
		if err := b.Put(seqKey(cp.ID), rec); err != nil {
			return err
		}
		if cp.ID > 0 {
			return deleteTo(root, b, job, cp.ID-1) // never empties b: cp is in it
		}
		return nil
	})
	if errors.Is(err, ErrStaleCheckpoint) {
		return err
	}
	if err != nil {
		return fmt.Errorf("persistence: job %q checkpoint %d%s: complete: %w", job, cp.ID, s.where, err)
	}
	return nil
}

// Clear implements CheckpointStore.
func (s *BoltCheckpointStore) Clear(ctx context.Context, job string) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		root := tx.Bucket(checkpointsBucket)
		if root == nil || root.Bucket([]byte(job)) == nil {
			return nil
		}
		return root.DeleteBucket([]byte(job))
	})
	if err != nil {
		return fmt.Errorf("persistence: job %q checkpoints%s: clear: %w", job, s.where, err)
	}
	return nil
}

// Latest implements CheckpointStore.
func (s *BoltCheckpointStore) Latest(ctx context.Context, job string) (cp Checkpoint, ok bool, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		root := tx.Bucket(checkpointsBucket)
		if root == nil {
			return nil
		}
		b := root.Bucket([]byte(job))
		if b == nil {
			return nil
		}
		k, v := b.Cursor().Last()
		if k == nil {
			return nil
		}
		id, err := keySeq(k)
		if err != nil {
			return &DecodeError{File: s.db.Path(), What: "checkpoint", ID: job, Err: err}
		}
		if cp, err = decodeCheckpoint(v); err != nil {
			return &DecodeError{File: s.db.Path(), What: "checkpoint", ID: job, Seq: id, Err: err}
		}
		if cp.ID != id {
			return &DecodeError{File: s.db.Path(), What: "checkpoint", ID: job, Seq: id, Err: fmt.Errorf("the record says checkpoint %d", cp.ID)}
		}
		ok = true
		return nil
	})
	if err != nil {
		var de *DecodeError
		if errors.As(err, &de) {
			return Checkpoint{}, false, err
		}
		return Checkpoint{}, false, fmt.Errorf("persistence: job %q%s: latest checkpoint: %w", job, s.where, err)
	}
	return cp, ok, nil
}

var (
	_ Journal         = (*BoltJournal)(nil)
	_ SnapshotStore   = (*BoltSnapshotStore)(nil)
	_ CheckpointStore = (*BoltCheckpointStore)(nil)
)
