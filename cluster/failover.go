package cluster

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/cluster/replication"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/supervision"
)

// Coordinator failover.
//
// A job started with Run records in its checkpoint log who coordinates it
// (runRecord): the coordinator's name and member id, and the nodes that
// hold copies of the log (the coordinator and its replicas). When a member
// leaves, every node looks through the logs it holds for jobs that member
// was coordinating and that are still running. The copies still alive are
// ranked by rendezvous hashing of the job's name; the first stands at once,
// the next ones only if the job is still orphaned a FailureTimeout later
// for each rank ahead of them.
//
// Standing is an election in the manner of Raft's: the candidate promises
// itself the log's next epoch and asks the other copies for theirs. A copy
// grants an epoch newer than any it promised, to a candidate whose copy of
// the log is at least as up to date as its own (so the winner holds every
// committed checkpoint: a checkpoint commits on a majority of the copies
// with the default Acks), and only once the coordinator is no longer a
// member in its own view (a coordinator that is alive keeps its job). A
// promise is kept in the log's bucket: each epoch goes to one candidate at
// most. With the votes of a majority of the copies, the winner leads the
// log in that epoch (the old coordinator, should it come back, is fenced:
// its checkpoints fail with ErrFenced) and runs the job, which resumes from
// the newest checkpoint. A job that ended, failed or was drained is marked
// so in its log and is never taken over.

// Election messages, to a node's replica actor.
type (
	claimRequest struct {
		Log       string
		Epoch     uint64
		Candidate string // the candidate node's name
		// LastIndex and LastEpoch describe the candidate's copy of the log.
		LastIndex, LastEpoch uint64
	}
	claimResponse struct {
		Log, Voter string
		Granted    bool
		Promised   uint64 // the voter's promised epoch after the request
		Reason     string // why it was refused
		// Behind: refused because the candidate's copy of the log is
		// behind the voter's (the voter should stand rather than it).
		Behind bool
	}
)

var voteKey = []byte("vote")

// voteRecord is the candidate a log's copy promised its epoch to.
type voteRecord struct {
	epoch     uint64
	candidate string
}

func (l *logTx) vote() voteRecord {
	if l.b == nil {
		return voteRecord{}
	}
	v := l.b.Get(voteKey)
	if len(v) < 8 {
		return voteRecord{}
	}
	return voteRecord{epoch: binary.BigEndian.Uint64(v), candidate: string(v[8:])}
}

func (l *logTx) promise(epoch uint64, candidate string) error {
	l.meta.promised = epoch
	if err := l.saveMeta(); err != nil {
		return err
	}
	return l.b.Put(voteKey, append(binary.BigEndian.AppendUint64(nil, epoch), candidate...))
}

// lastEpoch is the epoch of the log's last entry.
func (l *logTx) lastEpoch() uint64 {
	last := l.Last()
	if last == l.meta.baseIndex {
		return l.meta.baseEpoch
	}
	e, _ := l.EpochAt(last)
	return e
}

// stand promises the log's next epoch to this node (self), as a candidate,
// and returns it with the state of its copy.
func (s *logStore) stand(name, self string) (req claimRequest, err error) {
	err = s.update(name, func(l *logTx) error {
		if l.meta.promised >= replication.Limit-1 {
			return fmt.Errorf("%w: the log promised epoch %d", replication.ErrOutOfRange, l.meta.promised)
		}
		req = claimRequest{Log: name, Epoch: l.meta.promised + 1, Candidate: self, LastIndex: l.Last(), LastEpoch: l.lastEpoch()}
		return l.promise(req.Epoch, self)
	})
	return req, err
}

// observe raises the epoch this copy of the log promised to one a voter
// has promised (to nobody in particular: the vote record is left as it
// is), so that its next stand asks for a newer epoch than the voters have
// seen. Raising a promise is always safe: it only refuses more.
func (s *logStore) observe(name string, epoch uint64) error {
	return s.update(name, func(l *logTx) error {
		if epoch <= l.meta.promised || epoch >= replication.Limit-1 {
			return nil
		}
		l.meta.promised = epoch
		return l.saveMeta()
	})
}

