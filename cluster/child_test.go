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
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicehq/sluice/cluster"
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
//
// Commands: complete JOB ID | loop JOB MILLIS (complete 1, 2, ... until
// stop) | stop | latest JOB | request ADDR ACTOR NAME | send ADDR ACTOR
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
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
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
	var reports sync.WaitGroup
	defer reports.Wait()
	n.SubscribeJobs(func(ev cluster.JobEvent) {
		if ev.Kind == cluster.JobTakenOver {
			say("TOOKOVER %s %s %d %d", ev.Job, ev.From, ev.Checkpoint, ev.Time.UnixNano())
			reports.Add(1)
			go func() {
				defer reports.Done()
				report(ev.Run, say)
			}()
		}
	})
	n.Subscribe(func(ev cluster.MemberEvent) {
		say("EVENT %v %s %s", ev.Kind, ev.Member.Name, ev.Member.ID)
	})
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

// child is a node in a child process.
type child struct {
	t       testing.TB
	cfg     childConfig
	cmd     *exec.Cmd
	stdin   *os.File
	stderr  *os.File
	Address string
	ID      string
	// The child's output is a log that every wait searches: a line is
	// found wherever it comes in the stream, never passed over because
	// another was awaited first.
	mu     sync.Mutex
	seen   []string      // every line so far
	taken  []bool        // taken[i]: a wait returned seen[i]; no later wait returns it
	base   int           // waits look at seen[base:] only (see skipTo)
	last   int           // index of the line the last successful wait returned
	grew   chan struct{} // closed and replaced when a line comes or the output ends
	ended  bool          // all output read
	exited chan struct{}
	// readerDone is closed when all of the child's output has been read.
	readerDone chan struct{}
	exitErr    error // after exited
	killed     bool
}

var (
	siblingsMu sync.Mutex
	siblings   = map[testing.TB][]*child{}
)

// startChild starts a child node and waits for it to listen.
func startChild(t testing.TB, cfg childConfig) *child {
	t.Helper()
	if cfg.FailureTimeout == 0 {
		cfg.FailureTimeout = 2 * time.Second
	}
	raw, _ := json.Marshal(cfg)
	c := &child{t: t, cfg: cfg, grew: make(chan struct{}), exited: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], "-test.run=^TestChildNode$")
	if cfg.Netns != "" {
		c.cmd = exec.Command("ip", "netns", "exec", cfg.Netns, os.Args[0], "-test.run=^TestChildNode$")
	}
	c.cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c.stderr, err = os.CreateTemp(t.TempDir(), cfg.Name+"-stderr-*")
	if err != nil {
		t.Fatal(err)
	}
	c.cmd.Stdin, c.cmd.Stdout, c.cmd.Stderr = inR, outW, c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	c.stdin = inW
	c.readerDone = make(chan struct{})
	go func() { // ends when the child's stdout closes
		defer close(c.readerDone)
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			c.mu.Lock()
			c.seen = append(c.seen, sc.Text())
			c.taken = append(c.taken, false)
			close(c.grew)
			c.grew = make(chan struct{})
			c.mu.Unlock()
		}
		outR.Close()
		c.mu.Lock()
		c.ended = true
		close(c.grew)
		c.mu.Unlock()
	}()
	go func() {
		c.exitErr = c.cmd.Wait()
		close(c.exited)
	}()
	siblingsMu.Lock()
	siblings[t] = append(siblings[t], c)
	siblingsMu.Unlock()
	t.Cleanup(func() {
		// Ask every child of the test to stop at once, then wait for this one.
		siblingsMu.Lock()
		for _, s := range siblings[t] {
			s.stdin.Close()
		}
		delete(siblings, t)
		siblingsMu.Unlock()
		c.stop()
		if !c.killed && c.exitErr != nil { // a data race in the child, say
			t.Errorf("child %s: %v", cfg.Name, c.exitErr)
		}
		if t.Failed() {
			c.mu.Lock()
			t.Logf("child %s said:\n%s", cfg.Name, strings.Join(c.seen, "\n"))
			c.mu.Unlock()
			if b, _ := os.ReadFile(c.stderr.Name()); len(b) > 0 {
				t.Logf("child %s stderr:\n%s", cfg.Name, b)
			}
		}
	})
	f := c.expect(10*time.Second, "READY")
	c.Address, c.ID = f[1], f[2]
	return c
}

// expect waits for a line starting with prefix and returns its fields.
func (c *child) expect(d time.Duration, prefix string) []string {
	c.t.Helper()
	f, ok := c.await(d, prefix)
	if !ok {
		c.t.Fatalf("child %s: no %q within %v", c.cfg.Name, prefix, d)
	}
	return f
}

// await waits for a line starting with prefix (a line may be a prefix of
// several words); false when d passes or the child's output ends first.
func (c *child) await(d time.Duration, prefix string) ([]string, bool) {
	f, err := c.find(d, func(f []string) bool { return strings.HasPrefix(strings.Join(f, " "), prefix) })
	return f, err == nil
}

