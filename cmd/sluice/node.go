package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/telemetry"

	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/samples/clusterwordcount"
)

// tlsFlags are the certificate files of a node or a client.
type tlsFlags struct{ ca, cert, key string }

func (f *tlsFlags) add(c *cobra.Command) {
	c.Flags().StringVar(&f.ca, "tls-ca", "", "PEM file of the cluster's certificate authority (mutual TLS)")
	c.Flags().StringVar(&f.cert, "tls-cert", "", "PEM file of this node's certificate (names its host, and its --name as a DNS SAN)")
	c.Flags().StringVar(&f.key, "tls-key", "", "PEM file of this node's private key")
}

// config returns nil when no TLS flag is set.
func (f *tlsFlags) config() (*tls.Config, error) {
	if f.ca == "" && f.cert == "" && f.key == "" {
		return nil, nil
	}
	if f.ca == "" || f.cert == "" || f.key == "" {
		return nil, errors.New("--tls-ca, --tls-cert and --tls-key go together")
	}
	caPEM, err := os.ReadFile(f.ca)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("--tls-ca %s: no certificate", f.ca)
	}
	cert, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool}, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func nodeCmd(g *globals) *cobra.Command {
	var (
		name, host, peers, data, clusterName string
		port                                 int
		failure                              time.Duration
		tf                                   tlsFlags
		parallelism                          int
		lines                                int64
		out                                  string
		statusClients                        string
		insecure                             bool
		af                                   adminFlags
	)
	c := &cobra.Command{
		Use:   "node --name N --port P --peers HOST:PORT,... --data DIR",
		Short: "run a cluster node until interrupted, logging membership changes",
		Long: `Run one node of a sluice cluster until SIGINT or SIGTERM. It listens on
--host:--port (loopback by default), finds the cluster through --peers (the
host:port of other nodes; one live peer is enough) and keeps replicated
checkpoints in --data. Membership changes are printed, one line each.
The node hosts instances of the distributed jobs of this binary
(cluster-wordcount) for the coordinator that runs them.
A node that the others declared lost exits with an error: restart it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" {
				return errors.New("--name is required")
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			tc, err := tf.config()
			if err != nil {
				return err
			}
			cfg := cluster.Config{Name: name, ClusterName: clusterName, Host: host, Port: port, Peers: splitList(peers),
				TLS: tc, Insecure: insecure, StatusClients: splitList(statusClients), Logger: log, FailureTimeout: failure,
				Jobs: clusterJobs(clusterwordcount.Options{Parallelism: parallelism, Lines: lines, Dir: out})}
			if data != "" {
				if err := os.MkdirAll(data, 0o700); err != nil {
					return err
				}
				cfg.Store = filepath.Join(data, "sluice.db")
			}
			ctx := cmd.Context()
			n, err := cluster.Start(ctx, cfg)
			if err != nil {
				return err
			}
			srv, stopAdmin, err := af.start(g, telemetry.Noop())
			if err != nil {
				_ = n.Stop(context.WithoutCancel(ctx))
				return err
			}
			defer stopAdmin()
			if srv != nil { // the jobs this node coordinates
				cancelJobs := n.SubscribeJobs(func(ev cluster.JobEvent) {
					switch ev.Kind {
					case cluster.JobStarted, cluster.JobTakenOver:
						_ = srv.Replace(ev.Run)
					case cluster.JobEnded:
						srv.Remove(ev.Run)
					}
				})
				defer cancelJobs()
				for _, j := range n.Jobs() {
					_ = srv.Replace(j.Run)
				}
				defer af.watch(srv)()
			}
			excluded := make(chan struct{})
			n.Subscribe(func(ev cluster.MemberEvent) {
				fmt.Fprintf(g.stdout, "%s %s %s %s (%d members)\n", ev.Time.Format(time.RFC3339), ev.Kind, ev.Member.Name, ev.Member.Address, len(ev.Members))
				if ev.Kind == cluster.Excluded {
					close(excluded)
				}
			})
			n.SubscribeJobs(func(ev cluster.JobEvent) {
				at := time.Now().Format(time.RFC3339)
				switch {
				case ev.Kind == cluster.JobTakenOver:
					fmt.Fprintf(g.stdout, "%s took job %s over from %s, resuming from checkpoint %d\n", at, ev.Job, ev.From, ev.Checkpoint)
				case ev.Kind == cluster.JobEnded && ev.Err != nil:
					fmt.Fprintf(g.stdout, "%s job %s failed: %v\n", at, ev.Job, ev.Err)
				case ev.Kind == cluster.JobEnded:
					fmt.Fprintf(g.stdout, "%s job %s ended\n", at, ev.Job)
					if ev.Job == clusterwordcount.Job && out != "" { // check the counts, as the coordinator would
						got, err := clusterwordcount.Result(out)
						if err == nil {
							err = clusterwordcount.Compare(got, clusterwordcount.Want(lines))
						}
						if err != nil {
							fmt.Fprintf(g.stdout, "%s job %s: %v\n", at, ev.Job, err)
						} else {
							fmt.Fprintf(g.stdout, "%s job %s: %d distinct words: the counts equal the plain loop's\n", at, ev.Job, len(got))
						}
					}
				}
			})
			fmt.Fprintf(g.stdout, "node %s listening on %s (id %s)\n", n.Name(), n.Address(), n.ID())
			var runErr error
			select {
			case <-ctx.Done():
			case <-excluded:
				runErr = fmt.Errorf("node %s was declared lost by the cluster: restart it", name)
			}
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := n.Stop(stopCtx); err != nil {
				return errors.Join(runErr, err)
			}
			fmt.Fprintf(g.stdout, "node %s stopped\n", name)
			return runErr
		},
	}
	c.Flags().StringVar(&name, "name", "", "the node's name, unique in the cluster (required)")
	c.Flags().StringVar(&host, "host", cluster.DefaultHost, "the address to listen on and advertise")
	c.Flags().IntVar(&port, "port", 0, "the port to listen on (0: any free one)")
	c.Flags().StringVar(&peers, "peers", "", "comma-separated host:port of other nodes")
	c.Flags().StringVar(&data, "data", "", "folder of the node's store (default: a temporary store)")
	c.Flags().StringVar(&clusterName, "cluster", cluster.DefaultClusterName, "the cluster's name: nodes of other clusters never join")
	c.Flags().DurationVar(&failure, "failure-timeout", cluster.DefaultFailureTimeout, "how long a silent peer stays a member")
	c.Flags().IntVar(&parallelism, "parallelism", 6, "the cluster word count's counting instances (as on its coordinator)")
	c.Flags().Int64Var(&lines, "lines", 1_000_000, "the cluster word count's lines (as on its coordinator: for a takeover)")
	c.Flags().StringVar(&out, "out", "", "the cluster word count's output folder (as on its coordinator: for a takeover)")
	c.Flags().StringVar(&statusClients, "status-clients", "", "who may read this node's status without being a member (`sluice node status`): comma-separated certificate names, or * for anyone")
	c.Flags().BoolVar(&insecure, "insecure", false, "run without TLS on a host other than loopback (anything that reaches the port can act as any node)")
	tf.add(c)
	af.add(c, false)
	c.AddCommand(nodeStatusCmd(g))
	return c
}

func nodeStatusCmd(g *globals) *cobra.Command {
	var (
		peers   string
		timeout time.Duration
		tf      tlsFlags
	)
	c := &cobra.Command{
		Use:   "status --peers HOST:PORT,...",
		Short: "show the members, codec counters and replication states of running nodes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			addrs := splitList(peers)
			if len(addrs) == 0 {
				return errors.New("--peers: name at least one node (host:port)")
			}
			tc, err := tf.config()
			if err != nil {
				return err
			}
			client, err := cluster.Dial(cluster.ClientOptions{TLS: tc})
			if err != nil {
				return err
			}
			defer client.Close()
			reached := 0
			for _, addr := range addrs {
				ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
				st, err := client.Status(ctx, addr)
				cancel()
				if err != nil {
					fmt.Fprintf(g.stdout, "%s: %v\n", addr, err)
					continue
				}
				reached++
				printStatus(g.stdout, st)
			}
			if reached == 0 {
				return errors.New("no node answered")
			}
			return nil
		},
	}
	c.Flags().StringVar(&peers, "peers", "", "comma-separated host:port of the nodes to ask")
	c.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "how long to wait for each node")
	tf.add(c)
	return c
}

func printStatus(w io.Writer, st cluster.Stats) {
	fmt.Fprintf(w, "node %s at %s (id %s)\n", st.Name, st.Address, st.ID)
	if st.Excluded {
		fmt.Fprintln(w, "  EXCLUDED: the cluster declared this node lost; restart it")
	}
	var members []string
	for _, m := range st.Members {
		members = append(members, m.Name+" "+m.Address)
	}
	fmt.Fprintf(w, "  members (%d): %s\n", len(st.Members), strings.Join(members, ", "))
	c := st.Codec
	fmt.Fprintf(w, "  codec: packed %d, unpacked %d, refused: unregistered %d, unknown %d, undecodable %d, foreign %d\n",
		c.Packed, c.Unpacked, c.Unregistered, c.Unknown, c.Undecodable, c.Foreign)
	if a := st.Auth; a.Refused > 0 {
		var reasons []string
		for r, n := range a.ByReason {
			reasons = append(reasons, fmt.Sprintf("%s %d", r, n))
		}
		sort.Strings(reasons)
		fmt.Fprintf(w, "  refused from other nodes: %d (%s)\n", a.Refused, strings.Join(reasons, ", "))
	}
	for _, l := range st.Replication {
		fmt.Fprintf(w, "  leads %s: %s, epoch %d, entries %d..%d, committed %d\n", l.Log, l.Role, l.Epoch, l.First, l.Last, l.Commit)
		for _, r := range l.Replicas {
			fmt.Fprintf(w, "    replica %-12s %-9s match %d, lag %d", r.Name, r.Phase, r.Match, r.Lag)
			if r.Attempt > 0 {
				fmt.Fprintf(w, ", attempt %d", r.Attempt)
			}
			fmt.Fprintln(w)
		}
	}
	for _, h := range st.Held {
		fmt.Fprintf(w, "  holds %s: entries %d..%d, epoch %d", h.Log, h.First, h.Last, h.Promised)
		if h.Checkpoint > 0 {
			fmt.Fprintf(w, ", checkpoint %d", h.Checkpoint)
		}
		if h.Coordinator != "" {
			state := "over"
			if h.Running {
				state = "running"
			}
			fmt.Fprintf(w, ", run by %s (%s)", h.Coordinator, state)
		}
		fmt.Fprintln(w)
	}
	for _, j := range st.Coordinates {
		fmt.Fprintf(w, "  coordinates %s", j)
		if from := st.TakenOver[j]; from != "" {
			fmt.Fprintf(w, " (taken over from %s)", from)
		}
		fmt.Fprintln(w)
	}
}
