package cluster_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/cluster/internal/clustertest"
	"github.com/sluicehq/sluice/persistence"
	"github.com/sluicehq/sluice/supervision"
)

// childConfig configures a child process's node.
type childConfig struct {
	Name, Cluster  string
	Port           int
	Peers          []string
	Store          string // store file; empty: temporary
	CA, Cert, Key  string // PEM files: TLS when Cert is set
	FailureTimeout time.Duration
	// A ReplicatedCheckpointStore with these replicas (-1: none).
	Replicas, Acks int
	ReplicaPeers   []string
	Namespace      string
	// JobN and JobDir parameterise the test jobs (see testJobs) from the
	// start, for a node that takes a job over.
	JobN   int64
	JobDir string
	// HoldSource keeps the counting job's source half way until the test
	// opens the gate ("open source"); otherwise it is open from the start.
	HoldSource bool
	// PrivateStatus: only members may read the node's status (the
	// children answer anyone otherwise, the parent included).
	PrivateStatus bool
	// Host and Insecure are the node's (a network namespace's address);
	// Netns runs the child in that network namespace (ip netns exec).
	Host     string
	Insecure bool
	Netns    string
}

// TestChildNode is the child process of the process tests: it runs one
// node, prints what happens on stdout, one line each, and obeys commands
// on stdin. It is skipped unless a test started it.
//
//	READY <address> <id>
//	EVENT <joined|left|excluded> <name> <id>
//	TRANSITION <log> <replica> <from> <to>
//	COMPLETED <job> <checkpoint> | FAILED <job> <checkpoint> <error>
//	LATEST <job> <checkpoint>
//	REPLY <text> | ERROR <error>
//	SENT <n>
//	TOOKOVER <job> <from> <checkpoint>, then what runJob prints
//	CHANGED <job> <operator> <change> <version> <unix nanoseconds> (a live change in force here)
//	INPUT-OK <job> <operator> <address>=<change>,... | INPUT-REFUSED <error>
//	PAUSE-OK <job> <source> <paused> | PAUSE-REFUSED <error>
//
// Commands: complete JOB ID | loop JOB MILLIS (complete 1, 2, ... until
// stop) | stop | latest JOB | input JOB OP POLICY CAPACITY (a live change
// of a job run here, through its admin server) | pause JOB OP true|false | request ADDR ACTOR NAME | send ADDR ACTOR
// FROM N | count ADDR ACTOR | run JOB N DIR (see runJob) | hosted |
// status ADDR (STATUS <name> <members> <excluded> <in-sync replicas of
// the counting job's log, then "-"> <its copies as its last entry names
// them, then "-">) | auth (AUTH <refused>
// <reason>=<n>...) | forge ADDR ACTOR TYPE JSON (sends the JSON object,
// msgpack-encoded under the registered name TYPE, as it is: FORGED
// <type>). Every refusal the node logs prints REFUSED <reason>
// <level>; a start without TLS prints NOTLS.
func TestChildNode(t *testing.T) {
	raw := os.Getenv(childEnv)
	if raw == "" {
		t.Skip("the child process of the process tests")
	}
	var cfg childConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	say := clustertest.Say()
	ncfg := cluster.Config{
		Name: cfg.Name, ClusterName: cfg.Cluster, Port: cfg.Port, Peers: cfg.Peers, Store: cfg.Store,
		Registry: testRegistry(), Logger: slog.New(refusalPrinter{say: say, next: logger().Handler()}), FailureTimeout: cfg.FailureTimeout,
		Jobs: testJobs(),
	}
	if !cfg.PrivateStatus {
		ncfg.StatusClients = []string{"*"}
	}
	ncfg.Host, ncfg.Insecure = cfg.Host, cfg.Insecure
	if cfg.Cert != "" {
		tc, err := loadTLS(cfg.CA, cfg.Cert, cfg.Key)
		if err != nil {
			t.Fatal(err)
		}
		ncfg.TLS = tc
	}
	if cfg.JobDir != "" {
		jobN, jobDir = cfg.JobN, cfg.JobDir
	}
	if !cfg.HoldSource {
		gates["source"]()
	}
	ctx := context.Background()
	n, err := cluster.Start(ctx, ncfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop(ctx)
	defer clustertest.PrintEvents(n, func() string { return jobDir }, say)()
	for name, props := range map[string]*actor.Props{"echo": echoProps(), "sink": sinkProps()} {
		if _, err := n.Spawn(name, props); err != nil {
			t.Fatal(err)
		}
	}
	var store *cluster.ReplicatedCheckpointStore
	if cfg.Replicas >= 0 {
		store, err = cluster.NewReplicatedCheckpointStore(n, cluster.ReplicationConfig{
			Replicas: cfg.Replicas, Acks: cfg.Acks, Peers: cfg.ReplicaPeers, Namespace: cfg.Namespace,
			AckTimeout: 500 * time.Millisecond, MaxAttempts: 3,
			Backoff: supervision.Backoff{Initial: 100 * time.Millisecond, Max: 400 * time.Millisecond},
			OnTransition: func(tr cluster.ReplicaTransition) {
				say("TRANSITION %s %s %s %s", tr.Log, tr.Replica, tr.From, tr.To)
			},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	say("READY %s %s", n.Address(), n.ID())

	complete := func(job string, id uint64) error {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		cp := persistence.Checkpoint{ID: id, Time: time.Unix(int64(id), 0).UTC(),
			States: map[string][]byte{"count/0": []byte(fmt.Sprint("state-", id))}, Offsets: map[string]int64{"src/0": int64(id) * 10}}
		err := store.Complete(cctx, job, cp)
		if err != nil {
			say("FAILED %s %d %v", job, id, err)
		} else {
			say("COMPLETED %s %d", job, id)
		}
		return err
	}
	var loopStop chan struct{}
	var loopDone sync.WaitGroup
	stopLoop := func() {
		if loopStop != nil {
			close(loopStop)
			loopDone.Wait()
			loopStop = nil
		}
	}
	defer stopLoop()
	var jobs sync.WaitGroup // runs started by "run"; the node stops after them
	defer jobs.Wait()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		switch f[0] {
		case "complete":
			id, _ := strconv.ParseUint(f[2], 10, 64)
			_ = complete(f[1], id)
		case "loop":
			stopLoop()
			every, _ := strconv.Atoi(f[2])
			loopStop = make(chan struct{})
			loopDone.Add(1)
			go func(job string, stop chan struct{}) {
				defer loopDone.Done()
				tick := time.NewTicker(time.Duration(every) * time.Millisecond)
				defer tick.Stop()
				for id := uint64(1); ; {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					if complete(job, id) == nil {
						id++
					}
				}
			}(f[1], loopStop)
		case "stop":
			stopLoop()
			say("STOPPED")
		case "latest":
			cp, ok, err := store.Latest(rctx, f[1])
			switch {
			case err != nil:
				say("ERROR %v", err)
			case !ok:
				say("LATEST %s 0", f[1])
			default:
				say("LATEST %s %d", f[1], cp.ID)
			}
		case "request":
			r, err := n.Request(rctx, n.PID(f[1], f[2]), Greet{Name: f[3]})
			if err != nil {
				say("ERROR %v", err)
			} else {
				say("REPLY %s", r.(*Greeting).Text)
			}
		case "send":
			count, _ := strconv.Atoi(f[4])
			sent := 0
			for i := 1; i <= count; i++ {
				if err := n.Send(n.PID(f[1], f[2]), Greet{Name: f[3], Seq: i}); err == nil {
					sent++
				}
			}
			say("SENT %d", sent)
		case "run": // in the background: "open" must reach a gated job
			jobs.Add(1)
			go func(args []string) {
				defer jobs.Done()
				runJob(n, args, say)
			}(f[1:])
		case "open": // open NAME: see gates
			gates[f[1]]()
			say("OPENED")
		case "input": // input JOB OP POLICY CAPACITY: a live change of a job run here (livechange_test.go)
			say("%s", liveInput(rctx, f[1:]))
		case "pause": // pause JOB OP true|false (livechange_test.go)
			say("%s", livePause(rctx, f[1:]))
		case "codec":
			say("UNDECODABLE %d", n.Stats().Codec.Undecodable)
		case "status":
			st, err := n.Status(rctx, f[1])
			if err != nil {
				say("ERROR %v", err)
			} else {
				insync := []string{}
				for _, l := range st.Replication {
					for _, r := range l.Replicas {
						if l.Log == "checkpoints/counting" && r.Phase == "in-sync" {
							insync = append(insync, r.Name)
						}
					}
				}
				copies := []string{}
				for _, h := range st.Held {
					if h.Log == "checkpoints/counting" {
						copies = h.Copies
					}
				}
				say("STATUS %s %d %v %s %s", st.Name, len(st.Members), st.Excluded, strings.Join(append(insync, "-"), ","), strings.Join(append(copies, "-"), ","))
			}
		case "forge": // forge ADDR ACTOR TYPE JSON: a message of the cluster's, crafted
			parts := strings.SplitN(sc.Text(), " ", 5)
			if len(parts) < 5 {
				say("ERROR forge: want ADDR ACTOR TYPE JSON")
				break
			}
			b, err := craft(parts[4])
			if err != nil {
				say("ERROR forge: %v", err)
				break
			}
			// The codec sends an *anypb.Any as it is, over the node's own
			// (authenticated) connection.
			n.Root().Send(n.PID(parts[1], parts[2]), &anypb.Any{TypeUrl: "sluice.msgpack/" + parts[3], Value: b})
			say("FORGED %s", parts[3])
		case "auth":
			st := n.Stats().Auth
			var parts []string
			for r, c := range st.ByReason {
				parts = append(parts, fmt.Sprintf("%s=%d", r, c))
			}
			sort.Strings(parts)
			say("AUTH %d %s", st.Refused, strings.Join(parts, " "))
		case "hosted":
			for _, h := range n.Hosted() {
				say("HOSTED %s %d %d", h.Job, h.Gen, h.Instances)
			}
			say("HOSTED-END")
		case "count":
			r, err := n.Request(rctx, n.PID(f[1], f[2]), Count{})
			if err != nil {
				say("ERROR %v", err)
			} else {
				say("REPLY %d", r.(*Counted).N)
			}
		}
		cancel()
	}
}

func loadTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no CA certificate in %s", caFile)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool}, nil
}

// craft encodes a JSON object as msgpack, its numbers as integers (as
// the cluster's messages have them).
func craft(js string) ([]byte, error) {
	d := json.NewDecoder(strings.NewReader(js))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	var conv func(any) any
	conv = func(v any) any {
		switch x := v.(type) {
		case json.Number:
			if u, err := strconv.ParseUint(string(x), 10, 64); err == nil {
				return u
			}
			i, _ := x.Int64()
			return i
		case map[string]any:
			for k, e := range x {
				x[k] = conv(e)
			}
		case []any:
			for i, e := range x {
				x[i] = conv(e)
			}
		}
		return v
	}
	return msgpack.Marshal(conv(v))
}

// refusalPrinter prints a line for every refusal the node logs, at any
// level: REFUSED <reason> <level> (see auth.go: the first of each reason
// is a warning, the next ones debug records).
type refusalPrinter struct {
	say  func(string, ...any)
	next slog.Handler
}

func (h refusalPrinter) Enabled(ctx context.Context, l slog.Level) bool { return true }

func (h refusalPrinter) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "cluster: running without TLS") {
		h.say("NOTLS")
	}
	if strings.HasPrefix(r.Message, "cluster: refused") {
		reason := "?"
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "reason" {
				reason = a.Value.String()
			}
			return true
		})
		h.say("REFUSED %s %s", reason, r.Level)
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h refusalPrinter) WithAttrs(as []slog.Attr) slog.Handler {
	return refusalPrinter{say: h.say, next: h.next.WithAttrs(as)}
}

func (h refusalPrinter) WithGroup(name string) slog.Handler {
	return refusalPrinter{say: h.say, next: h.next.WithGroup(name)}
}

// child is a node in a child process (see clustertest.Child).
type child = clustertest.Child[childConfig]

// startChild starts a child node and waits for it to listen.
func startChild(t testing.TB, cfg childConfig) *child {
	t.Helper()
	if cfg.FailureTimeout == 0 {
		cfg.FailureTimeout = 2 * time.Second
	}
	return clustertest.Start(t, cfg.Name, cfg, clustertest.Spec{Env: childEnv, Netns: cfg.Netns})
}

// storeIn returns a store file in a fresh folder.
func storeIn(t testing.TB, name string) string {
	return filepath.Join(t.TempDir(), name+".db")
}
