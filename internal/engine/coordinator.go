package engine

import (
	"fmt"
	"slices"
)

// The checkpoint coordinator is a pure state machine (see DESIGN.md): Step
// takes the state and an event and returns the new state and the actions to
// carry out. It does no I/O, reads no clock and starts no goroutine; the job
// actor feeds it timer ticks and acknowledgements and performs its actions
// (inject barriers at the sources, store a completed checkpoint).
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
// starting checkpoints (evStopping); once every instance has finished its
// input, the job feeds evFinal and the coordinator starts one last
// checkpoint, which every instance answers as finished (no records are in
// flight any more, so any order is a consistent cut). Its completion
// commits the two-phase sinks' tail through the ordinary PreCommit/Commit
// path instead of at Close. A checkpoint still in flight at that moment is
// abandoned for it.

// coordState is the coordinator's state.
type coordState struct {
	Instances int    // operator instances that must acknowledge a checkpoint
	Next      uint64 // the id of the next checkpoint
	Completed uint64 // the id of the last completed checkpoint, 0 if none
	Stopping  bool   // the job is draining or finishing: start no new checkpoint
	Final     uint64 // the id of the final checkpoint once it started, 0 before
	// InFlight is the checkpoint being taken, if any (one at a time).
	InFlight *inFlight
}

type inFlight struct {
	ID      uint64
	Acked   map[int]bool // by instance number
	States  map[string][]byte
	Offsets map[string]int64
}

// Events.
type (
	evTick struct{} // the checkpoint interval elapsed
	evAck  struct { // an instance recorded its state for a checkpoint
		ID       uint64
		Instance int
		States   map[string][]byte
		Offsets  map[string]int64
	}
	evStored struct { // the store recorded a checkpoint
		ID  uint64
		Err error
	}
	evStopping struct{} // the job is draining
	evFinal    struct{} // every instance finished its input: take the final checkpoint
)

// Actions.
type (
	// actInject: announce checkpoint ID to every instance (running
	// sources inject its barrier); Final says it is the final checkpoint.
	actInject struct {
		ID    uint64
		Final bool
	}
	actStore struct { // record the completed checkpoint
		ID      uint64
		States  map[string][]byte
		Offsets map[string]int64
	}
	actCompleted struct { // tell the instances that ID is durable
		ID    uint64
		Final bool
	}
	actFailed struct { // a checkpoint could not be completed
		ID    uint64
		Err   error
		Final bool
	}
	actAbandoned struct{ ID uint64 } // the final checkpoint replaced checkpoint ID in flight
)

// step is the coordinator's transition function.
func step(s coordState, ev any) (coordState, []any) {
	switch e := ev.(type) {
	case evTick:
		if s.Stopping || s.InFlight != nil {
			return s, nil // at most one checkpoint at a time; none while stopping
		}
		if s.Next == 0 {
			s.Next = s.Completed + 1
		}
		id := s.Next
		s.Next++
		s.InFlight = &inFlight{ID: id, Acked: map[int]bool{}, States: map[string][]byte{}, Offsets: map[string]int64{}}
		return s, []any{actInject{ID: id}}
	case evAck:
		f := s.InFlight
		if f == nil || e.ID != f.ID || f.Acked[e.Instance] {
			return s, nil // late, stale or duplicate: ignore
		}
		f = &inFlight{ID: f.ID, Acked: cloneMap(f.Acked), States: cloneMap(f.States), Offsets: cloneMap(f.Offsets)}
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
		return s, []any{actStore{ID: f.ID, States: f.States, Offsets: f.Offsets}}
	case evStored:
		if s.InFlight == nil || s.InFlight.ID != e.ID {
			return s, nil
		}
		s.InFlight = nil
		final := e.ID == s.Final
		if e.Err != nil {
			return s, []any{actFailed{ID: e.ID, Err: e.Err, Final: final}}
		}
		s.Completed = e.ID
		return s, []any{actCompleted{ID: e.ID, Final: final}}
	case evStopping:
		s.Stopping = true
		return s, nil
	case evFinal:
		if s.Final != 0 {
			return s, nil // once
		}
		s.Stopping = true
		var acts []any
		if s.InFlight != nil {
			acts = append(acts, actAbandoned{ID: s.InFlight.ID})
		}
		if s.Next == 0 {
			s.Next = s.Completed + 1
		}
		s.Final = s.Next
		s.Next++
		s.InFlight = &inFlight{ID: s.Final, Acked: map[int]bool{}, States: map[string][]byte{}, Offsets: map[string]int64{}}
		return s, append(acts, actInject{ID: s.Final, Final: true})
	}
	panic(fmt.Sprintf("coordinator: unknown event %T", ev))
}

func cloneMap[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// sortedKeys is for deterministic output in tests and logs.
func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
