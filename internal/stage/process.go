package stage

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/state"
)

// ProcessContext is what a Process function sees: the current key, its
// state, the current event time, and the means to emit results and to set
// event-time timers. It is valid only during the call it is passed to.
type ProcessContext[K comparable, S, O any] struct {
	s    *ProcCore[K, S, O]
	key  K
	at   int64 // event time of the record or timer
	proc bool  // a processing-time timer fired
	// On disk: the key's state State returned during this call, put back
	// into the table when the call returns (existed: the table had it).
	cur     *S
	existed bool
	// In memory: the state Clear took out of the table during this call,
	// kept for reuse once the call has returned (done).
	freed *S
}

// ProcessingTimer sets a processing-time timer for the key: onTimer runs
// when the job's clock (WithClock) reaches t, with Time returning t and
// IsProcessingTimer true. Setting the same time twice for a key sets one
// timer. Processing-time timers are part of checkpoints and are armed again
// on restore (at once when their time has passed); those still pending at
// the end of the input do not fire.
func (c *ProcessContext[K, S, O]) ProcessingTimer(t time.Time) {
	at := t.UnixNano()
	if c.s.t.disk != nil { // disk: timers.go
		c.s.checkTimers()
		if c.s.dt.set(processingTime, at, c.key) {
			c.s.armWake(at)
		}
		return
	}
	id := TimerID[K]{at, c.key}
	if _, dup := c.s.ptimers[id]; dup {
		return
	}
	c.s.ptimers[id] = struct{}{}
	c.s.armProcessing(id)
}

// IsProcessingTimer reports whether onTimer runs for a processing-time
// timer (false: an event-time timer).
func (c *ProcessContext[K, S, O]) IsProcessingTimer() bool { return c.proc }

// Key returns the key of the record or timer being handled.
func (c *ProcessContext[K, S, O]) Key() K { return c.key }

// State returns the key's state, a zero S the first time. Changes through
// the pointer are kept, and are part of checkpoints (S must then be
// msgpack-encodable). The pointer is valid during the call: once the call
// has returned, a state Clear forgot may be reused for another key.
func (c *ProcessContext[K, S, O]) State() *S {
	t := &c.s.t
	if m := t.mem; m != nil {
		st, present := m.M[c.key]
		if st == nil {
			st = c.s.newState()
			if present { // cleared, still in the key order
				m.M[c.key] = st
				m.Changed(c.key, true)
			} else {
				t.memPut(c.key, st, false)
			}
		} else {
			m.Changed(c.key, true) // it may change through the pointer
		}
		return st
	}
	if c.cur == nil {
		t.check(c.s.sc)
		st, ok := t.tab.Get(c.key)
		if !ok || st == nil {
			st = new(S)
		}
		c.cur, c.existed = st, ok
	}
	return c.cur
}

// Clear forgets the key's state. Its timers stay set.
func (c *ProcessContext[K, S, O]) Clear() {
	t := &c.s.t
	if m := t.mem; m != nil {
		// Left in place as nil (Mem.Delete scans the key order), compacted
		// once they are many.
		if st, ok := m.M[c.key]; ok && st != nil {
			m.M[c.key] = nil
			m.Changed(c.key, true)
			c.freed = st
			if c.s.cleared++; c.s.cleared > 64 && c.s.cleared > len(m.M)/2 {
				t.compact(func(st *S) bool { return st == nil })
				c.s.cleared = 0
			}
		}
		return
	}
	t.check(c.s.sc)
	t.tab.Delete(c.key)
	c.cur = nil
}

// done ends a call of the user's functions: on disk, the state State
// returned goes back into the table (a value in the table's cache must not
// change behind it), and with a TTL a record that did not touch its key's
// state puts it again, its time renewed.
func (c *ProcessContext[K, S, O]) done(record bool) {
	t := &c.s.t
	if t.disk == nil {
		if st := c.freed; st != nil {
			c.freed = nil
			if len(c.s.spare) < maxSpareStates {
				var zero S
				*st = zero
				c.s.spare = append(c.s.spare, st)
			}
		}
		return
	}
	if c.cur != nil {
		t.tab.Put(c.key, c.cur, c.existed)
		c.cur = nil
		return
	}
	if record && c.s.sc.StateTTL > 0 {
		if st, ok := t.tab.Get(c.key); ok {
			t.tab.Put(c.key, st, true)
		}
	}
}

