// Package workers is the dispatcher sluice's operator instances run on: a protoactor
// actor.Dispatcher whose scheduled mailboxes run on long-lived goroutines.
//
// protoactor's default dispatcher starts a goroutine for every Schedule: a
// mailbox that empties and is posted to again gets a fresh goroutine, with
// a small stack that grows (a copy each time) as deep as an operator's
// call chain goes. A topology's mailboxes are scheduled hundreds of
// thousands of times a second (every batch and credit that finds its
// actor idle), so that cost shows: about a sixth of the CPU of a topology
// hop went to growing stacks. A Pool hands a scheduled function to an idle
// worker instead, whose stack is already grown, and starts a worker only
// when none is idle. At most MaxIdle workers wait for work; the rest end
// when they finish.
//
// Use:
//
//	pool := workers.New(300, 0) // protoactor's throughput; MaxIdle 2×GOMAXPROCS+2
//	defer pool.Stop()
//	props := actor.PropsFromProducer(newActor, actor.WithDispatcher(pool))
//
// Stop ends the idle workers; a function scheduled after Stop still runs
// (on a goroutine that ends after it), so that an actor stopped late drains.
package workers

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// Pool is an actor.Dispatcher running scheduled functions on reused
// goroutines. It is safe for concurrent use.
type Pool struct {
	throughput int
	maxIdle    int32
	work       chan func() // unbuffered: a send succeeds only into an idle worker
	quit       chan struct{}
	stopOnce   sync.Once
	idle       atomic.Int32
	live       sync.WaitGroup
	onIdle     func() // tests: called when a worker is about to wait
}

var _ actor.Dispatcher = (*Pool)(nil)

// New returns a pool whose mailboxes process up to throughput messages
// before yielding, keeping at most maxIdle idle workers (0: twice
// GOMAXPROCS plus two).
func New(throughput, maxIdle int) *Pool {
	if maxIdle <= 0 {
		maxIdle = 2*runtime.GOMAXPROCS(0) + 2
	}
	return &Pool{throughput: throughput, maxIdle: int32(maxIdle), work: make(chan func()), quit: make(chan struct{})}
}

// Throughput is how many messages a mailbox processes before it yields.
func (p *Pool) Throughput() int { return p.throughput }

// Schedule runs fn on an idle worker, or on a new one when none is idle.
func (p *Pool) Schedule(fn func()) {
	select {
	case p.work <- fn:
	default:
		p.live.Add(1)
		go p.run(fn)
	}
}

func (p *Pool) run(fn func()) {
	defer p.live.Done()
	for {
		fn()
		fn = nil
		if p.idle.Add(1) > p.maxIdle {
			p.idle.Add(-1)
			return
		}
		if p.onIdle != nil {
			p.onIdle()
		}
		select {
		case fn = <-p.work:
			p.idle.Add(-1)
		case <-p.quit:
			p.idle.Add(-1)
			return
		}
	}
}

// Stop ends the idle workers (it does not wait: Wait does); workers busy
// with a function end when it returns. Stop is idempotent.
func (p *Pool) Stop() {
	p.stopOnce.Do(func() { close(p.quit) })
}

// Wait waits until every worker has ended (after Stop, once the functions
// they run return).
func (p *Pool) Wait() { p.live.Wait() }

// Idle is how many workers wait for work now.
func (p *Pool) Idle() int { return int(p.idle.Load()) }
