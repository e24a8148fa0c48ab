package connectortest_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/connector"
	"github.com/sluicehq/sluice/connector/connectortest"
)

// store is a reference two-phase sink: writes are staged, PreCommit moves
// them under a checkpoint id, Commit publishes them once, and the state of
// a checkpoint is its id (the last committed id is kept with the data, as
// a database would, for idempotence).
type store struct {
	mu        sync.Mutex
	committed []int
	last      uint64 // the last committed checkpoint
	pending   map[uint64][]int
}

func (s *store) Open(context.Context, int, int) (connector.Writer[int], error) {
	return &storeWriter{s: s}, nil
}

func (s *store) OpenAt(ctx context.Context, _, _ int, state []byte) (connector.Writer[int], error) {
	id := binary.BigEndian.Uint64(state)
	w := &storeWriter{s: s}
	return w, w.Commit(ctx, id) // finish the checkpoint's commit if it did not happen
}

func (s *store) read() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.committed)
}

type storeWriter struct {
	s      *store
	staged []int
}

func (w *storeWriter) Write(rs []int) error { w.staged = append(w.staged, rs...); return nil }

func (w *storeWriter) PreCommit(id uint64) ([]byte, error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if w.s.pending == nil {
		w.s.pending = map[uint64][]int{}
	}
	w.s.pending[id], w.staged = w.staged, nil
	return binary.BigEndian.AppendUint64(nil, id), nil
}

func (w *storeWriter) Commit(_ context.Context, id uint64) error {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if id <= w.s.last {
		return nil
	}
	w.s.committed = append(w.s.committed, w.s.pending[id]...)
	w.s.last = id
	delete(w.s.pending, id)
	return nil
}

func (w *storeWriter) Abort() error { w.staged = nil; return nil }

func (w *storeWriter) Close() error {
	if len(w.staged) > 0 {
		return fmt.Errorf("close with %d records not pre-committed", len(w.staged))
	}
	return nil
}

func TestTwoPhaseReference(t *testing.T) {
	connectortest.Sink(t, connectortest.SinkCase[int]{
		Make: func(t *testing.T) (connector.Sink[int], func() []int) {
			s := &store{}
			return s, s.read
		},
		Records:  []int{1, 2, 3, 4, 5, 6},
		Features: connectortest.TwoPhase,
	})
}
