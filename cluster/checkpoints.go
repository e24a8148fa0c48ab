package cluster

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/cluster/replication"
	"github.com/sluicehq/sluice/internal/msgpacksafe"
	"github.com/sluicehq/sluice/persistence"
	"github.com/sluicehq/sluice/supervision"
)

// ReplicationConfig configures a ReplicatedCheckpointStore.
type ReplicationConfig struct {
	// Replicas is the number of other nodes that keep a copy of each job's
	// checkpoints (R). 0: none, the store is local only.
	Replicas int
	// Acks is the number of replicas that must hold a checkpoint before
	// Complete returns: 0 < Acks <= Replicas; default Replicas (all). With
	// every replica acknowledging, any survivor may take over a job; with
	// fewer, take over on the survivor whose copy is newest (see HeldLog).
	Acks int
	// Peers names the replica nodes. Default: Replicas members other than
	// this node, chosen per job by rendezvous hashing when the job's first
	// checkpoint is completed here.
	Peers []string
	// AckTimeout is how long a replica may take to acknowledge before it
	// counts as lagging. Default 2 s.
	AckTimeout time.Duration
	// Backoff spaces the attempts to reach a replica that does not answer.
	// Default: supervision's (100 ms doubling to 30 s, equal jitter).
	Backoff supervision.Backoff
	// MaxAttempts is the retry budget: after that many failed attempts in
	// a row a replica is failed until its node rejoins. Default 5.
	MaxAttempts int
	// Namespace separates the checkpoints of independent stores on one
	// cluster (the nodes of one application use the same). Default "".
	Namespace string
	// Clock runs the acknowledgement and retry timers. Default: the
	// node's Config.Clock.
	Clock clock.Clock
	// OnTransition, if set, is called (on the leader's goroutine; it must
	// not block) whenever a replica changes phase.
	OnTransition func(ReplicaTransition)
}

// ReplicatedCheckpointStore is a persistence.CheckpointStore that keeps
// each job's checkpoints in a log in the node's store (bbolt) and
// replicates every completed checkpoint to other nodes before Complete
// returns, so that a surviving node can restore the job's last checkpoint.
//
// The node whose Complete is called for a job becomes the leader of the
// job's log, with an epoch greater than any the log has seen on this node.
// A replica refuses appends from an older epoch, so when a job moves to
// another node (which leads the copy it held as a replica), the old node
// is fenced: its Complete fails with ErrFenced, and keeps failing for that
// job until the store is created again.
//
// Every node of the cluster replicates the logs other nodes lead, whether
// it has a ReplicatedCheckpointStore or not; Latest on any node returns
// the newest checkpoint of the job it holds, as leader or replica.
type ReplicatedCheckpointStore struct {
	n   *Node
	cfg ReplicationConfig

	// upTo: replicate to as many as Replicas members, fewer when the
	// cluster has fewer (the default store of Run)
	upTo bool

	mu      sync.Mutex
	stopped bool
	leaders map[string]*leaderRef // by job
	runs    map[string]*runRecord // the jobs run by Run with this store, by job
	claimed map[string]uint64     // jobs taken over: the epoch won, for the next leader
}

type leaderRef struct {
	pid    *actor.PID
	status *leaderStatus
}

// NewReplicatedCheckpointStore returns the store of node n.
func NewReplicatedCheckpointStore(n *Node, cfg ReplicationConfig) (*ReplicatedCheckpointStore, error) {
	switch {
	case cfg.Replicas < 0:
		return nil, fmt.Errorf("%w: %d replicas", ErrInvalidConfig, cfg.Replicas)
	case cfg.Acks < 0 || cfg.Acks > cfg.Replicas:
		return nil, fmt.Errorf("%w: %d acks with %d replicas", ErrInvalidConfig, cfg.Acks, cfg.Replicas)
	case len(cfg.Peers) > 0 && len(cfg.Peers) != cfg.Replicas:
		return nil, fmt.Errorf("%w: %d peers named for %d replicas", ErrInvalidConfig, len(cfg.Peers), cfg.Replicas)
	case strings.Contains(cfg.Namespace, "/"):
		return nil, fmt.Errorf("%w: namespace %q contains '/'", ErrInvalidConfig, cfg.Namespace)
	case slices.Contains(cfg.Peers, n.Name()):
		return nil, fmt.Errorf("%w: node %q cannot replicate to itself", ErrInvalidConfig, n.Name())
	}
	if cfg.AckTimeout == 0 {
		cfg.AckTimeout = 2 * time.Second
	}
	if err := cfg.replication(cfg.Peers).Validate(); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if _, err := n.logs(); err != nil {
		return nil, err
	}
	s := &ReplicatedCheckpointStore{n: n, cfg: cfg, leaders: map[string]*leaderRef{}, runs: map[string]*runRecord{}, claimed: map[string]uint64{}}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return nil, ErrStopped
	}
	n.stores = append(n.stores, s)
	return s, nil
}

