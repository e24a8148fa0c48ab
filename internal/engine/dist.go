package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/graph"

	"github.com/sluicehq/sluice/internal/stage"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/dist"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/persistence"
)

// hostLost: a process of a distributed job left.
type hostLost struct{ addr string }

// tell sends msg from an instance, to an actor of this process or another.
func (in *instance) tell(pid *actor.PID, msg any) { in.c.Send(pid, msg) }

// send sends an envelope on an output channel, encoded with the receiving
// task's codec when the receiver is in another process.
func (in *instance) send(oc *outChan, env *actors.Envelope) {
	if oc.codec == nil {
		in.c.Send(oc.target, env)
		return
	}
	oc.wseq++
	if p, ok := in.exec.dist.(dist.RecordsPacker); ok {
		if enc, ok := oc.codec.(dist.AppendEncoder); ok { // framed by the distributor, encoded once in place
			msg, err := p.PackRecords(oc.wseq, enc.EncodedSizeOf(env), enc, env)
			if err != nil {
				panic(fmt.Errorf("encode for %v: %w", oc.target, err))
			}
			in.c.Send(oc.target, msg)
			in.reclaim(env)
			return
		}
	}
	data, err := oc.codec.Encode(env)
	if err != nil {
		panic(fmt.Errorf("encode for %v: %w", oc.target, err))
	}
	in.c.Send(oc.target, &wire.Records{Seq: oc.wseq, Data: data})
	in.reclaim(env)
}

// reclaim gives back an envelope encoded for another process, and its
// array to the job's arrays (stage.Reclaim): the decoder of records from
// another process takes them up again (lentDecoder), as a source does.
func (in *instance) reclaim(env *actors.Envelope) {
	stage.Reclaim(env, &in.exec.arrays, in.exec.batch)
}

// lentDecoder decodes into arrays the job lends (stage.Codec.DecodeLent).
type lentDecoder interface {
	DecodeLent(data []byte, a *stage.Arrays, size int) (any, error)
}

// ErrLost: a message between the processes of a distributed job was lost;
// the job restarts from its last checkpoint.
var ErrLost = errors.New("operators: a message from another process was lost")

// remoteInbox is the mailbox of an instance with senders in other
// processes. protoactor's connection goroutines post those senders'
// messages to it (one goroutine per connection, concurrently with each
// other and with the actor). It unpacks them there, before the mailbox
// admits them, and turns wire.Records back into the envelope it carries, so
// that the overflow policy sees exactly what it sees on an edge within one
// process: a batch of records it can count, drop, sample or spill record by
// record, or a control envelope (barrier, watermark, end of stream) that it
// never drops.
//
// It also checks the sequence of every channel from another process, in
// the order the connection delivers, before any policy can discard
// anything: a policy's drops leave no gap, and a gap means a message was
// lost between the processes. Then the instance fails with ErrLost (the
// job restarts from its last checkpoint) through an inboxFailure message,
// and the inbox ignores that instance's records from then on.
//
// Credits need nothing here: only Block edges are credit-gated, and a Block
// mailbox never discards, so the receiver grants back every record it
// handles (grant); under the other policies senders hold no credits and
// are never slowed, across processes as within one.
type remoteInbox struct {
	*mailbox.Mailbox
	unpack  func(any) (any, error)
	dist    graph.Distributor
	senders []*actor.PID // by input channel

	mu     sync.Mutex    // orders the connections' posts; guards what follows
	codec  mailbox.Codec // the task's envelope codec
	arrays *stage.Arrays // the job's arrays, which a lentDecoder codec decodes into
	batch  int           // their capacity: the topology's batch size
	wseq   []uint64      // by input channel: the last message received
	failed bool          // a message was lost: the instance is failing
}

// inboxFailure fails the instance whose inbox posted it. It is a control
// message: no policy drops it.
type inboxFailure struct{ err error }

func (*inboxFailure) IsControl() bool { return true }