// Time returns the event time of the record being handled, or the time of
// the timer that fired (zero when the input carries no event times).
func (c *ProcessContext[K, S, O]) Time() time.Time {
	if c.at == math.MinInt64 {
		return time.Time{}
	}
	return time.Unix(0, c.at).UTC()
}

// Watermark returns the operator's event time: no record at or before it
// will arrive (zero before the first watermark).
func (c *ProcessContext[K, S, O]) Watermark() time.Time {
	if c.s.wm == math.MinInt64 {
		return time.Time{}
	}
	return time.Unix(0, c.s.wm).UTC()
}

// IsLate reports whether the record being handled is behind the watermark
// (its event time is at or before it): Process receives late records like
// any other, and the function decides what they mean.
func (c *ProcessContext[K, S, O]) IsLate() bool {
	return !c.proc && c.at != math.MinInt64 && c.s.wm != math.MinInt64 && c.at <= c.s.wm
}

// CountLate counts the record being handled as late in the operator's
// statistics (OperatorStats.Late), for a function that drops or diverts it.
func (c *ProcessContext[K, S, O]) CountLate() { c.s.sc.C.Late.Add(1) }

// Emit sends o downstream with the current event time.
func (c *ProcessContext[K, S, O]) Emit(o O) { c.s.out.add(o, c.at) }

// EmitAt sends o downstream with event time t.
func (c *ProcessContext[K, S, O]) EmitAt(o O, t time.Time) { c.s.out.add(o, t.UnixNano()) }

// Timer sets an event-time timer for the key: onTimer runs once the
// watermark reaches t (at the latest at the end of the input). Setting the
// same time twice for a key sets one timer.
func (c *ProcessContext[K, S, O]) Timer(t time.Time) {
	at := t.UnixNano()
	if c.s.t.disk != nil { // disk: timers.go
		c.s.checkTimers()
		c.s.dt.set(eventTime, at, c.key)
		return
	}
	// One map operation: the set grows unless the timer was set already.
	n := len(c.s.timerSet)
	if c.s.timerSet[TimerID[K]{at, c.key}] = struct{}{}; len(c.s.timerSet) == n {
		return
	}
	c.s.timers.add(at, c.key)
}

type TimerID[K comparable] struct {
	at  int64
	key K
}

// ProcessStage runs a Process operator's functions on its records.
type ProcessStage[K comparable, T, S, O any] struct {
	*ProcCore[K, S, O]
	key      func(T) K
	onRecord func(c *ProcessContext[K, S, O], v T)
	lend     lender[T] // gives the batches read back (giveBack)
}

func (s *ProcessStage[K, T, S, O]) Push(b *Batch[T]) {
	defer s.sc.attribute()
	if end := passKeyed(s.sc, b, s.key); end != nil {
		defer end()
	}
	s.sc.C.In.Add(int64(len(b.Vs)))
	if s.sc.StateTTL > 0 {
		s.clk.tick(s.sc)
	}
	c := &s.ctx
	c.s = s.ProcCore
	c.proc = false
	mi := 0
	defer func() { s.out.cur = nil }()
	for i, v := range b.Vs {
		s.out.cur = nil
		for mi < len(b.Tr) && int(b.Tr[mi].I) < i {
			mi++
		}
		if mi < len(b.Tr) && int(b.Tr[mi].I) == i { // what it emits stays in its trace
			s.out.cur = &b.Tr[mi]
		}
		c.at = math.MinInt64
		if b.Ts != nil {
			c.at = b.Ts[i]
		}
		c.key = s.key(v)
		if s.sc.StateTTL > 0 {
			if s.t.disk != nil {
				s.armSweep()
			} else {
				s.ttl.touch(s.sc, c.key, s.expire)
			}
		}
		c.cur = nil
		s.onRecord(c, v)
		c.done(true)
	}
	s.out.flush()
	s.lend.giveBack(s.sc, b)
}

