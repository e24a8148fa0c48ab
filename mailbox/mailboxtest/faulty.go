// Package mailboxtest helps test code that uses package mailbox: a spill
// store that fails or damages its reads and writes on demand.
package mailboxtest

import (
	"errors"
	"fmt"
	"sync"

	"github.com/sluicehq/sluice/mailbox"
)

// ErrInjected is the error of an injected failure when none was given, and
// every injected failure matches it with errors.Is.
var ErrInjected = errors.New("mailboxtest: injected fault")

// injectedError matches both the error given and ErrInjected.
type injectedError struct {
	op  string // `spill queue "q": commit`
	err error
}

func (e *injectedError) Error() string {
	if e.err == ErrInjected {
		return "mailboxtest: " + e.op + ": injected fault"
	}
	return "mailboxtest: " + e.op + ": injected fault: " + e.err.Error()
}

func (e *injectedError) Unwrap() []error { return []error{e.err, ErrInjected} }

func orInjected(err error) error {
	if err == nil {
		return ErrInjected
	}
	return err
}

// SpillCounts are the operations a FaultySpill has seen.
type SpillCounts struct {
	Commits       int // group writes (and deletes of processed groups)
	Loads         int // groups read back
	FailedCommits int // commits failed by an injected fault: nothing written
	FailedLoads   int // loads failed by an injected fault
	Corrupted     int // groups returned damaged
}

// FaultySpill injects faults into the spill queues of the mailboxes whose
// SpillOptions.WrapIO is its Wrap: failed commits (a full or failed disk),
// failed reads, and groups that come back damaged. Without faults armed it
// changes nothing. Safe for concurrent use: a test arms a fault while the
// mailbox runs.
//
//	faults := mailboxtest.NewFaultySpill()
//	opts := mailbox.SpillOptions{Store: st, Queue: "q", Codec: c, WrapIO: faults.Wrap}
//	faults.FailCommits(syscall.ENOSPC)
//	// ... what the spilled records became: Stats().Dropped[mailbox.ReasonUnspillable],
//	// and Config.OnError's error
//
// A commit writes one group of spilled messages and deletes processed
// groups, in one transaction; a failed commit does neither. A load reads one
// group back.
type FaultySpill struct {
	mu          sync.Mutex
	failNext    error // the next commit fails with it
	failAll     error // every commit fails with it
	failLoad    error // the next load fails with it
	corruptNext bool
	counts      SpillCounts
}

// NewFaultySpill returns a FaultySpill with no fault armed.
func NewFaultySpill() *FaultySpill { return &FaultySpill{} }

// Wrap is a SpillOptions.WrapIO: it puts the faults around inner.
func (f *FaultySpill) Wrap(inner mailbox.SpillIO) mailbox.SpillIO {
	return &faultyIO{f: f, inner: inner}
}

// FailNextCommit makes the next commit fail with err (nil: ErrInjected),
// writing nothing. The error matches err and ErrInjected.
func (f *FaultySpill) FailNextCommit(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext = orInjected(err)
}

// FailCommits makes every commit fail with err (nil: ErrInjected), as on a
// full or failed disk, until Heal.
func (f *FaultySpill) FailCommits(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failAll = orInjected(err)
}

// FailNextLoad makes the next read of a group fail with err (nil:
// ErrInjected).
func (f *FaultySpill) FailNextLoad(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failLoad = orInjected(err)
}

// CorruptNextLoad makes the next group read come back damaged: cut short
// in the middle of its first message, so that it does not parse
// (mailbox.ErrSpillCorrupt).
func (f *FaultySpill) CorruptNextLoad() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.corruptNext = true
}

// Heal disarms every fault. The counts stay.
func (f *FaultySpill) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext, f.failAll, f.failLoad, f.corruptNext = nil, nil, nil, false
}

// Counts returns the operations seen so far.
func (f *FaultySpill) Counts() SpillCounts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts
}

type faultyIO struct {
	f     *FaultySpill
	inner mailbox.SpillIO
}

func (x *faultyIO) Commit(queue string, key uint64, group []byte, del []uint64) error {
	f := x.f
	f.mu.Lock()
	f.counts.Commits++
	err := f.failNext
	f.failNext = nil
	if err == nil {
		err = f.failAll
	}
	if err != nil {
		f.counts.FailedCommits++
	}
	f.mu.Unlock()
	if err != nil {
		return &injectedError{op: fmt.Sprintf("spill queue %q: commit", queue), err: err}
	}
	return x.inner.Commit(queue, key, group, del)
}

func (x *faultyIO) Load(queue string, from uint64) (uint64, []byte, error) {
	f := x.f
	f.mu.Lock()
	f.counts.Loads++
	err := f.failLoad
	f.failLoad = nil
	corrupt := err == nil && f.corruptNext
	if err != nil {
		f.counts.FailedLoads++
	}
	if corrupt {
		f.corruptNext = false
		f.counts.Corrupted++
	}
	f.mu.Unlock()
	if err != nil {
		return 0, nil, &injectedError{op: fmt.Sprintf("spill queue %q: load", queue), err: err}
	}
	key, group, err := x.inner.Load(queue, from)
	if err == nil && corrupt {
		group = cutShort(group)
	}
	return key, group, err
}

// cutShort damages a group: the first message's length field is kept but
// its data is cut off, so the group no longer parses.
func cutShort(group []byte) []byte {
	if len(group) < 3 {
		return []byte{0}
	}
	return group[:3]
}