func newRemoteInbox(mb *mailbox.Mailbox, in *instance) *remoteInbox {
	b := &remoteInbox{Mailbox: mb, unpack: in.exec.dist.Unpack, dist: in.exec.dist,
		codec: in.exec.plan.Chains[in.task][0].NewCodec(), wseq: make([]uint64, len(in.ins)),
		arrays: &in.exec.arrays, batch: in.exec.batch}
	for _, ch := range in.ins {
		b.senders = append(b.senders, ch.sender)
	}
	return b
}

// PostUserMessage implements actor.Mailbox: records from another process
// reach the mailbox as envelopes, everything else as the value it carries.
func (b *remoteInbox) PostUserMessage(msg any) {
	m := msg
	env, wrapped := msg.(*actor.MessageEnvelope)
	if wrapped {
		m = env.Message
	}
	v, err := b.unpack(m)
	if err != nil {
		return // counted and logged by Unpack; a lost wire.Records shows as a gap
	}
	if rec, ok := v.(*wire.Records); ok {
		from := ""
		if wrapped {
			from = sentFrom(env.Header)
		}
		b.records(rec, from)
		return
	}
	if v != m {
		if wrapped {
			v = &actor.MessageEnvelope{Header: env.Header, Message: v, Sender: env.Sender}
		}
		msg = v
	}
	b.Mailbox.PostUserMessage(msg)
}

// records decodes the envelope of rec, checks that it came from the
// process of its channel's sender (from: see sentFrom) and the channel's
// sequence, and posts it. Records a process sends on a channel that is
// not its own are dropped and counted: they leave the channel's sequence
// as it was.
func (b *remoteInbox) records(rec *wire.Records, from string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failed {
		return
	}
	if from != "" && !slices.ContainsFunc(b.senders, func(p *actor.PID) bool { return p.Address == from }) {
		b.forged(from, "a channel of this instance (no sender of it runs there)")
		return // not decoded: a process that sends on none of the channels cannot fail the instance either
	}
	v, err := decodeRecords(b.codec, rec.Data, b.arrays, b.batch)
	if err != nil {
		err = fmt.Errorf("%w (message %d): %w", ErrUndecodable, rec.Seq, err)
		if c, ok := b.dist.(dist.UndecodableCounter); ok {
			c.Undecodable(err)
		}
		b.fail(err)
		return
	}
	env := v.(*actors.Envelope)
	ch := env.Channel
	if ch < 0 || ch >= len(b.wseq) {
		b.fail(fmt.Errorf("operators: records from another process on channel %d, the instance has %d", ch, len(b.wseq)))
		return
	}
	if from != "" && from != b.senders[ch].Address {
		b.forged(from, "channel "+itoa(ch)+" of the sender at "+b.senders[ch].Address)
		return
	}
	if rec.Seq != b.wseq[ch]+1 {
		b.fail(fmt.Errorf("%w: channel %d from %s: message %d after %d", ErrLost, ch, b.senders[ch].Address+"/"+b.senders[ch].Id, rec.Seq, b.wseq[ch]))
		return
	}
	b.wseq[ch] = rec.Seq
	b.Mailbox.PostUserMessage(env)
}

// ErrUndecodable: records from another process did not decode; the
// receiving instance fails (the job restarts from its last checkpoint).
var ErrUndecodable = errors.New("operators: records from another process do not decode")

// decodeRecords decodes the envelope of a wire.Records on the connection's
// goroutine: a panic of the codec (none is known: the envelope codec
// decodes with msgpacksafe) is returned as an error rather than unwinding
// into protoactor's gRPC goroutine, which would end the process.
func decodeRecords(c mailbox.Codec, data []byte, a *stage.Arrays, size int) (v any, err error) {
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, fmt.Errorf("the codec panicked: %v", p)
		}
	}()
	if d, ok := c.(lentDecoder); ok {
		return d.DecodeLent(data, a, size)
	}
	return c.Decode(data)
}

// forged counts records from a process that is not their channel's
// sender's (dist.ForgeryCounter); they are dropped.
func (b *remoteInbox) forged(from, claim string) {
	if c, ok := b.dist.(dist.ForgeryCounter); ok {
		c.Forged("records", from, claim)
	}
}

func (b *remoteInbox) fail(err error) {
	b.failed = true
	b.Mailbox.PostUserMessage(&inboxFailure{err: err})
}

