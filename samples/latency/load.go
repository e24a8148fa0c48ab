package latency

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/operators"
)

// Event is one record of the load: its number, its key, and when it
// arrived at the system's edge (its scheduled time: the load does not wait
// for the source to read it).
type Event struct {
	Seq     int64
	Key     int
	Arrived time.Time
}

// Phase is a stretch of the load at a constant rate.
type Phase struct {
	Rate     float64 // records per second
	Duration time.Duration
}

// schedule is the arrival times of a load: records arrive evenly at each
// phase's rate, one after the other.
type schedule struct {
	start  time.Time
	phases []Phase
	keys   int
}

// at is the arrival time of record seq, and false past the load's end.
func (s schedule) at(seq int64) (time.Time, bool) {
	off := time.Duration(0)
	for _, p := range s.phases {
		n := int64(p.Rate * p.Duration.Seconds())
		if seq < n {
			return s.start.Add(off + time.Duration(float64(seq)/p.Rate*float64(time.Second))), true
		}
		seq -= n
		off += p.Duration
	}
	return time.Time{}, false
}

// loadSource reads the records that have arrived by now on the clock; a
// record the source has not read yet waits outside, so its latency counts
// from its arrival (connector.IngestionTimer), not from when it was read.
type loadSource struct {
	s      *schedule
	c      clock.Clock
	once   sync.Once
	keys   int
	onOpen func()
}

func (l *loadSource) Open(_ context.Context, _, _ int, offset int64) (operators.Reader[Event], error) {
	l.once.Do(func() {
		l.s.start = l.c.Now()
		if l.onOpen != nil {
			l.onOpen()
		}
	})
	return &loadReader{s: l.s, c: l.c, seq: offset}, nil
}

type loadReader struct {
	s     *schedule
	c     clock.Clock
	seq   int64
	first time.Time // the arrival of the oldest record of the last read
}

func (r *loadReader) Read(buf []Event) (int, error) {
	now := r.c.Now()
	n := 0
	for n < len(buf) {
		at, ok := r.s.at(r.seq)
		if !ok {
			if n == 0 {
				return 0, io.EOF
			}
			break
		}
		if at.After(now) {
			break
		}
		if n == 0 {
			r.first = at
		}
		buf[n] = Event{Seq: r.seq, Key: int(r.seq % int64(r.s.keys)), Arrived: at}
		r.seq++
		n++
	}
	return n, nil
}

// IngestedAt implements connector.IngestionTimer.
func (r *loadReader) IngestedAt() time.Time { return r.first }

// Wait implements connector.Waiter: until the next record arrives.
func (r *loadReader) Wait(ctx context.Context) error {
	at, ok := r.s.at(r.seq)
	if !ok {
		return nil
	}
	d := at.Sub(r.c.Now())
	if d <= 0 {
		return nil
	}
	ch := make(chan struct{})
	stop := r.c.AfterFunc(d, func() { close(ch) })
	defer stop()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *loadReader) Offset() int64 { return r.seq }
func (r *loadReader) Close() error  { return nil }

// work waits d on the clock: the slow operator's cost per record, as a call
// to a service that takes d would.
func work(c clock.Clock, d time.Duration) {
	ch := make(chan struct{})
	c.AfterFunc(d, func() { close(ch) })
	<-ch
}
