package cluster

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/dist"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/supervision"
)

// Jobs names the topologies a cluster runs: every node is given the same
// (the same binary), so that any node can build any job's topology and
// host its instances. Each function returns a new topology.
type Jobs map[string]func() *operators.Topology

// engineOf is the runtime's topology under a user's.
func engineOf(t *operators.Topology) *engine.Topology {
	et, _ := engine.Of(t)
	return et
}

// jobsActorName is the actor on every node that hosts the instances of
// distributed jobs.
const jobsActorName = "sluice-jobs"

// registerJobMessages registers the operators runtime's messages.
func registerJobMessages(r *Registry) error {
	var errs []error
	add := func(v any, name string) {
		errs = append(errs, r.register(reflect.TypeOf(v), internalPrefix+"op."+name, true))
	}
	add(&wire.Records{}, "records")
	add(&wire.Credit{}, "credit")
	add(&wire.Barrier{}, "barrier")
	add(&wire.Ack{}, "ack")
	add(&wire.Committed{}, "committed")
	add(&wire.Finished{}, "finished")
	add(&wire.SourceDone{}, "sourceDone")
	add(&wire.Drain{}, "drain")
	add(&wire.Failed{}, "failed")
	add(&wire.Deploy{}, "deploy")
	add(&wire.Deployed{}, "deployed")
	add(&wire.StopGen{}, "stopGen")
	add(&wire.Stopped{}, "stopped")
	add(&wire.Stats{}, "stats")
	add(&wire.Change{}, "change")
	add(&wire.Changed{}, "changed")
	add(&wire.Gate{}, "gate")
	return errors.Join(errs...)
}

// RunOptions configure Run. The zero value is the defaults.
type RunOptions struct {
	// Checkpoints keeps the job's checkpoints. Default: a
	// ReplicatedCheckpointStore replicating to two other members (as many
	// as there are), returning once one holds each checkpoint.
	Checkpoints *ReplicatedCheckpointStore
	// Restart is the restart policy when the topology has none:
	// RestartOnFailure(Backoff, MaxRestarts, Within). Defaults: 100 ms
	// doubling to 2 s, 10 restarts within a minute.
	Backoff     supervision.Backoff
	MaxRestarts int
	Within      time.Duration
	// OffCoordinator keeps the tasks that are not pinned here (sources,
	// sinks) off this node while there are other members: the coordinator
	// only reads, writes and coordinates.
	OffCoordinator bool
}

// Run starts the job registered as name in Config.Jobs across the cluster,
// with this node as its coordinator: its job actor (checkpoints, restarts)
// and the tasks that read sources or write sinks run here; every other
// task's instances are spread evenly over the live members, this one
// included, in an order given by rendezvous hashing of (job, task) over
// their names (see distributor.Place). Every member hosts what it is given
// (Config.Jobs must have the job).
//
// When a member that hosts instances leaves, the job stops the generation
// and restarts on the members still there from its last completed
// checkpoint, which the replicated store holds on the survivors. The
// topology should take checkpoints (operators.Checkpoints); without them a
// restart starts from the beginning.
//
// Wait on the returned handle for the job's end, as for a local run.
func Run(ctx context.Context, n *Node, name string, opts RunOptions) (*actors.Run, error) {
	return n.runJobAt(ctx, name, n.cfg.Clock.Now(), opts, "")
}

