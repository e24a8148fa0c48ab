package mailbox

import (
	"fmt"
)

// Reconfigure changes a live mailbox's policy, capacity, high-water mark,
// sample rate or throttle rate. The change is atomic with respect to the
// accounting: every record is admitted under exactly one configuration, and
// Posted = Delivered + DroppedTotal() + Depth + SpillPending holds before,
// during and after it. Nothing queued is dropped by the change itself.
//
// What a change does to what is queued:
//   - A smaller capacity than the depth: nothing is evicted now; the policy
//     applies to what arrives next (a Block mailbox admits nothing more
//     until the depth is below the new capacity).
//   - To Spill: the spill queue opens (cfg.Spill is required, as for New;
//     a mailbox that spilled before keeps its queue and its options).
//   - From Spill while records are spilled: the queue drains in order, and
//     until it is empty records keep going behind it, so that the order of
//     records and control messages is kept. Meanwhile the new policy decides
//     what is admitted counting the spilled records as queued: Sample and
//     Throttle shed above the high-water mark, DropNewest and DropOldest drop
//     the newest records that do not fit, Block spills them (its senders
//     hold credits, which bound them).
//
// The callbacks (OnOverflow, OnError), the clock and the throughput of the
// mailbox stay as they were: those of cfg are ignored.
func (m *Mailbox) Reconfigure(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	if m.refuse != nil {
		return fmt.Errorf("mailbox: reconfigure: %w", m.refuse)
	}
	old := m.cfg
	// The callbacks, the clock and the throughput stay: they are read
	// outside the lock.
	cfg.OnOverflow, cfg.OnError, cfg.Now, cfg.Throughput = old.OnOverflow, old.OnError, old.Now, old.Throughput
	cfg = cfg.withDefaults()
	if cfg.Overflow == OverflowSpill && m.spill == nil {
		sq, _, err := openSpillQueue(cfg.Spill)
		if err != nil {
			return err
		}
		m.spill = sq
	}
	if m.spill != nil {
		cfg.Spill = m.spill.opts // the queue keeps the options it opened with
	}
	if cfg.Overflow == OverflowThrottle && (old.Overflow != OverflowThrottle || cfg.Rate != old.Rate) {
		m.tokens, m.refill = cfg.burst(), cfg.Now()
	}
	if cfg.Overflow == OverflowSample && old.Overflow != OverflowSample {
		m.sampled = 0
	}
	m.cfg.Capacity, m.cfg.Overflow, m.cfg.HighWater = cfg.Capacity, cfg.Overflow, cfg.HighWater
	m.cfg.SampleEvery, m.cfg.Rate, m.cfg.Spill = cfg.SampleEvery, cfg.Rate, cfg.Spill
	m.st.Policy, m.st.Capacity = cfg.Overflow.String(), cfg.Capacity
	if m.waiters > 0 { // a larger capacity may let waiting Puts in
		close(m.space)
		m.space = make(chan struct{})
	}
	return nil
}

// Config is the mailbox's configuration now (after Reconfigure, the new
// one).
func (m *Mailbox) Config() Config {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cfg
}

// SetOverfill lets a Block mailbox admit records that a sender posts
// beyond its capacity (counted in Stats.Overfilled) instead of refusing
// them. It is for the moment a live change to Block settles: senders that
// did not hold credits until then finish what they were sending, and from
// their next record on they send within credits again. Without it, a Block
// mailbox refuses (Dropped[ReasonRefused]).
func (m *Mailbox) SetOverfill(on bool) {
	m.mu.Lock()
	m.overfill = on
	m.mu.Unlock()
}

// admitLiveLocked admits a data message in the two cases a live change
// leaves behind: a spill that drains after a change away from Spill, and
// a Block mailbox settling after a change to Block (SetOverfill). done is
// false in every other case.
func (m *Mailbox) admitLiveLocked(msg any, n int) (done bool, err error, fire []Episode) {
	switch {
	case m.spill != nil && m.cfg.Overflow != OverflowSpill && m.spill.active():
		err, started := m.admitDrainingLocked(msg, n)
		if started != nil {
			e := *started
			e.Depth = m.depth
			fire = []Episode{e}
		}
		return true, err, fire
	case m.overfill && m.cfg.Overflow == OverflowBlock && m.depth+n > m.cfg.Capacity && m.depth > 0:
		m.st.Overfilled += int64(n)
		if m.ep != nil {
			m.ep.Overfilled += int64(n)
		}
		m.push(msg, n, false)
		return true, nil, nil
	}
	return false, nil, nil
}

// admitDrainingLocked admits a data message into a mailbox whose policy is
// no longer Spill while spilled records remain: it goes behind them, into
// the spill, unless the policy sheds it (see Reconfigure).
func (m *Mailbox) admitDrainingLocked(msg any, n int) (error, *Episode) {
	started := m.overflowLocked()
	queued := m.depth + int(m.st.SpillPending)
	switch m.cfg.Overflow {
	case OverflowSample, OverflowThrottle:
		if queued >= m.cfg.HighWater {
			kept := m.shedLocked(msg, n)
			why := ReasonSampled
			if m.cfg.Overflow == OverflowThrottle {
				why = ReasonThrottled
			}
			m.dropLocked(n-kept, why)
			if kept == 0 {
				m.discardedLocked(msg, why)
				return ErrDropped, started
			}
			n = kept
		}
	case OverflowDropNewest, OverflowDropOldest:
		free := m.cfg.Capacity - queued
		if free <= 0 {
			m.dropLocked(n, ReasonFull)
			m.discardedLocked(msg, ReasonFull)
			return ErrDropped, started
		}
		if n > free {
			kept := retain(msg, func(i int) bool { return i < free })
			m.dropLocked(n-kept, ReasonFull)
			n = kept
		}
	}
	if err := m.spillLocked(msg, n, false); err != nil {
		return ErrDropped, started
	}
	return nil, started
}
