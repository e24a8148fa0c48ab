package engine

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/stage"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/persistence"
	"github.com/sluicehq/sluice/supervision"
)

// execution is a running topology: the actors.Execution of a Topology.
type execution struct {
	topo   *Topology
	plan   *Plan
	sys    *actors.System
	root   *actor.RootContext
	ctx    context.Context
	cancel context.CancelFunc

	jobPID    *actor.PID
	gen       int             // incremented by every restart
	dist      Distributor     // nil: every instance runs in this process
	placement []string        // distributed: the address of every instance, by number
	hosts     map[string]bool // distributed: the other processes of the generation
	jobParent string          // the id of the actor that parents the instances here
	instMu    sync.RWMutex    // guards instances against Stats during a restart
	instances [][]*instance
	byID      map[string]*instance
	counters  map[*node][]*stage.Counters
	launched  chan error

	// The latest counters reported by instances in other processes, of
	// every generation: a generation's counts stay in the job's totals
	// after it is replaced, as the shared counters of local instances do.
	statsMu     sync.Mutex
	remoteStats map[statsKey]*wire.InstanceStats

	done     chan struct{}
	mu       sync.Mutex
	err      error
	finished int

	cpStore     persistence.CheckpointStore // nil: no checkpoints
	deadLetters supervision.DeadLetterStore
	restored    *persistence.Checkpoint // the checkpoint the job resumed from
	cpStats     CheckpointStats
	cpStatsMu   sync.Mutex
	metrics     *jobMetrics // nil without a MeterProvider
}

// CheckpointStats describe a job's checkpoints.
type CheckpointStats struct {
	Completed    int64         // checkpoints completed in this run
	Failed       int64         // checkpoints that failed: their store failed or they timed out
	TimedOut     int64         // of Failed, those that timed out
	LastFailure  string        // the reason of the newest failed checkpoint
	LastID       uint64        // the newest completed checkpoint
	LastDuration time.Duration // from injecting its barriers to stored
	LastTime     time.Time
	RestoredFrom uint64 // the checkpoint this run resumed from, 0 if none
	// Restarts counts RestartOnFailure's restarts of the job, and
	// RestartDelays the backoff before each.
	Restarts      int
	RestartDelays []time.Duration
	// InProgress are the checkpoints in flight, oldest first.
	InProgress []InProgressCheckpoint
}

func (x *execution) noteRestart(d time.Duration) {
	x.cpStatsMu.Lock()
	x.cpStats.Restarts++
	x.cpStats.RestartDelays = append(x.cpStats.RestartDelays, d)
	x.cpStatsMu.Unlock()
}

// CheckpointStatsOf reports the checkpoints of a topology's run (zero
// statistics for another kind of job).
func CheckpointStatsOf(run *actors.Run) CheckpointStats {
	if x, ok := run.Execution().(*execution); ok {
		return x.Checkpoints()
	}
	return CheckpointStats{}
}

// Checkpoints reports the job's checkpoints and restarts.
func (x *execution) Checkpoints() CheckpointStats {
	x.cpStatsMu.Lock()
	defer x.cpStatsMu.Unlock()
	st := x.cpStats
	st.RestartDelays = slices.Clone(st.RestartDelays)
	st.InProgress = slices.Clone(st.InProgress)
	return st
}

// Start implements actors.Job: it validates the topology, spawns one actor
// per task instance under a job actor that supervises them, and starts the
// sources.
func (t *Topology) Start(ctx context.Context, sys *actors.System) (actors.Execution, error) {
	plan, err := t.Plan()
	if err != nil {
		return nil, err
	}
	x := &execution{topo: t, plan: plan, sys: sys, root: sys.Root(),
		done: make(chan struct{}), launched: make(chan error, 1),
		byID: make(map[string]*instance), counters: make(map[*node][]*stage.Counters)}
	x.ctx, x.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if t.cfg.cpInterval > 0 {
		if err := x.openCheckpoints(ctx); err != nil {
			x.cancel()
			return nil, fmt.Errorf("operators: start %q: %w", t.name, err)
		}
	}
	if err := x.openDeadLetters(); err != nil {
		x.cancel()
		return nil, fmt.Errorf("operators: start %q: %w", t.name, err)
	}
	if x.metrics, err = newJobMetrics(x); err != nil {
		x.cancel()
		return nil, fmt.Errorf("operators: start %q: metrics: %w", t.name, err)
	}
	props := actor.PropsFromProducer(func() actor.Actor { return newJobActor(x) },
		actor.WithSupervisor(&failFast{x: x}), actor.WithGuardian(&jobGuardian{x: x}))
	if x.dist = t.cfg.dist; x.dist != nil {
		x.root, props = x.dist.Root(), x.dist.Props(props)
	}
	pid, err := x.root.SpawnNamed(props, fmt.Sprintf("job-%s-%d", t.name, jobSeq.Add(1)))
	if err != nil {
		x.cancel()
		return nil, fmt.Errorf("operators: start %q: %w", t.name, err)
	}
	select {
	case err := <-x.launched: // the job actor has set x.jobPID
		if err != nil {
			<-x.done
			return nil, fmt.Errorf("operators: start %q: %w", t.name, err)
		}
	case <-ctx.Done():
		x.root.Send(pid, &abortMsg{})
		<-x.done
		return nil, fmt.Errorf("operators: start %q: %w", t.name, context.Cause(ctx))
	}
	return x, nil
}

