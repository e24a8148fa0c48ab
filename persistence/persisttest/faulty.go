package persisttest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/sluicehq/sluice/persistence"
)

// ErrInjected is the error of an injected failure when none was given, and
// every injected failure matches it with errors.Is.
var ErrInjected = errors.New("persisttest: injected fault")

// injectedError is the error of an operation failed by injection: it
// matches both the error given and ErrInjected.
type injectedError struct {
	op  string // `journal "acct": append`
	err error
}

func (e *injectedError) Error() string {
	if e.err == ErrInjected {
		return "persisttest: " + e.op + ": injected fault"
	}
	return "persisttest: " + e.op + ": injected fault: " + e.err.Error()
}

func (e *injectedError) Unwrap() []error { return []error{e.err, ErrInjected} }

// Counts are the operations a faulty store has seen.
type Counts struct {
	Writes       int   // write operations: Append, Save, Complete, DeleteTo, Clear
	Reads        int   // read operations: Replay, HighestSeq, Latest
	FailedWrites int   // writes failed by an injected fault
	FailedReads  int   // reads failed by an injected fault
	Corrupted    int   // payloads returned corrupt
	BytesWritten int64 // payload bytes of the writes that succeeded
}

// Faults are the faults to inject into a store, and its counts. Each faulty
// store has its own, and its methods are promoted to the store's. Safe for
// concurrent use: a test may arm a fault while the code under test uses
// the store.
//
// The bytes of a write are the encoded size of its payloads: the sum of
// the events' Data for Append, the snapshot's Data for Save, the sum of the
// states of a checkpoint for Complete, none for DeleteTo and Clear. The
// payload of a read is each event's Data, the snapshot's Data, or all the
// states of a checkpoint.
type Faults struct {
	mu          sync.Mutex
	failWrite   error // the next write fails with it
	failRead    error // the next read fails with it
	limited     bool  // FailAfterBytes is armed
	gen         int   // how many times it was armed
	limit       int64 // bytes it allows
	used        int64 // bytes written since it was armed
	limitErr    error
	tripped     bool // a write went past the limit: every write fails
	corruptNext bool
	corruptAll  bool
	counts      Counts
}

func orInjected(err error) error {
	if err == nil {
		return ErrInjected
	}
	return err
}

// FailNextWrite makes the next write fail with err (nil: ErrInjected),
// writing nothing. The error matches err and ErrInjected.
func (f *Faults) FailNextWrite(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failWrite = orInjected(err)
}

// FailNextRead makes the next read fail with err (nil: ErrInjected).
func (f *Faults) FailNextRead(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failRead = orInjected(err)
}

// FailAfterBytes lets writes go on while the payload bytes they write,
// counted from this call, add up to at most n. The write that would go past
// n fails with err (nil: ErrInjected) and writes nothing, and so does every
// write after it, deletes included, as on a full or failed disk, until
// Heal or another FailAfterBytes.
func (f *Faults) FailAfterBytes(n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limited, f.limit, f.used, f.limitErr, f.tripped = true, int64(n), 0, orInjected(err), false
	f.gen++
}

// CorruptNextRead makes the next payload read come back corrupt (the
// first event of a Replay, say; the events after it are intact). See
// Corrupt for what corrupt means.
func (f *Faults) CorruptNextRead() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.corruptNext = true
}

// CorruptReads makes every payload read come back corrupt while on is true.
func (f *Faults) CorruptReads(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.corruptAll = on
}

// Heal disarms every fault. The counts stay.
func (f *Faults) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failWrite, f.failRead = nil, nil
	f.limited, f.limit, f.used, f.limitErr, f.tripped = false, 0, 0, nil, false
	f.corruptNext, f.corruptAll = false, false
}

// Counts returns the operations seen so far.
func (f *Faults) Counts() Counts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts
}

// beginWrite counts a write of size payload bytes and decides whether it
// fails. When it goes ahead, done must be called with the inner store's
// outcome, which gives back the bytes of a write that failed there.
func (f *Faults) beginWrite(op string, size int64) (done func(error) error, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts.Writes++
	if f.failWrite != nil {
		err, f.failWrite = f.failWrite, nil
		f.counts.FailedWrites++
		return nil, &injectedError{op: op, err: err}
	}
	if f.limited && (f.tripped || f.used+size > f.limit) {
		f.tripped = true
		f.counts.FailedWrites++
		return nil, &injectedError{op: fmt.Sprintf("%s: byte limit reached (%d/%d used)", op, f.used, f.limit), err: f.limitErr}
	}
	if f.limited {
		f.used += size
	}
	limited, gen := f.limited, f.gen
	return func(err error) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if err != nil {
			if limited && f.limited && f.gen == gen { // the bytes were not written
				f.used -= size
			}
			return err
		}
		f.counts.BytesWritten += size
		return nil
	}, nil
}

