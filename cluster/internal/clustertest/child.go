// Package clustertest holds what the cluster's process tests share, in
// package cluster and in the provider modules under cluster/ (cluster/etcd):
// a node in a child process that the test drives through its stdin and
// reads through its stdout (Child), network namespaces with links the test
// cuts (NetLab), and the counting job those tests run and check (CountingJob,
// Report, WantCounts).
//
// A test binary is its own child: the test starts os.Args[0] with
// -test.run=^TestChildNode$ and the child's configuration in an environment
// variable; TestChildNode, skipped without it, runs the node:
//
//	func TestChildNode(t *testing.T) {
//		raw := os.Getenv(childEnv)
//		if raw == "" {
//			t.Skip("the child process of the process tests")
//		}
//		// decode raw, start a node, print READY <address> <id>, obey stdin
//	}
//
//	c := clustertest.Start(t, cfg.Name, cfg, clustertest.Spec{Env: childEnv})
//	c.Send("run counting 1000 " + dir)
//	f := c.Expect(10*time.Second, "RESULT")
//
// Every wait searches the child's whole output: a line is found wherever it
// comes in the stream, never passed over because another was awaited first,
// and a line one wait returned no later wait returns.
package clustertest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Spec says how to start a child.
type Spec struct {
	// Env is the environment variable that carries the configuration
	// (JSON) to the child's TestChildNode.
	Env string
	// Netns, when set, runs the child in that network namespace (ip netns
	// exec).
	Netns string
	// Ready bounds the wait for the child's READY line. Default 10 s.
	Ready time.Duration
}

// Child is a node in a child process; Cfg is the configuration it was
// started with.
type Child[C any] struct {
	Cfg     C
	Name    string
	Address string // from the child's READY line
	ID      string

	t      testing.TB
	cmd    *exec.Cmd
	stdin  *os.File
	stderr *os.File

	mu     sync.Mutex
	seen   []string      // every line so far
	taken  []bool        // taken[i]: a wait returned seen[i]; no later wait returns it
	base   int           // waits look at seen[base:] only (see SkipTo)
	last   int           // index of the line the last successful wait returned
	grew   chan struct{} // closed and replaced when a line comes or the output ends
	ended  bool          // all output read
	exited chan struct{}
	// readerDone is closed when all of the child's output has been read.
	readerDone chan struct{}
	exitErr    error // after exited
	killed     bool
}

// siblings are the children of each test still running: its cleanup asks
// them all to stop at once, then waits for each.
var (
	siblingsMu sync.Mutex
	siblings   = map[testing.TB][]func(){}
)

// Start starts a child node with the configuration cfg and waits for its
// READY <address> <id> line. The test's cleanup stops it (closing its
// stdin), fails the test when it exited with an error it was not killed
// for (a data race in the child, say), and logs its output and stderr when
// the test failed.
func Start[C any](t testing.TB, name string, cfg C, s Spec) *Child[C] {
	t.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &Child[C]{Cfg: cfg, Name: name, t: t, grew: make(chan struct{}), exited: make(chan struct{}), readerDone: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], "-test.run=^TestChildNode$")
	if s.Netns != "" {
		c.cmd = exec.Command("ip", "netns", "exec", s.Netns, os.Args[0], "-test.run=^TestChildNode$")
	}
	c.cmd.Env = append(os.Environ(), s.Env+"="+string(raw))
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c.stderr, err = os.CreateTemp(t.TempDir(), name+"-stderr-*")
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
	go func() { // ends when the child's stdout closes
		defer close(c.readerDone)
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
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
	siblings[t] = append(siblings[t], func() { c.stdin.Close() })
	siblingsMu.Unlock()
	t.Cleanup(func() {
		siblingsMu.Lock()
		for _, closeStdin := range siblings[t] {
			closeStdin()
		}
		delete(siblings, t)
		siblingsMu.Unlock()
		c.Stop()
		if !c.killed && c.exitErr != nil {
			t.Errorf("child %s: %v", name, c.exitErr)
		}
		if t.Failed() {
			c.mu.Lock()
			t.Logf("child %s said:\n%s", name, strings.Join(c.seen, "\n"))
			c.mu.Unlock()
			if b, _ := os.ReadFile(c.stderr.Name()); len(b) > 0 {
				t.Logf("child %s stderr:\n%s", name, b)
			}
		}
	})
	ready := s.Ready
	if ready == 0 {
		ready = 10 * time.Second
	}
	f := c.Expect(ready, "READY")
	if len(f) < 3 {
		t.Fatalf("child %s: READY line %q has no address and id", name, strings.Join(f, " "))
	}
	c.Address, c.ID = f[1], f[2]
	return c
}

// Expect waits for a line starting with prefix and returns its fields; it
// fails the test when d passes or the child's output ends first.
func (c *Child[C]) Expect(d time.Duration, prefix string) []string {
	c.t.Helper()
	return c.AwaitLine(d, strconv.Quote(prefix), func(f []string) bool { return strings.HasPrefix(strings.Join(f, " "), prefix) })
}

// Await is Expect that reports a miss instead of failing the test.
func (c *Child[C]) Await(d time.Duration, prefix string) ([]string, bool) {
	f, err := c.Find(d, func(f []string) bool { return strings.HasPrefix(strings.Join(f, " "), prefix) })
	return f, err == nil
}

// Errors of Find.
var (
	ErrEnded    = errors.New("the child's output ended")
	ErrTimedOut = errors.New("timed out")
)