func (s *ProcessStage[K, T, S, O]) SnapshotState(id uint64) ([]byte, error) { return s.snapshot(id) }

func (s *ProcessStage[K, T, S, O]) RestoreState(b []byte) error {
	return s.RestoreKeyGroups([][]byte{b}, 0, state.AllGroups)
}

// RestoreKeyGroups implements KeyGroupRestorer: the states and timers of
// the keys in [lo, hi), the lowest event time.
func (s *ProcessStage[K, T, S, O]) RestoreKeyGroups(states [][]byte, lo, hi int) error {
	owns := ownsKeys[K](lo, hi)
	merged := processState[K, S]{Wm: s.wm}
	own, tstates, err := s.t.restoreExtra(states, lo, hi, s.t.disk != nil)
	old := errors.Is(err, errOldState)
	if err != nil && !old {
		return err
	}
	if !old {
		states = own
	}
	for i, b := range states {
		st, err := decodeProcess[K, S](b)
		if err != nil {
			return fmt.Errorf("state %d of %d: %w", i+1, len(states), err)
		}
		if !old && len(st.Keys) > 0 {
			return fmt.Errorf("state %d of %d: %d keys' states beside the state table", i+1, len(states), len(st.Keys))
		}
		if i == 0 || st.Wm < merged.Wm {
			merged.Wm = st.Wm
		}
		for j, k := range st.Keys {
			if owns(k) {
				merged.Keys, merged.States = append(merged.Keys, k), append(merged.States, st.States[j])
			}
		}
		for j, k := range st.TKeys {
			if owns(k) {
				merged.TKeys, merged.TAt = append(merged.TKeys, k), append(merged.TAt, st.TAt[j])
			}
		}
		for j, k := range st.PKeys {
			if owns(k) {
				merged.PKeys, merged.PAt = append(merged.PKeys, k), append(merged.PAt, st.PAt[j])
			}
		}
	}
	if old {
		vs := make(map[K]*S, len(merged.Keys))
		for i, k := range merged.Keys {
			vs[k] = &merged.States[i]
		}
		s.t.load(vs)
	}
	merged.Keys, merged.States = nil, nil
	if s.t.disk != nil { // the timer tables, then the timers of a checkpoint that kept them as slices
		if err := s.restoreTimers(tstates, lo, hi, merged); err != nil {
			return err
		}
		merged.TKeys, merged.TAt, merged.PKeys, merged.PAt = nil, nil, nil, nil
	}
	s.restoreFrom(merged)
	return nil
}

// ProcCore is the part of a process stage that does not depend on its input type.
type ProcCore[K comparable, S, O any] struct {
	onTimer  func(c *ProcessContext[K, S, O])
	wm       int64
	t        keyedTable[K, *S] // the keys' states
	cleared  int               // memory: states cleared (left nil) since the last compaction
	sweeping bool              // disk with a TTL: a sweep is scheduled
	clk      msgClock          // disk with a TTL: the table's time
	ended    bool              // Finish: no more sweeps
	timers   timeHeap[K]       // memory: the event-time timers
	timerSet map[TimerID[K]]struct{}
	dt       *diskTimers[K]          // disk: the timers (timers.go)
	dtErr    error                   // disk: the timer table did not open
	wake     int64                   // disk: the time of the wake-up for processing-time timers, if wakeStop
	wakeStop func()                  // disk: cancels the pending wake-up (nil: none)
	ptimers  map[TimerID[K]]struct{} // memory: processing-time timers set
	restored []TimerID[K]            // memory: processing-time timers to arm at open
	ttl      keyTTL[K]               // StateTTL: the keys' state expires, their timers stay
	ctx      ProcessContext[K, S, O]
	spare    []*S // memory: cleared states, zeroed, for keys that get one next (newState)
	// marshal encodes the stage's own part of a checkpoint (compiled,
	// state.Marshaler; nil: msgpack.Marshal).
	marshal func(*processState[K, S]) ([]byte, error)
	next    Pusher[O]
	sc      *Ctx
	out     OutBuf[O]
}