// beginRead counts a read and decides whether it fails.
func (f *Faults) beginRead(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts.Reads++
	if f.failRead != nil {
		err := f.failRead
		f.failRead = nil
		f.counts.FailedReads++
		return &injectedError{op: op, err: err}
	}
	return nil
}

// corrupting reports whether the payload being read is to come back
// corrupt, and counts it.
func (f *Faults) corrupting() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.corruptAll && !f.corruptNext {
		return false
	}
	f.corruptNext = false
	f.counts.Corrupted++
	return true
}

// Corrupt returns a corrupt copy of a payload: its first byte becomes 0xc1,
// a code msgpack never uses, and the others are inverted. No msgpack
// decoder accepts it, so persistence reports a decode error (ErrDecode)
// and an event-sourced actor a *persistence.RecoveryError. The length is
// unchanged, but an empty payload becomes one byte.
func Corrupt(data []byte) []byte {
	out := make([]byte, max(len(data), 1))
	out[0] = 0xc1
	for i := 1; i < len(data); i++ {
		out[i] = ^data[i]
	}
	return out
}

// FaultyJournal is a persistence.Journal that injects faults into the
// journal it wraps: failed writes, a full disk, failed and corrupt reads.
// Without faults armed it is the journal it wraps. A test of what the code
// under test does when the journal fails:
//
//	func TestDepositWhenTheDiskIsFull(t *testing.T) {
//		j := persisttest.NewFaultyJournal(nil) // an in-memory journal
//		acct := NewAccount(j)                  // code under test
//		if err := acct.Deposit(ctx, 10); err != nil {
//			t.Fatal(err)
//		}
//		j.FailAfterBytes(0, syscall.ENOSPC)
//		if err := acct.Deposit(ctx, 5); !errors.Is(err, syscall.ENOSPC) {
//			t.Fatalf("Deposit on a full disk = %v, want ENOSPC", err)
//		}
//		j.Heal()
//		if got := acct.Balance(); got != 10 {
//			t.Fatalf("balance %d, want 10: the failed deposit counted", got)
//		}
//	}
//
// Writes are Append and DeleteTo; reads are Replay and HighestSeq, and the
// payloads that Replay returns are the events' Data.
type FaultyJournal struct {
	*Faults
	inner persistence.Journal
}

// NewFaultyJournal wraps inner, or a new persistence.MemoryJournal when
// inner is nil.
func NewFaultyJournal(inner persistence.Journal) *FaultyJournal {
	if inner == nil {
		inner = persistence.NewMemoryJournal()
	}
	return &FaultyJournal{Faults: &Faults{}, inner: inner}
}

// Inner returns the journal it wraps.
func (j *FaultyJournal) Inner() persistence.Journal { return j.inner }

// Append implements persistence.Journal.
func (j *FaultyJournal) Append(ctx context.Context, id string, events []persistence.Event) error {
	var size int64
	for _, e := range events {
		size += int64(len(e.Data))
	}
	done, err := j.beginWrite(fmt.Sprintf("journal %q: append", id), size)
	if err != nil {
		return err
	}
	return done(j.inner.Append(ctx, id, events))
}

// Replay implements persistence.Journal.
func (j *FaultyJournal) Replay(ctx context.Context, id string, from, to uint64, max int, fn func(persistence.Event) error) error {
	if err := j.beginRead(fmt.Sprintf("journal %q: replay", id)); err != nil {
		return err
	}
	return j.inner.Replay(ctx, id, from, to, max, func(e persistence.Event) error {
		if j.corrupting() {
			e.Data = Corrupt(e.Data)
		}
		return fn(e)
	})
}

// HighestSeq implements persistence.Journal.
func (j *FaultyJournal) HighestSeq(ctx context.Context, id string) (uint64, error) {
	if err := j.beginRead(fmt.Sprintf("journal %q: highest seq", id)); err != nil {
		return 0, err
	}
	return j.inner.HighestSeq(ctx, id)
}

// DeleteTo implements persistence.Journal.
func (j *FaultyJournal) DeleteTo(ctx context.Context, id string, to uint64) error {
	done, err := j.beginWrite(fmt.Sprintf("journal %q: delete to %d", id, to), 0)
	if err != nil {
		return err
	}
	return done(j.inner.DeleteTo(ctx, id, to))
}

// FaultySnapshotStore is a persistence.SnapshotStore that injects faults
// into the store it wraps, as FaultyJournal does. Writes are Save and
// DeleteTo; the read is Latest, whose payload is the snapshot's Data.
type FaultySnapshotStore struct {
	*Faults
	inner persistence.SnapshotStore
}

// NewFaultySnapshotStore wraps inner, or a new
// persistence.MemorySnapshotStore when inner is nil.
func NewFaultySnapshotStore(inner persistence.SnapshotStore) *FaultySnapshotStore {
	if inner == nil {
		inner = persistence.NewMemorySnapshotStore()
	}
	return &FaultySnapshotStore{Faults: &Faults{}, inner: inner}
}

