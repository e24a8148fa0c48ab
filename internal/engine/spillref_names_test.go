package engine

import (
	"context"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/graph"
)

// TestSpillQueuesOfAnotherJob: a job's sweep of its earlier launches'
// spill queues (newLaunchTag, dropOldQueues) deletes only its own. Its
// queues are named "<job>/<op>.<i>@<launch>", and the sweep takes every
// queue under "<job>/" with an "@": a job named "a" deleted the queues of
// a job named "a/b" running in the same system (its queued records, and
// the ranges its checkpoints refer to). Found in review: the job's name is
// now escaped in spillQueue and deleteQueues.
func TestSpillQueuesOfAnotherJob(t *testing.T) {
	sys, err := actors.NewSystem(actors.Config{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop(context.Background())
	db, err := sys.DB()
	if err != nil {
		t.Fatal(err)
	}
	other := (&execution{topo: graph.NewTopology("a/b"), spillRefs: true, launchTag: "L2"}).spillQueue("op", 0)
	mine := (&execution{topo: graph.NewTopology("a"), spillRefs: true, launchTag: "L1"}).spillQueue("op", 0)
	if err := db.Update(func(tx *bolt.Tx) error {
		root, err := tx.CreateBucketIfNotExists([]byte("spill"))
		if err != nil {
			return err
		}
		for _, q := range []string{other, mine} {
			if _, err := root.CreateBucketIfNotExists([]byte(q)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	x := &execution{topo: graph.NewTopology("a"), sys: sys, spillRefs: true}
	if err := x.newLaunchTag(); err != nil {
		t.Fatal(err)
	}
	st, err := sys.SpillStore()
	if err != nil {
		t.Fatal(err)
	}
	names, err := st.QueueNames()
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(names, mine) {
		t.Fatalf("job a's own old queue %q kept: %v", mine, names)
	}
	if !slices.Contains(names, other) {
		t.Fatalf("job a's launch deleted job a/b's queue %q: %v", other, names)
	}
}