// runJobAt runs the job with this node as its coordinator from at on;
// from names the coordinator it takes the job over from ("" for Run).
func (n *Node) runJobAt(ctx context.Context, name string, at time.Time, opts RunOptions, from string) (*actors.Run, error) {
	build, ok := n.cfg.Jobs[name]
	if !ok {
		return nil, fmt.Errorf("cluster: run %q: no such job in Config.Jobs", name)
	}
	t := build()
	if t.Name() != name {
		return nil, fmt.Errorf("cluster: run %q: the topology is named %q: register it under its name", name, t.Name())
	}
	store := opts.Checkpoints
	if store == nil {
		var err error
		if store, err = n.jobCheckpoints(); err != nil {
			return nil, fmt.Errorf("cluster: run %q: %w", name, err)
		}
	}
	b, maxR, within := opts.Backoff, opts.MaxRestarts, opts.Within
	if b.Initial == 0 {
		b = supervision.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Multiplier: 2}
	}
	if maxR == 0 {
		maxR = 10
	}
	if within == 0 {
		within = time.Minute
	}
	et := engineOf(t)
	if !et.RestartsOnFailure() {
		et.Configure(engine.RestartOnFailure(b, maxR, within))
	}
	// halt ends the run's deployments in progress when the node abandons
	// the job (a deployment to a node that is gone would hold the job
	// actor, and so its stop, for RequestTimeout).
	halt, haltNow := context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if haltNow != nil {
			haltNow()
		}
	}()
	et.Configure(engine.CheckpointStore(store), engine.Distribute(&distributor{n: n, offSelf: opts.OffCoordinator, halt: halt}))
	// Recorded in the job's log first: from now on, if this node is lost,
	// a node holding a copy takes the job over.
	rec := runRecord{Coordinator: n.cfg.Name, CoordinatorID: n.ID(),
		Options: runOptionsRecord{Initial: b.Initial, Max: b.Max, Multiplier: b.Multiplier, Jitter: b.Jitter, MaxRestarts: maxR, Within: within, OffCoordinator: opts.OffCoordinator}}
	if n.cfg.Leadership != nil && from == "" {
		if err := n.campaignForRun(ctx, name); err != nil {
			return nil, err
		}
	}
	if err := store.beginRun(ctx, name, rec); err != nil {
		n.leadEnded(name)
		return nil, fmt.Errorf("cluster: run %q: record the run: %w", name, err)
	}
	n.lifeMu.Lock()
	if n.life.Err() != nil {
		n.lifeMu.Unlock()
		n.leadEnded(name)
		return nil, fmt.Errorf("cluster: run %q: %w", name, ErrStopped)
	}
	n.lifeWG.Add(1)
	n.lifeMu.Unlock()
	run, err := n.sys.Run(ctx, t)
	if err != nil {
		n.lifeWG.Done()
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.cfg.RequestTimeout)
		defer cancel()
		_ = store.endRun(ectx, name)
		n.leadEnded(name)
		return nil, err
	}
	n.jobReg.mu.Lock()
	if n.jobReg.halts == nil {
		n.jobReg.halts = map[string]context.CancelFunc{}
	}
	n.jobReg.halts[name], haltNow = haltNow, nil
	n.jobReg.mu.Unlock()
	ev := JobEvent{Kind: JobStarted, Job: name, Run: run, Time: at}
	if from != "" {
		ev.Kind, ev.From, ev.Checkpoint = JobTakenOver, from, operators.CheckpointStatsOf(run).RestoredFrom
	}
	n.emitJob(ev)
	go n.watchRun(store, name, run)
	return run, nil
}

// distributor is the cluster's operators.Distributor.
type distributor struct {
	n       *Node
	offSelf bool // place nothing unpinned on this node while others exist
	// halt ends when the node abandons the job: deployments stop waiting
	halt context.Context
}

func (d *distributor) Address() string                   { return d.n.Address() }
func (d *distributor) Root() *actor.RootContext          { return d.n.root }
func (d *distributor) Props(p *actor.Props) *actor.Props { return d.n.Props(p) }

// Unpack decodes a message from another node where it is posted to a
// mailbox, as the receiver middleware would before the actor sees it.
func (d *distributor) Unpack(msg any) (any, error) {
	a, ok := msg.(*anypb.Any)
	if !ok {
		return msg, nil
	}
	v, err := d.n.codec.unpack(a)
	if err != nil {
		d.n.codec.warnOnce(a.GetTypeUrl(), "cluster: message dropped", "err", err)
	}
	return v, err
}

// PackRecords frames the records of a channel to another node, the
// envelope encoded once in place (dist.RecordsPacker).
func (d *distributor) PackRecords(seq uint64, size int, enc dist.AppendEncoder, env any) (any, error) {
	return d.n.codec.packRecords(seq, size, enc, env)
}

// Undecodable counts a batch of records from another node that did not
// decode (dist.UndecodableCounter) in CodecStats.Undecodable; the
// receiving instance fails and the job restarts from its checkpoint.
func (d *distributor) Undecodable(err error) {
	d.n.codec.undecodable.Add(1)
	d.n.codec.warnOnce("records do not decode", "cluster: records from another node do not decode; the instance fails", "err", err)
}

// Forged counts and logs a distributed job's message that speaks for an
// instance, a channel or the job actor that the member it came from does
// not host (dist.ForgeryCounter); the runtime has dropped it.
func (d *distributor) Forged(what, from, claim string) {
	d.n.refusals.refuse(refusedInstance, "a job's "+what+" speaking for what its member does not host", "from", from, "claims", claim)
}

func (d *distributor) StopOn(addr string, s *wire.StopGen) {
	_ = d.n.Send(d.n.PID(addr, jobsActorName), s)
}

