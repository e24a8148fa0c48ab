package etcd_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/cluster/etcd"
	"github.com/sluicehq/sluice/cluster/internal/clustertest"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/operators"
)

// childConfig configures a child process's node.
type childConfig struct {
	Name, Cluster  string
	Port           int
	Store          string
	Endpoints      []string
	BaseKey        string
	LeaseTTL       time.Duration
	FailureTimeout time.Duration
	// JobN and JobDir parameterise the counting job from the start, for a
	// node that takes it over; HoldSource holds its source half way until
	// the test opens the gate ("open").
	JobN       int64
	JobDir     string
	HoldSource bool
	// Leadership: the jobs' coordinators are elected in etcd, and their
	// checkpoints committed there (Provider.Leadership).
	Leadership bool
	// DesiredKey: the node that runs a job watches the desired-state
	// document under this etcd key for it (admin.Server, WatchDesired).
	DesiredKey string
	// Host and Insecure are the node's (a network namespace's address);
	// Netns runs the child in that network namespace (ip netns exec).
	Host     string
	Insecure bool
	Netns    string
}

// TestChildNode is the child process of these tests: one node on the etcd
// provider, printing one line per event on stdout and obeying commands on
// stdin. It is skipped unless a test started it.
//
//	READY <address> <id>
//	EVENT <joined|left|excluded> <name> <id>
//	TOOKOVER <job> <from> <checkpoint> <unix nanoseconds>, then what report prints
//	PLACED <address> <instances> | CHECKPOINT <id> | RUNEND <unix nanoseconds> |
//	JOBERROR <error> | RESTARTS <n> <restored from> | RESULT <lines>
//	WATCHING <key> (the desired state of the job run here, DesiredKey)
//	CHANGED <job> <operator> <change> <version> <unix nanoseconds> (a live change in force here)
//
// Commands: run JOB N DIR (the counting job, coordinated here) | open (the
// source's gate). The node stops when stdin closes.
func TestChildNode(t *testing.T) {
	raw := os.Getenv(childEnv)
	if raw == "" {
		t.Skip("the child process of the etcd tests")
	}
	var cfg childConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	say := clustertest.Say()
	if cfg.JobDir != "" {
		jobN, jobDir = cfg.JobN, cfg.JobDir
	}
	if !cfg.HoldSource {
		openGate()
	}
	p, err := etcd.New(etcd.Config{Endpoints: cfg.Endpoints, BaseKey: cfg.BaseKey, LeaseTTL: cfg.LeaseTTL})
	if err != nil {
		t.Fatal(err)
	}
	var log *slog.Logger = slog.New(slog.DiscardHandler)
	if os.Getenv("SLUICE_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ctx := context.Background()
	ncfg := cluster.Config{Name: cfg.Name, ClusterName: cfg.Cluster, Host: cfg.Host, Insecure: cfg.Insecure, Port: cfg.Port, Store: cfg.Store,
		Provider: p, FailureTimeout: cfg.FailureTimeout, Logger: log, Jobs: cluster.Jobs{"counting": func() *operators.Topology { return clustertest.CountingJob(jobN, jobDir, gate) }}}
	if cfg.Leadership {
		ncfg.Leadership = p.Leadership()
	}
	n, err := cluster.Start(ctx, ncfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop(ctx)
	defer clustertest.PrintEvents(n, func() string { return jobDir }, say)()
	say("READY %s %s", n.Address(), n.ID())
	var jobs sync.WaitGroup
	defer jobs.Wait()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "run":
			jobN, _ = strconv.ParseInt(f[2], 10, 64)
			jobDir = f[3]
			run, err := cluster.Run(ctx, n, f[1], cluster.RunOptions{})
			if err != nil {
				say("JOBERROR %v", err)
				continue
			}
			for addr, count := range engine.PlacementOf(run) {
				say("PLACED %s %d", addr, count)
			}
			var stopWatch func() error
			if cfg.DesiredKey != "" {
				srv, err := admin.New(admin.Options{})
				if err == nil {
					err = srv.Add(run)
				}
				if err == nil {
					stopWatch, err = etcd.WatchDesired(ctx, etcd.DesiredConfig{Endpoints: cfg.Endpoints, Key: cfg.DesiredKey}, srv)
				}
				if err != nil {
					say("JOBERROR desired state: %v", err)
				} else {
					say("WATCHING %s", cfg.DesiredKey)
				}
			}
			jobs.Add(1)
			go func() {
				defer jobs.Done()
				clustertest.Report(run, jobDir, say)
				if stopWatch != nil {
					_ = stopWatch()
				}
			}()
		case "open":
			openGate()
			say("OPENED")
		}
	}
}

// The counting job: the numbers 0 .. n-1 counted by key k0..k22; the
// counters (6 instances) are spread over the cluster, the sink stays on
// the coordinator and commits on checkpoints (exactly once) into a folder
// every node reaches.
var (
	jobN     int64 = jobRecords
	jobDir         = os.TempDir()
	gate           = make(chan struct{})
	openGate       = sync.OnceFunc(func() { close(gate) })
)

const jobRecords = 1_000_000

// child is a node in a child process (see clustertest.Child).
type child = clustertest.Child[childConfig]

// startChild starts a child node and waits for it to be a member.
func startChild(t testing.TB, cfg childConfig) *child {
	t.Helper()
	return clustertest.Start(t, cfg.Name, cfg, clustertest.Spec{Env: childEnv, Netns: cfg.Netns, Ready: 20 * time.Second})
}

// event waits for EVENT kind about the member with that id.
func event(c *child, d time.Duration, kind, id string) {
	c.AwaitLine(d, "EVENT "+kind+" "+id, func(f []string) bool { return len(f) == 4 && f[0] == "EVENT" && f[1] == kind && f[3] == id })
}

func atou(s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		panic(fmt.Sprintf("not a number: %q", s))
	}
	return n
}

// wantCounts is the plain loop's answer.
func wantCounts(n int64) string { return clustertest.WantCounts(n) }