var jobSeq atomic.Int64 // unique job actor names within the process

func (x *execution) Done() <-chan struct{} { return x.done }

func (x *execution) Err() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.err
}

func (x *execution) Drain() { x.tell(&wire.Drain{}) }
func (x *execution) Abort() { x.tell(&abortMsg{}) }

// Abort stops a run now, as Run.Stop does without waiting, with cause as
// its outcome (wrapping ErrAborted): for a runner that stops a job for a
// reason of its own, such as a coordinator that was fenced. It does not
// wait; a run of another kind is stopped with ErrAborted.
func Abort(run *actors.Run, cause error) {
	if x, ok := run.Execution().(*execution); ok {
		x.tell(&abortMsg{cause: cause})
		return
	}
	run.Execution().Abort()
}

// tell sends msg to the job actor unless the job has already ended.
func (x *execution) tell(msg any) {
	select {
	case <-x.done:
	default:
		x.root.Send(x.jobPID, msg)
	}
}

// setErr records the job's outcome; the first error wins.
func (x *execution) setErr(err error) {
	x.mu.Lock()
	if x.err == nil {
		x.err = err
	}
	x.mu.Unlock()
}

// Stats implements actors.Execution. A distributed job's statistics cover
// its instances in every process: the counters of records (in, out, dead
// letters, late) are totals over every generation, as in one process, from
// the shared counters of this process's instances and the latest reports of
// the others (wire.Stats, wire.Finished); the mailboxes, blocked time and
// watermarks are those of the current generation's instances, reported up
// to hostStatsInterval ago when they run in another process.
func (x *execution) Stats() []actors.OperatorStats {
	x.instMu.RLock()
	defer x.instMu.RUnlock()
	x.statsMu.Lock()
	defer x.statsMu.Unlock()
	var out []actors.OperatorStats
	for id, chain := range x.plan.chains {
		for pos, n := range chain {
			st := actors.OperatorStats{Name: n.name, Kind: n.kind, Task: id, Parallelism: x.plan.par[n]}
			for _, c := range x.counters[n] {
				st.In += c.In.Load()
				st.Out += c.Out.Load()
				st.DeadLettered += c.Dead.Load()
				st.Late += c.Late.Load()
			}
			for k, r := range x.remoteStats {
				if k.task == id {
					o := r.Ops[pos]
					st.In += o.In
					st.Out += o.Out
					st.DeadLettered += o.DeadLettered
					st.Late += o.Late
				}
			}
			if pos == 0 && id < len(x.instances) {
				for _, in := range x.instances[id] {
					if x.local(in.self) {
						s := x.instanceStats(in)
						addInstanceStats(&st, &s)
					} else if r := x.remoteStats[statsKey{in.gen, id, in.idx}]; r != nil {
						addInstanceStats(&st, r)
					}
				}
			}
			out = append(out, st)
		}
	}
	return out
}

// addInstanceStats adds what an instance says of its mailbox, blocked time
// and event time to the statistics of its task's first operator.
func addInstanceStats(st *actors.OperatorStats, s *wire.InstanceStats) {
	if s.Policy != "" {
		st.Policy = s.Policy
		st.Capacity += s.Capacity
		st.Queued += s.Depth
		st.QueueHighWater = max(st.QueueHighWater, s.HighWater)
		st.Spilled += s.Spilled
		st.SpillPending += s.SpillPending
		for i, d := range s.Dropped {
			if d == 0 {
				continue
			}
			st.Dropped += d
			if st.DroppedBy == nil {
				st.DroppedBy = map[string]int64{}
			}
			st.DroppedBy[mailbox.Reason(i).String()] += d
		}
	}
	if wm := s.Watermark; wm != 0 && (st.Watermark.IsZero() || time.Unix(0, wm).Before(st.Watermark)) {
		st.Watermark = time.Unix(0, wm)
	}
	st.Blocked += time.Duration(s.Blocked)
	if s.Backpressured {
		st.Backpressured++
	}
}