func (c ReplicationConfig) replication(replicas []string) replication.Config {
	return replication.Config{Replicas: replicas, Acks: min(c.Acks, len(replicas)), AckTimeout: c.AckTimeout,
		Backoff: c.Backoff, MaxAttempts: c.MaxAttempts}
}

// logName is the name of a job's checkpoint log.
func (s *ReplicatedCheckpointStore) logName(job string) string {
	if s.cfg.Namespace != "" {
		return "checkpoints/" + s.cfg.Namespace + "/" + job
	}
	return "checkpoints/" + job
}

// Entry kinds of a checkpoint log. Kinds 1 and 2 are read, not written.
const (
	entryCheckpoint byte = 1 // a checkpointRecord
	entryClear      byte = 2 // no checkpoint
	entryRecord     byte = 3 // a logRecord
)

// checkpointRecord is the msgpack form of a persistence.Checkpoint.
type checkpointRecord struct {
	ID      uint64
	Time    time.Time
	States  map[string][]byte
	Offsets map[string]int64
}

// logRecord is an entry of a job's checkpoint log. Every entry stands on
// its own (a log is compacted to its last committed entry): the newest
// checkpoint, and for a job started with Run, who coordinates it, so that
// a node holding a copy can take the job over when its coordinator is lost.
type logRecord struct {
	Checkpoint *checkpointRecord `msgpack:",omitempty"` // nil: none
	Run        *runRecord        `msgpack:",omitempty"` // nil: not run by Run
}

// runRecord describes the run of a job by a coordinator.
type runRecord struct {
	Coordinator   string // the coordinating node's name
	CoordinatorID string // and member id (its incarnation)
	// Copies names the nodes that hold the job's log: the coordinator and
	// its replicas. A node takes the job over with the votes of a majority
	// of them.
	Copies    []string
	Namespace string // of the coordinator's store
	Running   bool   // false once the job ended, failed or was drained
	Options   runOptionsRecord
}

// runOptionsRecord is the part of RunOptions a node taking over follows.
type runOptionsRecord struct {
	Initial, Max   time.Duration // of the restart backoff
	Multiplier     float64
	Jitter         supervision.Jitter
	MaxRestarts    int
	Within         time.Duration
	OffCoordinator bool
}

func encodeRecord(cp *persistence.Checkpoint, run *runRecord) ([]byte, error) {
	r := logRecord{Run: run}
	if cp != nil {
		r.Checkpoint = &checkpointRecord{ID: cp.ID, Time: cp.Time, States: cp.States, Offsets: cp.Offsets}
	}
	b, err := msgpack.Marshal(r)
	if err != nil {
		return nil, err
	}
	return append([]byte{entryRecord}, b...), nil
}

// entryLimits bound the decode of a replicated-log entry (the default
// budget, 6 × the input + 1 MiB: a checkpoint's maps have an entry per
// operator instance and source partition, their values are bytes).
var entryLimits = msgpacksafe.Limits{Source: "replicated log entry"}

