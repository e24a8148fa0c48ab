package stage

import (
	"fmt"

	"go.opentelemetry.io/otel/attribute"

	"github.com/sluicehq/sluice/supervision"
)

// FailureHandler applies an operator's record-failure policy.
type FailureHandler struct {
	sc       *Ctx
	attempts int
	store    supervision.DeadLetterStore
	job      string
	tries    int // failed attempts of the current record
}

// failed handles a panic r of the operator's function on record rec and
// says whether to try the same record again. When the attempts are spent
// the record becomes a dead letter and processing goes on with the next.
func (h *FailureHandler) failed(r any, rec any, i int) (retry bool) {
	h.tries++
	m := h.sc.markOf(i)
	if h.tries < h.attempts {
		h.sc.Event(m, "retry", attribute.Int("sluice.attempt", h.tries), attribute.String("error", fmt.Sprint(r)))
		return true
	}
	h.sc.Event(m, "dead-letter", attribute.Int("sluice.attempts", h.tries), attribute.String("error", fmt.Sprint(r)))
	attempts := h.tries
	h.tries = 0
	payload, err := supervision.EncodePayload(rec)
	if err != nil {
		payload = fmt.Appendf(nil, "%+v", rec) // kept readable, if not decodable
	}
	d := supervision.DeadLetter{Job: h.job, Operator: h.sc.Name, Instance: h.sc.Instance,
		Error: fmt.Sprint(r), Attempts: attempts, Time: h.sc.Now(), Payload: payload}
	if _, err := h.store.Add(d); err != nil {
		h.sc.fail(fmt.Errorf("dead letter after %d attempts (%v): %w", attempts, r, err))
	}
	h.sc.C.Dead.Add(1)
	return false
}

func (h *FailureHandler) succeeded() { h.tries = 0 }

// afterPanic handles what a guarded loop recovered (nothing, when r is nil)
// while it processed record i of vs: next becomes i to try the record
// again, or i+1 to go on after it. It reports whether there was a panic.
func afterPanic[T any](h *FailureHandler, r any, vs []T, i int, next *int) bool {
	if r == nil {
		return false
	}
	*next = i + 1
	if h.failed(r, vs[i], i) {
		*next = i
	}
	return true
}

// The guarded loops below run only for operators with OnRecordFailure: one
// deferred recover per Batch (not per record), restarting at the failed
// record or after it.

func (s *MapStage[In, Out]) guarded(b *Batch[In]) {
	out := Batch[Out]{Vs: s.out.Vs[:0]}
	if b.Ts != nil {
		out.Ts = make([]int64, 0, len(b.Vs))
	}
	for i := 0; i < len(b.Vs); {
		i = s.guardedFrom(b, &out, i)
	}
	s.out.Vs = out.Vs
	s.sc.C.Out.Add(int64(len(out.Vs)))
	if len(out.Vs) > 0 {
		s.next.Push(&out)
	}
}

func (s *MapStage[In, Out]) guardedFrom(b *Batch[In], out *Batch[Out], i int) (next int) {
	h := s.sc.Failures
	defer func() { afterPanic(h, recover(), b.Vs, i, &next) }()
	for ; i < len(b.Vs); i++ {
		o := s.f(b.Vs[i])
		out.Vs = append(out.Vs, o)
		if b.Ts != nil {
			out.Ts = append(out.Ts, b.Ts[i])
		}
		h.succeeded()
	}
	return i
}

func (s *FilterStage[T]) guarded(b *Batch[T]) {
	j := 0
	for i := 0; i < len(b.Vs); {
		i, j = s.guardedFrom(b, i, j)
	}
	b.Vs = b.Vs[:j]
	if b.Ts != nil {
		b.Ts = b.Ts[:j]
	}
	if j > 0 {
		s.sc.C.Out.Add(int64(j))
		s.next.Push(b)
	}
}

func (s *FilterStage[T]) guardedFrom(b *Batch[T], i, j int) (next, kept int) {
	h := s.sc.Failures
	defer func() {
		if afterPanic(h, recover(), b.Vs, i, &next) {
			kept = j
		}
	}()
	for ; i < len(b.Vs); i++ {
		if s.keep(b.Vs[i]) {
			b.Vs[j] = b.Vs[i]
			if b.Ts != nil {
				b.Ts[j] = b.Ts[i]
			}
			j++
		}
		h.succeeded()
	}
	return i, j
}

func (s *FlatMapStage[In, Out]) guardedFrom(b *Batch[In], i int) (next int) {
	h := s.sc.Failures
	defer func() { afterPanic(h, recover(), b.Vs, i, &next) }()
	for ; i < len(b.Vs); i++ {
		outs := s.f(b.Vs[i])
		h.succeeded()
		s.emit(b, i, outs)
	}
	return i
}

func (s *KeyedStage[K, T, A, O]) guardedFrom(b *Batch[T], i int) (next int) {
	h := s.sc.Failures
	defer func() { afterPanic(h, recover(), b.Vs, i, &next) }()
	for ; i < len(b.Vs); i++ {
		s.fold(b.Vs[i])
		h.succeeded()
	}
	return i
}
