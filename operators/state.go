package operators

import (
	"github.com/sluicehq/sluice/internal/graph"
	"github.com/sluicehq/sluice/internal/state"
)

// StateSpec is a state backend for the keyed operators' per-key state
// (Count, Reduce, Aggregate, the windowed aggregations, Join,
// IntervalJoin, Process): MemoryState or DiskState.
type StateSpec struct{ s state.Spec }

// MemoryState keeps each key's state in a Go map (the default): the
// fastest, and bounded by memory. A checkpoint writes the whole state,
// unless Changelog makes its checkpoints incremental.
func MemoryState() StateSpec { return StateSpec{} }

// Changelog makes the memory backend's checkpoints incremental, as Flink's
// changelog state backend: each checkpoint writes to a file under
// dir/<job>/<operator>/<instance> only the keys put or deleted since the
// previous one (a delta naming it), and the checkpoint records the chain
// of files it needs. A full base is written again after 10 deltas, when
// the deltas pass half of the base's size, or when more than a quarter of the
// keys changed (a small, busy state checkpoints as without a changelog),
// so a recovery reads one base and a bounded chain. The files of the
// newest two checkpoints (RetainCheckpoints) are kept, the rest removed.
// A savepoint copies the chain it needs into its own directory. The
// directory must be on a disk the job restarts with (as the checkpoint
// store). DiskState ignores it.
func (s StateSpec) Changelog(dir string) StateSpec {
	s.s.Changelog = dir
	return s
}

// DiskState keeps the keyed operators' per-key state in a pebble database
// (an LSM tree) per operator instance under dir/<job>/<operator>, with
// about budget bytes of memory per instance (0: 64 MiB): half a
// write-back cache of hot keys, half pebble's block cache (its bloom
// filters and indexes, about 1.5 bytes a key, should fit for misses to
// stay cheap), and pebble's memtables (a sixteenth of the budget each, up
// to three) on top. The write-back cache is in the Go heap (under
// GOMEMLIMIT); pebble allocates its block cache and memtables outside it
// when cgo is on, so a process's RSS is about its Go memory plus half the
// budget and the memtables per instance. The state may grow far beyond
// memory, and memory is meant to stay within that however many keys there
// are (at 50 M keys it grew about 110 MiB past it in session 11: glibc's
// arenas holding pebble's freed blocks, and the big bloom-filter blocks
// of large sstables; a disk table now caps its sstables at 8 MiB and sets
// glibc to 2 arenas and a fixed mmap threshold, see internal/state's
// tuneMalloc and benchmarks/RESULTS.md, state-large). A checkpoint is incremental: it
// links the database's immutable files, and writes only those made since
// the previous one. The newest two checkpoints' files are kept
// (RetainCheckpoints). Results emitted at the end (EmitAtEnd) come in
// key-group order, not first-seen order. Windows, joins and Process keep
// their per-key state in the table too, and Process's timers, session
// windows' timers and an interval join's pruning timers (one per key with
// records) are in a second table on disk; a time window keeps an entry
// per open window in memory, bounded by the windows open, not the keys
// (see docs/checkpoints.md).
func DiskState(dir string, budget int64) StateSpec {
	return StateSpec{state.Spec{Dir: dir, Budget: budget}}
}

// RetainCheckpoints keeps the files of the newest n checkpoints (default
// 2) with the disk backend and the memory backend's changelog; older ones
// are removed once a newer one is complete.
func (s StateSpec) RetainCheckpoints(n int) StateSpec {
	s.s.Retain = n
	return s
}

// StateBackend chooses where the keyed operators keep their per-key state
// (default MemoryState).
func StateBackend(s StateSpec) TopologyOption { return TopologyOption{graph.StateBackend(s.s)} }
