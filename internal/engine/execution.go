package engine

import (
	"context"
	"crypto/rand"
	"fmt"
	"math"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/graph"
	"github.com/sluicehq/sluice/internal/savepoint"

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
	topo   *graph.Topology
	plan   *graph.Plan
	sys    *actors.System
	root   *actor.RootContext
	ctx    context.Context
	cancel context.CancelFunc

	jobPID    *actor.PID
	gen       int               // incremented by every restart
	dist      graph.Distributor // nil: every instance runs in this process
	placement []string          // distributed: the address of every instance, by number
	// placedGens: copies of the placements of the current generation and
	// the few before it, to check messages against (senders.go).
	placedGens map[int][]string
	hosts      map[string]bool // distributed: the other processes of the generation
	jobParent  string          // the id of the actor that parents the instances here
	instMu     sync.RWMutex    // guards instances against Stats during a restart
	instGen    int             // the generation of instances (guarded by instMu)
	instances  [][]*instance
	byID       map[string]*instance
	counters   map[*graph.Node][]*stage.Counters
	launched   chan error

	// The latest counters reported by instances in other processes, of
	// every generation: a generation's counts stay in the job's totals
	// after it is replaced, as the shared counters of local instances do.
	statsMu     sync.Mutex
	remoteStats map[statsKey]*wire.InstanceStats
	remoteLat   map[statsKey]latencySnap // their latency, checked (latency.go)

	done     chan struct{}
	mu       sync.Mutex
	err      error
	finished int

	cpStore     persistence.CheckpointStore // nil: no checkpoints
	deadLetters supervision.DeadLetterStore
	recentDead  *recentDeadLetters      // deadLetters, remembering the newest added; nil without
	restored    *persistence.Checkpoint // the checkpoint the job resumed from
	rest        restoration             // what restored says of the plan that took it
	origin      string                  // the savepoint the job's lineage started from
	planBytes   []byte                  // the plan recorded in the job's checkpoints (savepoint.Plan)
	cpStats     CheckpointStats
	cpStatsMu   sync.Mutex
	metrics     *jobMetrics  // nil without a MeterProvider
	arrays      stage.Arrays // batch arrays lent from the job's sinks back to its sources
	batch       int          // the topology's batch size: the capacity of arrays (set by build)

	// Latency (latency.go, shedding.go): what every instance measured, by
	// task and instance (nil when the topology measures none); the shed
	// points by (sending task, receiving task), nil without a LatencyTarget;
	// the job's clock; the latest complete window's measurements by task.
	lats  [][]*instLatency
	sheds map[[2]int]*shedPoint
	nowFn func() time.Time
	// mono: now reads the monotonic clock since monoBase (whose unix
	// time is monoNs) instead of nowFn (setClock).
	mono     bool
	monoBase time.Time
	monoNs   int64
	latMu    sync.Mutex
	latWin   []latencySnap
	latPrev  []latencySnap
	shedder  *shedder   // nil without a LatencyTarget
	live     liveInputs // inputs changed while the job runs (control.go)

	// Spill inputs by reference (unaligned.go, spillref.go): spillRefs says
	// that unaligned checkpoints record a Spill input's range of its spill
	// queue rather than copy it; launchTag names this launch's queues;
	// oldQueues that queues of earlier launches may still be in the store
	// (deleted once a checkpoint of this launch completes).
	spillRefs bool
	launchTag string
	oldQueues bool
}

// now is the job's clock, in unix nanoseconds: the batches' timing and
// the envelopes' stamps. On the system clock (Config.SystemClock) it is the
// monotonic time since the job's first reading (monoBase, set with nowFn)
// added to that reading's unix time: one vDSO read instead of time.Now's
// two, and steady across steps of the wall clock.
func (x *execution) now() int64 {
	if x.mono {
		return x.monoNs + int64(time.Since(x.monoBase))
	}
	return x.nowFn().UnixNano()
}

