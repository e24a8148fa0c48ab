package engine

import (
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/sluicehq/sluice/supervision"
)

// failureHandler applies an operator's record-failure policy.
type failureHandler struct {
	sc       *stageCtx
	attempts int
	store    supervision.DeadLetterStore
	job      string
	tries    int // failed attempts of the current record
}

// failed handles a panic r of the operator's function on record rec and
// says whether to try the same record again. When the attempts are spent
// the record becomes a dead letter and processing goes on with the next.
func (h *failureHandler) failed(r any, rec any) (retry bool) {
	h.tries++
	if h.tries < h.attempts {
		h.sc.tr.event("retry", attribute.Int("sluice.attempt", h.tries), attribute.String("error", fmt.Sprint(r)))
		return true
	}
	h.sc.tr.event("dead-letter", attribute.Int("sluice.attempts", h.tries), attribute.String("error", fmt.Sprint(r)))
	attempts := h.tries
	h.tries = 0
	payload, err := supervision.EncodePayload(rec)
	if err != nil {
		payload = fmt.Appendf(nil, "%+v", rec) // kept readable, if not decodable
	}
	d := supervision.DeadLetter{Job: h.job, Operator: h.sc.name, Instance: h.sc.instance,
		Error: fmt.Sprint(r), Attempts: attempts, Time: time.Now(), Payload: payload}
	if _, err := h.store.Add(d); err != nil {
		h.sc.fail(fmt.Errorf("dead letter after %d attempts (%v): %w", attempts, r, err))
	}
	h.sc.c.dead.Add(1)
	return false
}

func (h *failureHandler) succeeded() { h.tries = 0 }

// afterPanic handles what a guarded loop recovered (nothing, when r is nil)
// while it processed record i of vs: next becomes i to try the record
// again, or i+1 to go on after it. It reports whether there was a panic.
func afterPanic[T any](h *failureHandler, r any, vs []T, i int, next *int) bool {
	if r == nil {
		return false
	}
	*next = i + 1
	if h.failed(r, vs[i]) {
		*next = i
	}
	return true
}

// The guarded loops below run only for operators with OnRecordFailure: one
// deferred recover per batch (not per record), restarting at the failed
// record or after it.

func (s *mapStage[In, Out]) guarded(b *batch[In]) {
	out := batch[Out]{vs: s.out.vs[:0]}
	if b.ts != nil {
		out.ts = make([]int64, 0, len(b.vs))
	}
	for i := 0; i < len(b.vs); {
		i = s.guardedFrom(b, &out, i)
	}
	s.out.vs = out.vs
	s.sc.c.out.Add(int64(len(out.vs)))
	if len(out.vs) > 0 {
		s.next.push(&out)
	}
}

func (s *mapStage[In, Out]) guardedFrom(b *batch[In], out *batch[Out], i int) (next int) {
	h := s.sc.failures
	defer func() { afterPanic(h, recover(), b.vs, i, &next) }()
	for ; i < len(b.vs); i++ {
		o := s.f(b.vs[i])
		out.vs = append(out.vs, o)
		if b.ts != nil {
			out.ts = append(out.ts, b.ts[i])
		}
		h.succeeded()
	}
	return i
}

func (s *filterStage[T]) guarded(b *batch[T]) {
	j := 0
	for i := 0; i < len(b.vs); {
		i, j = s.guardedFrom(b, i, j)
	}
	b.vs = b.vs[:j]
	if b.ts != nil {
		b.ts = b.ts[:j]
	}
	if j > 0 {
		s.sc.c.out.Add(int64(j))
		s.next.push(b)
	}
}

func (s *filterStage[T]) guardedFrom(b *batch[T], i, j int) (next, kept int) {
	h := s.sc.failures
	defer func() {
		if afterPanic(h, recover(), b.vs, i, &next) {
			kept = j
		}
	}()
	for ; i < len(b.vs); i++ {
		if s.keep(b.vs[i]) {
			b.vs[j] = b.vs[i]
			if b.ts != nil {
				b.ts[j] = b.ts[i]
			}
			j++
		}
		h.succeeded()
	}
	return i, j
}

func (s *flatMapStage[In, Out]) guardedFrom(b *batch[In], i int) (next int) {
	h := s.sc.failures
	defer func() { afterPanic(h, recover(), b.vs, i, &next) }()
	for ; i < len(b.vs); i++ {
		outs := s.f(b.vs[i])
		h.succeeded()
		s.emit(b, i, outs)
	}
	return i
}

func (s *keyedStage[K, T, A, O]) guardedFrom(b *batch[T], i int) (next int) {
	h := s.sc.failures
	defer func() { afterPanic(h, recover(), b.vs, i, &next) }()
	for ; i < len(b.vs); i++ {
		s.fold(b.vs[i])
		h.succeeded()
	}
	return i
}
