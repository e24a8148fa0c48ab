package coord

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
)

func TestCoordinatorSteps(t *testing.T) {
	idle := Checkpoints{Instances: 2, Completed: 4}
	taking := func() Checkpoints {
		s, _ := idle.Step(Tick{})
		return s
	}
	half := func() Checkpoints {
		s, _ := taking().Step(Acked{ID: 5, Instance: 0, States: map[string][]byte{"count/0": []byte("a")}, Offsets: map[string]int64{"src/0": 10}})
		return s
	}
	full := func() Checkpoints {
		s, _ := half().Step(Acked{ID: 5, Instance: 1, States: map[string][]byte{"count/1": []byte("b")}})
		return s
	}
	errDisk := errors.New("disk full")
	cases := []struct {
		name      string
		from      Checkpoints
		ev        CheckpointEvent
		actions   []CheckpointAction
		inFlight  uint64 // 0: none
		completed uint64
		stopping  bool
	}{
		{"idle tick starts the next checkpoint", idle, Tick{}, []CheckpointAction{Inject{ID: 5}}, 5, 4, false},
		{"idle ack is ignored", idle, Acked{ID: 5, Instance: 0}, nil, 0, 4, false},
		{"idle stored is ignored", idle, Stored{ID: 5}, nil, 0, 4, false},
		{"idle stopping", idle, Stop{}, nil, 0, 4, true},
		{"tick while taking one waits", taking(), Tick{}, nil, 5, 4, false},
		{"first ack", taking(), Acked{ID: 5, Instance: 0}, nil, 5, 4, false},
		{"stale ack is ignored", taking(), Acked{ID: 3, Instance: 0}, nil, 5, 4, false},
		{"stopping keeps the checkpoint in flight", taking(), Stop{}, nil, 5, 4, true},
		{"duplicate ack is ignored", half(), Acked{ID: 5, Instance: 0}, nil, 5, 4, false},
		{"last ack stores", half(), Acked{ID: 5, Instance: 1, States: map[string][]byte{"count/1": []byte("b")}},
			[]CheckpointAction{Store{ID: 5, States: map[string][]byte{"count/0": []byte("a"), "count/1": []byte("b")}, Offsets: map[string]int64{"src/0": 10}}}, 5, 4, false},
		{"stored completes", full(), Stored{ID: 5}, []CheckpointAction{Completed{ID: 5}}, 0, 5, false},
		{"failed store fails it", full(), Stored{ID: 5, Err: errDisk}, []CheckpointAction{CheckpointFailed{ID: 5, Err: errDisk}}, 0, 4, false},
		{"stored of another id is ignored", full(), Stored{ID: 4}, nil, 5, 4, false},
		{"final from idle goes to every instance", idle, TakeFinal{}, []CheckpointAction{Inject{ID: 5, Final: true}}, 5, 4, true},
		{"final abandons the checkpoint in flight", half(), TakeFinal{}, []CheckpointAction{Abandoned{ID: 5}, Inject{ID: 6, Final: true}}, 6, 4, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := fmt.Sprintf("%+v", c.from)
			got, acts := c.from.Step(c.ev)
			if !reflect.DeepEqual(acts, c.actions) {
				t.Errorf("actions = %+v, want %+v", acts, c.actions)
			}
			var id uint64
			if got.InFlight != nil {
				id = got.InFlight.ID
			}
			if id != c.inFlight || got.Completed != c.completed || got.Stopping != c.stopping {
				t.Errorf("state = in flight %d, completed %d, stopping %v; want %d, %d, %v", id, got.Completed, got.Stopping, c.inFlight, c.completed, c.stopping)
			}
			if after := fmt.Sprintf("%+v", c.from); after != before {
				t.Errorf("step modified its input state: %s -> %s", before, after)
			}
		})
	}
	// After stopping, ticks start nothing.
	s, _ := idle.Step(Stop{})
	if _, acts := s.Step(Tick{}); acts != nil {
		t.Errorf("tick after stopping = %v, want nothing", acts)
	}
	// The final checkpoint: acks complete it as any other, marked final;
	// ticks and a second TakeFinal start nothing.
	s, _ = half().Step(TakeFinal{})
	if _, acts := s.Step(Tick{}); acts != nil {
		t.Errorf("tick during the final checkpoint = %v, want nothing", acts)
	}
	if _, acts := s.Step(TakeFinal{}); acts != nil {
		t.Errorf("a second TakeFinal = %v, want nothing", acts)
	}
	s, _ = s.Step(Acked{ID: 5, Instance: 0}) // the abandoned checkpoint's: ignored
	s, _ = s.Step(Acked{ID: 6, Instance: 0})
	s, acts := s.Step(Acked{ID: 6, Instance: 1})
	if len(acts) != 1 {
		t.Fatalf("last ack of the final checkpoint = %v, want one store", acts)
	}
	if _, acts := s.Step(Stored{ID: 6}); !reflect.DeepEqual(acts, []CheckpointAction{Completed{ID: 6, Final: true}}) {
		t.Errorf("final stored = %v, want completed 6, final", acts)
	}
	if _, acts := s.Step(Stored{ID: 6, Err: errDisk}); !reflect.DeepEqual(acts, []CheckpointAction{CheckpointFailed{ID: 6, Err: errDisk, Final: true}}) {
		t.Errorf("final store failed = %v, want failed 6, final", acts)
	}
	// After a failure the next tick takes a new id.
	s, _ = full().Step(Stored{ID: 5, Err: errDisk})
	if _, acts := s.Step(Tick{}); !reflect.DeepEqual(acts, []CheckpointAction{Inject{ID: 6}}) {
		t.Errorf("tick after a failed checkpoint = %v, want inject 6", acts)
	}
}
