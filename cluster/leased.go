package cluster

import (
	"log/slog"

	pc "github.com/asynkron/protoactor-go/cluster"
)

// LeasedProvider is a Provider whose membership rests on a lease this
// member holds in a coordination service, a lease that can run out while
// the process is paused or cut off from the service (package
// github.com/sluicehq/sluice/cluster/etcd's provider). Start binds it to
// the node before it starts it:
//
//   - Publish replaces the node's member list (the provider's view of the
//     service's registrations, this node included). A provider calls it
//     instead of protoactor's MemberList.UpdateClusterTopology, so that
//     its updates are ordered with the node's reads of the block list.
//   - Fence tells the node, once, that its lease has expired in the
//     service or may have (no renewal was confirmed for long enough):
//     the others may declare it lost and take its jobs over. The node is
//     then fenced exactly as when static peers exclude it: it reports
//     Excluded, stops the jobs it coordinates and the instances it hosts,
//     and can only rejoin after a restart, with a new member id. A
//     provider must call Fence early enough for the stop to end before the
//     service may expire the lease (see the etcd provider's LeaseTTL), and
//     must never register the same member id again afterwards.
//
// Begin is called once Start has stopped protoactor's gossip (which reads
// the member list without its lock, see the Caveats of the package doc):
// until then the provider publishes this node alone, so that no gossip
// ever flows between sluice nodes.
type LeasedProvider interface {
	Provider
	Bind(ProviderHooks)
	Begin()
}

// ProviderHooks is what a LeasedProvider gets from the node (see
// LeasedProvider).
type ProviderHooks struct {
	// Publish replaces the member list; members' Ids are member ids
	// ("name.random", see Member.ID).
	Publish func(members []*pc.Member)
	// Fence fences this node; reason says why (it is logged and carried
	// by the errors of the jobs it stops).
	Fence func(reason error)
	// Logger is the node's logger.
	Logger *slog.Logger
}

// publishMembers is ProviderHooks.Publish.
func (n *Node) publishMembers(members []*pc.Member) {
	n.codec.topoMu.Lock()
	defer n.codec.topoMu.Unlock()
	n.cl.MemberList.UpdateClusterTopology(members)
}

// fence is ProviderHooks.Fence: the provider's lease ran out (or may
// have), so this node is excluded as if the others had declared it lost.
func (n *Node) fence(reason error) {
	n.mu.Lock()
	first := n.fencedBy == nil
	if first {
		n.fencedBy = reason
	}
	n.mu.Unlock()
	if !first {
		return
	}
	n.log.Error("cluster: this node's lease ran out: it stops its jobs and must restart to rejoin", "reason", reason)
	// The jobs stop at once, not after the Excluded event's round through
	// the subscribers: the others may take them over once the lease is
	// gone in the service.
	n.abandonAll()
	n.markExcluded()
}