// Inner returns the store it wraps.
func (s *FaultySnapshotStore) Inner() persistence.SnapshotStore { return s.inner }

// Save implements persistence.SnapshotStore.
func (s *FaultySnapshotStore) Save(ctx context.Context, id string, snap persistence.Snapshot) error {
	done, err := s.beginWrite(fmt.Sprintf("snapshot %q seq %d: save", id, snap.Seq), int64(len(snap.Data)))
	if err != nil {
		return err
	}
	return done(s.inner.Save(ctx, id, snap))
}

// Latest implements persistence.SnapshotStore.
func (s *FaultySnapshotStore) Latest(ctx context.Context, id string) (persistence.Snapshot, bool, error) {
	if err := s.beginRead(fmt.Sprintf("snapshot %q: latest", id)); err != nil {
		return persistence.Snapshot{}, false, err
	}
	snap, ok, err := s.inner.Latest(ctx, id)
	if err == nil && ok && s.corrupting() {
		snap.Data = Corrupt(snap.Data)
	}
	return snap, ok, err
}

// Select implements persistence.SnapshotStore (a read, as Latest).
func (s *FaultySnapshotStore) Select(ctx context.Context, id string, c persistence.SnapshotCriteria) (persistence.Snapshot, bool, error) {
	if err := s.beginRead(fmt.Sprintf("snapshot %q: select", id)); err != nil {
		return persistence.Snapshot{}, false, err
	}
	snap, ok, err := s.inner.Select(ctx, id, c)
	if err == nil && ok && s.corrupting() {
		snap.Data = Corrupt(snap.Data)
	}
	return snap, ok, err
}

// Delete implements persistence.SnapshotStore (a write).
func (s *FaultySnapshotStore) Delete(ctx context.Context, id string, seq uint64) error {
	done, err := s.beginWrite(fmt.Sprintf("snapshot %q seq %d: delete", id, seq), 0)
	if err != nil {
		return err
	}
	return done(s.inner.Delete(ctx, id, seq))
}

// DeleteTo implements persistence.SnapshotStore.
func (s *FaultySnapshotStore) DeleteTo(ctx context.Context, id string, to uint64) error {
	done, err := s.beginWrite(fmt.Sprintf("snapshot %q: delete to %d", id, to), 0)
	if err != nil {
		return err
	}
	return done(s.inner.DeleteTo(ctx, id, to))
}

// FaultyCheckpointStore is a persistence.CheckpointStore that injects
// faults into the store it wraps, as FaultyJournal does. Writes are
// Complete and Clear; the read is Latest, whose payload is the checkpoint's
// States (a corrupt checkpoint has every state corrupt; its offsets are
// left alone).
type FaultyCheckpointStore struct {
	*Faults
	inner persistence.CheckpointStore
}

// NewFaultyCheckpointStore wraps inner, or a new
// persistence.MemoryCheckpointStore when inner is nil.
func NewFaultyCheckpointStore(inner persistence.CheckpointStore) *FaultyCheckpointStore {
	if inner == nil {
		inner = persistence.NewMemoryCheckpointStore()
	}
	return &FaultyCheckpointStore{Faults: &Faults{}, inner: inner}
}

// Inner returns the store it wraps.
func (s *FaultyCheckpointStore) Inner() persistence.CheckpointStore { return s.inner }

// Complete implements persistence.CheckpointStore.
func (s *FaultyCheckpointStore) Complete(ctx context.Context, job string, cp persistence.Checkpoint) error {
	var size int64
	for _, st := range cp.States {
		size += int64(len(st))
	}
	done, err := s.beginWrite(fmt.Sprintf("job %q: complete checkpoint %d", job, cp.ID), size)
	if err != nil {
		return err
	}
	return done(s.inner.Complete(ctx, job, cp))
}

// Latest implements persistence.CheckpointStore.
func (s *FaultyCheckpointStore) Latest(ctx context.Context, job string) (persistence.Checkpoint, bool, error) {
	if err := s.beginRead(fmt.Sprintf("job %q: latest checkpoint", job)); err != nil {
		return persistence.Checkpoint{}, false, err
	}
	cp, ok, err := s.inner.Latest(ctx, job)
	if err == nil && ok && s.corrupting() {
		states := make(map[string][]byte, len(cp.States))
		for k, v := range cp.States {
			states[k] = Corrupt(v)
		}
		cp.States = states
	}
	return cp, ok, err
}

// Clear implements persistence.CheckpointStore.
func (s *FaultyCheckpointStore) Clear(ctx context.Context, job string) error {
	done, err := s.beginWrite(fmt.Sprintf("job %q: clear checkpoints", job), 0)
	if err != nil {
		return err
	}
	return done(s.inner.Clear(ctx, job))
}

var (
	_ persistence.Journal         = (*FaultyJournal)(nil)
	_ persistence.SnapshotStore   = (*FaultySnapshotStore)(nil)
	_ persistence.CheckpointStore = (*FaultyCheckpointStore)(nil)
)