// decodeEntry returns the checkpoint of an entry (nil when it has none)
// and its run (nil when the job was not run by Run).
func decodeEntry(data []byte) (*persistence.Checkpoint, *runRecord, error) {
	if len(data) == 0 {
		return nil, nil, errors.New("empty entry")
	}
	var cr *checkpointRecord
	var run *runRecord
	switch data[0] {
	case entryClear:
		return nil, nil, nil
	case entryCheckpoint:
		cr = new(checkpointRecord)
		if err := msgpacksafe.Decode(data[1:], cr, entryLimits); err != nil {
			return nil, nil, err
		}
	case entryRecord:
		var r logRecord
		if err := msgpacksafe.Decode(data[1:], &r, entryLimits); err != nil {
			return nil, nil, err
		}
		cr, run = r.Checkpoint, r.Run
	default:
		return nil, nil, fmt.Errorf("unknown entry kind %d", data[0])
	}
	if cr == nil {
		return nil, run, nil
	}
	cp := &persistence.Checkpoint{ID: cr.ID, Time: cr.Time, States: cr.States, Offsets: cr.Offsets}
	if cp.States == nil {
		cp.States = map[string][]byte{}
	}
	if cp.Offsets == nil {
		cp.Offsets = map[string]int64{}
	}
	return cp, run, nil
}

// Complete implements persistence.CheckpointStore: it appends cp to the
// job's log here and returns once Acks replicas hold it too. It fails with
// ErrNotEnoughReplicas when too few replicas are live, ErrFenced when a
// newer leader took the job over, persistence.ErrStaleCheckpoint for a
// checkpoint older than the newest, or ctx's error. A checkpoint whose
// Complete failed may still be the newest here and on some replicas.
func (s *ReplicatedCheckpointStore) Complete(ctx context.Context, job string, cp persistence.Checkpoint) error {
	err := s.write(ctx, job, func(last []byte, run *runRecord) ([]byte, error) {
		if last != nil {
			prev, _, err := decodeEntry(last)
			if err != nil {
				return nil, fmt.Errorf("cluster: job %q: newest checkpoint: %w", job, err)
			}
			if prev != nil && cp.ID < prev.ID {
				return nil, fmt.Errorf("cluster: job %q checkpoint %d: older than checkpoint %d: %w", job, cp.ID, prev.ID, persistence.ErrStaleCheckpoint)
			}
		}
		data, err := encodeRecord(&cp, run)
		if err != nil {
			return nil, fmt.Errorf("encode: %w", err)
		}
		return data, nil
	})
	if err != nil {
		if errors.Is(err, persistence.ErrStaleCheckpoint) {
			return err
		}
		err = fmt.Errorf("cluster: job %q checkpoint %d: %w", job, cp.ID, err)
		if errors.Is(err, ErrFenced) { // a newer coordinator runs the job
			s.n.abandon(job, err)
		}
		return err
	}
	s.mu.Lock()
	runs := s.runs[job] != nil
	s.mu.Unlock()
	if runs { // with a Leadership, complete once committed through the job's term
		if err := s.n.commitCheckpoint(ctx, job, cp.ID); err != nil {
			if errors.Is(err, ErrFenced) {
				s.n.abandon(job, err)
			}
			return err
		}
	}
	return nil
}

// Clear implements persistence.CheckpointStore: a clear travels through
// the log like a checkpoint, so that replicas forget the job too. The
// runtime clears a job that ran to its end: a run of it is over.
func (s *ReplicatedCheckpointStore) Clear(ctx context.Context, job string) error {
	s.mu.Lock()
	if r := s.runs[job]; r != nil {
		r.Running = false
	}
	s.mu.Unlock()
	err := s.write(ctx, job, func(_ []byte, run *runRecord) ([]byte, error) { return encodeRecord(nil, run) })
	if err != nil {
		return fmt.Errorf("cluster: job %q: clear checkpoints: %w", job, err)
	}
	return nil
}

// Latest implements persistence.CheckpointStore: the newest checkpoint of
// job this node holds, as its leader or as a replica.
func (s *ReplicatedCheckpointStore) Latest(ctx context.Context, job string) (persistence.Checkpoint, bool, error) {
	if job == "" {
		return persistence.Checkpoint{}, false, fmt.Errorf("cluster: checkpoint store: empty job name")
	}
	cp, _, err := s.n.lastRecord(s.logName(job))
	if err != nil {
		return persistence.Checkpoint{}, false, fmt.Errorf("cluster: job %q: %w", job, err)
	}
	if cp == nil {
		return persistence.Checkpoint{}, false, nil
	}
	return *cp, true, nil
}

