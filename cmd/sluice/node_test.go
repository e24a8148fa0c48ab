package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

const nodeChildEnv = "SLUICE_NODE_CHILD_ARGS"

// TestNodeChild runs `sluice node` with the arguments the parent test put
// in the environment; it is skipped unless a test started it.
func TestNodeChild(t *testing.T) {
	args := os.Getenv(nodeChildEnv)
	if args == "" {
		t.Skip("the child process of TestNodeCommand")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	root := newRoot(os.Stdout, os.Stderr)
	root.SetArgs(strings.Split(args, "\x1f"))
	if err := root.ExecuteContext(ctx); err != nil {
		t.Fatal(err)
	}
}

// startNodeProcess runs `sluice node` in a child process and returns its
// address once it listens, and a channel of its later output lines.
func startNodeProcess(t *testing.T, args ...string) (*exec.Cmd, string, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestNodeChild$")
	cmd.Env = append(os.Environ(), nodeChildEnv+"="+strings.Join(append([]string{"node"}, args...), "\x1f"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() { // ends when the child's stdout closes
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	for line := range waitLines(t, lines, 15*time.Second) {
		// node NAME listening on ADDR (id ID)
		if f := strings.Fields(line); len(f) >= 5 && f[0] == "node" && f[2] == "listening" {
			return cmd, f[4], lines
		}
	}
	t.Fatal("the node did not start")
	return nil, "", nil
}

// waitLines yields lines until d passes or the channel closes.
func waitLines(t *testing.T, lines <-chan string, d time.Duration) func(func(string) bool) {
	return func(yield func(string) bool) {
		timer := time.NewTimer(d)
		defer timer.Stop()
		for {
			select {
			case line, ok := <-lines:
				if !ok || !yield(line) {
					return
				}
			case <-timer.C:
				return
			}
		}
	}
}

// TestNodeCommand runs two nodes as `sluice node` processes, watches them
// find each other, asks them with `sluice node status`, and stops one with
// SIGTERM.
func TestNodeCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes")
	}
	// `sluice node status` is no member: the nodes must allow it.
	a, addrA, linesA := startNodeProcess(t, "--name", "n1", "--data", t.TempDir(), "--failure-timeout", "2s", "--status-clients", "*")
	b, addrB, linesB := startNodeProcess(t, "--name", "n2", "--peers", addrA, "--data", t.TempDir(), "--failure-timeout", "2s", "--status-clients", "*")
	joined := false
	for line := range waitLines(t, linesA, 15*time.Second) {
		if strings.Contains(line, " joined n2 "+addrB) {
			joined = true
			break
		}
	}
	if !joined {
		t.Fatal("n1 did not log n2 joining")
	}
	out, errOut, err := execute(t, "node", "status", "--peers", addrA+","+addrB)
	if err != nil {
		t.Fatalf("node status: %v\n%s", err, errOut)
	}
	for _, want := range []string{"node n1 at " + addrA, "node n2 at " + addrB, "members (2): n1 " + addrA + ", n2 " + addrB, "codec: packed"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	// SIGTERM stops n2 cleanly; n1 logs it leaving.
	if err := b.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	stopped := false
	for line := range waitLines(t, linesB, 15*time.Second) {
		stopped = stopped || strings.Contains(line, "node n2 stopped")
	}
	if err := b.Wait(); err != nil || !stopped {
		t.Errorf("n2 after SIGTERM: exit %v, said stopped: %v", err, stopped)
	}
	left := false
	for line := range waitLines(t, linesA, 10*time.Second) {
		if strings.Contains(line, " left n2 ") {
			left = true
			break
		}
	}
	if !left {
		t.Error("n1 did not log n2 leaving")
	}
	_ = a
	// (One status client per test process: protoactor's remote sets gRPC's
	// global logger each time one starts.)
	if _, _, err := execute(t, "node", "status"); err == nil || !strings.Contains(err.Error(), "--peers") {
		t.Errorf("status without --peers: %v", err)
	}
	if _, _, err := execute(t, "node", "--port", "1"); err == nil || !strings.Contains(err.Error(), "--name") {
		t.Errorf("node without --name: %v", err)
	}
}