// grant decides a candidate's request on this node's copy of the log.
func (s *logStore) grant(req *claimRequest) (resp claimResponse, err error) {
	resp = claimResponse{Log: req.Log}
	err = s.update(req.Log, func(l *logTx) error {
		v := l.vote()
		lastEpoch, last := l.lastEpoch(), l.Last()
		switch {
		case !replication.InRange(req.Epoch, req.LastIndex, req.LastEpoch):
			resp.Reason = fmt.Sprintf("epoch %d or index %d out of range", req.Epoch, req.LastIndex)
		case req.Epoch < l.meta.promised:
			resp.Reason = fmt.Sprintf("epoch %d is older than the %d promised here", req.Epoch, l.meta.promised)
		case req.Epoch == l.meta.promised:
			resp.Granted = v.epoch == req.Epoch && v.candidate == req.Candidate
			if !resp.Granted {
				resp.Reason = fmt.Sprintf("epoch %d was promised to another", req.Epoch)
			}
		case req.LastEpoch < lastEpoch || req.LastEpoch == lastEpoch && req.LastIndex < last:
			resp.Behind = true
			resp.Reason = fmt.Sprintf("the candidate's copy (entry %d of epoch %d) is behind this one (entry %d of epoch %d)",
				req.LastIndex, req.LastEpoch, last, lastEpoch)
		default:
			resp.Granted = true
			if err := l.promise(req.Epoch, req.Candidate); err != nil {
				return err
			}
		}
		resp.Promised = l.meta.promised
		return nil
	})
	return resp, err
}

// onClaim answers a candidate (on the replica actor).
func (r *replicaEndpoint) onClaim(ctx actor.Context, m *claimRequest) {
	n := r.n
	resp := &claimResponse{Log: m.Log, Voter: n.cfg.Name}
	_, run, err := n.lastRecord(m.Log)
	if err != nil || run == nil || !slices.Contains(run.Copies, m.Candidate) || m.Candidate == n.cfg.Name {
		// Only a copy of the log may stand (the guard checked that the
		// connection's peer is the member it names).
		n.refusals.refuse(refusedClaim, "a claim from a node that holds no copy of the log", "log", m.Log, "candidate", m.Candidate, "epoch", m.Epoch)
		return
	}
	if run.Running && n.isMemberID(run.CoordinatorID) {
		resp.Reason = fmt.Sprintf("its coordinator %s is still a member here", run.Coordinator)
	} else if logs, err := n.logs(); err != nil {
		resp.Reason = err.Error()
	} else if g, err := logs.grant(m); err != nil {
		resp.Reason = err.Error()
	} else {
		g.Voter = n.cfg.Name
		resp = &g
	}
	n.log.Info("failover: vote", "log", m.Log, "candidate", m.Candidate, "epoch", m.Epoch, "granted", resp.Granted, "reason", resp.Reason)
	ctx.Respond(resp)
}

// isMemberID says whether a member with that id is in the cluster now.
func (n *Node) isMemberID(id string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.ContainsFunc(n.members, func(m Member) bool { return m.ID == id })
}

// JobEventKind says what happened to a job coordinated by a node.
type JobEventKind int

const (
	// JobStarted: Run started the job here.
	JobStarted JobEventKind = iota
	// JobTakenOver: this node took the job over from a coordinator that
	// left the cluster.
	JobTakenOver
	// JobEnded: the job coordinated here ended (Err says how).
	JobEnded
	// JobChanged: a live change of a distributed job (Operator, Change,
	// Version) is in force on this node's instances of it, the
	// coordinator's or a host's; Time is when it was applied here.
	JobChanged
)