// maxSpareStates bounds ProcCore.spare: the states kept for reuse after a
// burst of Clears.
const maxSpareStates = 1024

// newState is a zero state for a key of the memory table: one Clear
// forgot, or a new one. Operators whose keys come and go (an auction, a
// window) then allocate a state per live key, not one per key ever seen.
func (s *ProcCore[K, S, O]) newState() *S {
	if n := len(s.spare); n > 0 {
		st := s.spare[n-1]
		s.spare[n-1] = nil
		s.spare = s.spare[:n-1]
		return st
	}
	return new(S)
}

// expire forgets the state of keys idle for longer than the TTL.
func (s *ProcCore[K, S, O]) expire(gone map[K]bool) {
	if s.t.mem != nil {
		s.t.mem.DeleteAll(gone)
	}
}

// open opens the state table; on disk with a TTL the table forgets a
// key's state a TTL after it was last put (each record puts it).
func (s *ProcCore[K, S, O]) open() {
	s.t = openTable[K, *S](s.sc)
	s.openTimers()
	if s.t.disk != nil && s.sc.StateTTL > 0 {
		s.t.disk.SetTTL(time.Duration(s.sc.StateTTL), s.clk.now, nil)
	}
}

// sweepDisk removes the disk table's expired states, and sweeps again a
// TTL later while states are left.
func (s *ProcCore[K, S, O]) sweepDisk() {
	defer s.sc.attribute()
	s.sweeping = false
	s.clk.tick(s.sc)
	if !s.ended && s.t.disk.Expire() > 0 {
		s.armSweep()
	}
}

func (s *ProcCore[K, S, O]) armSweep() {
	if !s.sweeping && !s.ended {
		s.sweeping = true
		s.sc.After(time.Duration(s.sc.StateTTL), s.sweepDisk)
	}
}

// CommittedState and CloseState: the state backend's (see KeyedStage).
func (s *ProcCore[K, S, O]) CommittedState(id uint64) { s.t.committed(id); s.committedTimers(id) }
func (s *ProcCore[K, S, O]) CloseState() error        { return errors.Join(s.t.close(), s.closeTimers()) }

// armProcessing asks the instance to run a processing-time timer.
func (s *ProcCore[K, S, O]) armProcessing(id TimerID[K]) {
	d := time.Duration(max(0, id.at-s.sc.Now().UnixNano()))
	s.sc.After(d, func() { s.fireProcessing(id) })
}

func (s *ProcCore[K, S, O]) fireProcessing(id TimerID[K]) {
	defer s.sc.attribute()
	if _, ok := s.ptimers[id]; !ok {
		return
	}
	delete(s.ptimers, id)
	s.clk.tick(s.sc)
	if s.onTimer != nil {
		c := &s.ctx
		c.s, c.key, c.at, c.proc, c.cur = s, id.key, id.at, true, nil
		s.onTimer(c)
		c.done(false)
		c.proc = false
	}
	s.out.flush()
}

// open arms the processing-time timers of a restored state (on disk: the
// wake-up for the earliest).
func (s *ProcCore[K, S, O]) Open() error {
	if s.dt != nil {
		s.armWake(s.dt.earliest(processingTime))
	}
	for _, id := range s.restored {
		s.armProcessing(id)
	}
	s.restored = nil
	return nil
}

func (s *ProcCore[K, S, O]) Abort() {}

// fire runs the timers due at or before wm.
func (s *ProcCore[K, S, O]) fire(wm int64) {
	if s.t.disk != nil {
		s.fireDisk(wm)
		return
	}
	c := &s.ctx
	c.s, c.proc = s, false
	for e, ok := s.timers.due(wm); ok; e, ok = s.timers.due(wm) {
		delete(s.timerSet, TimerID[K]{e.at, e.v})
		if s.onTimer == nil {
			continue
		}
		c.key, c.at, c.cur = e.v, e.at, nil
		s.onTimer(c)
		c.done(false)
	}
}