// lastRecord decodes the last entry of a log this node holds: its
// checkpoint and run, nil when it has none.
func (n *Node) lastRecord(log string) (*persistence.Checkpoint, *runRecord, error) {
	logs, err := n.logs()
	if err != nil {
		return nil, nil, err
	}
	e, ok, err := logs.last(log)
	if err != nil || !ok {
		return nil, nil, err
	}
	cp, run, err := decodeEntry(e.Data)
	if err != nil {
		return nil, nil, fmt.Errorf("log %q entry %d: %w: %v", log, e.Index, persistence.ErrDecode, err)
	}
	return cp, run, nil
}

// write appends the entry that build returns to the job's log, through
// its leader; build sees the data of the log's last entry (nil when none)
// and the job's run as this store coordinates it (nil when it does not).
func (s *ReplicatedCheckpointStore) write(ctx context.Context, job string, build func(last []byte, run *runRecord) ([]byte, error)) error {
	if job == "" {
		return errors.New("cluster: checkpoint store: empty job name")
	}
	ref, err := s.leaderFor(job)
	if err != nil {
		return err
	}
	s.mu.Lock()
	var run *runRecord
	if r := s.runs[job]; r != nil {
		c := *r
		c.Namespace = s.cfg.Namespace
		run = &c
	}
	s.mu.Unlock()
	done := make(chan error, 1)
	s.n.root.Send(ref.pid, &writeRequest{build: func(last []byte, replicas []string) ([]byte, error) {
		if run != nil { // the copies as the leader replicates now
			run.Copies = append([]string{s.n.Name()}, replicas...)
		}
		return build(last, run)
	}, done: done})
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// leaderFor returns the job's leader actor, starting it (with its
// replicas) on the job's first write here.
func (s *ReplicatedCheckpointStore) leaderFor(job string) (*leaderRef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil, ErrStopped
	}
	if ref, ok := s.leaders[job]; ok {
		return ref, nil
	}
	replicas := s.cfg.Peers
	if len(replicas) == 0 && s.cfg.Replicas > 0 {
		var names []string
		for _, m := range s.n.Members() {
			if m.Name != s.n.Name() && !slices.Contains(names, m.Name) {
				names = append(names, m.Name)
			}
		}
		want := s.cfg.Replicas
		if s.upTo {
			want = min(want, len(names))
		}
		if len(names) < want {
			return nil, fmt.Errorf("%w: job %q needs %d replicas, the cluster has %d other members", ErrNotEnoughReplicas, job, s.cfg.Replicas, len(names))
		}
		replicas = rendezvous(job, names)[:want]
	}
	clk := s.cfg.Clock
	if clk == nil {
		clk = s.n.cfg.Clock
	}
	l := &leader{n: s.n, clock: clk, log: s.logName(job), cfg: s.cfg.replication(replicas), timers: map[string]timer{},
		status: &leaderStatus{}, onChange: s.cfg.OnTransition, claimed: s.claimed[job]}
	if s.upTo && len(s.cfg.Peers) == 0 {
		l.want = s.cfg.Replicas // members that join later become replicas, up to that many
	}
	delete(s.claimed, job)
	l.status.st = LogStatus{Log: l.log, Role: "starting"}
	pid, err := s.n.root.SpawnNamed(s.n.Props(actor.PropsFromProducer(func() actor.Actor { return l })), "sluice-leader/"+l.log)
	if err != nil {
		return nil, fmt.Errorf("cluster: job %q: start its leader: %w", job, err)
	}
	ref := &leaderRef{pid: pid, status: l.status}
	s.leaders[job] = ref
	return ref, nil
}

// claim prepares the store to lead job's log in epoch, which this node won
// (see Node.claim): a leader it had for the job (fenced since) is stopped,
// and the next one takes office in that epoch.
func (s *ReplicatedCheckpointStore) claim(job string, epoch uint64) error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return ErrStopped
	}
	ref := s.leaders[job]
	delete(s.leaders, job)
	s.claimed[job] = epoch
	s.mu.Unlock()
	if ref != nil {
		_ = s.n.as.Root.StopFuture(ref.pid).Wait()
	}
	return nil
}