// openDeadLetters finds the dead-letter store when an operator needs one.
func (x *execution) openDeadLetters() error {
	need := false
	for _, n := range x.topo.nodes {
		need = need || n.recordAttempts > 0
	}
	if !need {
		return nil
	}
	x.deadLetters = x.topo.cfg.deadLetters
	if x.deadLetters != nil {
		return nil
	}
	db, err := x.sys.DB()
	if err != nil {
		return fmt.Errorf("dead letters: %w", err)
	}
	x.deadLetters, err = supervision.NewBoltDeadLetters(db)
	if err != nil {
		return fmt.Errorf("dead letters: %w", err)
	}
	return nil
}

// openCheckpoints finds the checkpoint store and the checkpoint to resume
// from.
func (x *execution) openCheckpoints(ctx context.Context) error {
	x.cpStore = x.topo.cfg.cpStore
	if x.cpStore == nil {
		db, err := x.sys.DB()
		if err != nil {
			return fmt.Errorf("checkpoints: %w", err)
		}
		x.cpStore, err = defaultCheckpointStore(db)
		if err != nil {
			return fmt.Errorf("checkpoints: %w", err)
		}
	}
	cp, ok, err := x.cpStore.Latest(ctx, x.topo.name)
	if err != nil {
		return fmt.Errorf("checkpoints: load the latest: %w", err)
	}
	if ok {
		x.restored = &cp
		x.cpStats.RestoredFrom = cp.ID
		x.sys.Logger().Info("restoring from checkpoint", "job", x.topo.name, "checkpoint", cp.ID,
			"states", len(cp.States), "offsets", len(cp.Offsets))
	}
	return nil
}

// Plan returns the physical plan the job runs.
func (x *execution) Plan() *Plan { return x.plan }

