package stage

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/internal/state"
)

// keyedTable is the state table of a stage that keeps a value per key
// beside some state of its own (joins, Process): the memory backend, whose
// map the stage's record loop reads and writes directly (mem), or the disk
// backend (disk), both behind tab. Its checkpoint is a state.Bundle of the
// stage's own bytes and the table's snapshot, so that the table's part
// gets the backends' incremental checkpoints and a savepoint copies it as
// it copies an aggregation's.
type keyedTable[K comparable, V any] struct {
	mem     *state.Mem[K, V] // nil with the disk backend
	disk    *state.Disk[K, V]
	tab     state.Table[K, V]
	openErr error      // the backend failed to open (tab nil)
	gone    map[K]bool // compact's, empty between compactions
}

// openTable opens the stage's table as the topology's state backend says
// (KeyedStage.open's choice: a changelog only when checkpoints are taken).
func openTable[K comparable, V any](sc *Ctx) keyedTable[K, V] {
	var t keyedTable[K, V]
	h := HasherFor[K]()
	if !sc.State.Disk() {
		owns := func(k K, lo, hi int) bool { kg := KeyGroupOf(h(k)); return kg >= lo && kg < hi }
		if sc.State.Changelog == "" || !sc.FinalCheckpoint {
			t.mem = state.NewMem[K, V](owns)
			t.tab = t.mem
			return t
		}
		m, err := state.OpenChangelog[K, V](sc.State, sc.Name, sc.Instance, sc.Parts, owns)
		if err != nil {
			t.openErr = err
			return t
		}
		t.mem, t.tab = m, m
		return t
	}
	d, err := state.OpenDisk[K, V](sc.State, sc.Name, sc.Instance, sc.Parts, h, func(err error) { sc.fail(err) })
	if err != nil {
		t.openErr = err
		return t
	}
	t.disk, t.tab = d, d
	return t
}

// check fails the stage if its table did not open.
func (t *keyedTable[K, V]) check(sc *Ctx) {
	if t.tab == nil {
		sc.fail(t.openErr)
	}
}

// memPut sets k's value in the memory table's map, as Put does, without
// the interface call (existed: k had a value).
func (t *keyedTable[K, V]) memPut(k K, v V, existed bool) {
	m := t.mem
	if !existed {
		m.Order = append(m.Order, k)
	}
	m.M[k] = v
	m.Changed(k, existed)
}

// snapshot is the bundle of the stage's own bytes, the table's and those
// of the stage's other tables (extra: Process's timers on disk).
func (t *keyedTable[K, V]) snapshot(id uint64, own []byte, extra ...[]byte) ([]byte, error) {
	if t.tab == nil {
		return nil, t.openErr
	}
	tb, err := t.tab.Snapshot(id)
	if err != nil {
		return nil, err
	}
	return state.Bundle(own, append([][]byte{tb}, extra...)...)
}

// errOldState is the cause of a checkpoint's state written before the
// stage kept its state in a table, which the caller decodes as before.
var errOldState = errors.New("state written before the state tables")

// restore restores the table from the table parts of bundles, keeping
// groups [lo, hi), and returns each bundle's own part. A state that is not
// a bundle (written by an older sluice) is errOldState: the caller decodes
// every state the old way.
func (t *keyedTable[K, V]) restore(states [][]byte, lo, hi int) ([][]byte, error) {
	own, _, err := t.restoreExtra(states, lo, hi, false)
	return own, err
}

// restoreExtra is restore for a stage that may keep a second table
// (extra): the bundles' second tables (nil where a bundle has one) are
// returned beside their own parts, for the caller to restore.
func (t *keyedTable[K, V]) restoreExtra(states [][]byte, lo, hi int, extra bool) (own, second [][]byte, err error) {
	if t.tab == nil {
		return nil, nil, t.openErr
	}
	own = make([][]byte, len(states))
	second = make([][]byte, len(states))
	tabs := make([][]byte, len(states))
	old := 0
	for i, b := range states {
		if !state.IsBundle(b) {
			old++
			continue
		}
		e, tbs, err := state.Unbundle(b)
		if err == nil && (len(tbs) < 1 || len(tbs) > 2 || len(tbs) == 2 && !extra) {
			keeps := "one"
			if extra {
				keeps = "one or two"
			}
			err = fmt.Errorf("%w: a bundle of %d tables, this stage keeps %s", state.ErrCorrupt, len(tbs), keeps)
		}
		if err != nil {
			return nil, nil, wrapState(i, len(states), err)
		}
		own[i], tabs[i] = e, tbs[0]
		if len(tbs) == 2 {
			second[i] = tbs[1]
		}
	}
	switch {
	case old == len(states):
		return nil, nil, errOldState
	case old > 0:
		return nil, nil, fmt.Errorf("%d of %d states written before the state tables, the others after: not one checkpoint", old, len(states))
	}
	if err := t.tab.Restore(tabs, lo, hi); err != nil {
		return nil, nil, err
	}
	return own, second, nil
}

// committed and close: the stages' CommittedState and CloseState.
func (t *keyedTable[K, V]) committed(id uint64) {
	if t.tab != nil {
		t.tab.Committed(id)
	}
}

func (t *keyedTable[K, V]) close() error {
	if t.tab == nil {
		return nil
	}
	return t.tab.Close()
}

// len is how many keys the memory table holds (-1 on disk: unknown
// without a scan).
func (t *keyedTable[K, V]) len() int {
	if t.mem != nil {
		return len(t.mem.M)
	}
	return -1
}

// load puts the values of a state decoded the old way (a checkpoint
// written before the state tables) into the emptied table.
func (t *keyedTable[K, V]) load(vs map[K]V) {
	if t.mem != nil {
		if err := t.mem.Restore(nil, 0, 0); err != nil { // empties it (a base at the next snapshot)
			panic(err)
		}
	} else if err := t.tab.Restore(nil, 0, 0); err != nil {
		panic(err)
	}
	for k, v := range vs {
		t.tab.Put(k, v, false)
	}
}

// clear forgets the memory table's keys at the end of the input (the disk
// backend's stay in its files).
func (t *keyedTable[K, V]) clear() {
	if t.mem == nil || len(t.mem.M) == 0 {
		return
	}
	t.mem.Clear()
}

// compact deletes from the memory table the keys empty says have no state
// (a stage that leaves them in place, to spare Mem.Delete's scan of the
// key order, calls it once they are many: amortized, a key costs one).
// Its set of keys to delete is kept for the next compaction.
func (t *keyedTable[K, V]) compact(empty func(V) bool) {
	if t.gone == nil {
		t.gone = map[K]bool{}
	}
	for k, v := range t.mem.M {
		if empty(v) {
			t.gone[k] = true
		}
	}
	if len(t.gone) > 0 {
		t.mem.DeleteAll(t.gone)
		clear(t.gone)
	}
}

// msgClock is the time a disk table with a TTL puts and checks entries
// at: the stage's clock read once as each message (a batch, a watermark,
// a timer) begins, so that every record of a batch is put at the time the
// batch arrived, as the memory backend's touch does, and not at whatever
// moment each Put runs (the clock may move while a batch is processed).
type msgClock struct{ ns int64 }

// tick reads the stage's clock.
func (c *msgClock) tick(sc *Ctx) { c.ns = sc.Now().UnixNano() }

// now is the time of the message being processed.
func (c *msgClock) now() int64 { return c.ns }