// beginRun records that this node coordinates a run of job, in the job's
// log (replicated like a checkpoint; the newest checkpoint stays), so that
// the nodes holding copies can take it over if this node is lost.
func (s *ReplicatedCheckpointStore) beginRun(ctx context.Context, job string, run runRecord) error {
	run.Running = true
	s.mu.Lock()
	s.runs[job] = &run
	s.mu.Unlock()
	return s.rewrite(ctx, job)
}

// endRun records that the run of job is over (ended, failed or drained):
// no node takes it over. The newest checkpoint stays.
func (s *ReplicatedCheckpointStore) endRun(ctx context.Context, job string) error {
	s.mu.Lock()
	r := s.runs[job]
	delete(s.runs, job)
	s.mu.Unlock()
	if r == nil {
		return nil
	}
	r.Running = false
	return s.write(ctx, job, func(last []byte, _ *runRecord) ([]byte, error) { return carry(last, r) })
}

// rewrite appends the newest checkpoint again with the job's run.
func (s *ReplicatedCheckpointStore) rewrite(ctx context.Context, job string) error {
	return s.write(ctx, job, carry)
}

// carry returns an entry with the checkpoint of last and run.
func carry(last []byte, run *runRecord) ([]byte, error) {
	var cp *persistence.Checkpoint
	if last != nil {
		var err error
		if cp, _, err = decodeEntry(last); err != nil {
			return nil, fmt.Errorf("newest entry: %w", err)
		}
	}
	return encodeRecord(cp, run)
}

// rendezvous orders names by their hash with key, highest first: each key
// gets its own order, and removing a name moves only its keys.
func rendezvous(key string, names []string) []string {
	score := func(n string) uint64 {
		h := fnv.New64a()
		h.Write([]byte(key))
		h.Write([]byte{0})
		h.Write([]byte(n))
		return h.Sum64()
	}
	out := slices.Clone(names)
	sort.Slice(out, func(i, j int) bool { return score(out[i]) > score(out[j]) })
	return out
}

// Status returns the state of every job's log this store leads, by job.
func (s *ReplicatedCheckpointStore) Status() []LogStatus {
	s.mu.Lock()
	refs := make([]*leaderRef, 0, len(s.leaders))
	for _, r := range s.leaders {
		refs = append(refs, r)
	}
	s.mu.Unlock()
	out := make([]LogStatus, 0, len(refs))
	for _, r := range refs {
		out = append(out, r.status.get())
	}
	slices.SortFunc(out, func(a, b LogStatus) int { return strings.Compare(a.Log, b.Log) })
	return out
}

// memberEvent passes membership changes to the leaders.
func (s *ReplicatedCheckpointStore) memberEvent(ev MemberEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	for _, r := range s.leaders {
		s.n.root.Send(r.pid, leaderMember{ev: ev})
	}
}

// Close stops the store's leaders (their waiting writes fail with
// ErrStopped) and detaches it from the node; later calls fail with
// ErrStopped. The node goes on replicating other nodes' logs.
func (s *ReplicatedCheckpointStore) Close() error {
	s.stop()
	s.n.mu.Lock()
	s.n.stores = slices.DeleteFunc(s.n.stores, func(o *ReplicatedCheckpointStore) bool { return o == s })
	s.n.mu.Unlock()
	return nil
}

// stop stops the leaders; their waiting writes fail with ErrStopped.
func (s *ReplicatedCheckpointStore) stop() {
	s.mu.Lock()
	s.stopped = true
	refs := make([]*leaderRef, 0, len(s.leaders))
	for _, r := range s.leaders {
		refs = append(refs, r)
	}
	s.mu.Unlock()
	for _, r := range refs {
		_ = s.n.as.Root.StopFuture(r.pid).Wait() // bounded by protoactor's 10 s
	}
}

var _ persistence.CheckpointStore = (*ReplicatedCheckpointStore)(nil)