// Find waits until the log holds a line, not taken by an earlier wait and
// at or after the base (SkipTo), that match accepts; it takes the first
// such line and returns its fields. It fails with ErrTimedOut when d passes
// and with ErrEnded when the output ends with no such line. match runs
// without the log's lock, so it may fail the test.
func (c *Child[C]) Find(d time.Duration, match func(f []string) bool) ([]string, error) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	next := 0
	for {
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
			return nil, ErrEnded
		}
		select {
		case <-grew:
		case <-timer.C:
			return nil, ErrTimedOut
		}
	}
}

// AwaitLine waits for a line that match accepts and returns its fields;
// what names the line in the failure.
func (c *Child[C]) AwaitLine(d time.Duration, what string, match func(f []string) bool) []string {
	c.t.Helper()
	f, err := c.Find(d, match)
	switch {
	case err == nil:
		return f
	case errors.Is(err, ErrEnded):
		c.t.Fatalf("child %s exited before %s", c.Name, what)
	default:
		c.t.Fatalf("child %s: no %s within %v", c.Name, what, d)
	}
	return nil
}

// AwaitAll waits until the child has printed every one of lines (prefixes,
// in any order, among others).
func (c *Child[C]) AwaitAll(d time.Duration, lines ...string) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for _, l := range lines {
		c.AwaitLine(time.Until(deadline), fmt.Sprintf("%q (of %q)", l, lines), func(f []string) bool {
			return strings.HasPrefix(strings.Join(f, " "), l)
		})
	}
}

// JobLine waits for a line whose first field is prefix; a JOBERROR line
// first fails the test with the job's error.
func (c *Child[C]) JobLine(d time.Duration, prefix string) []string {
	c.t.Helper()
	f := c.AwaitLine(d, prefix, func(f []string) bool { return f[0] == "JOBERROR" || f[0] == prefix })
	if f[0] == "JOBERROR" {
		c.t.Fatalf("the job failed on %s: %s", c.Name, strings.Join(f[1:], " "))
	}
	return f
}

// Until waits until cond holds over the lines the child printed so far.
func (c *Child[C]) Until(d time.Duration, what string, cond func(lines []string) bool) {
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
			c.t.Fatalf("child %s exited before %s", c.Name, what)
		}
		select {
		case <-grew:
		case <-timer.C:
			c.t.Fatalf("child %s: no %s within %v", c.Name, what, d)
		}
	}
}

// SkipTo makes the waits that follow look only at lines from index i on
// (LenSeen for the lines still to come; LastMatch+1 for those after the
// line the last wait returned).
func (c *Child[C]) SkipTo(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.base = i
}

// LenSeen is the number of lines the child printed so far.
func (c *Child[C]) LenSeen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

// LastMatch is the index of the line the last successful wait returned.
func (c *Child[C]) LastMatch() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// SeenLines returns every line the child printed so far.
func (c *Child[C]) SeenLines() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.seen)
}

// LastCompleted is the newest checkpoint the child reported completed
// (COMPLETED <job> <id>).
func (c *Child[C]) LastCompleted(job string) uint64 {
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

// Send writes a command line to the child's stdin.
func (c *Child[C]) Send(cmd string) {
	c.t.Helper()
	if _, err := fmt.Fprintln(c.stdin, cmd); err != nil {
		c.t.Fatalf("child %s: %s: %v", c.Name, cmd, err)
	}
}

// Kill SIGKILLs the child and waits for it to exit and for its last lines
// (in the log; the ones not yet awaited stay there).
func (c *Child[C]) Kill() {
	c.killed = true
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.exited
	<-c.readerDone
}

// Stop closes the child's stdin, which ends it, or kills it after 15 s.
func (c *Child[C]) Stop() {
	c.stdin.Close()
	select {
	case <-c.exited:
	case <-time.After(15 * time.Second):
		c.Kill()
	}
	<-c.readerDone
}

// Pause stops the child (SIGSTOP) as a long garbage-collection pause or a
// partition would; Resume lets it go on (SIGCONT).
func (c *Child[C]) Pause() {
	c.t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		c.t.Fatalf("child %s: SIGSTOP: %v", c.Name, err)
	}
}

// Resume lets a paused child go on.
func (c *Child[C]) Resume() {
	c.t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		c.t.Fatalf("child %s: SIGCONT: %v", c.Name, err)
	}
}

// Port is the port of the child's address.
func (c *Child[C]) Port() int {
	_, p, _ := strings.Cut(c.Address, ":")
	n, _ := strconv.Atoi(p)
	return n
}

// Pid is the child's process id.
func (c *Child[C]) Pid() int { return c.cmd.Process.Pid }

// T is the test the child belongs to.
func (c *Child[C]) T() testing.TB { return c.t }

// First waits for the first of the children to print a line starting with
// prefix, takes it, and returns that child with the line's fields; it fails
// the test when d passes first.
func First[C any](t testing.TB, d time.Duration, prefix string, children ...*Child[C]) (*Child[C], []string) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(deadline.C)}}
		for _, c := range children {
			c.mu.Lock()
			grew, ended := c.grew, c.ended
			c.mu.Unlock()
			if f, ok := c.Await(0, prefix); ok {
				return c, f
			}
			if !ended { // an ended child's channel stays closed: nothing more to wait for
				cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(grew)})
			}
		}
		if i, _, _ := reflect.Select(cases); i == 0 {
			t.Fatalf("no %q from any of the children within %v", prefix, d)
			return nil, nil
		}
	}
}
