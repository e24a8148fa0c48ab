package engine

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
)

func TestCoordinatorSteps(t *testing.T) {
	idle := coordState{Instances: 2, Completed: 4}
	taking := func() coordState {
		s, _ := step(idle, evTick{})
		return s
	}
	half := func() coordState {
		s, _ := step(taking(), evAck{ID: 5, Instance: 0, States: map[string][]byte{"count/0": []byte("a")}, Offsets: map[string]int64{"src/0": 10}})
		return s
	}
	full := func() coordState {
		s, _ := step(half(), evAck{ID: 5, Instance: 1, States: map[string][]byte{"count/1": []byte("b")}})
		return s
	}
	errDisk := errors.New("disk full")
	cases := []struct {
		name      string
		from      coordState
		ev        any
		actions   []any
		inFlight  uint64 // 0: none
		completed uint64
		stopping  bool
	}{
		{"idle tick starts the next checkpoint", idle, evTick{}, []any{actInject{ID: 5}}, 5, 4, false},
		{"idle ack is ignored", idle, evAck{ID: 5, Instance: 0}, nil, 0, 4, false},
		{"idle stored is ignored", idle, evStored{ID: 5}, nil, 0, 4, false},
		{"idle stopping", idle, evStopping{}, nil, 0, 4, true},
		{"tick while taking one waits", taking(), evTick{}, nil, 5, 4, false},
		{"first ack", taking(), evAck{ID: 5, Instance: 0}, nil, 5, 4, false},
		{"stale ack is ignored", taking(), evAck{ID: 3, Instance: 0}, nil, 5, 4, false},
		{"stopping keeps the checkpoint in flight", taking(), evStopping{}, nil, 5, 4, true},
		{"duplicate ack is ignored", half(), evAck{ID: 5, Instance: 0}, nil, 5, 4, false},
		{"last ack stores", half(), evAck{ID: 5, Instance: 1, States: map[string][]byte{"count/1": []byte("b")}},
			[]any{actStore{ID: 5, States: map[string][]byte{"count/0": []byte("a"), "count/1": []byte("b")}, Offsets: map[string]int64{"src/0": 10}}}, 5, 4, false},
		{"stored completes", full(), evStored{ID: 5}, []any{actCompleted{ID: 5}}, 0, 5, false},
		{"failed store fails it", full(), evStored{ID: 5, Err: errDisk}, []any{actFailed{ID: 5, Err: errDisk}}, 0, 4, false},
		{"stored of another id is ignored", full(), evStored{ID: 4}, nil, 5, 4, false},
		{"final from idle goes to every instance", idle, evFinal{}, []any{actInject{ID: 5, Final: true}}, 5, 4, true},
		{"final abandons the checkpoint in flight", half(), evFinal{}, []any{actAbandoned{ID: 5}, actInject{ID: 6, Final: true}}, 6, 4, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := fmt.Sprintf("%+v", c.from)
			got, acts := step(c.from, c.ev)
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
	s, _ := step(idle, evStopping{})
	if _, acts := step(s, evTick{}); acts != nil {
		t.Errorf("tick after stopping = %v, want nothing", acts)
	}
	// The final checkpoint: acks complete it as any other, marked final;
	// ticks and a second evFinal start nothing.
	s, _ = step(half(), evFinal{})
	if _, acts := step(s, evTick{}); acts != nil {
		t.Errorf("tick during the final checkpoint = %v, want nothing", acts)
	}
	if _, acts := step(s, evFinal{}); acts != nil {
		t.Errorf("a second evFinal = %v, want nothing", acts)
	}
	s, _ = step(s, evAck{ID: 5, Instance: 0}) // the abandoned checkpoint's: ignored
	s, _ = step(s, evAck{ID: 6, Instance: 0})
	s, acts := step(s, evAck{ID: 6, Instance: 1})
	if len(acts) != 1 {
		t.Fatalf("last ack of the final checkpoint = %v, want one store", acts)
	}
	if _, acts := step(s, evStored{ID: 6}); !reflect.DeepEqual(acts, []any{actCompleted{ID: 6, Final: true}}) {
		t.Errorf("final stored = %v, want completed 6, final", acts)
	}
	if _, acts := step(s, evStored{ID: 6, Err: errDisk}); !reflect.DeepEqual(acts, []any{actFailed{ID: 6, Err: errDisk, Final: true}}) {
		t.Errorf("final store failed = %v, want failed 6, final", acts)
	}
	// After a failure the next tick takes a new id.
	s, _ = step(full(), evStored{ID: 5, Err: errDisk})
	if _, acts := step(s, evTick{}); !reflect.DeepEqual(acts, []any{actInject{ID: 6}}) {
		t.Errorf("tick after a failed checkpoint = %v, want inject 6", acts)
	}
}