// hasRemoteSender says whether an input channel of in comes from another
// process.
func (in *instance) hasRemoteSender() bool {
	for _, ch := range in.ins {
		if !in.exec.local(ch.sender) {
			return true
		}
	}
	return false
}

// grant returns the room env took to its sender, as the total of records
// handled on the channel (see wire.Credit).
func (in *instance) grant(env *actors.Envelope) {
	ch := &in.ins[env.Channel]
	ch.consumed += int64(env.Count)
	if ch.consumed-ch.reported < ch.every {
		return // gathered: see grantEvery
	}
	ch.reported = ch.consumed
	in.c.Send(ch.sender, &wire.Credit{Out: ch.out, Total: ch.consumed})
}

// local says whether pid is an actor of this process (always, when the job
// is not distributed).
func (x *execution) local(pid *actor.PID) bool {
	return x.dist == nil || pid.Address == x.dist.Address()
}

// tellFrom sends msg from the job actor.
func (x *execution) tellFrom(c actor.Context, pid *actor.PID, msg any) { c.Send(pid, msg) }

// place computes the placement of a generation: the address of every
// instance, by instance number. Tasks that read sources stay here.
func (x *execution) place() {
	if x.dist == nil {
		return
	}
	self := x.dist.Address()
	x.placement = x.placement[:0]
	x.hosts = map[string]bool{}
	for id, chain := range x.plan.Chains {
		for i := range x.plan.Par[chain[0]] {
			addr := self
			if chain[0].Role() != graph.RoleSource {
				if a := x.dist.Place(x.topo.Name(), x.gen, x.plan.Tasks[id], i); a != "" {
					addr = a
				}
			}
			x.placement = append(x.placement, addr)
			if addr != self {
				x.hosts[addr] = true
			}
		}
	}
	x.notePlacement()
}

// remoteParent is the name of the actor that parents a generation's
// instances in another process.
func remoteParent(jobPID *actor.PID, gen int) string {
	return jobPID.Id + "@" + strings.ReplaceAll(jobPID.Address, ":", "_") + "-g" + strconv.Itoa(gen)
}

// deploy asks every other process of the placement to run its instances.
func (x *execution) deploy() error {
	d := &wire.Deploy{Job: x.topo.Name(), JobAddress: x.jobPID.Address, JobID: x.jobPID.Id, Gen: x.gen, Placement: x.placement}
	if x.restored != nil {
		d.Checkpoint = &wire.Checkpoint{ID: x.restored.ID, States: x.restored.States, Offsets: x.restored.Offsets}
	}
	x.liveDeploy(d)
	for addr := range x.hosts {
		if err := x.dist.Deploy(x.ctx, addr, d); err != nil {
			return fmt.Errorf("deploy generation %d on %s: %w", x.gen, addr, err)
		}
	}
	return nil
}

// stopHosts asks every other process of the placement to stop the
// generation's instances; it returns the addresses asked.
// hostList is the other processes of the generation, sorted.
func (x *execution) hostList() []string {
	hosts := make([]string, 0, len(x.hosts))
	for addr := range x.hosts {
		hosts = append(hosts, addr)
	}
	slices.Sort(hosts)
	return hosts
}

func (x *execution) stopHosts(skip map[string]bool) map[string]bool {
	asked := map[string]bool{}
	for addr := range x.hosts {
		if skip[addr] {
			continue
		}
		x.dist.StopOn(addr, &wire.StopGen{JobAddress: x.jobPID.Address, JobID: x.jobPID.Id, Gen: x.gen})
		asked[addr] = true
	}
	return asked
}

