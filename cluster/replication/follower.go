package replication

import (
	"fmt"
	"slices"
)

// Entry is one entry of a replicated log.
type Entry struct {
	Index, Epoch uint64
	Data         []byte
}

// Append is an append as a replica receives it: a Send action with its
// entries filled in.
type Append struct {
	Epoch, Seq      uint64
	Prev, PrevEpoch uint64
	Entries         []Entry // Prev+1, Prev+2, ...
	Commit          uint64
	Reset           bool
}

// Result is how a replica answered an append.
type Result uint8

const (
	// OK: the replica holds the entries through Reply.Match.
	OK Result = iota
	// Mismatch: the replica does not hold entry Prev with epoch PrevEpoch.
	Mismatch
	// Stale: the replica has promised a newer epoch (Reply.Epoch).
	Stale
)

func (r Result) String() string {
	switch r {
	case OK:
		return "ok"
	case Mismatch:
		return "mismatch"
	case Stale:
		return "stale"
	}
	return fmt.Sprintf("Result(%d)", uint8(r))
}

// Reply is a replica's answer to an append.
type Reply struct {
	Result Result
	// Epoch is the append's epoch, or the replica's promise when Stale.
	Epoch, Seq uint64
	Match      uint64 // OK: the last index the append covered
	Prev, Last uint64 // Mismatch: the append's Prev; the replica's last index
}

// Event turns the reply of the named replica into the leader's event.
func (r Reply) Event(replica string) Event {
	switch r.Result {
	case OK:
		return Acked{Replica: replica, Epoch: r.Epoch, Seq: r.Seq, Match: r.Match}
	case Mismatch:
		return Nacked{Replica: replica, Epoch: r.Epoch, Seq: r.Seq, Prev: r.Prev, Last: r.Last}
	}
	return Rejected{Replica: replica, Epoch: r.Epoch}
}

func (r Reply) String() string {
	switch r.Result {
	case OK:
		return fmt.Sprintf("ok through %d (epoch %d seq %d)", r.Match, r.Epoch, r.Seq)
	case Mismatch:
		return fmt.Sprintf("mismatch at %d, last %d (epoch %d seq %d)", r.Prev, r.Last, r.Epoch, r.Seq)
	}
	return fmt.Sprintf("stale: promised epoch %d (seq %d)", r.Epoch, r.Seq)
}

// FollowerLog is what Decide reads of a replica's log.
type FollowerLog interface {
	// Promised is the newest epoch the replica has accepted appends from.
	Promised() uint64
	// Base is the last compacted entry (0, 0 when none was) and its epoch.
	Base() (index, epoch uint64)
	// Last is the last entry's index (Base's index when none follows it).
	Last() uint64
	// EpochAt returns the epoch of the entry at index, Base < index <= Last.
	EpochAt(index uint64) (epoch uint64, ok bool)
}

// Decision is what a replica does with an append, in one atomic write,
// before it sends Reply: promise the epoch, drop entries, add entries.
type Decision struct {
	// Err, when set (ErrOutOfRange), refuses the append: nothing is
	// written, and Reply is not to be sent.
	Err error
	// Promise is the epoch to promise from now on, 0 to keep the promise.
	Promise uint64
	// Reset drops every entry; the new base is (Append.Prev, Append.PrevEpoch).
	Reset bool
	// Truncate drops the entries after TruncateAfter.
	Truncate      bool
	TruncateAfter uint64
	// Append adds these entries at the end, after Reset or Truncate.
	Append []Entry
	Reply  Reply
}

// Decide is a replica's rule for an append, a pure function of its log
// and the append:
//   - an append from an epoch older than the promised one is refused
//     (Stale), which fences a stale leader; a newer epoch is promised;
//   - the replica must hold entry Prev with epoch PrevEpoch (the log
//     matching check of Raft), or it answers Mismatch with its last index;
//   - an entry it holds with the same epoch is kept, one with another
//     epoch is dropped with everything after it; the rest is appended. So a
//     duplicate or late append never removes entries, and a new leader's
//     log replaces the divergent suffix of an old one's;
//   - Reset replaces the whole log (the leader compacted what the replica
//     lacks; its first entry stands on its own).
func Decide(l FollowerLog, a Append) Decision {
	if d, bad := outOfRange(l, a); bad {
		return d
	}
	promised := l.Promised()
	if a.Epoch < promised {
		return Decision{Reply: Reply{Result: Stale, Epoch: promised, Seq: a.Seq}}
	}
	var d Decision
	if a.Epoch > promised {
		d.Promise = a.Epoch
	}
	last := l.Last()
	mismatch := Reply{Result: Mismatch, Epoch: a.Epoch, Seq: a.Seq, Prev: a.Prev, Last: last}
	for i, e := range a.Entries {
		if e.Index != a.Prev+1+uint64(i) || e.Epoch > a.Epoch {
			d.Reply = mismatch // malformed: let the leader resynchronise
			return d
		}
	}
	match := a.Prev + uint64(len(a.Entries))
	d.Reply = Reply{Result: OK, Epoch: a.Epoch, Seq: a.Seq, Match: match}
	if a.Reset {
		d.Reset, d.Append = true, a.Entries
		return d
	}
	base, baseEpoch := l.Base()
	switch {
	case a.Prev < base:
		// Compacted entries were committed: they match the leader's.
	case a.Prev == base:
		if a.PrevEpoch != baseEpoch {
			d.Reply = mismatch
			return d
		}
	case a.Prev > last:
		d.Reply = mismatch
		return d
	default:
		if e, ok := l.EpochAt(a.Prev); !ok || e != a.PrevEpoch {
			d.Reply = mismatch
			return d
		}
	}
	for i, e := range a.Entries {
		if e.Index <= base {
			continue
		}
		if e.Index > last {
			d.Append = a.Entries[i:]
			break
		}
		if have, ok := l.EpochAt(e.Index); ok && have == e.Epoch {
			continue
		}
		d.Truncate, d.TruncateAfter, d.Append = true, e.Index-1, a.Entries[i:]
		break
	}
	return d
}