// find waits until the log holds a line, not taken by an earlier wait and
// at or after the base, that match accepts; it takes that line (the first
// such) and returns its fields. It fails when d passes or the output ends
// with no such line.
func (c *child) find(d time.Duration, match func(f []string) bool) ([]string, error) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	next := 0
	for {
		c.mu.Lock()
		for i := max(next, c.base); i < len(c.seen); i++ {
			if c.taken[i] {
				continue
			}
			if f := strings.Fields(c.seen[i]); len(f) > 0 && match(f) {
				c.taken[i], c.last = true, i
				c.mu.Unlock()
				return f, nil
			}
		}
		next = len(c.seen)
		ended, grew := c.ended, c.grew
		c.mu.Unlock()
		if ended {
			return nil, errEnded
		}
		select {
		case <-grew:
		case <-timer.C:
			return nil, errTimedOut
		}
	}
}

var (
	errEnded    = fmt.Errorf("the child's output ended")
	errTimedOut = fmt.Errorf("timed out")
)

// skipTo makes the waits that follow look only at lines from index i on
// (lenSeen for the lines still to come; lastMatch+1 for those after the
// line the last wait returned).
func (c *child) skipTo(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.base = i
}

// lenSeen is the number of lines the child printed so far.
func (c *child) lenSeen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

// lastMatch is the index of the line the last successful wait returned.
func (c *child) lastMatch() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

func (c *child) send(cmd string) {
	c.t.Helper()
	if _, err := fmt.Fprintln(c.stdin, cmd); err != nil {
		c.t.Fatalf("child %s: %s: %v", c.cfg.Name, cmd, err)
	}
}

// until waits until cond holds over the lines the child printed so far.
func (c *child) until(d time.Duration, what string, cond func(lines []string) bool) {
	c.t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		c.mu.Lock()
		lines, ended, grew := slices.Clone(c.seen), c.ended, c.grew
		c.mu.Unlock()
		if cond(lines) {
			return
		}
		if ended {
			c.t.Fatalf("child %s exited before %s", c.cfg.Name, what)
		}
		select {
		case <-grew:
		case <-timer.C:
			c.t.Fatalf("child %s: no %s within %v", c.cfg.Name, what, d)
		}
	}
}

// kill SIGKILLs the child and waits for it to exit and for its last
// lines (in seen; the ones not yet awaited are dropped).
func (c *child) kill() {
	c.killed = true
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.exited
	<-c.readerDone
}

// stop closes the child's stdin, which ends it, or kills it after a while.
func (c *child) stop() {
	c.stdin.Close()
	select {
	case <-c.exited:
	case <-time.After(15 * time.Second):
		c.kill()
	}
	<-c.readerDone
}

// storeIn returns a store file in a fresh folder.
func storeIn(t testing.TB, name string) string {
	return filepath.Join(t.TempDir(), name+".db")
}

// awaitLine waits for a line that match accepts and returns its fields.
func (c *child) awaitLine(d time.Duration, what string, match func(f []string) bool) []string {
	c.t.Helper()
	f, err := c.find(d, match)
	switch err {
	case nil:
		return f
	case errEnded:
		c.t.Fatalf("child %s exited before %s", c.cfg.Name, what)
	default:
		c.t.Fatalf("child %s: no %s within %v", c.cfg.Name, what, d)
	}
	return nil
}

// awaitAll waits until the child has printed every one of lines (in any
// order, among others).
func (c *child) awaitAll(d time.Duration, lines ...string) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for _, l := range lines {
		c.awaitLine(time.Until(deadline), fmt.Sprintf("%q (of %q)", l, lines), func(f []string) bool {
			return strings.HasPrefix(strings.Join(f, " "), l)
		})
	}
}

// lastCompleted is the newest checkpoint the child reported completed.
func (c *child) lastCompleted(job string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var last uint64
	for _, line := range c.seen {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "COMPLETED" && f[1] == job {
			if id, err := strconv.ParseUint(f[2], 10, 64); err == nil && id > last {
				last = id
			}
		}
	}
	return last
}

func (c *child) port() int {
	_, p, _ := strings.Cut(c.Address, ":")
	n, _ := strconv.Atoi(p)
	return n
}

// seenLines returns every line the child printed so far.
func (c *child) seenLines() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.seen)
}

// pause stops the child (SIGSTOP) as a long garbage-collection pause or a
// partition would; resume lets it go on (SIGCONT).
func (c *child) pause() {
	c.t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		c.t.Fatalf("child %s: SIGSTOP: %v", c.cfg.Name, err)
	}
}

func (c *child) resume() {
	c.t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		c.t.Fatalf("child %s: SIGCONT: %v", c.cfg.Name, err)
	}
}
