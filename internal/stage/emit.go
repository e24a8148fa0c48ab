package stage

import (
	"math"
	"slices"
	"sync/atomic"

	"github.com/sluicehq/sluice/actors"
)

// Flusher sends what a chain's tail holds.
type Flusher interface{ Flush() }

// Sender is what an emitter sends through: the operator instance, which
// sends the envelopes on its output channels as credits allow.
type Sender interface {
	// Enqueue sends env on channel target of output out.
	Enqueue(out, target int, env *actors.Envelope)
	// Watermarked says that watermark wm went out on every channel.
	Watermarked(wm int64)
}

// ArraysLender is implemented by a Sender whose job lends batch arrays
// (Arrays): an emitter that partitions by key fills its per-target buffers
// with arrays the job's keyed stages gave back (lender.giveBack) instead of new
// ones.
type ArraysLender interface{ JobArrays() *Arrays }

// Output is one output edge of an instance: how records are partitioned,
// Hasher (a func(T) uint64 for Hash edges), and the number of channels
// (target instances; one for Forward edges).
type Output struct {
	Part    Partition
	Hasher  any
	Targets int
}

// emitter is the tail of a chain whose operator has consumers: it
// partitions records into per-target batches and hands full batches to the
// instance, which sends them as credits allow.
type Emitter[T any] struct {
	s     Sender
	outs  []*output[T]
	size  int
	free  *returns[T] // envelopes the receivers handled (Release)
	spare *shipped[T] // envelopes taken from free, not used yet: the emitter's own
	wm    int64       // the chain's event time: sent on every channel at the next flush when it advanced
	sent  int64       // the last watermark sent
	// targets is hashed's scratch: each record's target.
	targets []int32
	// vsFree and tsFree are the job's arrays of T and of event times of
	// capacity size, which keyed stages give back (lender.giveBack); nil: none.
	vsFree *freeArrays[T]
	tsFree *freeArrays[int64]
}

type output[T any] struct {
	index int
	spec  Output
	hash  func(T) uint64
	bufs  []Batch[T]
	rr    int
	// counts is hashed's scratch: records of a batch per target (Hash).
	counts []int
}

func NewEmitter[T any](specs []Output, size int, snd Sender) *Emitter[T] {
	e := &Emitter[T]{s: snd, size: size, wm: math.MinInt64, sent: math.MinInt64, free: &returns[T]{}}
	for i, s := range specs {
		o := &output[T]{index: i, spec: s, bufs: make([]Batch[T], s.Targets)}
		if s.Part == Hash {
			o.hash = s.Hasher.(func(T) uint64)
			o.counts = make([]int, s.Targets)
		}
		e.outs = append(e.outs, o)
	}
	if l, ok := snd.(ArraysLender); ok && e.hashes() {
		a := l.JobArrays()
		e.vsFree, e.tsFree = arraysFor[T](a, size, true), arraysFor[int64](a, size, true)
	}
	return e
}

// hashes says whether an output partitions by key over several targets.
func (e *Emitter[T]) hashes() bool {
	for _, o := range e.outs {
		if o.spec.Part == Hash && len(o.bufs) > 1 {
			return true
		}
	}
	return false
}

// lent fills an empty buffer with arrays given back to the job, when there
// are, or with new arrays of a whole batch when a keyed stage wants them
// back: they hold a whole batch, and the buffer grows into them.
func (e *Emitter[T]) lent(buf *Batch[T], ts bool) {
	if e.vsFree == nil || buf.Vs != nil {
		return
	}
	if buf.Vs = e.vsFree.get(); buf.Vs == nil && e.vsFree.wanted.Load() {
		buf.Vs = make([]T, 0, e.size)
	}
	if ts && buf.Vs != nil {
		if buf.Ts = e.tsFree.get(); buf.Ts == nil {
			buf.Ts = make([]int64, 0, e.size)
		}
	}
}

func (e *Emitter[T]) Push(b *Batch[T]) {
	if len(b.Tr) > 0 {
		e.pushMarked(b)
		return
	}
	for i, o := range e.outs {
		// The batch's arrays may be kept (Own) by the last target it goes
		// to whole; the others copy it.
		last := i == len(e.outs)-1
		switch o.spec.Part {
		case Forward:
			e.add(o, 0, b, last)
		case Rebalance:
			e.add(o, o.rr, b, last)
			o.rr = (o.rr + 1) % len(o.bufs)
		case Broadcast:
			for t := range o.bufs {
				e.add(o, t, b, last && t == len(o.bufs)-1)
			}
		case Hash:
			if len(o.bufs) == 1 { // every record to the one target
				e.add(o, 0, b, last)
				continue
			}
			e.hashed(o, b)
		}
	}
}

