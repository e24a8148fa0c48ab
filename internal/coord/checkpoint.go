package coord

import (
	"fmt"
	"slices"
	"time"
)

// Checkpoints is the state of the checkpoint coordinator.
//
// Checkpoints after sources finished (as Flink's FLIP-147): a source that
// reaches its end does not stop checkpoints. The job announces every
// checkpoint to every instance; running sources start it, instances that
// have finished their input answer with their final state (a source with
// its end offset), and the others align it on their inputs, counting an
// ended input as aligned. So a job whose small bounded source ended keeps
// checkpointing its unbounded ones.
//
// The final checkpoint: when the job is drained the coordinator stops
// starting checkpoints (Stop); once every instance has finished its input,
// the job feeds TakeFinal and the coordinator starts one last checkpoint,
// which every instance answers as finished (no records are in flight any
// more, so any order is a consistent cut). Its completion commits the
// two-phase sinks' tail through the ordinary PreCommit/Commit path instead
// of at Close. Checkpoints still in flight at that moment are abandoned for
// it.
//
// The policy (as Flink's CheckpointConfig): at most MaxConcurrent
// checkpoints are in flight (default one); a tick while that many are in
// flight starts nothing. A checkpoint not stored Timeout after it started
// fails with a TimeoutError (Expire, fed by the timer the Inject action's
// Deadline asks for), acknowledgements for it arriving later are ignored,
// and the job goes on. With MinPause, a checkpoint starts only when none is
// in flight and MinPause has passed since the last one ended (completed or
// failed); a tick earlier than that asks for a tick at that time (TickAt).
// When a checkpoint completes, the older ones still in flight are subsumed
// by it (Abandoned): it covers everything they would have.
type Checkpoints struct {
	Instances int    // operator instances that must acknowledge a checkpoint
	Next      uint64 // the id of the next checkpoint
	Completed uint64 // the id of the last completed checkpoint, 0 if none
	Stopping  bool   // the job is draining or finishing: start no new checkpoint
	Final     uint64 // the id of the final checkpoint once it started, 0 before

	Timeout       time.Duration // 0: checkpoints never time out
	MaxConcurrent int           // checkpoints in flight at once; 0 means 1
	MinPause      time.Duration // between the end of one and the start of the next
	// Unaligned starts every checkpoint unaligned; AlignmentTimeout starts
	// them aligned and switches one that is still in flight after it to
	// unaligned (SwitchUnaligned). See docs/checkpoints.md.
	Unaligned        bool
	AlignmentTimeout time.Duration

	// InFlight are the checkpoints being taken, oldest first.
	InFlight []*InFlight
	// LastEnded is when the last checkpoint completed or failed.
	LastEnded time.Time
	// Deferred is when the tick TickAt asked for is due (zero: none asked).
	Deferred time.Time
}

// InFlight is a checkpoint being taken: when it started, who acknowledged
// it and what they recorded.
type InFlight struct {
	ID      uint64
	Started time.Time
	Acked   map[int]bool // by instance number
	States  map[string][]byte
	Offsets map[string]int64
	// Unaligned: barriers overtake queued records; Channels holds the
	// overtaken records (or a reference to a spill queue's range) by input
	// channel, to be replayed first on restore.
	Unaligned bool
	Channels  map[string][]byte
}

// TimeoutError is the reason of a checkpoint that timed out.
type TimeoutError struct{ After time.Duration }

func (e *TimeoutError) Error() string { return fmt.Sprintf("timed out after %v", e.After) }

// A CheckpointEvent is an input of the coordinator: Tick, Acked, Stored,
// Expire, Stop or TakeFinal.
type CheckpointEvent interface{ checkpointEvent() }

// The coordinator's events.
type (
	// Tick: the checkpoint interval elapsed (or a savepoint was asked).
	Tick struct{ At time.Time }
	// Acked: an instance recorded its state for checkpoint ID.
	Acked struct {
		ID       uint64
		Instance int
		States   map[string][]byte
		Offsets  map[string]int64
		// Channels: the in-flight records the barrier overtook, by input
		// channel (an unaligned acknowledgement).
		Channels map[string][]byte
	}
	// Stored: the store recorded checkpoint ID, or failed to (Err).
	Stored struct {
		ID  uint64
		Err error
		At  time.Time
	}
	// Expire: the deadline of checkpoint ID (Inject.Deadline) passed.
	Expire struct {
		ID uint64
		At time.Time
	}
	// AlignTimeout: the alignment deadline of checkpoint ID
	// (Inject.AlignBy) passed.
	AlignTimeout struct {
		ID uint64
		At time.Time
	}
	// Stop: the job is draining; start no new checkpoint.
	Stop struct{}
	// TakeFinal: every instance finished its input; take the final
	// checkpoint.
	TakeFinal struct{ At time.Time }
)

