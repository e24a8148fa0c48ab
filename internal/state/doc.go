// Package state is the state-backend seam of keyed operators: Table (get,
// put, delete, every entry, snapshot, restore of a key-group range,
// committed, close) and its two backends. Mem keeps a Go map (the default,
// and the fastest); its checkpoints are the whole map or, opened with
// OpenChangelog, incremental: a base, then deltas of the keys changed since
// the checkpoint before, in files whose chain the checkpoint names (Inline
// copies a chain into a savepoint). Disk keeps a pebble database per
// operator instance behind a write-back cache of a byte budget, and takes
// incremental checkpoints (hard links of the immutable sstables, a
// checksummed manifest). Operators choose one with operators.StateBackend;
// see docs/checkpoints.md, "State backends".
//
//	d, err := state.OpenDisk[string, int64](state.Spec{Dir: dir, Budget: 64 << 20}, "count", 0, 1, hash, nil)
//	v, ok := d.Get("k")
//	d.Put("k", v+1, ok)
//	handle, err := d.Snapshot(1) // what the checkpoint records
//
//	m, err := state.OpenChangelog[string, int64](state.Spec{Changelog: dir}, "count", 0, 1, owns)
//	m.Put("k", 1, false)
//	base, err := m.Snapshot(1) // every key
//	m.Put("k", 2, true)
//	delta, err := m.Snapshot(2) // only "k"
package state