// hashed appends each record of b to the buffer of its key's target. The
// targets are found first, so that each buffer grows once, by what the
// batch brings it: a buffer sized for the whole batch was left half empty
// with two targets (the instance flushes after every batch it handles),
// and the half it never filled was allocated and cleared for nothing.
func (e *Emitter[T]) hashed(o *output[T], b *Batch[T]) {
	n := len(o.bufs)
	if cap(e.targets) < len(b.Vs) {
		e.targets = make([]int32, len(b.Vs))
	}
	ts := e.targets[:len(b.Vs)]
	counts := o.counts // left for each target: records of b not yet appended
	clear(counts)
	for i, v := range b.Vs {
		t := InstanceFor(o.hash(v), n)
		ts[i] = int32(t)
		counts[t]++
	}
	for t, k := range counts {
		if k == 0 {
			continue
		}
		buf := &o.bufs[t]
		e.lent(buf, b.Ts != nil)
		room := min(k, e.size-len(buf.Vs)) // a buffer ships once it holds e.size
		buf.Vs = slices.Grow(buf.Vs, room)
		if b.Ts != nil {
			buf.Ts = slices.Grow(buf.Ts, room)
		}
	}
	for i, v := range b.Vs {
		t := ts[i]
		buf := &o.bufs[t]
		if buf.Vs == nil { // shipped during this batch
			e.lent(buf, b.Ts != nil)
			if buf.Vs == nil { // none lent: sized for what is left
				c := min(e.size, counts[t])
				buf.Vs = make([]T, 0, c)
				if b.Ts != nil {
					buf.Ts = make([]int64, 0, c)
				}
			}
		}
		counts[t]--
		buf.Vs = append(buf.Vs, v)
		if b.Ts != nil {
			buf.Ts = append(buf.Ts, b.Ts[i])
		}
		if len(buf.Vs) >= e.size {
			e.ship(o, int(t))
		}
	}
}

// add appends b's records to target t's buffer. With keep, a batch whose
// arrays the emitter may keep (Own) and an empty buffer, the arrays become
// the buffer without a copy, and b says so (its Vs and Ts are nil after).
func (e *Emitter[T]) add(o *output[T], t int, b *Batch[T], keep bool) {
	buf := &o.bufs[t]
	if keep && b.Own && buf.Vs == nil && len(b.Vs) > 0 && len(b.Tr) == 0 {
		buf.Vs, buf.Ts = b.Vs, b.Ts
		b.Vs, b.Ts = nil, nil
		if len(buf.Vs) >= e.size {
			e.ship(o, t)
		}
		return
	}
	for _, m := range b.Tr { // the sampled records follow theirs
		m.I += int32(len(buf.Vs))
		buf.Tr = append(buf.Tr, m)
	}
	buf.Vs = append(buf.Vs, b.Vs...)
	if b.Ts != nil {
		buf.Ts = append(buf.Ts, b.Ts...)
	}
	if len(buf.Vs) >= e.size {
		e.ship(o, t)
	}
}

// shipped is a data envelope with its batch: they travel together, and
// once the receiver has handled the envelope (Release) it goes back to the
// free list of the emitter that made it, for its next batch.
type shipped[T any] struct {
	env  actors.Envelope
	b    Batch[T]
	home *returns[T]
	next *shipped[T] // in home, or in the emitter's spare list
}

// returns is where the receivers of an emitter's envelopes hand them back
// (Release), from any goroutine, for the emitter to take all at once
// (newShipped): a stack that receivers push onto with a compare-and-swap
// and the emitter empties with one swap. Taking the whole stack, never
// one entry, is what makes it safe without a lock: a push only needs the
// head it links to be the head when it swaps, whatever was taken and
// pushed again in between. A mutex here was taken twice per batch and
// hop, by the sender's and the receiver's goroutines in turn, and its
// cache line went back and forth between their cores.
//
// It keeps every envelope given back: an emitter makes one only when none
// is free, so it holds as many as were ever in flight at once on its
// channels (bounded by their credits, 16 full batches per channel by
// default, or by the receivers' mailboxes).
type returns[T any] struct{ head atomic.Pointer[shipped[T]] }

// push gives x back.
func (r *returns[T]) push(x *shipped[T]) {
	for {
		h := r.head.Load()
		x.next = h
		if r.head.CompareAndSwap(h, x) {
			return
		}
	}
}

// newShipped is an envelope of e's, reused when a receiver gave one back,
// with its batch as its payload.
func (e *Emitter[T]) newShipped() *shipped[T] {
	x := e.spare
	if x == nil {
		x = e.free.head.Swap(nil)
	}
	if x == nil {
		x = &shipped[T]{home: e.free}
		x.b.sh = x
	} else {
		e.spare, x.next = x.next, nil
	}
	x.env.Payload = &x.b
	return x
}

// shippedPayload is the payload of an envelope an emitter made (*Batch[T]).
type shippedPayload interface {
	release(env *actors.Envelope)
	reclaim(env *actors.Envelope, a *Arrays, size int)
}

// Release gives data envelope env back to the emitter that made it, once
// the receiving instance has handled it and holds no reference to it nor
// to its payload any more (the arrays of its records are not the
// envelope's: stages may have kept them, Batch.Own). An envelope that no
// emitter of this process made (decoded, restored) is left alone.
func Release(env *actors.Envelope) {
	if r, ok := env.Payload.(shippedPayload); ok {
		r.release(env)
	}
}

