package etcd_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// ownEtcd is a 3-member etcd that a test starts in child processes of its
// own (the etcd binary of Debian's etcd-server), to kill its members.
type ownEtcd struct {
	t         *testing.T
	endpoints []string
	members   []*exec.Cmd
	exited    []chan struct{}
}

// startOwnEtcd starts a 3-member etcd on free loopback ports, data in
// t.TempDir(), and waits until it has a leader.
func startOwnEtcd(t *testing.T) *ownEtcd {
	t.Helper()
	return startOwnEtcdIn(t, "127.0.0.1", "")
}

// startOwnEtcdIn is startOwnEtcd on host, in network namespace netns
// ("": this one).
func startOwnEtcdIn(t *testing.T, host, netns string) *ownEtcd {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		if os.Getenv("SLUICE_REQUIRE_ETCD") == "1" || os.Getenv("SLUICE_REQUIRE_SERVICES") == "1" {
			t.Fatalf("no etcd binary: %v (bash .ci/services installs etcd-server)", err)
		}
		t.Skipf("no etcd binary: %v", err)
	}
	next := 42000 + int(time.Now().UnixNano()%1000)*10 // in a namespace of the test's own: free
	free := func() int {
		if netns != "" {
			next++
			return next
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	dir := t.TempDir()
	e := &ownEtcd{t: t}
	var peers []string
	type ports struct{ client, peer int }
	var ps []ports
	for i := range 3 {
		p := ports{free(), free()}
		ps = append(ps, p)
		peers = append(peers, fmt.Sprintf("m%d=http://%s:%d", i, host, p.peer))
		e.endpoints = append(e.endpoints, fmt.Sprintf("%s:%d", host, p.client))
	}
	for i, p := range ps {
		log, err := os.Create(filepath.Join(dir, fmt.Sprintf("m%d.log", i)))
		if err != nil {
			t.Fatal(err)
		}
		args := []string{bin, "--name", fmt.Sprintf("m%d", i), "--data-dir", filepath.Join(dir, fmt.Sprintf("m%d", i)),
			"--listen-client-urls", "http://" + e.endpoints[i], "--advertise-client-urls", "http://" + e.endpoints[i],
			"--listen-peer-urls", fmt.Sprintf("http://%s:%d", host, p.peer), "--initial-advertise-peer-urls", fmt.Sprintf("http://%s:%d", host, p.peer),
			"--initial-cluster", strings.Join(peers, ","), "--initial-cluster-state", "new", "--initial-cluster-token", filepath.Base(dir),
			"--heartbeat-interval", "100", "--election-timeout", "1000"}
		if netns != "" {
			args = append([]string{"ip", "netns", "exec", netns}, args...)
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); log.Close(); close(exited) }()
		e.members, e.exited = append(e.members, cmd), append(e.exited, exited)
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-exited
		})
	}
	e.leader(30 * time.Second)
	return e
}

// leader returns the index of the member that leads, waiting up to d for
// one (a bounded poll: etcd's status has no event to wait on).
func (e *ownEtcd) leader(d time.Duration) int {
	e.t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		e.t.Fatal(err)
	}
	defer cli.Close()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		for i, ep := range e.endpoints {
			select {
			case <-e.exited[i]:
				continue
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := cli.Status(ctx, ep)
			cancel()
			if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
				return i
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("etcd at %v: no leader within %v", e.endpoints, d)
		}
		<-tick.C
	}
}

// kill SIGKILLs member i.
func (e *ownEtcd) Kill(i int) {
	_ = e.members[i].Process.Signal(syscall.SIGKILL)
	<-e.exited[i]
}

// outageLease is the nodes' lease in the tests that kill etcd's leader:
// long enough to outlast its re-election (a node fences itself 5.3 s after
// the send time of its last confirmed renewal; etcd elects within about
// two election timeouts, 2 s, up to 3 s on a loaded machine).
const outageLease = 8 * time.Second

// outageCluster is etcdCluster on the test's own etcd, with leases of
// outageLease.
func outageCluster(t *testing.T, e *ownEtcd, dir string) (a, b, c *child) {
	t.Helper()
	a, b, c, _ = etcdClusterWith(t, e.endpoints, dir, outageLease)
	return a, b, c
}

// The etcd leader is SIGKILLed while a job runs: etcd elects another, and
// the job goes on where it was (no member leaves, nothing is taken over,
// no restart); its result is exact.
func TestEtcdLeaderKilledJobGoesOn(t *testing.T) {
	modes(t, func(t *testing.T) {
		e := startOwnEtcd(t)
		dir := t.TempDir()
		a, b, c := outageCluster(t, e, dir)
		runCounting(t, a, dir)
		l := e.leader(10 * time.Second)
		e.Kill(l)
		killed := time.Now()
		nl := e.leader(20 * time.Second)
		t.Logf("killed etcd's leader m%d; etcd elected m%d within %v", l, nl, time.Since(killed).Round(time.Millisecond))
		// Checkpoints complete after the re-election (committed in etcd in
		// leadership mode).
		last := uint64(0)
		for _, line := range a.SeenLines() {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "CHECKPOINT" {
				last = max(last, atou(f[1]))
			}
		}
		a.AwaitLine(30*time.Second, "a checkpoint after etcd's re-election", func(f []string) bool {
			return len(f) == 2 && f[0] == "CHECKPOINT" && atou(f[1]) > last+2
		})
		open(a, b, c)
		r := a.JobLine(2*time.Minute, "RESTARTS")
		if r[1] != "0" {
			t.Errorf("the job restarted %s times over etcd's re-election", r[1])
		}
		if got := a.Expect(10*time.Second, "RESULT"); got[1] != wantCounts(jobRecords) {
			t.Fatalf("result %v, want %s", got, wantCounts(jobRecords))
		}
		for _, ch := range []*child{a, b, c} {
			for _, line := range ch.SeenLines() {
				if strings.HasPrefix(line, "EVENT left") || strings.HasPrefix(line, "EVENT excluded") || strings.HasPrefix(line, "TOOKOVER") {
					t.Errorf("%s: %q over etcd's re-election", ch.Cfg.Name, line)
				}
			}
		}
	})
}

// The etcd leader and the job's coordinator are SIGKILLed together: once
// etcd has a leader again, the coordinator's lease expires and a survivor
// takes the job over; the result is exact.
func TestEtcdLeaderAndCoordinatorKilled(t *testing.T) {
	modes(t, func(t *testing.T) {
		e := startOwnEtcd(t)
		dir := t.TempDir()
		a, b, c := outageCluster(t, e, dir)
		runCounting(t, a, dir)
		l := e.leader(10 * time.Second)
		e.Kill(l)
		a.Kill()
		winner, took := firstLine(t, 60*time.Second, "TOOKOVER", b, c)
		t.Logf("%s took the job over from %s at checkpoint %s", winner.Cfg.Name, took[2], took[3])
		open(b, c)
		if got := winner.JobLine(2*time.Minute, "RESULT"); got[1] != wantCounts(jobRecords) {
			t.Fatalf("result %v, want %s", got, wantCounts(jobRecords))
		}
	})
}
