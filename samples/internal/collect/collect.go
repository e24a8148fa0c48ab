// Package collect is the in-memory result sink of the samples: it keeps
// the records it receives, like operators.Collector, and also records them
// in every checkpoint, so that a sample run with checkpoints (sluice run
// --store FILE --checkpoints D) and resumed after a crash reports the same
// results as an uninterrupted run.
//
// Each sink instance records, at a checkpoint, every record it received
// before it (msgpack, so the record type must be msgpack-encodable); a job
// restored from that checkpoint starts the instance again with exactly
// those records, and the records replayed after it are received once. The
// state grows with the results: the samples' results are small.
package collect

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
	"github.com/sluicehq/sluice/operators"
)

// Sink keeps the records of every instance in memory. It is a
// SinkConnector and a RestorableSink; create it with New.
type Sink[T any] struct {
	mu    sync.Mutex
	parts [][]T // by instance
}

// New returns an empty sink.
func New[T any]() *Sink[T] { return &Sink[T]{} }

// Open implements operators.SinkConnector: instance part starts empty (a
// job that starts afresh, or restarts without a checkpoint).
func (s *Sink[T]) Open(_ context.Context, part, parts int) (operators.Writer[T], error) {
	return s.open(part, parts, nil), nil
}

// OpenAt implements operators.RestorableSink: instance part starts with the
// records it had received at the checkpoint.
func (s *Sink[T]) OpenAt(_ context.Context, part, parts int, state []byte) (operators.Writer[T], error) {
	var items []T
	if len(state) > 0 {
		if err := msgpacksafe.Decode(state, &items, msgpacksafe.Limits{Source: fmt.Sprintf("checkpointed results of instance %d", part)}); err != nil {
			return nil, err
		}
		inUTC(reflect.ValueOf(items))
	}
	return s.open(part, parts, items), nil
}

func (s *Sink[T]) open(part, parts int, items []T) *writer[T] {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.parts) < parts {
		s.parts = append(s.parts, make([][]T, parts-len(s.parts))...)
	}
	s.parts[part] = items
	return &writer[T]{s: s, part: part}
}

// RescaleStates implements connector.StateRescaler, so that a sample's job
// can be resumed from a savepoint at another parallelism: the records of
// every old instance, in instance order, go to new instance 0 and the
// others start empty. Items lists instance 0 first, so the records of a
// key still come in the order they were received.
func (s *Sink[T]) RescaleStates(states [][]byte, parts int) ([][]byte, error) {
	var all []T
	for j, st := range states {
		if len(st) == 0 {
			continue
		}
		var items []T
		if err := msgpacksafe.Decode(st, &items, msgpacksafe.Limits{Source: fmt.Sprintf("checkpointed results of instance %d", j)}); err != nil {
			return nil, err
		}
		all = append(all, items...)
	}
	b, err := msgpack.Marshal(all)
	if err != nil {
		return nil, fmt.Errorf("rescale the results: %w", err)
	}
	out := make([][]byte, parts)
	out[0] = b
	return out, nil
}

// Items returns a copy of the records received, instance by instance, each
// instance's in arrival order (the records of one key, which reach one
// instance, stay in order).
func (s *Sink[T]) Items() []T {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []T
	for _, p := range s.parts {
		out = append(out, p...)
	}
	return out
}

// Len returns the number of records received.
func (s *Sink[T]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, p := range s.parts {
		n += len(p)
	}
	return n
}

// inUTC sets the times in v to UTC: msgpack decodes them in the local
// zone, and the samples compare results, which they make in UTC, with
// reflect.DeepEqual.
func inUTC(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		if t, ok := v.Interface().(time.Time); ok {
			if v.CanSet() {
				v.Set(reflect.ValueOf(t.UTC()))
			}
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				inUTC(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			inUTC(v.Index(i))
		}
	case reflect.Pointer:
		if !v.IsNil() {
			inUTC(v.Elem())
		}
	}
}

type writer[T any] struct {
	s    *Sink[T]
	part int
}

func (w *writer[T]) Write(rs []T) error {
	w.s.mu.Lock()
	w.s.parts[w.part] = append(w.s.parts[w.part], rs...)
	w.s.mu.Unlock()
	return nil
}

// Checkpoint implements operators.Checkpointer: the records received so
// far.
func (w *writer[T]) Checkpoint() ([]byte, error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	b, err := msgpack.Marshal(w.s.parts[w.part])
	if err != nil {
		return nil, fmt.Errorf("checkpoint the results of instance %d: %w", w.part, err)
	}
	return b, nil
}

func (w *writer[T]) Close() error { return nil }