func (k JobEventKind) String() string {
	switch k {
	case JobStarted:
		return "started"
	case JobTakenOver:
		return "taken-over"
	case JobEnded:
		return "ended"
	case JobChanged:
		return "changed"
	}
	return fmt.Sprintf("JobEventKind(%d)", int(k))
}

// JobEvent reports a change of the jobs a node coordinates, or a live
// change applied to the instances it runs (JobChanged).
type JobEvent struct {
	Kind JobEventKind
	Job  string
	// Run is the job's handle on this node: wait on it, read its Stats.
	Run *actors.Run
	// From is the coordinator the job was taken over from (JobTakenOver).
	From string
	// Checkpoint is the checkpoint a taken-over job resumes from (0: the
	// beginning).
	Checkpoint uint64
	// Err is the job's end (JobEnded): nil when it ran to its end.
	Err error
	// Time is when it happened; for JobTakenOver, when this node won the
	// job's log, before the job started here.
	Time time.Time
	// Operator, Change and Version name a live change (JobChanged): the
	// operator whose input changed, the coordinator's number of the
	// change and the desired-state version it applies (0: none).
	Operator        string
	Change, Version uint64
}

// CoordinatedJob is a job this node coordinates now.
type CoordinatedJob struct {
	Job string
	Run *actors.Run
	// From is the coordinator it was taken over from ("" when Run started
	// it here).
	From string
}

// jobRegistry holds the jobs a node coordinates and the subscribers to
// their events.
type jobRegistry struct {
	mu      sync.Mutex
	jobs    map[string]CoordinatedJob
	subs    map[int]func(JobEvent)
	nextSub int
	// standing: jobs this node is standing for
	standing map[string]bool
	// abandoned: jobs stopped because another node takes them over, why
	abandoned map[string]error
	// halts end the deployments in progress of the current run of each job
	halts map[string]context.CancelFunc
}

// SubscribeJobs calls fn for every JobEvent of this node from now on, in
// order, on a goroutine of the node's (fn must not block for long).
func (n *Node) SubscribeJobs(fn func(JobEvent)) (cancel func()) {
	r := &n.jobReg
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.subs == nil {
		r.subs = map[int]func(JobEvent){}
	}
	id := r.nextSub
	r.nextSub++
	r.subs[id] = fn
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.subs, id)
	}
}

// Jobs lists the jobs this node coordinates now, started by Run or taken
// over, by name.
func (n *Node) Jobs() []CoordinatedJob {
	r := &n.jobReg
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]CoordinatedJob, 0, len(r.jobs))
	for _, j := range r.jobs {
		out = append(out, j)
	}
	slices.SortFunc(out, func(a, b CoordinatedJob) int { return strings.Compare(a.Job, b.Job) })
	return out
}

// Job returns the run of a job this node coordinates now.
func (n *Node) Job(name string) (*actors.Run, bool) {
	r := &n.jobReg
	r.mu.Lock()
	defer r.mu.Unlock()
	j, ok := r.jobs[name]
	return j.Run, ok
}

func (n *Node) emitJob(ev JobEvent) {
	r := &n.jobReg
	r.mu.Lock()
	switch ev.Kind {
	case JobStarted, JobTakenOver:
		if r.jobs == nil {
			r.jobs = map[string]CoordinatedJob{}
		}
		r.jobs[ev.Job] = CoordinatedJob{Job: ev.Job, Run: ev.Run, From: ev.From}
	case JobEnded:
		if j, ok := r.jobs[ev.Job]; ok && j.Run == ev.Run {
			delete(r.jobs, ev.Job)
			if halt := r.halts[ev.Job]; halt != nil {
				halt()
				delete(r.halts, ev.Job)
			}
		}
	}
	subs := make([]func(JobEvent), 0, len(r.subs))
	for id := 0; id < r.nextSub; id++ {
		if fn, ok := r.subs[id]; ok {
			subs = append(subs, fn)
		}
	}
	r.mu.Unlock()
	for _, fn := range subs {
		fn(ev)
	}
}