// Place pins sinks to this node and spreads each task's instances evenly
// over the live members: the members in the order of their rendezvous
// scores for (job, task), instance i on the (i mod n)th. Each task starts
// on a different member, and the placement depends only on the job, the
// task and the members' names. A restart (gen > 0) leaves out the members
// whose last connection event was a failure: the one that died is often
// still a member then, for up to FailureTimeout.
func (d *distributor) Place(job string, gen int, task dist.Task, instance int) string {
	for _, k := range task.Kinds {
		if k == "sink" {
			return ""
		}
	}
	members := d.n.Members()
	if gen > 0 { // a restart: avoid members whose connection broke, they may be dying
		members = slices.DeleteFunc(members, func(m Member) bool { return d.n.suspect(m.Address) })
	}
	if d.offSelf && len(members) > 1 {
		self := d.n.Address()
		members = slices.DeleteFunc(members, func(m Member) bool { return m.Address == self })
	}
	if len(members) == 0 {
		return ""
	}
	key := hash64(job + "/" + strconv.Itoa(task.ID))
	sort.Slice(members, func(i, j int) bool {
		si, sj := mix64(key^hash64(members[i].Name)), mix64(key^hash64(members[j].Name))
		if si != sj {
			return si > sj
		}
		return members[i].Name < members[j].Name
	})
	return members[instance%len(members)].Address
}

func hash64(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// mix64 is splitmix64's finaliser: similar keys get unrelated scores.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (d *distributor) Deploy(ctx context.Context, addr string, w *wire.Deploy) error {
	if d.halt != nil {
		if err := context.Cause(d.halt); err != nil {
			return fmt.Errorf("the job was abandoned: %w", err)
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(d.halt, cancel)()
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.n.cfg.RequestTimeout)
		defer cancel()
	}
	// A member that has just joined may not know this node yet: its guard
	// refuses (counts and drops) what a non-member sends, and the request
	// would wait for its whole timeout. Ask again, with growing waits,
	// until ctx ends; a host that already runs the generation says so
	// (deploy is idempotent there).
	var r any
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		actx, cancel := context.WithTimeout(ctx, wait)
		var err error
		r, err = d.n.Request(actx, d.n.PID(addr, jobsActorName), w)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil || actx.Err() == nil {
			return err
		}
		d.n.log.Debug("deploy: no answer yet, asking again", "job", w.Job, "generation", w.Gen, "host", addr, "waited", wait)
	}
	resp, ok := r.(*wire.Deployed)
	if !ok {
		return fmt.Errorf("unexpected reply %T", r)
	}
	if resp.Err != "" {
		return errors.New(resp.Err)
	}
	return nil
}

// Watch reports members that leave and broken connections: protoactor
// drops the messages queued on a connection that fails (even to a node
// that is still there, as when a node comes back on the same address and
// old connection attempts fail), so a job whose messages may have been
// lost restarts from its checkpoint rather than wait for them.
func (d *distributor) Watch(lost func(addr string)) (cancel func()) {
	unsub := d.n.Subscribe(func(ev MemberEvent) {
		if ev.Kind == Left {
			lost(ev.Member.Address)
		}
	})
	stopConn := d.n.watchConnections(func(addr string, up bool) {
		if !up {
			lost(addr)
		}
	})
	return func() { unsub(); stopConn() }
}

// watchConnections calls fn on protoactor's publishing goroutine whenever
// a connection to another node breaks (up false) or is made (up true).
func (n *Node) watchConnections(fn func(addr string, up bool)) (cancel func()) {
	sub := n.as.EventStream.Subscribe(func(evt any) {
		switch e := evt.(type) {
		case *remote.EndpointTerminatedEvent:
			fn(e.Address, false)
		case *remote.EndpointConnectedEvent:
			fn(e.Address, true)
		}
	})
	return func() { n.as.EventStream.Unsubscribe(sub) }
}

// HostedGeneration is a generation of a distributed job whose instances
// this node runs.
type HostedGeneration struct {
	Job         string
	Coordinator string // the address of the job's coordinator
	Gen         int
	Instances   int
}

type genKey struct {
	addr, id string
	gen      int
}

type hosted struct {
	pid     *actor.PID
	host    *engine.Host
	info    HostedGeneration
	peers   map[string]bool          // the addresses of the generation's processes
	changes map[uint64]*hostedChange // live changes prepared or applied here, by id (changes.go)
}

// jobsActor hosts the instances of distributed jobs on its node.
type jobsActor struct {
	n                *Node
	gens             map[genKey]hosted
	cancel, stopConn func()
}

type (
	coordinatorLost struct{ member Member }
	excluded        struct{}
	connectionLost  struct{ addr string }
)

