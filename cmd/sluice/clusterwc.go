package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/samples/clusterwordcount"
)

// clusterJobs are the topologies every node of this binary can run and
// host: the same on every node.
func clusterJobs(o clusterwordcount.Options) cluster.Jobs { return clusterwordcount.Jobs(o) }

// clusterWordCountCmd starts nodes as local processes and runs the
// cluster word count across them.
func clusterWordCountCmd(g *globals) *cobra.Command {
	var (
		nodes int
		o     clusterwordcount.Options
	)
	c := &cobra.Command{
		Use:   "cluster-wordcount --nodes N [--lines L]",
		Short: "count words across N local node processes and check the counts against a plain loop",
		Long: `Start a cluster of N nodes on loopback: this process is the coordinator and
starts N-1 others ("sluice node"). The word count's source and sink run here,
its counters on every node; checkpoints are replicated to the others, so the
job goes on if a node other than this one is killed (try kill -9 on one).
If this process is killed instead, the other nodes elect one of them to take
the job over from the last checkpoint; it prints "took job cluster-wordcount
over" and, at the end, "job cluster-wordcount ended", with the counts in
--out (the nodes then keep running: stop them with kill).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nodes < 1 {
				return errors.New("--nodes: at least 1")
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			if o.Dir == "" {
				if o.Dir, err = os.MkdirTemp("", "sluice-cwc-"); err != nil {
					return err
				}
				defer os.RemoveAll(o.Dir)
			}
			ctx := cmd.Context()
			name := "cwc-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			n, err := cluster.Start(ctx, cluster.Config{Name: "n1", ClusterName: name, Logger: log, FailureTimeout: 2 * time.Second,
				Jobs: clusterJobs(o)})
			if err != nil {
				return err
			}
			defer n.Stop(context.WithoutCancel(ctx))
			self, err := os.Executable()
			if err != nil {
				return err
			}
			for i := 2; i <= nodes; i++ {
				p := exec.Command(self, "node", "--name", "n"+strconv.Itoa(i), "--cluster", name, "--peers", n.Address(),
					"--failure-timeout", "2s", "--parallelism", strconv.Itoa(o.Parallelism), "--lines", strconv.FormatInt(o.Lines, 10),
					"--out", o.Dir, "--log-level", g.logLevel)
				// Its lines (membership, a takeover) are not this command's output.
				p.Stdout, p.Stderr = g.stderr, g.stderr
				if err := p.Start(); err != nil {
					return err
				}
				defer func() { _ = p.Process.Signal(syscall.SIGTERM); _ = p.Wait() }()
			}
			actx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if _, err := n.AwaitMembers(actx, nodes); err != nil {
				return err
			}
			start := time.Now()
			run, err := cluster.Run(ctx, n, clusterwordcount.Job, cluster.RunOptions{})
			if err != nil {
				return err
			}
			where := cluster.PlacementOf(run)
			if err := run.Wait(ctx); err != nil {
				return err
			}
			got, err := clusterwordcount.Result(o.Dir)
			if err != nil {
				return err
			}
			st := operators.CheckpointStatsOf(run)
			addrs := make([]string, 0, len(where))
			for a := range where {
				addrs = append(addrs, a)
			}
			sort.Strings(addrs)
			fmt.Fprintf(g.stdout, "counted %d lines on %d nodes in %v (%d checkpoints, %d restarts)\n",
				o.Lines, nodes, time.Since(start).Round(time.Millisecond), st.Completed, st.Restarts)
			for _, a := range addrs {
				fmt.Fprintf(g.stdout, "  %s: %d instances\n", a, where[a])
			}
			if err := clusterwordcount.Compare(got, clusterwordcount.Want(o.Lines)); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "%d distinct words: the counts equal the plain loop's\n", len(got))
			return nil
		},
	}
	c.Flags().IntVar(&nodes, "nodes", 3, "how many nodes (processes), this one included")
	c.Flags().Int64Var(&o.Lines, "lines", 1_000_000, "lines of generated text")
	c.Flags().IntVar(&o.Parallelism, "parallelism", 6, "counting instances")
	c.Flags().StringVar(&o.Dir, "out", "", "folder for the counts (default: a temporary one)")
	return c
}
