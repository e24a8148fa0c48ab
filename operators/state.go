package operators

import (
	"github.com/sluicehq/sluice/internal/graph"
	"github.com/sluicehq/sluice/internal/state"
)

// StateSpec is a state backend for the per-key aggregations (Count,
// Reduce, Aggregate): MemoryState or DiskState.
type StateSpec struct{ s state.Spec }

// MemoryState keeps each key's state in a Go map (the default): the
// fastest, and bounded by memory. A checkpoint writes the whole state.
func MemoryState() StateSpec { return StateSpec{} }

// DiskState keeps the per-key aggregations' state in a pebble database
// (an LSM tree) per operator instance under dir/<job>/<operator>, with
// about budget bytes of memory per instance (0: 64 MiB): half a
// write-back cache of hot keys, half pebble's block cache (its bloom
// filters and indexes, about 1.5 bytes a key, should fit for misses to
// stay cheap), and pebble's memtables (a sixteenth of the budget each, up
// to three) on top. The state may grow far beyond memory, and memory
// stays within that however many keys there are. A checkpoint is
// incremental: it links the database's immutable files, and writes only
// those made since the previous one. The newest two checkpoints' files are
// kept (RetainCheckpoints). Results emitted at the end (EmitAtEnd) come in
// key-group order, not first-seen order. Windows, joins and Process keep
// their state in memory with either backend (see docs/checkpoints.md).
func DiskState(dir string, budget int64) StateSpec {
	return StateSpec{state.Spec{Dir: dir, Budget: budget}}
}

// RetainCheckpoints keeps the files of the newest n checkpoints (default
// 2) with the disk backend; older ones are removed once a newer one is
// complete.
func (s StateSpec) RetainCheckpoints(n int) StateSpec {
	s.s.Retain = n
	return s
}

// StateBackend chooses where the per-key aggregations keep their state
// (default MemoryState).
func StateBackend(s StateSpec) TopologyOption { return TopologyOption{graph.StateBackend(s.s)} }