func (a *jobsActor) Receive(c actor.Context) {
	n := a.n
	switch m := c.Message().(type) {
	case *actor.Started:
		a.gens = map[genKey]hosted{}
		self := c.Self()
		a.cancel = n.Subscribe(func(ev MemberEvent) {
			switch ev.Kind {
			case Left:
				n.root.Send(self, &coordinatorLost{member: ev.Member})
			case Excluded:
				n.root.Send(self, &excluded{})
			}
		})
		a.stopConn = n.watchConnections(func(addr string, up bool) {
			if !up {
				n.root.Send(self, &connectionLost{addr: addr})
			}
		})
	case *actor.Stopping:
		a.cancel()
		a.stopConn()
	case *connectionLost:
		// Messages of the hosted instances may have been lost on it: the
		// coordinators restart their jobs from their checkpoints.
		for k, h := range a.gens {
			if !h.peers[m.addr] {
				continue
			}
			_ = n.Send(actor.NewPID(k.addr, k.id), &wire.Failed{Gen: k.gen, Address: n.Address(), ID: jobsActorName,
				Operator: "connection " + n.Address() + " -> " + m.addr, Message: fmt.Sprintf("node %s: the connection to %s broke (messages may have been lost)", n.cfg.Name, m.addr)})
		}
	case *wire.Deploy:
		c.Respond(&wire.Deployed{Err: a.deploy(m)})
	case *wire.Change:
		c.Respond(&wire.Changed{Address: n.Address(), ID: m.ID, Phase: m.Phase, Err: a.change(c.Sender(), m)})
	case *wire.StopGen:
		k := genKey{m.JobAddress, m.JobID, m.Gen}
		if h, ok := a.gens[k]; ok {
			delete(a.gens, k)
			n.root.Stop(h.pid) // it tells the job actor once its instances stopped
			a.publish()
			return
		}
		_ = n.Send(actor.NewPID(m.JobAddress, m.JobID), &wire.Stopped{Address: n.Address(), Gen: m.Gen})
	case *excluded:
		// The others declared this node lost: they restart what it hosted
		// elsewhere and take over the jobs it coordinated.
		for k, h := range a.gens {
			delete(a.gens, k)
			n.root.Stop(h.pid)
		}
		a.publish()
		n.abandonAll()
	case *coordinatorLost: // nobody will stop them: the job moved or ended
		for k, h := range a.gens {
			if k.addr == m.member.Address {
				delete(a.gens, k)
				n.root.Stop(h.pid)
			}
		}
		a.publish()
		// A job it coordinated may be this node's to take over.
		n.considerTakeovers(m.member)
	}
}

func (a *jobsActor) deploy(d *wire.Deploy) string {
	n := a.n
	if _, ok := a.gens[genKey{d.JobAddress, d.JobID, d.Gen}]; ok {
		return "" // asked again (Deploy retries a request it had no answer to)
	}
	build, ok := n.cfg.Jobs[d.Job]
	if !ok {
		return fmt.Sprintf("no job %q on node %q", d.Job, n.cfg.Name)
	}
	host, err := engine.HostGeneration(n.sys, &distributor{n: n}, engineOf(build()), d)
	if err != nil {
		return err.Error()
	}
	pid := host.PID()
	count, peers := 0, map[string]bool{d.JobAddress: true}
	for _, addr := range d.Placement {
		if addr == n.Address() {
			count++
		}
		peers[addr] = true
	}
	a.gens[genKey{d.JobAddress, d.JobID, d.Gen}] = hosted{pid: pid, host: host, changes: map[uint64]*hostedChange{}, peers: peers,
		info: HostedGeneration{Job: d.Job, Coordinator: d.JobAddress, Gen: d.Gen, Instances: count}}
	n.log.Info("hosting a job's instances", "job", d.Job, "generation", d.Gen, "instances", count, "coordinator", d.JobAddress)
	a.publish()
	return ""
}

func (a *jobsActor) publish() {
	out := make([]HostedGeneration, 0, len(a.gens))
	for _, h := range a.gens {
		out = append(out, h.info)
	}
	a.n.mu.Lock()
	a.n.hosted = out
	a.n.mu.Unlock()
}

// Hosted lists the generations of distributed jobs whose instances this
// node runs now.
func (n *Node) Hosted() []HostedGeneration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]HostedGeneration(nil), n.hosted...)
}

// noteConnection records whether the last connection event of addr was a
// failure.
func (n *Node) noteConnection(addr string, up bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.suspects == nil {
		n.suspects = map[string]bool{}
	}
	if up {
		delete(n.suspects, addr)
	} else {
		n.suspects[addr] = true
	}
}

// suspect says whether the last connection event of addr was a failure.
func (n *Node) suspect(addr string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.suspects[addr]
}

// jobCheckpoints returns the node's default store for the checkpoints of
// the jobs it coordinates (one per node: a store leads its jobs' logs).
func (n *Node) jobCheckpoints() (*ReplicatedCheckpointStore, error) {
	n.jobStoreMu.Lock()
	defer n.jobStoreMu.Unlock()
	if n.jobStore != nil {
		return n.jobStore, nil
	}
	s, err := NewReplicatedCheckpointStore(n, ReplicationConfig{Replicas: 2, Acks: 1})
	if err != nil {
		return nil, err
	}
	s.upTo = true // as many as there are, up to two
	n.jobStore = s
	return s, nil
}
