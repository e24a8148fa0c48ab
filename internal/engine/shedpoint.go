package engine

import (
	"math"
	"sync/atomic"

	"github.com/sluicehq/sluice/actors"
)

// shedPoint is where a LatencyTarget sheds: the output edges of a source,
// or of the task before a bottleneck (DESIGN.md, Latency and shedding).
// The job actor sets its rate; the sending instances read it once per
// batch.
type shedPoint struct {
	keep atomic.Uint64 // math.Float64bits of the fraction kept, 1: shed nothing
	drop atomic.Bool   // drop whole batches rather than sample records
}

func newShedPoint() *shedPoint {
	p := &shedPoint{}
	p.keep.Store(math.Float64bits(1))
	return p
}

func (p *shedPoint) rate() float64 { return math.Float64frombits(p.keep.Load()) }

func (p *shedPoint) set(keep float64, drop bool) {
	p.drop.Store(drop)
	p.keep.Store(math.Float64bits(keep))
}

// shed applies sp to data envelope env before it is sent: it keeps each
// record with the point's rate (sampling: env.Keep records the
// probability, for the estimates downstream), or keeps whole batches with
// that rate (dropping). Every record shed is counted with its reason. It
// reports whether anything is left to send.
func (in *instance) shed(sp *shedPoint, env *actors.Envelope) bool {
	k := sp.rate()
	if k >= 1 || env.Count == 0 {
		return true
	}
	before := env.Count
	if sp.drop.Load() {
		if in.random() < k {
			return true
		}
		in.countShed(shedDropped, int64(before))
		return false
	}
	kept := env.Retain(func(int) bool { return in.random() < k })
	in.countShed(shedSampled, int64(before-kept))
	prior := env.Keep
	if prior == 0 {
		prior = 1
	}
	env.Keep = prior * k
	return kept > 0
}

func (in *instance) countShed(reason int, n int64) {
	if in.lat != nil && n > 0 {
		in.lat.shed[reason].Add(n)
	}
}

// random is a number in [0, 1) from the instance's splitmix64 sequence,
// seeded from its number, so a run sheds the same records given the same
// rates.
func (in *instance) random() float64 {
	in.shedRand += 0x9e3779b97f4a7c15
	z := in.shedRand
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}