// setClock sets the clock now reads: cfg's Now, read as the monotonic
// clock from this moment when it is the system clock.
func (x *execution) setClock(cfg graph.Config) {
	x.nowFn, x.mono = cfg.Now, cfg.SystemClock
	if x.mono {
		x.monoBase = cfg.Now()
		x.monoNs = x.monoBase.UnixNano()
	}
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
	RestoredFrom uint64    // the checkpoint this run resumed from, 0 if none
	RestoredTime time.Time // when that checkpoint was taken
	// RestoredInFlight counts the input channels whose in-flight records
	// (of an unaligned checkpoint) the run processed first, and
	// RestoredSpillRefs those of them whose records the checkpoint held as
	// a range of a Spill input's queue instead of a copy.
	RestoredInFlight  int
	RestoredSpillRefs int
	// Restarts counts RestartOnFailure's restarts of the job, and
	// RestartDelays the backoff before each.
	Restarts      int
	RestartDelays []time.Duration
	// RestartCauses are the newest restarts (up to 64), oldest first: when,
	// why, after what backoff.
	RestartCauses []RestartCause
	// InProgress are the checkpoints in flight, oldest first.
	InProgress []InProgressCheckpoint
	// History are the newest completed checkpoints (up to 64), oldest
	// first.
	History []CompletedCheckpoint
}

func (x *execution) noteRestart(d time.Duration, cause error) {
	x.cpStatsMu.Lock()
	x.cpStats.Restarts++
	x.cpStats.RestartDelays = append(x.cpStats.RestartDelays, d)
	why := "unknown"
	if cause != nil {
		why = cause.Error()
	}
	x.cpStats.RestartCauses = appendBounded(x.cpStats.RestartCauses, RestartCause{Time: x.topo.Config().Now(), Err: why, Delay: d})
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
	st.RestartCauses = slices.Clone(st.RestartCauses)
	st.History = slices.Clone(st.History)
	return st
}

// Job runs a topology on an actors.System: it is the topology's actors.Job.
type Job struct{ T *graph.Topology }

// Name is the topology's.
func (j Job) Name() string { return j.T.Name() }

// Start validates the topology, spawns one actor per task instance under a
// job actor that supervises them, and starts the sources.
func (j Job) Start(ctx context.Context, sys *actors.System) (actors.Execution, error) {
	return start(ctx, sys, j.T)
}