func (Tick) checkpointEvent()         {}
func (Acked) checkpointEvent()        {}
func (Stored) checkpointEvent()       {}
func (Expire) checkpointEvent()       {}
func (Stop) checkpointEvent()         {}
func (AlignTimeout) checkpointEvent() {}
func (TakeFinal) checkpointEvent()    {}

// A CheckpointAction is what the coordinator asks the job actor to do:
// Inject, Store, Completed, CheckpointFailed, Abandoned or TickAt.
type CheckpointAction interface{ checkpointAction() }

// The coordinator's actions.
type (
	// Inject: announce checkpoint ID to every instance (running sources
	// inject its barrier); Final says it is the final checkpoint. Unless
	// Deadline is zero, feed Expire{ID} once it has passed.
	Inject struct {
		ID       uint64
		Final    bool
		Deadline time.Time
		// Unaligned: barriers overtake queued records. Otherwise, unless
		// AlignBy is zero, feed AlignTimeout{ID} once it has passed.
		Unaligned bool
		AlignBy   time.Time
	}
	// Store: record the completed checkpoint, then feed Stored.
	Store struct {
		ID        uint64
		States    map[string][]byte
		Offsets   map[string]int64
		Unaligned bool
		Channels  map[string][]byte // in-flight records, for an unaligned checkpoint
	}
	// Completed: checkpoint ID is durable; tell the instances.
	Completed struct {
		ID    uint64
		Final bool
	}
	// CheckpointFailed: checkpoint ID could not be completed (a
	// *TimeoutError when it timed out).
	CheckpointFailed struct {
		ID    uint64
		Err   error
		Final bool
	}
	// Abandoned: checkpoint ID in flight was given up for a later one (the
	// final checkpoint, or one that completed and covers it).
	Abandoned struct{ ID uint64 }
	// TickAt: feed a Tick at At (the minimum pause deferred one).
	TickAt struct{ At time.Time }
	// SwitchUnaligned: tell the instances still aligning checkpoint ID to
	// let its barrier overtake their queued records and record them.
	SwitchUnaligned struct{ ID uint64 }
)

func (Inject) checkpointAction()           {}
func (Store) checkpointAction()            {}
func (Completed) checkpointAction()        {}
func (CheckpointFailed) checkpointAction() {}
func (Abandoned) checkpointAction()        {}
func (TickAt) checkpointAction()           {}
func (SwitchUnaligned) checkpointAction()  {}

