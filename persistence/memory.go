package persistence

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"sort"
	"sync"
)

// checkBatch validates an Append before anything is written: a persistence
// id, and consecutive sequence numbers. where names the store (" in FILE").
func checkBatch(id, where string, events []Event) error {
	if id == "" {
		return fmt.Errorf("persistence: journal%s: empty persistence id", where)
	}
	if len(id) > maxIDLen {
		return fmt.Errorf("persistence: journal%s: persistence id of %d bytes (at most %d)", where, len(id), maxIDLen)
	}
	if len(events) > 0 && events[0].Seq == 0 {
		return errorf(ErrSeqConflict, "persistence: journal %q%s: append: sequence numbers start at 1, not 0", id, where)
	}
	for i := 1; i < len(events); i++ {
		if want := events[0].Seq + uint64(i); events[i].Seq != want {
			return errorf(ErrSeqConflict, "persistence: journal %q%s: append seq %d: event %d of the batch has seq %d, want %d (nothing written)",
				id, where, events[0].Seq, i, events[i].Seq, want)
		}
	}
	return nil
}

func seqConflict(id, where string, first, highest uint64) error {
	return errorf(ErrSeqConflict, "persistence: journal %q%s: append seq %d: sequence conflict: the journal's highest is %d, want %d (nothing written)",
		id, where, first, highest, highest+1)
}

// maxIDLen bounds a persistence id or job name: bbolt's largest key.
const maxIDLen = 32 << 10

// MemoryJournal is a Journal in memory, for tests and for state that need
// not survive the process. Safe for concurrent use.
type MemoryJournal struct {
	mu   sync.Mutex
	logs map[string]*memLog
}

type memLog struct {
	events  []Event // consecutive sequence numbers
	highest uint64
}

// NewMemoryJournal returns an empty journal.
func NewMemoryJournal() *MemoryJournal { return &MemoryJournal{logs: map[string]*memLog{}} }

func cloneEvent(e Event) Event {
	e.Data = bytes.Clone(e.Data)
	return e
}

// Append implements Journal.
func (j *MemoryJournal) Append(ctx context.Context, id string, events []Event) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("persistence: journal %q: append: %w", id, err)
	}
	if err := checkBatch(id, "", events); err != nil {
		return err
	}
	if len(events) == 0 {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	l := j.logs[id]
	if l == nil {
		l = &memLog{}
		j.logs[id] = l
	}
	if events[0].Seq != l.highest+1 {
		return seqConflict(id, "", events[0].Seq, l.highest)
	}
	for _, e := range events {
		l.events = append(l.events, cloneEvent(e))
	}
	l.highest = events[len(events)-1].Seq
	return nil
}