// HostGeneration runs in this process the instances of a distributed job's
// generation that d places here, built from t (the topology registered
// under d.Job, the same as the coordinator's). They are children of one
// actor, whose PID it returns once they are spawned and started: stopping
// it stops them, and then the job actor gets wire.Stopped. A failure of an
// instance goes to the job actor as wire.Failed. The returned Host carries
// the coordinator's live changes to them.
func HostGeneration(sys *actors.System, dist graph.Distributor, t *graph.Topology, d *wire.Deploy) (*Host, error) {
	plan, err := t.Plan()
	if err != nil {
		return nil, err
	}
	x := &execution{topo: t, plan: plan, sys: sys, root: dist.Root(), dist: dist,
		done: make(chan struct{}), launched: make(chan error, 1),
		byID: make(map[string]*instance), counters: make(map[*graph.Node][]*stage.Counters)}
	x.ctx, x.cancel = context.WithCancel(context.Background())
	x.jobPID, x.gen, x.placement = actor.NewPID(d.JobAddress, d.JobID), d.Gen, d.Placement
	x.notePlacement()
	if d.Checkpoint != nil {
		if err := x.adopt(&persistence.Checkpoint{ID: d.Checkpoint.ID, States: d.Checkpoint.States, Offsets: d.Checkpoint.Offsets}); err != nil {
			x.cancel()
			return nil, fmt.Errorf("operators: host %q generation %d: %w", t.Name(), d.Gen, err)
		}
	}
	if n := plan.InstanceCount(); len(d.Placement) != n {
		x.cancel()
		return nil, fmt.Errorf("operators: host %q generation %d: placement of %d instances, the plan has %d", t.Name(), d.Gen, len(d.Placement), n)
	}
	if err := x.adoptLive(d); err != nil {
		x.cancel()
		return nil, fmt.Errorf("operators: host %q generation %d: %w", t.Name(), d.Gen, err)
	}
	// Latency is measured here as in the job's process and reported with
	// the counters (a LatencyTarget's controller runs in the job actor:
	// the shed points here keep everything).
	if err := x.setupLatency(); err != nil {
		x.cancel()
		return nil, fmt.Errorf("operators: host %q generation %d: %w", t.Name(), d.Gen, err)
	}
	if err := x.openDeadLetters(); err != nil {
		x.cancel()
		return nil, err
	}
	props := actor.PropsFromProducer(func() actor.Actor { return &hostActor{x: x} },
		actor.WithSupervisor(&hostSupervisor{x: x}))
	pid, err := x.root.SpawnNamed(dist.Props(props), remoteParent(x.jobPID, d.Gen))
	if err != nil {
		x.cancel()
		return nil, fmt.Errorf("operators: host %q generation %d: %w", t.Name(), d.Gen, err)
	}
	if err := <-x.launched; err != nil {
		x.root.Stop(pid)
		return nil, fmt.Errorf("operators: host %q generation %d: %w", t.Name(), d.Gen, err)
	}
	return &Host{x: x, pid: pid}, nil
}

// hostActor parents one generation's instances in a process other than
// the job actor's. It reports their counters to the job actor every
// hostStatsInterval, and a last time once they have stopped, before
// wire.Stopped (the job actor waits for that before a restart, so the
// counts of a stopped generation are in before the next one starts).
type hostActor struct {
	x         *execution
	stopTimer func() bool // the next report's timer, nil when none
	stopping  bool        // no timer after Stopping: the last report comes with Stopped
}

// hostStatsInterval is how often a process hosting instances of a
// distributed job reports their counters (the dashboard's default
// refresh).
const hostStatsInterval = 500 * time.Millisecond

// hostStatsTick: time for hostActor's next report.
type hostStatsTick struct{}

func (h *hostActor) Receive(c actor.Context) {
	x := h.x
	switch c.Message().(type) {
	case *actor.Started:
		err := h.launch(c)
		x.launched <- err
		if err == nil {
			h.arm(c.Self())
		}
	case *hostStatsTick:
		h.stopTimer = nil
		if !h.stopping { // a tick that fired as the actor began to stop
			x.root.Send(x.jobPID, x.hostStats(false))
			h.arm(c.Self())
		}
	case *actor.Stopping:
		h.stopping = true
		if h.stopTimer != nil {
			h.stopTimer()
			h.stopTimer = nil
		}
	case *actor.Stopped: // after its children: the counts are final
		x.cancel()
		x.root.Send(x.jobPID, x.hostStats(true))
		x.root.Send(x.jobPID, &wire.Stopped{Address: x.dist.Address(), Gen: x.gen})
	}
}