// watchRun marks the run's end in its log when it ends by itself (not
// when this node stops: then the job is for the others to take over), and
// reports JobEnded.
func (n *Node) watchRun(store *ReplicatedCheckpointStore, name string, run *actors.Run) {
	defer n.lifeWG.Done()
	select {
	case <-run.Done():
	case <-n.life.Done():
		return
	}
	err := run.Wait(context.Background())
	if n.life.Err() != nil {
		return
	}
	n.jobReg.mu.Lock()
	why := n.jobReg.abandoned[name]
	delete(n.jobReg.abandoned, name)
	n.jobReg.mu.Unlock()
	if why != nil { // the log is another node's now: nothing to record
		n.leadEnded(name)
		n.emitJob(JobEvent{Kind: JobEnded, Job: name, Run: run, Err: why, Time: n.cfg.Clock.Now()})
		return
	}
	ctx, cancel := context.WithTimeout(n.life, n.cfg.RequestTimeout)
	defer cancel()
	if e := store.endRun(ctx, name); e != nil && n.life.Err() == nil {
		n.log.Warn("failover: could not mark the job's run as over", "job", name, "err", e)
	}
	n.leadEnded(name) // after the log says the run is over: a copy elected next resigns
	n.emitJob(JobEvent{Kind: JobEnded, Job: name, Run: run, Err: err, Time: n.cfg.Clock.Now()})
}

// orphans lists the running jobs of the default namespace whose
// coordinator was lost, among the logs this node holds.
func (n *Node) orphans(lost Member) []string {
	logs, err := n.logs()
	if err != nil {
		return nil
	}
	held, err := logs.held()
	if err != nil {
		n.log.Warn("failover: list the logs held here", "err", err)
		return nil
	}
	var out []string
	for _, h := range held {
		job, ok := strings.CutPrefix(h.Log, "checkpoints/")
		if !ok {
			continue
		}
		_, run, err := n.lastRecord(h.Log)
		if err != nil || run == nil || !run.Running || run.CoordinatorID != lost.ID {
			continue
		}
		if strings.Contains(job, "/") || run.Namespace != "" {
			n.log.Warn("failover: a job of a namespaced store is not taken over", "log", h.Log, "coordinator", lost.Name)
			continue
		}
		out = append(out, job)
	}
	return out
}

// considerTakeovers starts standing for the jobs lost coordinated.
func (n *Node) considerTakeovers(lost Member) {
	if len(n.cfg.Jobs) == 0 {
		return
	}
	for _, job := range n.orphans(lost) {
		if _, ok := n.cfg.Jobs[job]; !ok {
			n.log.Warn("failover: an orphaned job is not in Config.Jobs here", "job", job, "coordinator", lost.Name)
			continue
		}
		r := &n.jobReg
		r.mu.Lock()
		if r.standing == nil {
			r.standing = map[string]bool{}
		}
		if r.standing[job] || n.life.Err() != nil {
			r.mu.Unlock()
			continue
		}
		r.standing[job] = true
		n.lifeWG.Add(1)
		r.mu.Unlock()
		if n.cfg.Leadership != nil {
			go func() {
				defer n.lifeWG.Done()
				defer func() {
					n.jobReg.mu.Lock()
					delete(n.jobReg.standing, job)
					n.jobReg.mu.Unlock()
				}()
				n.standLeadership(job)
			}()
			continue
		}
		go n.stand(job, lost)
	}
}