// build wires every instance: channels, credits, stages. It runs before any
// instance is spawned, so instances start fully formed.
func (x *execution) build() error {
	x.instMu.Lock()
	defer x.instMu.Unlock()
	p, cfg := x.plan, x.topo.cfg
	x.instances = make([][]*instance, len(p.chains))
	if x.jobParent == "" {
		x.jobParent = x.jobPID.Id
	}
	nums := 0
	for id, chain := range p.chains {
		par := p.par[chain[0]]
		for i := 0; i < par; i++ {
			name := "t" + strconv.Itoa(id) + "." + strconv.Itoa(i)
			if x.gen > 0 {
				name += "g" + strconv.Itoa(x.gen)
			}
			addr, parent := x.jobPID.Address, x.jobPID.Id
			if x.placement != nil && x.placement[nums] != addr {
				addr, parent = x.placement[nums], remoteParent(x.jobPID, x.gen)
			}
			nums++
			in := &instance{exec: x, task: id, idx: i, gen: x.gen, self: actor.NewPID(addr, parent+"/"+name)}
			x.instances[id] = append(x.instances[id], in)
			x.byID[in.self.Id] = in
		}
		for _, n := range chain {
			if x.counters[n] != nil {
				continue // counts go on across restarts
			}
			cs := make([]*stage.Counters, par)
			for i := range cs {
				cs[i] = new(stage.Counters)
			}
			x.counters[n] = cs
		}
	}
	// Input channels of every receiver: one per (edge, sender instance that
	// sends to it). Window: the receiver's capacity shared by its channels.
	type key struct{ task, edge, from, to int }
	chanOf := make(map[key]int)
	for id := range p.chains {
		for _, recv := range x.instances[id] {
			for ei, e := range p.ins[id] {
				for _, snd := range x.instances[e.from] {
					if e.part == partForward && snd.idx != recv.idx {
						continue
					}
					chanOf[key{id, ei, snd.idx, recv.idx}] = len(recv.ins)
					recv.ins = append(recv.ins, inChan{sender: snd.self})
				}
			}
			recv.eosLeft = len(recv.ins)
			recv.mbCfg = mailbox.Block(cfg.capacity)
			if head := p.chains[id][0]; head.input != nil {
				recv.mbCfg = *head.input
			}
			recv.credited = recv.mbCfg.Overflow == mailbox.OverflowBlock
			if recv.credited { // room for every channel's window
				recv.mbCfg.Capacity = max(recv.mbCfg.Capacity, cfg.batchSize*len(recv.ins))
			}
		}
	}
	window := func(recv *instance) int { return max(cfg.batchSize, recv.mbCfg.Capacity/max(1, len(recv.ins))) }
	// Output channels and emitters.
	specsOf := make([][]*outputSpec, len(x.instances))
	for id := range p.chains {
		specsOf[id] = make([]*outputSpec, len(x.instances[id]))
	}
	outSpecs := func(snd *instance) []*outputSpec {
		var specs []*outputSpec
		for _, e := range p.outs[snd.task] {
			ei := e.index
			spec := &outputSpec{part: e.part}
			if e.via != nil {
				spec.hasher = e.via.hasher
			}
			for _, recv := range x.instances[e.to] {
				if e.part == partForward && snd.idx != recv.idx {
					continue
				}
				ci := chanOf[key{e.to, ei, snd.idx, recv.idx}]
				oc := &outChan{target: recv.self, channel: ci, credits: window(recv), credited: recv.credited}
				if !x.local(recv.self) && x.local(snd.self) {
					oc.codec = p.chains[e.to][0].newCodec()
				}
				recv.ins[ci].out = len(snd.outs)
				snd.outs = append(snd.outs, oc)
				spec.chans = append(spec.chans, oc)
			}
			specs = append(specs, spec)
		}
		return specs
	}
	num := 0
	for id, chain := range p.chains {
		for _, in := range x.instances[id] {
			in.num = num
			num++
			if !x.local(in.self) { // wired for its senders, built where it runs
				if tail := chain[len(chain)-1]; tail.role != roleSink {
					outSpecs(in)
				}
				continue
			}
			in.tr = newTracer(x, in)
			in.finishedIn = make([]bool, len(in.ins))
			in.inWm = make([]int64, len(in.ins))
			for i := range in.inWm {
				in.inWm[i] = math.MinInt64
			}
			in.idleIn = make([]bool, len(in.ins))
			in.curWm = math.MinInt64
			in.idleAfter = chain[0].idleAfter
			in.lastData = cfg.now()
			in.finKey = chain[0].name + "/" + strconv.Itoa(in.idx) + "#finished"
			in.restoredDone = x.restored != nil && x.restored.Offsets[in.finKey] != 0
			if chain[0].role == roleSource {
				in.srcKey = chain[0].name + "/" + strconv.Itoa(in.idx)
				if x.restored != nil {
					in.srcOffset = x.restored.Offsets[in.srcKey]
				}
			}
			tail := chain[len(chain)-1]
			var next any
			if tail.role == roleSink {
				in.em = nopFlusher{}
			} else {
				next, in.em = tail.newEmitter(outSpecs(in), in)
			}
			for pos := len(chain) - 1; pos >= 0; pos-- {
				n := chain[pos]
				sc := &stage.Ctx{Name: n.name, Kind: n.kind, Head: pos == 0 && n.role != roleSource, PanicErr: x.topo.kit.Panic,
					Instance: in.idx, Parts: p.par[n], Context: x.ctx, C: x.counters[n][in.idx], BatchSize: cfg.batchSize, Tracer: in.tr,
					After: in.afterFunc, Now: cfg.now, FinalCheckpoint: x.topo.cfg.cpInterval > 0}
				if x.restored != nil {
					sc.Restore, sc.Restored = x.restored.States[sc.Key()]
				}
				if n.recordAttempts > 0 {
					sc.Failures = stage.NewFailureHandler(sc, n.recordAttempts, x.deadLetters, x.topo.name)
				}
				if n.role == roleSource {
					in.src = n.newSource(next, sc)
					continue
				}
				next = n.newStage(next, sc)
				if st, ok := next.(stage.Stateful); ok && x.topo.cfg.cpInterval > 0 {
					in.states = append([]stateSlot{{key: sc.Key(), st: st}}, in.states...)
				}
				if r, ok := next.(interface{ RestoreState([]byte) error }); ok && sc.Restored {
					if err := r.RestoreState(sc.Restore); err != nil {
						return fmt.Errorf("operator %q instance %d: restore from checkpoint %d: %w", n.name, in.idx, x.restored.ID, err)
					}
				}
				if o, ok := next.(opener); ok {
					in.sinks = append(in.sinks, o)
				}
				if pos == 0 {
					in.head = n.newInlet(next)
				}
			}
		}
	}
	return nil
}
