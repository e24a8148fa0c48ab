package replication_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/cluster/replication"
	"github.com/sluicehq/sluice/supervision"
)

// A leader of epoch 2 replicates to two replicas; b was offline while the
// leader wrote entries 5..9, so after reconnecting it receives exactly
// those.
func Example() {
	cfg := replication.Config{
		Replicas:    []string{"a", "b"},
		AckTimeout:  time.Second,
		Backoff:     supervision.Backoff{Initial: 100 * time.Millisecond, Jitter: supervision.NoJitter},
		MaxAttempts: 3,
	}
	// The leader's log holds 1..4; so do both replicas.
	logs := map[string]*replication.MemoryLog{"a": {}, "b": {}}
	leader := &replication.MemoryLog{}
	for i := uint64(1); i <= 4; i++ {
		e := replication.Entry{Index: i, Epoch: 1, Data: []byte(fmt.Sprint("cp", i))}
		leader.Entries = append(leader.Entries, e)
		logs["a"].Entries = append(logs["a"].Entries, e)
		logs["b"].Entries = append(logs["b"].Entries, e)
	}

	s := replication.New(cfg, 2, leader.Info())
	var acts []replication.Action
	// deliver carries out the sends: each replica applies the append and
	// its reply goes back to the leader.
	var deliver func(acts []replication.Action, offline string)
	deliver = func(acts []replication.Action, offline string) {
		for _, a := range acts {
			switch a := a.(type) {
			case replication.Send:
				if a.Replica == offline {
					continue
				}
				if a.To >= a.From {
					fmt.Printf("  %s gets %d..%d\n", a.Replica, a.From, a.To)
				}
				app := replication.Append{Epoch: a.Epoch, Seq: a.Seq, Prev: a.Prev, PrevEpoch: a.PrevEpoch, Commit: a.Commit}
				app.Entries = leader.Entries[a.From-1 : a.To]
				reply := logs[a.Replica].Receive(app)
				var more []replication.Action
				s, more = replication.Step(s, reply.Event(a.Replica))
				deliver(more, offline)
			case replication.Commit, replication.Transition, replication.Unavailable:
				fmt.Println(" ", a)
			}
		}
	}

	fmt.Println("start")
	s, acts = replication.Step(s, replication.Start{})
	deliver(acts, "")
	fmt.Println("b disconnects")
	s, acts = replication.Step(s, replication.Unreachable{Replica: "b"})
	deliver(acts, "b")
	fmt.Println("write 5..9")
	for i := uint64(5); i <= 9; i++ {
		leader.Entries = append(leader.Entries, replication.Entry{Index: i, Epoch: 2, Data: []byte(fmt.Sprint("cp", i))})
		s, acts = replication.Step(s, replication.Appended{Last: i})
		deliver(acts, "b")
	}
	fmt.Println("b reconnects")
	s, acts = replication.Step(s, replication.Reachable{Replica: "b"})
	deliver(acts, "")
	fmt.Println(s)
	// Output:
	// start
	//   a syncing -> in-sync
	//   b syncing -> in-sync
	//   commit 4
	// b disconnects
	//   b in-sync -> retrying
	// write 5..9
	//   a gets 5..5
	//   a gets 6..6
	//   a gets 7..7
	//   a gets 8..8
	//   a gets 9..9
	// b reconnects
	//   b retrying -> syncing
	//   b gets 5..9
	//   b syncing -> in-sync
	//   commit 9
	// leading epoch 2 log 1..9 commit 9; a in-sync match 9 next 10; b in-sync match 9 next 10
}
