package coord

import "slices"

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
// of at Close. A checkpoint still in flight at that moment is abandoned for
// it.
type Checkpoints struct {
	Instances int    // operator instances that must acknowledge a checkpoint
	Next      uint64 // the id of the next checkpoint
	Completed uint64 // the id of the last completed checkpoint, 0 if none
	Stopping  bool   // the job is draining or finishing: start no new checkpoint
	Final     uint64 // the id of the final checkpoint once it started, 0 before
	// InFlight is the checkpoint being taken, if any (one at a time).
	InFlight *InFlight
}

// InFlight is the checkpoint being taken: who acknowledged it and what they
// recorded.
type InFlight struct {
	ID      uint64
	Acked   map[int]bool // by instance number
	States  map[string][]byte
	Offsets map[string]int64
}

// A CheckpointEvent is an input of the coordinator: Tick, Acked, Stored,
// Stop or TakeFinal.
type CheckpointEvent interface{ checkpointEvent() }

// The coordinator's events.
type (
	// Tick: the checkpoint interval elapsed (or a savepoint was asked).
	Tick struct{}
	// Acked: an instance recorded its state for checkpoint ID.
	Acked struct {
		ID       uint64
		Instance int
		States   map[string][]byte
		Offsets  map[string]int64
	}
	// Stored: the store recorded checkpoint ID, or failed to (Err).
	Stored struct {
		ID  uint64
		Err error
	}
	// Stop: the job is draining; start no new checkpoint.
	Stop struct{}
	// TakeFinal: every instance finished its input; take the final
	// checkpoint.
	TakeFinal struct{}
)

func (Tick) checkpointEvent()      {}
func (Acked) checkpointEvent()     {}
func (Stored) checkpointEvent()    {}
func (Stop) checkpointEvent()      {}
func (TakeFinal) checkpointEvent() {}

// A CheckpointAction is what the coordinator asks the job actor to do:
// Inject, Store, Completed, CheckpointFailed or Abandoned.
type CheckpointAction interface{ checkpointAction() }

// The coordinator's actions.
type (
	// Inject: announce checkpoint ID to every instance (running sources
	// inject its barrier); Final says it is the final checkpoint.
	Inject struct {
		ID    uint64
		Final bool
	}
	// Store: record the completed checkpoint, then feed Stored.
	Store struct {
		ID      uint64
		States  map[string][]byte
		Offsets map[string]int64
	}
	// Completed: checkpoint ID is durable; tell the instances.
	Completed struct {
		ID    uint64
		Final bool
	}
	// CheckpointFailed: checkpoint ID could not be completed.
	CheckpointFailed struct {
		ID    uint64
		Err   error
		Final bool
	}
	// Abandoned: the final checkpoint replaced checkpoint ID in flight.
	Abandoned struct{ ID uint64 }
)

func (Inject) checkpointAction()           {}
func (Store) checkpointAction()            {}
func (Completed) checkpointAction()        {}
func (CheckpointFailed) checkpointAction() {}
func (Abandoned) checkpointAction()        {}

// Step is the coordinator's transition function: it returns the new state
// and the actions to carry out, and changes neither s nor ev. It does no
// I/O, reads no clock and starts no goroutine.
func (s Checkpoints) Step(ev CheckpointEvent) (Checkpoints, []CheckpointAction) {
	switch e := ev.(type) {
	case Tick:
		if s.Stopping || s.InFlight != nil {
			return s, nil // at most one checkpoint at a time; none while stopping
		}
		id := s.next()
		s.InFlight = newInFlight(id)
		return s, []CheckpointAction{Inject{ID: id}}
	case Acked:
		f := s.InFlight
		if f == nil || e.ID != f.ID || f.Acked[e.Instance] {
			return s, nil // late, stale or duplicate: ignore
		}
		f = &InFlight{ID: f.ID, Acked: cloneMap(f.Acked), States: cloneMap(f.States), Offsets: cloneMap(f.Offsets)}
		f.Acked[e.Instance] = true
		for k, v := range e.States {
			f.States[k] = v
		}
		for k, v := range e.Offsets {
			f.Offsets[k] = v
		}
		s.InFlight = f
		if len(f.Acked) < s.Instances {
			return s, nil
		}
		return s, []CheckpointAction{Store{ID: f.ID, States: f.States, Offsets: f.Offsets}}
	case Stored:
		if s.InFlight == nil || s.InFlight.ID != e.ID {
			return s, nil
		}
		s.InFlight = nil
		final := e.ID == s.Final
		if e.Err != nil {
			return s, []CheckpointAction{CheckpointFailed{ID: e.ID, Err: e.Err, Final: final}}
		}
		s.Completed = e.ID
		return s, []CheckpointAction{Completed{ID: e.ID, Final: final}}
	case Stop:
		s.Stopping = true
		return s, nil
	case TakeFinal:
		if s.Final != 0 {
			return s, nil // once
		}
		s.Stopping = true
		var acts []CheckpointAction
		if s.InFlight != nil {
			acts = append(acts, Abandoned{ID: s.InFlight.ID})
		}
		s.Final = s.next()
		s.InFlight = newInFlight(s.Final)
		return s, append(acts, Inject{ID: s.Final, Final: true})
	}
	return s, nil // the event types are sealed: not reached
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

func newInFlight(id uint64) *InFlight {
	return &InFlight{ID: id, Acked: map[int]bool{}, States: map[string][]byte{}, Offsets: map[string]int64{}}
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
