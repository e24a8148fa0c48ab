package clusterwordcount_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/samples/clusterwordcount"
)

const peerEnv = "SLUICE_CWC_PEER" // "name address-of-the-coordinator"

// TestNodeChild is a worker node of TestClusterWordCount, in a child
// process: it runs until its stdin closes.
func TestNodeChild(t *testing.T) {
	v := os.Getenv(peerEnv)
	if v == "" {
		t.Skip("child of TestClusterWordCount")
	}
	name, peer, _ := strings.Cut(v, " ")
	ctx := context.Background()
	n, err := cluster.Start(ctx, cluster.Config{Name: name, ClusterName: "cwc", Peers: []string{peer},
		FailureTimeout: time.Second, Jobs: clusterwordcount.Jobs(clusterwordcount.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop(ctx)
	os.Stdout.WriteString("READY\n")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // EOF when the parent ends
}

// TestClusterWordCount counts words over three processes (this one
// coordinates, two children host counters) and compares with a plain loop.
func TestClusterWordCount(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes")
	}
	const lines = 100_000
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	n, err := cluster.Start(ctx, cluster.Config{Name: "coord", ClusterName: "cwc", FailureTimeout: time.Second,
		Jobs: clusterwordcount.Jobs(clusterwordcount.Options{Lines: lines, Dir: dir})})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop(context.Background())
	for _, name := range []string{"w1", "w2"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestNodeChild$")
		cmd.Env = append(os.Environ(), peerEnv+"="+name+" "+n.Address())
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	}
	if _, err := n.AwaitMembers(ctx, 3); err != nil {
		t.Fatal(err)
	}
	run, err := cluster.Run(ctx, n, clusterwordcount.Job, cluster.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	where := cluster.PlacementOf(run)
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if len(where) != 3 {
		t.Errorf("instances on %d processes, want 3: %v", len(where), where)
	}
	got, err := clusterwordcount.Result(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := clusterwordcount.Compare(got, clusterwordcount.Want(lines)); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d words counted on %v", len(got), where)
}
