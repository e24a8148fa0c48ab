package engine

import (
	"errors"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	bolt "go.etcd.io/bbolt"
	"go.opentelemetry.io/otel/attribute"

	"github.com/sluicehq/sluice/internal/stage"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/persistence"
)

// Messages of the job actor and its instances within this process (the
// protocol between them is package wire). The ones that are not records are
// control messages: they never count against mailbox capacity.
type (
	startMsg struct{}
	tickMsg  struct{ waiter bool }
	// timerMsg runs a stage's timer function f in the instance's actor.
	timerMsg struct {
		id uint64
		f  func()
	}
	abortMsg   struct{ cause error }
	cpTick     struct{}          // the checkpoint interval elapsed
	restartMsg struct{ gen int } // the restart backoff elapsed
)

func (*tickMsg) IsControl() bool  { return true }
func (*timerMsg) IsControl() bool { return true }
func (*cpTick) IsControl() bool   { return true }
func (*startMsg) IsControl() bool { return true }

// replayMsg: go on replaying restored in-flight records (instance.drain).
type replayMsg struct{}

func (*replayMsg) IsControl() bool { return true }

// IsUrgent: the replay comes before the queue (whose records follow the
// replayed ones), and a spill cannot hold it.
func (*replayMsg) IsUrgent() bool { return true }

// mailboxFor completes an instance's mailbox configuration: overflow
// episodes and spill errors go to the log, and a spill gets the system's
// store, a queue of its own and a codec for the operator's input type.
func (x *execution) mailboxFor(in *instance) (mailbox.Config, error) {
	cfg := in.mbCfg
	head := x.plan.Chains[in.task][0]
	log := x.sys.Logger().With("job", x.topo.Name(), "operator", head.Name(), "instance", in.idx)
	cfg.OnOverflow = func(e mailbox.Episode) {
		policy := cfg.Overflow.String()
		if mb := in.mb.Load(); mb != nil { // the policy now: it may change while the job runs (control.go)
			policy = mb.Config().Overflow.String()
		}
		attrs := []any{"policy", policy, "depth", e.Depth, "spilled", e.Spilled, "overfilled", e.Overfilled}
		for _, r := range mailbox.Reasons() {
			if e.Dropped[r] > 0 {
				attrs = append(attrs, "dropped_"+r.String(), e.Dropped[r])
			}
		}
		if e.Started {
			log.Warn("mailbox overflow started", attrs...)
		} else {
			log.Info("mailbox overflow ended", attrs...)
		}
		if in.tr == nil || in.headSC == nil {
			return
		}
		// One span per episode, from its start to its end, linked to the
		// sampled records it dropped or spilled.
		if e.Started {
			in.episodeNow(e.At).Started(e.At)
			return
		}
		ep := in.episode.Swap(nil)
		if ep == nil {
			return
		}
		var dropped int64
		for _, d := range e.Dropped {
			dropped += d
		}
		ep.End(e.At, attribute.String("sluice.mailbox.policy", policy), attribute.Int64("sluice.dropped", dropped),
			attribute.Int64("sluice.spilled", e.Spilled), attribute.Int("sluice.queue.depth", e.Depth))
	}
	if in.tr != nil {
		cfg.OnDrop = func(msg any, why mailbox.Reason) { in.traceShedMsg(msg, "drop", why.String()) }
		cfg.OnSpill = func(msg any) { in.traceShedMsg(msg, "spill", "spill") }
	}
	cfg.OnError = func(err error) { log.Error("mailbox spill", "err", err) }
	if cfg.Overflow == mailbox.OverflowSpill {
		st, err := x.sys.SpillStore()
		if err != nil {
			return cfg, fmt.Errorf("operator %q: spill: %w", head.Name(), err)
		}
		opts := mailbox.SpillOptions{}
		if cfg.Spill != nil {
			opts = *cfg.Spill
		}
		opts.Store, opts.Codec, opts.Keep = st, head.NewCodec(), false
		opts.Queue = x.spillQueue(head.Name(), in.idx)
		cfg.Spill = &opts
	}
	return cfg, nil
}

// operatorError is the error of the failed instance child: the operator
// that failed, the instance and the cause.
func (x *execution) operatorError(child *actor.PID, reason any) error {
	op, instance, err := x.failureOf(child, reason)
	return x.topo.Kit().Operator(x.topo.Name(), op, instance, err)
}

// failureOf names the operator and instance of a failure and its cause.
func (x *execution) failureOf(child *actor.PID, reason any) (op string, instance int, err error) {
	op = child.Id
	if in := x.byID[child.Id]; in != nil {
		op, instance = x.plan.Tasks[in.task].Name(), in.idx
	}
	switch r := reason.(type) {
	case *stage.Failure:
		op, err = r.Op(), r.Unwrap()
	case error:
		err = r
	default:
		err = x.topo.Kit().Panic(r)
	}
	return op, instance, err
}

// failFast is the supervision of this foundation: the first failure of any
// instance stops the job with an error that names the operator. (Restarts,
// backoff and dead letters come with the supervision package.)
type failFast struct{ x *execution }

func (f *failFast) HandleFailure(_ *actor.ActorSystem, _ actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason, _ any) {
	if reason == nil {
		reason = errors.New("failed without a reason")
	}
	f.x.root.Send(f.x.jobPID, &wire.Failed{Gen: -1, Address: child.Address, ID: child.Id, Reason: reason})
}

// jobGuardian handles a failure of the job actor itself (a bug in sluice):
// it records the reason and stops the job.
type jobGuardian struct{ x *execution }

func (g *jobGuardian) HandleFailure(_ *actor.ActorSystem, _ actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason, _ any) {
	g.x.setErr(fmt.Errorf("operators: topology %q: job actor failed: %v", g.x.topo.Name(), reason))
	g.x.root.Stop(child)
}

// defaultCheckpointStore keeps checkpoints in the system's store.
func defaultCheckpointStore(db *bolt.DB) (persistence.CheckpointStore, error) {
	return persistence.NewBoltCheckpointStore(db)
}