// Step is the coordinator's transition function: it returns the new state
// and the actions to carry out, and changes neither s nor ev. It does no
// I/O, reads no clock and starts no goroutine.
func (s Checkpoints) Step(ev CheckpointEvent) (Checkpoints, []CheckpointAction) {
	switch e := ev.(type) {
	case Tick:
		if s.Stopping || len(s.InFlight) >= max(1, s.MaxConcurrent) {
			return s, nil // none while stopping; at most MaxConcurrent at once
		}
		if s.MinPause > 0 {
			if len(s.InFlight) > 0 {
				return s, nil // with a pause, one at a time
			}
			if due := s.LastEnded.Add(s.MinPause); !s.LastEnded.IsZero() && e.At.Before(due) {
				if s.Deferred.Equal(due) {
					return s, nil // already asked for
				}
				s.Deferred = due
				return s, []CheckpointAction{TickAt{At: due}}
			}
		}
		s.Deferred = time.Time{}
		id := s.next()
		f := newInFlight(id, e.At)
		f.Unaligned = s.Unaligned
		s.InFlight = append(slices.Clone(s.InFlight), f)
		return s, []CheckpointAction{s.inject(id, e.At, false)}
	case Acked:
		i := s.find(e.ID)
		if i < 0 || s.InFlight[i].Acked[e.Instance] {
			return s, nil // late, stale, timed out or duplicate: ignore
		}
		old := s.InFlight[i]
		f := &InFlight{ID: old.ID, Started: old.Started, Acked: cloneMap(old.Acked), States: cloneMap(old.States), Offsets: cloneMap(old.Offsets),
			Unaligned: old.Unaligned || len(e.Channels) > 0, Channels: cloneMap(old.Channels)}
		f.Acked[e.Instance] = true
		for k, v := range e.Channels {
			f.Channels[k] = v
		}
		for k, v := range e.States {
			f.States[k] = v
		}
		for k, v := range e.Offsets {
			f.Offsets[k] = v
		}
		s.InFlight = slices.Clone(s.InFlight)
		s.InFlight[i] = f
		if len(f.Acked) < s.Instances {
			return s, nil
		}
		st := Store{ID: f.ID, States: f.States, Offsets: f.Offsets, Unaligned: f.Unaligned}
		if len(f.Channels) > 0 {
			st.Channels = f.Channels
		}
		return s, []CheckpointAction{st}
	case Stored:
		i := s.find(e.ID)
		if i < 0 {
			return s, nil
		}
		s.LastEnded = e.At
		final := e.ID == s.Final
		if e.Err != nil {
			s.InFlight = slices.Delete(slices.Clone(s.InFlight), i, i+1)
			return s, []CheckpointAction{CheckpointFailed{ID: e.ID, Err: e.Err, Final: final}}
		}
		var acts []CheckpointAction
		for _, f := range s.InFlight[:i] { // older: covered by this one
			acts = append(acts, Abandoned{ID: f.ID})
		}
		s.InFlight = slices.Clone(s.InFlight[i+1:])
		s.Completed = e.ID
		return s, append(acts, Completed{ID: e.ID, Final: final})
	case Expire:
		i := s.find(e.ID)
		if i < 0 || s.Timeout <= 0 || e.At.Before(s.InFlight[i].Started.Add(s.Timeout)) {
			return s, nil // ended already, or the timer of an earlier checkpoint of that id
		}
		s.InFlight = slices.Delete(slices.Clone(s.InFlight), i, i+1)
		s.LastEnded = e.At
		return s, []CheckpointAction{CheckpointFailed{ID: e.ID, Err: &TimeoutError{After: s.Timeout}, Final: e.ID == s.Final}}
	case AlignTimeout:
		i := s.find(e.ID)
		if i < 0 || s.AlignmentTimeout <= 0 || s.InFlight[i].Unaligned || e.At.Before(s.InFlight[i].Started.Add(s.AlignmentTimeout)) {
			return s, nil // ended, already unaligned, or an earlier checkpoint's timer
		}
		old := s.InFlight[i]
		f := *old
		f.Unaligned = true
		s.InFlight = slices.Clone(s.InFlight)
		s.InFlight[i] = &f
		return s, []CheckpointAction{SwitchUnaligned{ID: e.ID}}
	case Stop:
		s.Stopping = true
		return s, nil
	case TakeFinal:
		if s.Final != 0 {
			return s, nil // once
		}
		s.Stopping = true
		var acts []CheckpointAction
		for _, f := range s.InFlight {
			acts = append(acts, Abandoned{ID: f.ID})
		}
		s.Final = s.next()
		s.InFlight = []*InFlight{newInFlight(s.Final, e.At)}
		return s, append(acts, s.inject(s.Final, e.At, true))
	}
	return s, nil // the event types are sealed: not reached
}

func (s Checkpoints) inject(id uint64, at time.Time, final bool) Inject {
	a := Inject{ID: id, Final: final}
	if s.Timeout > 0 {
		a.Deadline = at.Add(s.Timeout)
	}
	// The final checkpoint has nothing in flight to overtake: aligned.
	switch {
	case final:
	case s.Unaligned:
		a.Unaligned = true
	case s.AlignmentTimeout > 0:
		a.AlignBy = at.Add(s.AlignmentTimeout)
	}
	return a
}

// find returns the index of checkpoint id in flight, -1 if none.
func (s Checkpoints) find(id uint64) int {
	return slices.IndexFunc(s.InFlight, func(f *InFlight) bool { return f.ID == id })
}

// next takes the id of the next checkpoint.
func (s *Checkpoints) next() uint64 {
	if s.Next == 0 {
		s.Next = s.Completed + 1
	}
	id := s.Next
	s.Next++
	return id
}

// MinSavepoint is the first checkpoint id a savepoint asked now may be
// answered with: one that starts after the request.
func (s Checkpoints) MinSavepoint() uint64 {
	if s.Next == 0 {
		return s.Completed + 1
	}
	return s.Next
}

func newInFlight(id uint64, at time.Time) *InFlight {
	return &InFlight{ID: id, Started: at, Acked: map[int]bool{}, States: map[string][]byte{}, Offsets: map[string]int64{}, Channels: map[string][]byte{}}
}

func cloneMap[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// sortedKeys is for deterministic output in tests and logs.
func sortedKeys[K interface{ ~string | ~int }, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
