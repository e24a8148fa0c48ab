package cluster_test

import (
	"context"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/persistence"
)

type (
	Order   struct{ ID int }
	Receipt struct{ OrderID int }
)

// A node joins the cluster through a seed, serves an actor and asks one on
// another node. (Not run: it needs the other nodes.)
func Example() {
	ctx := context.Background()
	reg := cluster.NewRegistry()
	_ = cluster.Register[Order](reg, "shop.Order")
	_ = cluster.Register[*Receipt](reg, "shop.Receipt")

	n, err := cluster.Start(ctx, cluster.Config{Name: "n1", Port: 7001, Peers: []string{"127.0.0.1:7002"}, Registry: reg})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer n.Stop(ctx)
	n.Subscribe(func(ev cluster.MemberEvent) { fmt.Println(ev.Member.Name, ev.Kind) })

	_, _ = n.Spawn("billing", actor.PropsFromFunc(func(c actor.Context) {
		if o, ok := c.Message().(Order); ok {
			c.Respond(&Receipt{OrderID: o.ID})
		}
	}))
	if _, err := n.AwaitMembers(ctx, 2); err != nil {
		fmt.Println(err)
		return
	}
	other, _ := n.Member("n2")
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	reply, err := n.Request(rctx, n.PID(other.Address, "billing"), Order{ID: 7})
	fmt.Println(reply, err)
}

// Checkpoints of a job replicated to two other nodes before Complete
// returns. (Not run: it needs the other nodes.)
func ExampleReplicatedCheckpointStore() {
	ctx := context.Background()
	n, err := cluster.Start(ctx, cluster.Config{Name: "n1", Port: 7001, Peers: []string{"127.0.0.1:7002"}, Store: "n1.db"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer n.Stop(ctx)
	store, err := cluster.NewReplicatedCheckpointStore(n, cluster.ReplicationConfig{Replicas: 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	err = store.Complete(ctx, "wordcount", persistence.Checkpoint{ID: 1, Time: time.Now()})
	fmt.Println(err)
	for _, log := range n.Stats().Replication {
		for _, r := range log.Replicas {
			fmt.Println(log.Log, r.Name, r.Phase, r.Lag)
		}
	}
}
