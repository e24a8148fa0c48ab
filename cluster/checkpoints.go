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

	mu      sync.Mutex
	stopped bool
	leaders map[string]*leaderRef // by job
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
	s := &ReplicatedCheckpointStore{n: n, cfg: cfg, leaders: map[string]*leaderRef{}}
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

// Entry kinds of a checkpoint log.
const (
	entryCheckpoint byte = 1
	entryClear      byte = 2
)

// checkpointRecord is the msgpack form of a persistence.Checkpoint.
type checkpointRecord struct {
	ID      uint64
	Time    time.Time
	States  map[string][]byte
	Offsets map[string]int64
}

func encodeEntry(cp *persistence.Checkpoint) ([]byte, error) {
	if cp == nil {
		return []byte{entryClear}, nil
	}
	b, err := msgpack.Marshal(checkpointRecord{ID: cp.ID, Time: cp.Time, States: cp.States, Offsets: cp.Offsets})
	if err != nil {
		return nil, err
	}
	return append([]byte{entryCheckpoint}, b...), nil
}

// decodeEntry returns the checkpoint of an entry, nil for a clear.
func decodeEntry(data []byte) (*persistence.Checkpoint, error) {
	if len(data) == 0 {
		return nil, errors.New("empty entry")
	}
	switch data[0] {
	case entryClear:
		return nil, nil
	case entryCheckpoint:
		if err := msgpacksafe.Check(data[1:]); err != nil {
			return nil, err
		}
		var r checkpointRecord
		if err := msgpack.Unmarshal(data[1:], &r); err != nil {
			return nil, err
		}
		cp := &persistence.Checkpoint{ID: r.ID, Time: r.Time, States: r.States, Offsets: r.Offsets}
		if cp.States == nil {
			cp.States = map[string][]byte{}
		}
		if cp.Offsets == nil {
			cp.Offsets = map[string]int64{}
		}
		return cp, nil
	}
	return nil, fmt.Errorf("unknown entry kind %d", data[0])
}

// Complete implements persistence.CheckpointStore: it appends cp to the
// job's log here and returns once Acks replicas hold it too. It fails with
// ErrNotEnoughReplicas when too few replicas are live, ErrFenced when a
// newer leader took the job over, persistence.ErrStaleCheckpoint for a
// checkpoint older than the newest, or ctx's error. A checkpoint whose
// Complete failed may still be the newest here and on some replicas.
func (s *ReplicatedCheckpointStore) Complete(ctx context.Context, job string, cp persistence.Checkpoint) error {
	data, err := encodeEntry(&cp)
	if err != nil {
		return fmt.Errorf("cluster: job %q checkpoint %d: encode: %w", job, cp.ID, err)
	}
	check := func(last []byte) error {
		if last == nil {
			return nil
		}
		prev, err := decodeEntry(last)
		if err != nil {
			return fmt.Errorf("cluster: job %q: newest checkpoint: %w", job, err)
		}
		if prev != nil && cp.ID < prev.ID {
			return fmt.Errorf("cluster: job %q checkpoint %d: older than checkpoint %d: %w", job, cp.ID, prev.ID, persistence.ErrStaleCheckpoint)
		}
		return nil
	}
	if err := s.write(ctx, job, data, check); err != nil {
		if errors.Is(err, persistence.ErrStaleCheckpoint) {
			return err
		}
		return fmt.Errorf("cluster: job %q checkpoint %d: %w", job, cp.ID, err)
	}
	return nil
}

// Clear implements persistence.CheckpointStore: a clear travels through
// the log like a checkpoint, so that replicas forget the job too.
func (s *ReplicatedCheckpointStore) Clear(ctx context.Context, job string) error {
	data, _ := encodeEntry(nil)
	if err := s.write(ctx, job, data, nil); err != nil {
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
	logs, err := s.n.logs()
	if err != nil {
		return persistence.Checkpoint{}, false, err
	}
	e, ok, err := logs.last(s.logName(job))
	if err != nil || !ok {
		return persistence.Checkpoint{}, false, err
	}
	cp, err := decodeEntry(e.Data)
	if err != nil {
		return persistence.Checkpoint{}, false, fmt.Errorf("cluster: job %q entry %d: %w: %v", job, e.Index, persistence.ErrDecode, err)
	}
	if cp == nil {
		return persistence.Checkpoint{}, false, nil
	}
	return *cp, true, nil
}

func (s *ReplicatedCheckpointStore) write(ctx context.Context, job string, data []byte, check func([]byte) error) error {
	if job == "" {
		return errors.New("cluster: checkpoint store: empty job name")
	}
	ref, err := s.leaderFor(job)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	s.n.root.Send(ref.pid, &writeRequest{data: data, check: check, done: done})
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
		if len(names) < s.cfg.Replicas {
			return nil, fmt.Errorf("%w: job %q needs %d replicas, the cluster has %d other members", ErrNotEnoughReplicas, job, s.cfg.Replicas, len(names))
		}
		replicas = rendezvous(job, names)[:s.cfg.Replicas]
	}
	clk := s.cfg.Clock
	if clk == nil {
		clk = s.n.cfg.Clock
	}
	l := &leader{n: s.n, clock: clk, log: s.logName(job), cfg: s.cfg.replication(replicas), timers: map[string]timer{},
		status: &leaderStatus{}, onChange: s.cfg.OnTransition}
	l.status.st = LogStatus{Log: l.log, Role: "starting"}
	pid, err := s.n.root.SpawnNamed(s.n.Props(actor.PropsFromProducer(func() actor.Actor { return l })), "sluice-leader/"+l.log)
	if err != nil {
		return nil, fmt.Errorf("cluster: job %q: start its leader: %w", job, err)
	}
	ref := &leaderRef{pid: pid, status: l.status}
	s.leaders[job] = ref
	return ref, nil
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