// stand tries to take job over from lost (see the top of this file).
func (n *Node) stand(job string, lost Member) {
	defer n.lifeWG.Done()
	defer func() {
		n.jobReg.mu.Lock()
		delete(n.jobReg.standing, job)
		n.jobReg.mu.Unlock()
	}()
	log := "checkpoints/" + job
	ft := n.cfg.FailureTimeout
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-n.life.Done():
			return false
		}
	}
	// Rank k waits k FailureTimeouts before its first attempt; attempts
	// that lose are retried after a random quarter to three quarters of a
	// FailureTimeout (candidates that split the votes do not meet again),
	// or one to two FailureTimeouts when a voter's copy of the log was
	// ahead of this one (that voter can win, and this node's stands would
	// only outbid it), for as long as the job is orphaned, up to 30
	// FailureTimeouts.
	deadline := time.Now().Add(30 * ft)
	behind := false
	for attempt := 0; time.Now().Before(deadline); attempt++ {
		_, run, err := n.lastRecord(log)
		if err != nil || run == nil || !run.Running || run.CoordinatorID != lost.ID {
			return // taken over by another, or over
		}
		var live []string
		for _, c := range run.Copies {
			if m, ok := n.Member(c); ok && m.ID != lost.ID && (c == n.cfg.Name || !n.suspect(m.Address)) {
				live = append(live, c)
			}
		}
		rank := slices.Index(rendezvous(job, live), n.cfg.Name)
		if rank < 0 {
			return // not a copy, or not a member
		}
		// The old coordinator stops its job once its lease ran out (see
		// lease.go): stand only after it surely has, and then in rank
		// order.
		for {
			since := time.Since(n.lastHeard(lost.ID))
			if since >= n.electionWait() {
				break
			}
			if !wait(n.electionWait() - since) {
				return
			}
		}
		delay := time.Duration(rank) * ft
		switch {
		case attempt > 0 && behind:
			delay = ft + rand.N(ft)
		case attempt > 0:
			delay = ft/4 + rand.N(ft/2)
		}
		if !wait(delay) {
			return
		}
		if _, run, err = n.lastRecord(log); err != nil || run == nil || !run.Running || run.CoordinatorID != lost.ID {
			return
		}
		var epoch uint64
		var ok bool
		epoch, ok, behind = n.claim(run, log)
		if ok && n.takeOver(job, run, lost, epoch) {
			return
		}
	}
	n.log.Error("failover: gave up standing for the job", "job", job, "coordinator", lost.Name)
}

// claim stands for the log's next epoch and asks the other copies; it
// returns the epoch and true with the votes of a majority of them, and
// whether a voter refused because its copy was ahead of this one's.
//
// A lost election raises this copy's promise to the newest epoch a voter
// said it promised (Raft's rule that a candidate adopts a newer term it
// hears of): without it, a copy that is up to date but had promised less
// than one that is behind asked for epochs the other had already promised
// itself, at every attempt, while the one behind could never win (a CI
// run of TestPartitionRandomCuts saw no takeover within 30 s so).
func (n *Node) claim(run *runRecord, log string) (epoch uint64, won, behind bool) {
	logs, err := n.logs()
	if err != nil {
		return 0, false, false
	}
	req, err := logs.stand(log, n.cfg.Name)
	if err != nil {
		n.log.Warn("failover: stand", "log", log, "err", err)
		return 0, false, false
	}
	need := len(run.Copies)/2 + 1
	type answer struct {
		from string
		resp *claimResponse
		err  error
	}
	answers := make(chan answer, len(run.Copies))
	asked := 0
	for _, c := range run.Copies {
		m, ok := n.Member(c)
		if c == n.cfg.Name || !ok {
			continue
		}
		asked++
		go func() {
			ctx, cancel := context.WithTimeout(n.life, n.cfg.FailureTimeout)
			defer cancel()
			r, err := n.Request(ctx, actor.NewPID(m.Address, replicaActorName), &req)
			resp, _ := r.(*claimResponse)
			if err == nil && resp == nil {
				err = fmt.Errorf("unexpected reply %T", r)
			}
			answers <- answer{from: c, resp: resp, err: err}
		}()
	}
	votes := 1
	var newer uint64 // the newest epoch a voter had promised
	for range asked {
		a := <-answers
		if a.err == nil && a.resp.Voter == a.from && a.resp.Log == log && !a.resp.Granted {
			newer = max(newer, a.resp.Promised)
			behind = behind || a.resp.Behind
		}
		switch {
		case a.err != nil:
			n.log.Info("failover: no vote", "log", log, "from", a.from, "err", a.err)
		case a.resp.Voter != a.from || a.resp.Log != log:
			n.refusals.refuse(refusedClaim, "a vote from another node than the copy asked", "log", log, "asked", a.from, "voter", a.resp.Voter)
		case a.resp.Granted:
			votes++
		default:
			n.log.Info("failover: vote refused", "log", log, "from", a.from, "reason", a.resp.Reason)
		}
	}
	won = votes >= need
	n.log.Info("failover: election", "log", log, "epoch", req.Epoch, "votes", votes, "of", len(run.Copies), "needed", need, "newer", newer, "behind", behind)
	if !won && newer > req.Epoch {
		if err := logs.observe(log, newer); err != nil {
			n.log.Warn("failover: raise the promised epoch", "log", log, "epoch", newer, "err", err)
		}
	}
	return req.Epoch, won, behind
}