func (s *ProcCore[K, S, O]) Watermark(wm int64) {
	defer s.sc.attribute()
	if wm <= s.wm {
		return
	}
	s.wm = wm
	s.clk.tick(s.sc)
	s.fire(wm)
	s.out.flush()
	s.next.Watermark(wm)
}

func (s *ProcCore[K, S, O]) Finish() {
	defer s.sc.attribute()
	s.ttl.stop()
	s.ended = true
	if s.wakeStop != nil { // pending processing-time timers do not fire
		s.wakeStop()
		s.wakeStop = nil
	}
	s.clk.tick(s.sc)
	s.fire(math.MaxInt64)
	s.out.flush()
	s.t.clear()
	s.next.Finish()
}

// processState is Process's checkpoint before the state tables (every
// key's state, its timers and event time); now its own part beside the
// table (the timers and event time, Keys and States empty).
type processState[K comparable, S any] struct {
	Wm     int64   `msgpack:"wm"`
	Keys   []K     `msgpack:"k"`
	States []S     `msgpack:"s"`
	TKeys  []K     `msgpack:"tk"`
	TAt    []int64 `msgpack:"ta"`
	PKeys  []K     `msgpack:"pk,omitempty"` // processing-time timers
	PAt    []int64 `msgpack:"pa,omitempty"`
}

func (s *ProcCore[K, S, O]) snapshot(id uint64) ([]byte, error) {
	st := processState[K, S]{Wm: s.wm}
	// In the heap's order, not sorted (sorting a copy was a sixth of the
	// winning-bid operator's checkpoint in a profile): one instance's,
	// restored in it, is a heap again without a swap.
	if n := len(s.timers); n > 0 {
		st.TKeys, st.TAt = make([]K, 0, n), make([]int64, 0, n)
	}
	for _, tm := range s.timers {
		st.TKeys = append(st.TKeys, tm.v)
		st.TAt = append(st.TAt, tm.at)
	}
	for id := range s.ptimers {
		st.PKeys = append(st.PKeys, id.key)
		st.PAt = append(st.PAt, id.at)
	}
	marshal := s.marshal
	if marshal == nil {
		marshal = func(st *processState[K, S]) ([]byte, error) { return msgpack.Marshal(st) }
	}
	b, err := marshal(&st)
	if err != nil {
		return nil, fmt.Errorf("encode the timers of %d keys: %w", len(st.TKeys), err)
	}
	if s.t.disk != nil { // disk: the timer table's part beside the state table's
		tb, err := s.snapshotTimers(id)
		if err != nil {
			return nil, err
		}
		return s.t.snapshot(id, b, tb)
	}
	return s.t.snapshot(id, b)
}

func decodeProcess[K comparable, S any](b []byte) (processState[K, S], error) {
	var st processState[K, S]
	if err := decodeState(b, &st, "process state"); err != nil {
		return st, err
	}
	if len(st.Keys) != len(st.States) || len(st.TKeys) != len(st.TAt) || len(st.PKeys) != len(st.PAt) {
		return st, fmt.Errorf("%d keys but %d states, %d timer keys but %d times", len(st.Keys), len(st.States), len(st.TKeys), len(st.TAt))
	}
	return st, nil
}

func (s *ProcCore[K, S, O]) restoreFrom(st processState[K, S]) {
	if s.t.mem != nil {
		s.ttl.restored(s.sc, slices.Values(s.t.mem.Order))
	}
	s.wm = st.Wm
	for i, k := range st.TKeys {
		s.timerSet[TimerID[K]{st.TAt[i], k}] = struct{}{}
		s.timers.add(st.TAt[i], k)
	}
	for i, k := range st.PKeys {
		id := TimerID[K]{st.PAt[i], k}
		s.ptimers[id] = struct{}{}
		s.restored = append(s.restored, id)
	}
}