// Reclaim is Release for a data envelope its instance has encoded for
// another process: the encoding is a copy, so nothing reads the envelope
// or its records any more. The envelope goes back to the emitter that made
// it, and the array of its records, when it is a whole batch's (capacity
// size), to a, where a source or a decoder of records from another process
// (Codec.DecodeLent) takes it up again instead of allocating one.
func Reclaim(env *actors.Envelope, a *Arrays, size int) {
	if r, ok := env.Payload.(shippedPayload); ok {
		r.reclaim(env, a, size)
	}
}

// shipped says whether b is the batch of env as an emitter made them (not
// one decoded or restored, whose arrays may be someone else's); it returns
// their allocation.
func (b *Batch[T]) shipped(env *actors.Envelope) (*shipped[T], bool) {
	x := b.sh
	return x, x != nil && &x.b == b && &x.env == env
}

func (b *Batch[T]) reclaim(env *actors.Envelope, a *Arrays, size int) {
	if _, ok := b.shipped(env); !ok {
		return
	}
	if cap(b.Vs) == size {
		if l := arraysFor[T](a, size, false); l != nil {
			l.put(b.Vs)
		}
	}
	b.release(env)
}

func (b *Batch[T]) release(env *actors.Envelope) {
	x, ok := b.shipped(env)
	if !ok {
		return
	}
	x.env = actors.Envelope{}
	x.b = Batch[T]{sh: x}
	x.home.push(x)
}

// ship hands the target's buffer over in envelopes of at most one batch; the
// receiver owns them from then on.
func (e *Emitter[T]) ship(o *output[T], t int) {
	buf := o.bufs[t]
	o.bufs[t] = Batch[T]{}
	if len(buf.Vs) <= e.size && len(buf.Tr) == 0 { // one envelope: the arrays whole, capacity and all
		x := e.newShipped()
		x.env.Kind, x.env.Count = actors.Data, len(buf.Vs)
		x.b.Vs, x.b.Ts = buf.Vs, buf.Ts
		e.s.Enqueue(o.index, t, &x.env)
		return
	}
	for start := 0; start < len(buf.Vs); start += e.size {
		end := min(start+e.size, len(buf.Vs))
		// The envelope and its batch in one allocation (reused once
		// handled: Release).
		x := e.newShipped()
		x.env.Kind, x.env.Count = actors.Data, end-start
		x.b.Vs = buf.Vs[start:end:end]
		part, env := &x.b, &x.env
		if buf.Ts != nil {
			part.Ts = buf.Ts[start:end:end]
		}
		env.Payload = part
		if len(buf.Tr) > 0 {
			part.Tr = sliceMarks(buf.Tr, start, end)
		}
		e.s.Enqueue(o.index, t, env)
	}
}

func (e *Emitter[T]) Flush() {
	for _, o := range e.outs {
		for t := range o.bufs {
			if len(o.bufs[t].Vs) > 0 {
				e.ship(o, t)
			}
		}
	}
	if e.wm > e.sent { // after the records it follows, on every channel
		e.sent = e.wm
		for _, o := range e.outs {
			for t := range o.spec.Targets {
				e.s.Enqueue(o.index, t, &actors.Envelope{Kind: actors.Watermark, Mark: e.wm})
			}
		}
		e.s.Watermarked(e.wm)
	}
}

// watermark records the chain's new event time; flush sends it.
func (e *Emitter[T]) Watermark(wm int64) { e.wm = max(e.wm, wm) }

func (e *Emitter[T]) Finish() { e.Flush() }

// sliceMarks are the marks of records [start, end) of a batch, renumbered
// from start (nil when none).
func sliceMarks(ms []Mark, start, end int) []Mark {
	var out []Mark
	for _, m := range ms {
		if int(m.I) >= start && int(m.I) < end {
			m.I -= int32(start)
			out = append(out, m)
		}
	}
	return out
}

// pushMarked is Push for a batch with sampled records: their marks go with
// them into the batches of their targets (a hash edge places them one by
// one).
func (e *Emitter[T]) pushMarked(b *Batch[T]) {
	for _, o := range e.outs {
		switch o.spec.Part {
		case Forward:
			e.add(o, 0, b, false)
		case Rebalance:
			e.add(o, o.rr, b, false)
			o.rr = (o.rr + 1) % len(o.bufs)
		case Broadcast:
			for t := range o.bufs {
				e.add(o, t, b, false)
			}
		case Hash:
			n, mi := len(o.bufs), 0
			for i, v := range b.Vs {
				t := InstanceFor(o.hash(v), n)
				buf := &o.bufs[t]
				for mi < len(b.Tr) && int(b.Tr[mi].I) < i {
					mi++
				}
				if mi < len(b.Tr) && int(b.Tr[mi].I) == i {
					m := b.Tr[mi]
					m.I = int32(len(buf.Vs))
					buf.Tr = append(buf.Tr, m)
				}
				buf.Vs = append(buf.Vs, v)
				if b.Ts != nil {
					buf.Ts = append(buf.Ts, b.Ts[i])
				}
				if len(buf.Vs) >= e.size {
					e.ship(o, t)
				}
			}
		}
	}
}