// takeOver runs job here, leading its log in the epoch won.
func (n *Node) takeOver(job string, run *runRecord, lost Member, epoch uint64) bool {
	store, err := n.jobCheckpoints()
	if err == nil {
		err = store.claim(job, epoch)
	}
	var r *actors.Run
	if err == nil {
		o := run.Options
		r, err = n.runJobAt(n.life, job, n.cfg.Clock.Now(), RunOptions{Checkpoints: store,
			Backoff: supervision.Backoff{Initial: o.Initial, Max: o.Max, Multiplier: o.Multiplier, Jitter: o.Jitter}, MaxRestarts: o.MaxRestarts,
			Within: o.Within, OffCoordinator: o.OffCoordinator}, lost.Name)
	}
	if err != nil {
		n.log.Warn("failover: could not take the job over", "job", job, "from", lost.Name, "epoch", epoch, "err", err)
		return false
	}
	cp := operators.CheckpointStatsOf(r).RestoredFrom
	n.log.Info("failover: took the job over", "job", job, "from", lost.Name, "epoch", epoch, "checkpoint", cp)
	return true
}

// abandon stops a job this node coordinates because another node takes
// it over, or may: its log was fenced by a newer coordinator, or the
// cluster declared this node lost. Its JobEnded event carries why.
func (n *Node) abandon(job string, why error) {
	r := &n.jobReg
	r.mu.Lock()
	j, ok := r.jobs[job]
	if ok {
		if r.abandoned == nil {
			r.abandoned = map[string]error{}
		}
		if r.abandoned[job] != nil {
			ok = false // already
		} else {
			r.abandoned[job] = why
		}
	}
	halt := r.halts[job]
	r.mu.Unlock()
	if !ok {
		return
	}
	n.log.Error("stopping a job that another node takes over", "job", job, "reason", why)
	n.cancelCommit(job) // the job actor may wait in a checkpoint's commit
	engine.Abort(j.Run, why)
	if halt != nil {
		halt()
	}
}

// abandonAll stops every job this node coordinates: the cluster declared
// it lost, and the others take its jobs over.
func (n *Node) abandonAll() {
	n.mu.Lock()
	lease := n.fencedBy
	n.mu.Unlock()
	for _, j := range n.Jobs() {
		if lease != nil {
			n.abandon(j.Job, fmt.Errorf("cluster: job %q: %w: node %s's lease ran out (%v); the others take its jobs over", j.Job, ErrFenced, n.cfg.Name, lease))
			continue
		}
		n.abandon(j.Job, fmt.Errorf("cluster: job %q: %w: the cluster declared node %s lost; the others take its jobs over", j.Job, ErrFenced, n.cfg.Name))
	}
}