// outOfRange refuses an append whose epochs, indexes or commit are at or
// above Limit, or whose entries would take the log there.
func outOfRange(l FollowerLog, a Append) (Decision, bool) {
	bad := func(what string, v uint64) (Decision, bool) {
		return Decision{Err: fmt.Errorf("%w: %s %d (limit %d)", ErrOutOfRange, what, v, Limit)}, true
	}
	switch {
	case a.Epoch >= Limit:
		return bad("epoch", a.Epoch)
	case a.Seq >= Limit:
		return bad("sequence number", a.Seq)
	case a.Prev >= Limit:
		return bad("previous index", a.Prev)
	case a.PrevEpoch >= Limit:
		return bad("previous epoch", a.PrevEpoch)
	case a.Commit >= Limit:
		return bad("commit", a.Commit)
	case uint64(len(a.Entries)) >= Limit-a.Prev:
		return bad("last index after the append", a.Prev+uint64(len(a.Entries)))
	case l.Promised() >= Limit:
		return bad("promised epoch of the log", l.Promised())
	}
	return Decision{}, false
}

// MemoryLog is a replica's log in memory: a FollowerLog that applies
// Decisions. Tests and examples use it; the cluster keeps its logs in bbolt.
type MemoryLog struct {
	Promise              uint64
	BaseIndex, BaseEpoch uint64
	Entries              []Entry // BaseIndex+1, BaseIndex+2, ...
}

// Promised implements FollowerLog.
func (l *MemoryLog) Promised() uint64 { return l.Promise }

// Base implements FollowerLog.
func (l *MemoryLog) Base() (uint64, uint64) { return l.BaseIndex, l.BaseEpoch }

// Last implements FollowerLog.
func (l *MemoryLog) Last() uint64 { return l.BaseIndex + uint64(len(l.Entries)) }

// EpochAt implements FollowerLog.
func (l *MemoryLog) EpochAt(i uint64) (uint64, bool) {
	if i <= l.BaseIndex || i > l.Last() {
		return 0, false
	}
	return l.Entries[i-l.BaseIndex-1].Epoch, true
}

// Apply carries out d (but not its reply). a is the append d decided.
func (l *MemoryLog) Apply(a Append, d Decision) {
	if d.Promise > l.Promise {
		l.Promise = d.Promise
	}
	if d.Reset {
		l.BaseIndex, l.BaseEpoch, l.Entries = a.Prev, a.PrevEpoch, nil
	}
	if d.Truncate && d.TruncateAfter < l.Last() {
		l.Entries = l.Entries[:d.TruncateAfter-l.BaseIndex]
	}
	l.Entries = append(slices.Clip(l.Entries), d.Append...)
}

// Receive decides on a and applies the decision, and returns the reply.
func (l *MemoryLog) Receive(a Append) Reply {
	d := Decide(l, a)
	if d.Err != nil {
		return Reply{}
	}
	l.Apply(a, d)
	return d.Reply
}

// Compact drops the entries before index (keeping the one at index).
func (l *MemoryLog) Compact(index uint64) {
	if index <= l.BaseIndex+1 || index > l.Last() {
		return
	}
	n := index - 1 - l.BaseIndex
	l.BaseIndex, l.BaseEpoch = index-1, l.Entries[n-1].Epoch
	l.Entries = slices.Clone(l.Entries[n:])
}

// Epochs returns the EpochStarts of the log, from its base on.
func (l *MemoryLog) Epochs() []EpochStart {
	var out []EpochStart
	if l.BaseIndex > 0 {
		out = append(out, EpochStart{Epoch: l.BaseEpoch, Start: l.BaseIndex})
	}
	for _, e := range l.Entries {
		if len(out) == 0 || out[len(out)-1].Epoch != e.Epoch {
			out = append(out, EpochStart{Epoch: e.Epoch, Start: e.Index})
		}
	}
	return out
}

// Info returns the LogInfo of the log, for a leader taking office on it.
func (l *MemoryLog) Info() LogInfo {
	return LogInfo{First: l.BaseIndex + 1, Last: l.Last(), Epochs: l.Epochs()}
}
