package etcd_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/cluster/etcd"
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
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
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
		Provider: p, FailureTimeout: cfg.FailureTimeout, Logger: log, Jobs: cluster.Jobs{"counting": func() *operators.Topology { return countingJob(jobN, jobDir) }}}
	if cfg.Leadership {
		ncfg.Leadership = p.Leadership()
	}
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
			jobs.Add(1)
			go func() {
				defer jobs.Done()
				report(run, say)
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

func countingJob(n int64, dir string) *operators.Topology {
	t := operators.NewTopology("counting", operators.Checkpoints(100*time.Millisecond), operators.BatchSize(256))
	src := operators.Source(t, "numbers", heldSource{n: n, hold: n / 2})
	keys := operators.Map(src, "key", func(v int64) string { return "k" + strconv.Itoa(int(v*7%23)) })
	by := operators.KeyBy(keys, "by-key", func(k string) string { return k }, operators.Parallelism(6))
	counts := operators.Count(by, "count", operators.Emit(operators.EmitAtEnd))
	operators.Sink(counts, "out", operators.File(filepath.Join(dir, "counts"), func(kv operators.KV[string, int64]) string {
		return fmt.Sprintf("%s=%d", kv.Key, kv.Value)
	}), operators.Parallelism(1))
	return t
}

// heldSource is Generate's numbers, held after hold of them until the
// gate opens: the job cannot end before the test has done its fault,
// however fast the machine. A held source idles as a dry one does:
// checkpoints go on.
type heldSource struct{ n, hold int64 }

func (s heldSource) Open(ctx context.Context, part, parts int, offset int64) (operators.Reader[int64], error) {
	r, err := operators.Generate(s.n, func(i int64) int64 { return i }).Open(ctx, part, parts, offset)
	if err != nil {
		return nil, err
	}
	return &heldReader{Reader: r, hold: s.hold / int64(parts)}, nil
}

type heldReader struct {
	operators.Reader[int64]
	hold int64
}

func (r *heldReader) Read(buf []int64) (int, error) {
	select {
	case <-gate:
		return r.Reader.Read(buf)
	default:
	}
	left := r.hold - r.Offset()
	if left <= 0 {
		return 0, nil
	}
	return r.Reader.Read(buf[:min(int64(len(buf)), left)])
}

func (r *heldReader) Wait(ctx context.Context) error {
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// wantCounts is the plain loop's answer.
func wantCounts(n int64) string {
	m := map[string]int64{}
	for v := range n {
		m["k"+strconv.Itoa(int(v*7%23))]++
	}
	var lines []string
	for k, c := range m {
		lines = append(lines, fmt.Sprintf("%s=%d", k, c))
	}
	sort.Strings(lines)
	return strings.Join(lines, ",")
}

// report waits for a run's end, printing CHECKPOINT <id> as checkpoints
// complete, then RUNEND, and RESTARTS and RESULT or JOBERROR.
func report(run *actors.Run, say func(string, ...any)) {
	done := make(chan error, 1)
	go func() { done <- run.Wait(context.Background()) }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last uint64
	for {
		select {
		case err := <-done:
			say("RUNEND %d", time.Now().UnixNano()) // its sources and sinks have stopped
			if err != nil {
				say("JOBERROR %v", err)
				return
			}
			st := operators.CheckpointStatsOf(run)
			if st.LastID != last {
				say("CHECKPOINT %d", st.LastID)
			}
			b, err := os.ReadFile(filepath.Join(jobDir, "counts"))
			if err != nil {
				say("JOBERROR %v", err)
				return
			}
			lines := strings.Fields(string(b))
			sort.Strings(lines)
			say("RESTARTS %d %d", st.Restarts, st.RestoredFrom)
			say("RESULT %s", strings.Join(lines, ","))
			return
		case <-tick.C:
			if st := operators.CheckpointStatsOf(run); st.LastID != last {
				last = st.LastID
				say("CHECKPOINT %d", last)
			}
		}
	}
}

// child is a node in a child process. Its output is a log that every
// wait searches: a line is found wherever it comes, never passed over
// because another was awaited first (as in package cluster's tests).
type child struct {
	t       testing.TB
	cfg     childConfig
	cmd     *exec.Cmd
	stdin   *os.File
	stderr  *os.File
	Address string
	ID      string

	mu         sync.Mutex
	seen       []string
	taken      []bool
	base       int
	last       int
	grew       chan struct{}
	ended      bool
	exited     chan struct{}
	readerDone chan struct{}
	exitErr    error
	killed     bool
}

// startChild starts a child node and waits for it to be a member.
func startChild(t testing.TB, cfg childConfig) *child {
	t.Helper()
	raw, _ := json.Marshal(cfg)
	c := &child{t: t, cfg: cfg, grew: make(chan struct{}), exited: make(chan struct{}), readerDone: make(chan struct{})}
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
	go func() {
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
	t.Cleanup(func() {
		c.stop()
		if !c.killed && c.exitErr != nil {
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
	f := c.expect(20*time.Second, "READY")
	c.Address, c.ID = f[1], f[2]
	return c
}

// find waits until the log holds a line, not taken by an earlier wait and
// at or after the base, that match accepts; it takes that line and
// returns its fields.
func (c *child) find(d time.Duration, match func(f []string) bool) ([]string, error) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	next := 0
	for {
		// match runs without the lock: it may fail the test (Goexit).
		type line struct {
			i int
			f []string
		}
		var lines []line
		c.mu.Lock()
		for i := max(next, c.base); i < len(c.seen); i++ {
			if !c.taken[i] {
				lines = append(lines, line{i, strings.Fields(c.seen[i])})
			}
		}
		next = len(c.seen)
		ended, grew := c.ended, c.grew
		c.mu.Unlock()
		for _, l := range lines {
			if len(l.f) == 0 || !match(l.f) {
				continue
			}
			c.mu.Lock()
			took := !c.taken[l.i]
			if took {
				c.taken[l.i], c.last = true, l.i
			}
			c.mu.Unlock()
			if took {
				return l.f, nil
			}
		}
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

// expect waits for a line starting with prefix.
func (c *child) expect(d time.Duration, prefix string) []string {
	c.t.Helper()
	return c.awaitLine(d, strconv.Quote(prefix), func(f []string) bool { return strings.HasPrefix(strings.Join(f, " "), prefix) })
}

// await is expect that reports a miss instead of failing.
func (c *child) await(d time.Duration, prefix string) ([]string, bool) {
	f, err := c.find(d, func(f []string) bool { return strings.HasPrefix(strings.Join(f, " "), prefix) })
	return f, err == nil
}

// jobLine waits for the line starting with prefix (RESTARTS, RESULT); a
// JOBERROR first fails the test.
func (c *child) jobLine(d time.Duration, prefix string) []string {
	c.t.Helper()
	return c.awaitLine(d, prefix, func(f []string) bool {
		if f[0] == "JOBERROR" {
			c.t.Fatalf("the job failed on %s: %s", c.cfg.Name, strings.Join(f[1:], " "))
		}
		return f[0] == prefix
	})
}

// event waits for EVENT kind about the member with that id.
func (c *child) event(d time.Duration, kind, id string) {
	c.t.Helper()
	c.awaitLine(d, "EVENT "+kind+" "+id, func(f []string) bool { return len(f) == 4 && f[0] == "EVENT" && f[1] == kind && f[3] == id })
}

func (c *child) skipTo(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.base = i
}

func (c *child) lastMatch() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

func (c *child) seenLines() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.seen...)
}

func (c *child) send(cmd string) {
	c.t.Helper()
	if _, err := fmt.Fprintln(c.stdin, cmd); err != nil {
		c.t.Fatalf("child %s: %s: %v", c.cfg.Name, cmd, err)
	}
}

// kill SIGKILLs the child and waits for it to exit and for its last lines.
func (c *child) kill() {
	c.killed = true
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.exited
	<-c.readerDone
}

// stop closes the child's stdin, which ends it, or kills it after a while.
func (c *child) stop() {
	c.stdin.Close()
	_ = c.cmd.Process.Signal(syscall.SIGCONT) // a paused child must be able to stop
	select {
	case <-c.exited:
	case <-time.After(15 * time.Second):
		c.kill()
	}
	<-c.readerDone
}

// pause stops the child (SIGSTOP), as a long garbage-collection pause
// would; resume lets it go on.
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

func (c *child) port() int {
	_, p, _ := strings.Cut(c.Address, ":")
	n, _ := strconv.Atoi(p)
	return n
}

func atou(s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		panic(fmt.Sprintf("not a number: %q", s))
	}
	return n
}