// Replay implements Journal.
func (j *MemoryJournal) Replay(ctx context.Context, id string, from, to uint64, max int, fn func(Event) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("persistence: journal %q: replay: %w", id, err)
	}
	if max == 0 || from > to {
		return nil
	}
	// Copy the range under the lock and call fn without it, so that fn may
	// use the journal.
	j.mu.Lock()
	var out []Event
	if l := j.logs[id]; l != nil && len(l.events) > 0 {
		i := sort.Search(len(l.events), func(i int) bool { return l.events[i].Seq >= from })
		for ; i < len(l.events) && l.events[i].Seq <= to && (max < 0 || len(out) < max); i++ {
			out = append(out, cloneEvent(l.events[i]))
		}
	}
	j.mu.Unlock()
	for _, e := range out {
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// HighestSeq implements Journal.
func (j *MemoryJournal) HighestSeq(ctx context.Context, id string) (uint64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if l := j.logs[id]; l != nil {
		return l.highest, nil
	}
	return 0, nil
}

// DeleteTo implements Journal.
func (j *MemoryJournal) DeleteTo(ctx context.Context, id string, to uint64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	l := j.logs[id]
	if l == nil {
		return nil
	}
	i := sort.Search(len(l.events), func(i int) bool { return l.events[i].Seq > to })
	clear(l.events[:i]) // let the payloads go
	l.events = l.events[i:]
	return nil
}

// MemorySnapshotStore is a SnapshotStore in memory. Safe for concurrent use.
type MemorySnapshotStore struct {
	mu    sync.Mutex
	snaps map[string][]Snapshot // by Seq
}

// NewMemorySnapshotStore returns an empty store.
func NewMemorySnapshotStore() *MemorySnapshotStore {
	return &MemorySnapshotStore{snaps: map[string][]Snapshot{}}
}

func checkID(kind, id string) error {
	switch {
	case id == "":
		return fmt.Errorf("persistence: %s: empty id", kind)
	case len(id) > maxIDLen:
		return fmt.Errorf("persistence: %s: id of %d bytes (at most %d)", kind, len(id), maxIDLen)
	}
	return nil
}

// Save implements SnapshotStore. A snapshot with the Seq of an existing one
// replaces it.
func (s *MemorySnapshotStore) Save(ctx context.Context, id string, snap Snapshot) error {
	if err := checkID("snapshot store", id); err != nil {
		return err
	}
	snap.Data = bytes.Clone(snap.Data)
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.snaps[id]
	i := sort.Search(len(l), func(i int) bool { return l[i].Seq >= snap.Seq })
	if i < len(l) && l[i].Seq == snap.Seq {
		l[i] = snap
		return nil
	}
	s.snaps[id] = append(l[:i], append([]Snapshot{snap}, l[i:]...)...)
	return nil
}

// Latest implements SnapshotStore.
func (s *MemorySnapshotStore) Latest(ctx context.Context, id string) (Snapshot, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.snaps[id]
	if len(l) == 0 {
		return Snapshot{}, false, nil
	}
	snap := l[len(l)-1]
	snap.Data = bytes.Clone(snap.Data)
	return snap, true, nil
}

// Select implements SnapshotStore.
func (s *MemorySnapshotStore) Select(ctx context.Context, id string, c SnapshotCriteria) (Snapshot, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.snaps[id]
	for i := len(l) - 1; i >= 0; i-- {
		if c.admits(l[i]) {
			snap := l[i]
			snap.Data = bytes.Clone(snap.Data)
			return snap, true, nil
		}
	}
	return Snapshot{}, false, nil
}

// Delete implements SnapshotStore.
func (s *MemorySnapshotStore) Delete(ctx context.Context, id string, seq uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.snaps[id]
	i := sort.Search(len(l), func(i int) bool { return l[i].Seq >= seq })
	if i < len(l) && l[i].Seq == seq {
		s.snaps[id] = append(l[:i:i], l[i+1:]...)
	}
	return nil
}

// DeleteTo implements SnapshotStore.
func (s *MemorySnapshotStore) DeleteTo(ctx context.Context, id string, to uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.snaps[id]
	i := sort.Search(len(l), func(i int) bool { return l[i].Seq > to })
	if i == len(l) {
		delete(s.snaps, id)
		return nil
	}
	s.snaps[id] = append([]Snapshot(nil), l[i:]...)
	return nil
}

// MemoryCheckpointStore is a CheckpointStore in memory that keeps the
// newest checkpoint of each job. Safe for concurrent use.
type MemoryCheckpointStore struct {
	mu     sync.Mutex
	newest map[string]Checkpoint
}

// NewMemoryCheckpointStore returns an empty store.
func NewMemoryCheckpointStore() *MemoryCheckpointStore {
	return &MemoryCheckpointStore{newest: map[string]Checkpoint{}}
}

func cloneCheckpoint(cp Checkpoint) Checkpoint {
	states := make(map[string][]byte, len(cp.States))
	for k, v := range cp.States {
		states[k] = bytes.Clone(v)
	}
	cp.States = states
	cp.Offsets = maps.Clone(cp.Offsets)
	if cp.Offsets == nil {
		cp.Offsets = map[string]int64{}
	}
	return cp
}

// Complete implements CheckpointStore. A checkpoint older than the job's
// newest is refused with ErrStaleCheckpoint; completing the newest again
// replaces it.
func (s *MemoryCheckpointStore) Complete(ctx context.Context, job string, cp Checkpoint) error {
	if err := checkID("checkpoint store", job); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.newest[job]; ok && cp.ID < old.ID {
		return staleCheckpoint(job, "", cp.ID, old.ID)
	}
	s.newest[job] = cloneCheckpoint(cp)
	return nil
}

func staleCheckpoint(job, where string, id, newest uint64) error {
	return errorf(ErrStaleCheckpoint, "persistence: job %q%s: complete checkpoint %d: stale: checkpoint %d is already complete", job, where, id, newest)
}

// Clear implements CheckpointStore.
func (s *MemoryCheckpointStore) Clear(ctx context.Context, job string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.newest, job)
	return nil
}

// Latest implements CheckpointStore.
func (s *MemoryCheckpointStore) Latest(ctx context.Context, job string) (Checkpoint, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cp, ok := s.newest[job]
	if !ok {
		return Checkpoint{}, false, nil
	}
	return cloneCheckpoint(cp), true, nil
}

var (
	_ Journal         = (*MemoryJournal)(nil)
	_ SnapshotStore   = (*MemorySnapshotStore)(nil)
	_ CheckpointStore = (*MemoryCheckpointStore)(nil)
)
