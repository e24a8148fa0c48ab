package stage

import "time"

// keyTTL applies StateTTL to a keyed stage: when each key last saw a
// record (processing time), and a sweep every TTL that hands the keys idle
// for longer to the stage's expire function. A key's state is forgotten
// between one and two TTLs after its last record. After a restore the TTL
// counts from the first record (when the times are set again): the times
// are not checkpointed.
type keyTTL[K comparable] struct {
	touched map[K]int64
	armed   bool
	stopped bool // the stage has finished: nothing expires any more
}

// stop ends the sweeps (at the end of the stage's input).
func (t *keyTTL[K]) stop() { t.stopped, t.touched = true, nil }

// touch records a record of k now, and arms the sweep.
func (t *keyTTL[K]) touch(sc *Ctx, k K, expire func(map[K]bool)) {
	if t.stopped {
		return
	}
	now := sc.Now().UnixNano()
	if t.touched == nil {
		t.touched = map[K]int64{}
	}
	t.touched[k] = now
	if !t.armed {
		t.armed = true
		sc.After(time.Duration(sc.StateTTL), func() { t.sweep(sc, expire) })
	}
}

// restored counts the TTL of restored keys from now.
func (t *keyTTL[K]) restored(sc *Ctx, keys func(yield func(K) bool)) {
	if sc.StateTTL <= 0 {
		return
	}
	now := sc.Now().UnixNano()
	if t.touched == nil {
		t.touched = map[K]int64{}
	}
	for k := range keys {
		t.touched[k] = now
	}
}

func (t *keyTTL[K]) sweep(sc *Ctx, expire func(map[K]bool)) {
	if t.stopped {
		return
	}
	cutoff := sc.Now().UnixNano() - sc.StateTTL
	gone := map[K]bool{}
	for k, at := range t.touched {
		if at <= cutoff {
			gone[k] = true
			delete(t.touched, k)
		}
	}
	if len(gone) > 0 {
		expire(gone)
	}
	t.armed = len(t.touched) > 0
	if t.armed {
		sc.After(time.Duration(sc.StateTTL), func() { t.sweep(sc, expire) })
	}
}