func (h *hostActor) arm(self *actor.PID) {
	root := h.x.root
	h.stopTimer = h.x.topo.Config().After(hostStatsInterval, func() { root.Send(self, &hostStatsTick{}) })
}

// hostStats reports the counters of the instances that run here.
func (x *execution) hostStats(final bool) *wire.Stats {
	x.instMu.RLock()
	defer x.instMu.RUnlock()
	ws := &wire.Stats{Gen: x.gen, Address: x.dist.Address(), Final: final}
	for _, insts := range x.instances {
		for _, in := range insts {
			if x.local(in.self) {
				s := x.instanceStats(in)
				s.Final = final
				s.Latency = x.instLatencyWire(in)
				ws.Instances = append(ws.Instances, s)
			}
		}
	}
	return ws
}

// instanceStats reads the counters of an instance of this process. It is
// safe from any goroutine.
func (x *execution) instanceStats(in *instance) wire.InstanceStats {
	chain := x.plan.Chains[in.task]
	s := wire.InstanceStats{Task: in.task, Instance: in.idx, Ops: make([]wire.OpStats, len(chain)),
		Blocked: in.blocked.Load(), Watermark: in.evTime.Load()}
	for pos, n := range chain {
		if cs := x.counters[n]; in.idx < len(cs) {
			c := cs[in.idx]
			s.Ops[pos] = wire.OpStats{In: c.In.Load(), Out: c.Out.Load(), DeadLettered: c.Dead.Load(), Late: c.Late.Load()}
		}
	}
	if mb := in.mb.Load(); mb != nil && chain[0].Role() != graph.RoleSource {
		ms := mb.Stats()
		s.Policy, s.Capacity, s.Depth, s.HighWater = ms.Policy, ms.Capacity, ms.Depth, ms.HighWater
		s.Dropped, s.Spilled, s.SpillPending = ms.Dropped[:], ms.Spilled, ms.SpillPending
	}
	if since := in.blockedSince.Load(); since != 0 {
		s.Blocked += int64(x.topo.Config().Now().Sub(time.Unix(0, since)))
		s.Backpressured = true
	}
	return s
}

// onStats keeps a process's report (the job actor calls it): from is the
// process it came from (sentFrom); what it says of an instance that
// process does not host is refused.
func (x *execution) onStats(from string, m *wire.Stats) {
	if !x.fromProcess(from, m.Address) {
		x.forged("statistics", from, "the process at "+m.Address)
		return
	}
	for i := range m.Instances {
		s := &m.Instances[i]
		if !x.fromInstance(from, m.Gen, x.instanceNum(s.Task, s.Instance)) {
			x.forged("statistics", from, "task "+itoa(s.Task)+" instance "+itoa(s.Instance)+" of generation "+itoa(m.Gen))
			continue
		}
		x.noteStats(m.Gen, s)
	}
}

// statsKey names the reports of one instance of one generation.
type statsKey struct{ gen, task, instance int }

// noteStats keeps the latest report of an instance in another process
// (the job actor calls it). A report after the instance's final one is
// older than it and ignored.
func (x *execution) noteStats(gen int, s *wire.InstanceStats) {
	if s == nil || s.Task < 0 || s.Task >= len(x.plan.Chains) || len(s.Ops) != len(x.plan.Chains[s.Task]) ||
		s.Instance < 0 || s.Instance >= x.plan.Par[x.plan.Chains[s.Task][0]] {
		return // not of this plan
	}
	k := statsKey{gen, s.Task, s.Instance}
	x.statsMu.Lock()
	defer x.statsMu.Unlock()
	if old, ok := x.remoteStats[k]; ok && old.Final && !s.Final {
		return
	}
	if x.remoteStats == nil {
		x.remoteStats = map[statsKey]*wire.InstanceStats{}
	}
	x.remoteStats[k] = s
	if s.Latency != nil && x.lats != nil {
		l, err := latencyFromWire(s.Latency)
		if err != nil {
			x.sys.Logger().Warn("latency statistics from another process refused", "job", x.topo.Name(),
				"task", s.Task, "instance", s.Instance, "gen", gen, "err", err)
			return
		}
		if x.remoteLat == nil {
			x.remoteLat = map[statsKey]latencySnap{}
		}
		x.remoteLat[k] = l
	}
}

