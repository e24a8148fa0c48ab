package cluster

import (
	"errors"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/cluster/replication"
)

// replicaEndpoint is the actor through which a node replicates the logs
// other nodes lead: it applies their appends to its copies (the rules of
// replication.Decide, in one bbolt transaction each) and answers.
type replicaEndpoint struct{ n *Node }

func newReplicaEndpoint(n *Node) *replicaEndpoint { return &replicaEndpoint{n: n} }

func (r *replicaEndpoint) Receive(ctx actor.Context) {
	if c, ok := ctx.Message().(*claimRequest); ok {
		r.onClaim(ctx, c)
		return
	}
	m, ok := ctx.Message().(*appendRequest)
	if !ok {
		return
	}
	resp := &appendResponse{Log: m.Log, Replica: r.n.cfg.Name, Epoch: m.Epoch, Seq: m.Seq}
	st, err := r.n.logs()
	var reply replication.Reply
	if err == nil {
		a := replication.Append{Epoch: m.Epoch, Seq: m.Seq, Prev: m.Prev, PrevEpoch: m.PrevEpoch, Commit: m.Commit, Reset: m.Reset}
		for _, e := range m.Entries {
			a.Entries = append(a.Entries, replication.Entry{Index: e.Index, Epoch: e.Epoch, Data: e.Data})
		}
		reply, err = st.receive(m.Log, a)
	}
	if errors.Is(err, replication.ErrOutOfRange) {
		r.n.refusals.refuse(refusedMalformed, "an append out of range", "log", m.Log, "leader", m.Leader, "err", err)
		resp.Err = err.Error()
	} else if err != nil {
		resp.Err = err.Error()
		r.n.log.Error("replica: append failed", "log", m.Log, "leader", m.Leader, "err", err)
	} else {
		resp.Result, resp.Epoch, resp.Seq = uint8(reply.Result), reply.Epoch, reply.Seq
		resp.Match, resp.Prev, resp.Last = reply.Match, reply.Prev, reply.Last
	}
	ctx.Respond(resp)
}

// logs returns the node's replicated logs, in its System's store.
func (n *Node) logs() (*logStore, error) {
	n.logsOnce.Do(func() {
		db, err := n.sys.DB()
		if err != nil {
			n.logsErr = fmt.Errorf("cluster: node %q: store: %w", n.cfg.Name, err)
			return
		}
		n.logStore = &logStore{db: db}
	})
	return n.logStore, n.logsErr
}