func start(ctx context.Context, sys *actors.System, t *graph.Topology) (actors.Execution, error) {
	plan, err := t.Plan()
	if err != nil {
		return nil, err
	}
	x := &execution{topo: t, plan: plan, sys: sys, root: sys.Root(),
		done: make(chan struct{}), launched: make(chan error, 1),
		byID: make(map[string]*instance), counters: make(map[*graph.Node][]*stage.Counters)}
	x.ctx, x.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if err := checkUnaligned(t, plan); err != nil {
		x.cancel()
		return nil, fmt.Errorf("operators: start %q: %w", t.Name(), err)
	}
	if err := x.setupLatency(); err != nil {
		x.cancel()
		return nil, fmt.Errorf("operators: start %q: %w", t.Name(), err)
	}
	if t.Config().Savepoint != "" && t.Config().CheckpointInterval <= 0 {
		x.cancel()
		return nil, fmt.Errorf("operators: start %q: FromSavepoint(%s) needs Checkpoints: the job restores through its checkpoint store", t.Name(), t.Config().Savepoint)
	}
	if t.Config().CheckpointInterval > 0 {
		if err := x.openCheckpoints(ctx); err != nil {
			x.cancel()
			return nil, fmt.Errorf("operators: start %q: %w", t.Name(), err)
		}
	}
	if err := x.openDeadLetters(); err != nil {
		x.cancel()
		return nil, fmt.Errorf("operators: start %q: %w", t.Name(), err)
	}
	if x.metrics, err = newJobMetrics(x); err != nil {
		x.cancel()
		return nil, fmt.Errorf("operators: start %q: metrics: %w", t.Name(), err)
	}
	props := actor.PropsFromProducer(func() actor.Actor { return newJobActor(x) },
		actor.WithSupervisor(&failFast{x: x}), actor.WithGuardian(&jobGuardian{x: x}))
	if x.dist = t.Config().Dist; x.dist != nil {
		x.root, props = x.dist.Root(), x.dist.Props(props)
	}
	// The job actor's name ends in 128 random bits (crypto/rand): another
	// process that can reach this one cannot guess it (the cluster also
	// accepts job messages only from members, in their own names).
	pid, err := x.root.SpawnNamed(props, fmt.Sprintf("job-%s-%d-%s", t.Name(), jobSeq.Add(1), rand.Text()))
	if err != nil {
		x.cancel()
		return nil, fmt.Errorf("operators: start %q: %w", t.Name(), err)
	}
	select {
	case err := <-x.launched: // the job actor has set x.jobPID
		if err != nil {
			<-x.done
			return nil, fmt.Errorf("operators: start %q: %w", t.Name(), err)
		}
	case <-ctx.Done():
		x.root.Send(pid, &abortMsg{})
		<-x.done
		return nil, fmt.Errorf("operators: start %q: %w", t.Name(), context.Cause(ctx))
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
	for id, chain := range x.plan.Chains {
		for pos, n := range chain {
			st := actors.OperatorStats{Name: n.Name(), Kind: n.Kind(), Task: id, Parallelism: x.plan.Par[n]}
			for _, c := range x.counters[n] {
				st.In += c.In.Load()
				st.Out += c.Out.Load()
				st.DeadLettered += c.Dead.Load()
				st.Late += c.Late.Load()
				st.BadTraceParents += c.BadTrace.Load()
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
			x.addLatencyStats(&st, id, pos)
			out = append(out, st)
		}
	}
	return out
}

// addLatencyStats adds what the task's instances measured (latency.go): its
// queue wait, processing and shedding on its first operator, end-to-end
// latency on a sink at its end, and every operator's event-time lag.
func (x *execution) addLatencyStats(st *actors.OperatorStats, task, pos int) {
	st.SampleRate = 1
	if !st.Watermark.IsZero() {
		now := x.topo.Config().Now
		if x.nowFn != nil {
			now = x.nowFn
		}
		st.EventTimeLag = max(0, now().Sub(st.Watermark))
	}
	if x.lats == nil {
		return
	}
	chain := x.plan.Chains[task]
	first, sink := pos == 0, pos == len(chain)-1 && chain[pos].Role() == graph.RoleSink
	if !first && !sink {
		return
	}
	total := x.taskLatencyLocked(task) // Stats holds statsMu
	var win latencySnap
	x.latMu.Lock()
	if task < len(x.latWin) {
		win = x.latWin[task]
	}
	x.latMu.Unlock()
	if first {
		st.Latency.QueueWait, st.Latency.Processing = total.queue.percentiles(), total.proc.percentiles()
		st.LatencyWindow.QueueWait, st.LatencyWindow.Processing = win.queue.percentiles(), win.proc.percentiles()
		for r, n := range total.shed {
			if n > 0 {
				if st.ShedBy == nil {
					st.ShedBy = map[string]int64{}
				}
				st.ShedBy[shedReasonNames[r]] += n
				st.Shed += n
			}
		}
		for k, p := range x.sheds {
			if k[0] == task {
				st.SampleRate = min(st.SampleRate, p.rate())
			}
		}
	}
	if sink {
		st.Latency.EndToEnd, st.LatencyWindow.EndToEnd = total.e2e.percentiles(), win.e2e.percentiles()
	}
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
	for _, n := range x.topo.Nodes() {
		need = need || n.RecordAttempts() > 0
	}
	if !need {
		return nil
	}
	store := x.topo.Config().DeadLetters
	if store == nil {
		db, err := x.sys.DB()
		if err != nil {
			return fmt.Errorf("dead letters: %w", err)
		}
		if store, err = supervision.NewBoltDeadLetters(db); err != nil {
			return fmt.Errorf("dead letters: %w", err)
		}
	}
	x.recentDead = &recentDeadLetters{DeadLetterStore: store}
	x.deadLetters = x.recentDead
	return nil
}

// openCheckpoints finds the checkpoint store and the checkpoint to resume
// from.
func (x *execution) openCheckpoints(ctx context.Context) error {
	x.cpStore = x.topo.Config().CheckpointStore
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
	pol := x.topo.Config().CheckpointPolicy
	x.spillRefs = x.topo.Config().CheckpointStore == nil && x.dist == nil && (pol.Unaligned || pol.AlignmentTimeout > 0)
	x.planBytes = savepoint.EncodePlan(x.planRecord())
	cp, ok, err := x.cpStore.Latest(ctx, x.topo.Name())
	if err != nil {
		return fmt.Errorf("checkpoints: load the latest: %w", err)
	}
	if dir := x.topo.Config().Savepoint; dir != "" {
		if cp, ok, err = x.fromSavepoint(ctx, dir, cp, ok); err != nil {
			return err
		}
	}
	if ok {
		if err := x.adopt(&cp); err != nil {
			return err
		}
		x.noteRestored(&cp)
		x.sys.Logger().Info("restoring from checkpoint", "job", x.topo.Name(), "checkpoint", cp.ID,
			"states", len(cp.States), "offsets", len(cp.Offsets))
	}
	return nil
}

// build wires every instance: channels, credits, stages. It runs before any
// instance is spawned, so instances start fully formed.
func (x *execution) build() error {
	x.instMu.Lock()
	defer x.instMu.Unlock()
	p, cfg := x.plan, x.topo.Config()
	x.batch = cfg.BatchSize
	x.instances = make([][]*instance, len(p.Chains))
	x.instGen = x.gen // the generation these instances are (read under instMu)
	if x.jobParent == "" {
		x.jobParent = x.jobPID.Id
	}
	nums := 0
	for id, chain := range p.Chains {
		par := p.Par[chain[0]]
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
		if x.lats != nil && x.lats[id] == nil { // measurements go on across restarts
			x.lats[id] = make([]*instLatency, par)
			for i := range x.lats[id] {
				x.lats[id][i] = new(instLatency)
			}
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
	for id := range p.Chains {
		for _, recv := range x.instances[id] {
			for ei, e := range p.Ins[id] {
				for _, snd := range x.instances[e.From] {
					if e.Part == stage.Forward && snd.idx != recv.idx {
						continue
					}
					chanOf[key{id, ei, snd.idx, recv.idx}] = len(recv.ins)
					from := p.Chains[e.From][len(p.Chains[e.From])-1].Name()
					recv.ins = append(recv.ins, inChan{sender: snd.self, from: from, kind: e.Part.String(), remote: !x.local(snd.self)})
				}
			}
			recv.eosLeft = len(recv.ins)
			recv.mbCfg = mailbox.Block(cfg.Capacity)
			if head := p.Chains[id][0]; head.Input() != nil {
				recv.mbCfg = *head.Input()
			}
			if o, ok := x.liveInput(id); ok { // changed while the job ran (control.go)
				recv.mbCfg = o
			}
			recv.credited = recv.mbCfg.Overflow == mailbox.OverflowBlock
			if recv.credited { // room for every channel's window
				recv.mbCfg.Capacity = max(recv.mbCfg.Capacity, cfg.BatchSize*len(recv.ins))
			}
		}
	}
	window := func(recv *instance) int { return max(cfg.BatchSize, recv.mbCfg.Capacity/max(1, len(recv.ins))) }
	// Output channels and emitters.
	specsOf := make([][]*outputSpec, len(x.instances))
	for id := range p.Chains {
		specsOf[id] = make([]*outputSpec, len(x.instances[id]))
	}
	outSpecs := func(snd *instance) []*outputSpec {
		var specs []*outputSpec
		for _, e := range p.Outs[snd.task] {
			ei := e.Index
			spec := &outputSpec{part: e.Part, side: e.ToNode.Side()}
			if e.Via != nil {
				spec.hasher = e.Via.Hasher()
			}
			for _, recv := range x.instances[e.To] {
				if e.Part == stage.Forward && snd.idx != recv.idx {
					continue
				}
				ci := chanOf[key{e.To, ei, snd.idx, recv.idx}]
				oc := &outChan{target: recv.self, channel: ci, credits: window(recv), credited: recv.credited,
					shed: x.sheds[[2]int{snd.task, e.To}], lastWm: math.MinInt64}
				if !x.local(recv.self) && x.local(snd.self) {
					oc.codec = p.Chains[e.To][0].NewCodec()
				}
				recv.ins[ci].out = len(snd.outs)
				recv.ins[ci].every = grantEvery(oc.credits, cfg.BatchSize)
				snd.outs = append(snd.outs, oc)
				spec.chans = append(spec.chans, oc)
			}
			specs = append(specs, spec)
		}
		return specs
	}
	num := 0
	for id, chain := range p.Chains {
		for _, in := range x.instances[id] {
			in.num = num
			num++
			if !x.local(in.self) { // wired for its senders, built where it runs
				if tail := chain[len(chain)-1]; tail.Role() != graph.RoleSink {
					outSpecs(in)
				}
				continue
			}
			in.tr = newTracer(x, in)
			if x.lats != nil {
				in.lat = x.lats[id][in.idx]
			}
			in.sinkTail = chain[len(chain)-1].Role() == graph.RoleSink
			in.shedRand = uint64(in.num+1)*0x2545f4914f6cdd1d ^ x.topo.Config().ShedSeed*0xd1342543de82ef95
			in.latEvery, in.latRand = x.latencyEvery(), uint64(in.num+1)*0x9e3779b97f4a7c15|1
			in.finishedIn = make([]bool, len(in.ins))
			in.nextIn = make([]uint64, len(in.ins))
			if chain[0].Role() != graph.RoleSource {
				in.codec = chain[0].NewCodec()
			}
			in.inWm = make([]int64, len(in.ins))
			for i := range in.inWm {
				in.inWm[i] = math.MinInt64
			}
			in.idleIn = make([]bool, len(in.ins))
			in.curWm = math.MinInt64
			in.idleAfter = chain[0].IdleAfter()
			in.lastData = cfg.Now()
			in.finKey = chain[0].Name() + "/" + strconv.Itoa(in.idx) + "#finished"
			in.restoredDone = x.restoredFinished(chain[0], in.idx)
			if chain[0].Role() == graph.RoleSource {
				in.paused = x.livePaused(id) // a restart keeps a pause (control.go)
				in.srcKey = chain[0].Name() + "/" + strconv.Itoa(in.idx)
				in.srcOffset = x.restoredOffset(chain[0], in.idx)
			}
			tail := chain[len(chain)-1]
			var next, late any
			if tail.Role() == graph.RoleSink {
				in.em = nopFlusher{}
			} else {
				var outs, lateOuts []stage.Output
				for _, s := range outSpecs(in) {
					o := stage.Output{Part: s.part, Hasher: s.hasher, Targets: len(s.chans)}
					if s.side { // to the window's late records' stream
						in.lateOutputs, lateOuts = append(in.lateOutputs, s), append(lateOuts, o)
					} else {
						in.outputs, outs = append(in.outputs, s), append(outs, o)
					}
				}
				next, in.em = tail.NewEmitter(outs, cfg.BatchSize, in)
				if tail.LateNode() != nil && len(lateOuts) > 0 {
					var lf stage.Flusher
					late, lf = tail.NewLateEmitter(lateOuts, cfg.BatchSize, lateSender{in})
					in.em = flushers{in.em, lf}
				}
			}
			for pos := len(chain) - 1; pos >= 0; pos-- {
				n := chain[pos]
				sc := &stage.Ctx{Name: n.Name(), Kind: n.Kind(), Head: pos == 0 && n.Role() != graph.RoleSource, PanicErr: x.topo.Kit().Panic,
					Prev:     prevName(chain, pos),
					Instance: in.idx, Parts: p.Par[n], Context: x.ctx, C: x.counters[n][in.idx], BatchSize: cfg.BatchSize, Tracer: in.tr,
					After: in.afterFunc, Now: cfg.Now, FinalCheckpoint: x.topo.Config().CheckpointInterval > 0, StateTTL: int64(n.TTL()),
					Blocked: in.outputsBlocked, Resume: in.resumeLater, Arrays: &x.arrays}
				if n == tail {
					sc.Late = late
				}
				sc.Keep = in.keepRate
				if st := x.topo.Config().State; st.Disk() || st.Changelog != "" {
					if st.Disk() {
						st.Dir = filepath.Join(st.Dir, url.PathEscape(x.topo.Name()))
					}
					st.Changelog = x.changelogDir()
					sc.State = st
				}
				if n.Role() == graph.RoleSource && in.lat != nil {
					sc.Ingested = func(at int64) { in.curBorn = at }
				}
				if n.Role() == graph.RoleSource && n == tail && x.topo.Config().Tracing.Key != "" {
					sc.SourceKey = sourceKey(p.Outs[in.task])
				}
				old, rescaled := x.rescaled(n)
				switch sts, ok := x.rest.states[n.Name()]; {
				case x.restored != nil && !rescaled:
					sc.Restore, sc.Restored = x.restored.States[sc.Key()]
				case rescaled && ok:
					sc.Restore, sc.Restored = sts[in.idx], true
				}
				if n.Role() == graph.RoleSink {
					sc.Context = stage.WithSinkStart(sc.Context, stage.SinkStart{Fresh: x.gen == 0 && x.restored == nil, Checkpoints: x.topo.Config().CheckpointInterval > 0})
				}
				if n.RecordAttempts() > 0 {
					sc.Failures = stage.NewFailureHandler(sc, n.RecordAttempts(), x.deadLetters, x.topo.Name())
				}
				if n.Role() == graph.RoleSource {
					in.src = n.NewSource(next, sc)
					continue
				}
				next = n.NewStage(next, sc)
				if c, ok := next.(interface{ CloseState() error }); ok {
					in.closers = append(in.closers, c)
				}
				if st, ok := next.(stage.Stateful); ok && x.topo.Config().CheckpointInterval > 0 {
					in.states = append([]stateSlot{{key: sc.Key(), st: st}}, in.states...)
				}
				if r, ok := next.(interface{ RestoreState([]byte) error }); ok && sc.Restored {
					if err := r.RestoreState(sc.Restore); err != nil {
						return fmt.Errorf("operator %q instance %d: restore from checkpoint %d: %w", n.Name(), in.idx, x.restored.ID, err)
					}
				}
				if rescaled {
					if err := x.restoreRescaled(n, old, in.idx, next); err != nil {
						return fmt.Errorf("operator %q instance %d: restore from checkpoint %d (parallelism %d, now %d): %w",
							n.Name(), in.idx, x.restored.ID, old.Parallelism, p.Par[n], err)
					}
				}
				if o, ok := next.(opener); ok {
					in.sinks = append(in.sinks, o)
				}
				if pos == 0 {
					in.head = n.NewInlet(next)
					in.headSC = sc
				}
			}
		}
	}
	return x.restoreChannels()
}

// prevName is the name of the operator before chain[pos] in its chain, ""
// for the head.
func prevName(chain []*graph.Node, pos int) string {
	if pos == 0 {
		return ""
	}
	return chain[pos-1].Name()
}