// instLatencyWire is what in measured, to report to the job actor in
// another process (nil when the job measures no latency).
func (x *execution) instLatencyWire(in *instance) *wire.Latency {
	if in.task < len(x.lats) && in.idx < len(x.lats[in.task]) && x.lats[in.task][in.idx] != nil {
		return x.lats[in.task][in.idx].toWire(x.topo.Config().Now())
	}
	return nil
}

func (h *hostActor) launch(c actor.Context) (err error) {
	x := h.x
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("launch: %v", r)
		}
	}()
	x.jobParent = c.Self().Id
	if err := x.build(); err != nil {
		return err
	}
	var local []*instance
	for _, insts := range x.instances {
		for _, in := range insts {
			if in.self.Address != x.dist.Address() {
				continue
			}
			if err := x.spawn(c, in, x.jobParent); err != nil {
				return err
			}
			local = append(local, in)
		}
	}
	for i := len(local) - 1; i >= 0; i-- { // consumers first, as launch does
		c.Send(local[i].self, &startMsg{})
	}
	return nil
}

// hostSupervisor reports a failed instance to the job actor.
type hostSupervisor struct{ x *execution }

func (s *hostSupervisor) HandleFailure(_ *actor.ActorSystem, _ actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason, _ any) {
	x := s.x
	op, _, err := x.failureOf(child, reason)
	x.root.Send(x.jobPID, &wire.Failed{Gen: x.gen, Address: child.Address, ID: child.Id, Operator: op, Message: err.Error()})
}

// spawn starts instance in as a child of c named after its PID.
func (x *execution) spawn(c actor.Context, in *instance, parent string) error {
	mbCfg, err := x.mailboxFor(in)
	if err != nil {
		return err
	}
	mbp, err := mbCfg.Producer(func(mb *mailbox.Mailbox) { in.mb.Store(mb) })
	if err != nil {
		return err
	}
	if x.dist != nil && in.hasRemoteSender() {
		local := mbp
		mbp = func() actor.Mailbox { return newRemoteInbox(local().(*mailbox.Mailbox), in) }
	}
	props := actor.PropsFromProducer(func() actor.Actor { return in }, actor.WithMailbox(mbp), actor.WithDispatcher(x.sys.Dispatcher()))
	if x.dist != nil {
		props = x.dist.Props(props)
	}
	name := in.self.Id[len(parent)+1:]
	if _, err := c.SpawnNamed(props, name); err != nil {
		return fmt.Errorf("spawn %s: %w", name, err)
	}
	return nil
}

// PlacementOf reports where the instances of a distributed run's current
// generation run: the number of instances by process address (nil for a
// run in one process).
func PlacementOf(run *actors.Run) map[string]int {
	x, ok := run.Execution().(*execution)
	if !ok {
		return nil
	}
	x.instMu.RLock()
	defer x.instMu.RUnlock()
	if x.dist == nil {
		return nil
	}
	out := map[string]int{}
	for _, insts := range x.instances {
		for _, in := range insts {
			out[in.self.Address]++
		}
	}
	return out
}

// AddressOf reports the address of the process that runs instance
// instance of the operator named op in a run's current generation ("" when
// there is none).
func AddressOf(run *actors.Run, op string, instance int) string {
	x, ok := run.Execution().(*execution)
	if !ok {
		return ""
	}
	x.instMu.RLock()
	defer x.instMu.RUnlock()
	for id, chain := range x.plan.Chains {
		for _, n := range chain {
			if n.Name() == op && id < len(x.instances) && instance < len(x.instances[id]) {
				return x.instances[id][instance].self.Address
			}
		}
	}
	return ""
}

// JobActorOf is the PID of a topology run's job actor (the coordinator of
// its checkpoints and restarts), nil for another kind of job: for tests
// and diagnostics that must address it.
func JobActorOf(run *actors.Run) *actor.PID {
	if x, ok := run.Execution().(*execution); ok {
		return x.jobPID
	}
	return nil
}
