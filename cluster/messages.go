package cluster

import (
	"errors"
	"reflect"
)

// The cluster's own messages travel through the same codec as the
// application's, under names starting with "sluice.".

// Membership (the static-peers provider).
type (
	// ping asks a node who it is; From is the asker's address, which the
	// answering node adds to the peers it pings itself.
	ping struct {
		Cluster string
		From    string // the asker's address
		ID      string // the asker's member id
		// Nonce is random: the answer carries it back, and a pong counts
		// only when it answers a ping this node sent.
		Nonce uint64
	}
	pong struct {
		Cluster string
		Name    string
		ID      string
		Addr    string
		Peers   []string // the addresses it knows, so that peers learn of each other
		// Excluded: the asker's member id was declared lost here; it must
		// restart (with a new id) to rejoin.
		Excluded bool
		// Members is how many members the answering node sees (itself
		// included); see membership.excludedBy.
		Members int
		// To is the member id of the asker: an answer to a ping of an
		// earlier run of a node on the same address is not for this one.
		To string
		// Nonce is the ping's.
		Nonce uint64
	}
)

// Requests to a node's "sluice-node" actor.
type (
	statusRequest  struct{}
	statusResponse struct{ Stats Stats }
	spawnRequest   struct{ Kind, Name string }
	spawnResponse  struct {
		Address, ID string
		Err         string
	}
)

// Replication.
type (
	wireEntry struct {
		Index, Epoch uint64
		Data         []byte
	}
	appendRequest struct {
		Log             string
		Leader          string // the leader node's name
		Epoch, Seq      uint64
		Prev, PrevEpoch uint64
		Commit          uint64
		Reset           bool
		Entries         []wireEntry
	}
	appendResponse struct {
		Log, Replica string
		Result       uint8
		Epoch, Seq   uint64
		Match        uint64
		Prev, Last   uint64
		Err          string // the replica could not apply the append (its store failed)
	}
)

func registerInternal(r *Registry) error {
	var errs []error
	add := func(v any, name string) {
		errs = append(errs, r.register(reflect.TypeOf(v), internalPrefix+"cluster."+name, true))
	}
	add(&ping{}, "ping")
	add(&pong{}, "pong")
	add(&statusRequest{}, "statusRequest")
	add(&statusResponse{}, "statusResponse")
	add(&spawnRequest{}, "spawnRequest")
	add(&spawnResponse{}, "spawnResponse")
	add(&appendRequest{}, "appendRequest")
	add(&appendResponse{}, "appendResponse")
	add(&claimRequest{}, "claimRequest")
	add(&claimResponse{}, "claimResponse")
	errs = append(errs, registerJobMessages(r))
	return errors.Join(errs...)
}
