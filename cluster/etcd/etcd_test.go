package etcd_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/sluicehq/sluice/cluster/etcd"
	"github.com/sluicehq/sluice/cluster/internal/clustertest"
)

// The fault tests: three nodes in child processes form a cluster through
// the real 3-member etcd (.ci/services); node a coordinates the counting
// job, whose counters are spread over all three and whose sink writes
// into a folder they share. Each fault's result must equal the plain
// loop's (the fault-free run's).

const (
	testLease   = 3 * time.Second // the members' etcd leases
	testFailure = 1500 * time.Millisecond
)

// etcdCluster starts nodes a, b and c on etcd (a fresh cluster name) that
// can all run the counting job into dir, and waits until each sees the
// others. cfg makes another node's configuration.
func etcdCluster(t *testing.T, eps []string, dir string) (a, b, c *child, cfg func(name string) childConfig) {
	t.Helper()
	return etcdClusterWith(t, eps, dir, testLease)
}

// etcdClusterWith is etcdCluster with leases of ttl.
func etcdClusterWith(t *testing.T, eps []string, dir string, ttl time.Duration) (a, b, c *child, cfg func(name string) childConfig) {
	t.Helper()
	leadership := strings.HasSuffix(t.Name(), "/leadership")
	cl := "etcd-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cfg = func(name string) childConfig {
		return childConfig{Name: name, Cluster: cl, Store: t.TempDir() + "/" + name + ".db", Endpoints: eps, BaseKey: "/sluice-test",
			LeaseTTL: ttl, FailureTimeout: testFailure, JobN: jobRecords, JobDir: dir, HoldSource: true,
			Leadership: leadership}
	}
	a = startChild(t, cfg("a"))
	b = startChild(t, cfg("b"))
	c = startChild(t, cfg("c"))
	event(a, 20*time.Second, "joined", b.ID)
	event(a, 20*time.Second, "joined", c.ID)
	event(b, 20*time.Second, "joined", c.ID)
	// c found a and b registered when it started: they are its members
	// from the start (the events may come before its subscription).
	return a, b, c, cfg
}

// runCounting runs the counting job with a as the coordinator until
// checkpoint 3 has completed; it returns the placement (address ->
// instances).
func runCounting(t *testing.T, a *child, dir string) map[string]int {
	t.Helper()
	a.Send(fmt.Sprintf("run counting %d %s", jobRecords, dir))
	where := map[string]int{}
	f := a.Expect(30*time.Second, "PLACED")
	where[f[1]] = int(atou(f[2]))
	for len(where) < 3 {
		f, ok := a.Await(200*time.Millisecond, "PLACED")
		if !ok {
			break
		}
		where[f[1]] = int(atou(f[2]))
	}
	a.AwaitLine(30*time.Second, "checkpoint 3", func(f []string) bool { return len(f) == 2 && f[0] == "CHECKPOINT" && atou(f[1]) >= 3 })
	return where
}

// firstLine waits for the first of the children to print a line starting
// with prefix, and returns it with the line's fields.
func firstLine(t *testing.T, d time.Duration, prefix string, children ...*child) (*child, []string) {
	t.Helper()
	return clustertest.First(t, d, prefix, children...)
}

func open(children ...*child) {
	for _, c := range children {
		c.Send("open")
	}
	for _, c := range children {
		c.Expect(10*time.Second, "OPENED")
	}
}

func other(one, b, c *child) *child {
	if one == b {
		return c
	}
	return b
}

// Two nodes register in the real etcd: each sees the other join through
// etcd's watch; when one stops, it revokes its lease and the other sees it
// leave.
func TestMembersJoinAndLeaveThroughEtcd(t *testing.T) {
	needEtcd(t)
	cl := "etcd-join-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cfg := func(name string) childConfig {
		return childConfig{Name: name, Cluster: cl, Endpoints: endpoints, BaseKey: "/sluice-test", LeaseTTL: testLease, FailureTimeout: testFailure}
	}
	a := startChild(t, cfg("a"))
	b := startChild(t, cfg("b"))
	event(a, 20*time.Second, "joined", b.ID)
	b.Stop()
	event(a, 20*time.Second, "left", b.ID)
}

// The fault-free run, for comparison: the result is the plain loop's.
func TestEtcdJobFaultFree(t *testing.T) {
	modes(t, func(t *testing.T) {
		needEtcd(t)
		dir := t.TempDir()
		a, b, c, cfg := etcdCluster(t, endpoints, dir)
		runCounting(t, a, dir)
		open(a, b, c)
		if got := a.JobLine(2*time.Minute, "RESULT"); got[1] != wantCounts(jobRecords) {
			t.Fatalf("result %v, want %s", got, wantCounts(jobRecords))
		}
		checkCommitted(t, cfg("x"), "counting", a.ID)
	})
}

// A node hosting counters is SIGKILLed: its lease expires, the others see
// it leave, and the job restarts on the survivors from its last
// checkpoint; the result is exact.
func TestEtcdJobSurvivesKill(t *testing.T) {
	modes(t, func(t *testing.T) {
		needEtcd(t)
		dir := t.TempDir()
		a, b, c, _ := etcdCluster(t, endpoints, dir)
		where := runCounting(t, a, dir)
		victim := b
		if where[b.Address] == 0 {
			victim = c
		}
		if where[victim.Address] == 0 {
			t.Fatalf("no instance on b or c: %v", where)
		}
		victim.Kill()
		event(a, 20*time.Second, "left", victim.ID)
		open(a, other(victim, b, c))
		r := a.JobLine(2*time.Minute, "RESTARTS")
		if r[1] == "0" {
			t.Fatalf("the job did not restart after the kill: %v", r)
		}
		if got := a.Expect(10*time.Second, "RESULT"); got[1] != wantCounts(jobRecords) {
			t.Fatalf("result after the kill %v, want %s", got, wantCounts(jobRecords))
		}
	})
}

// The coordinator is SIGKILLed: once etcd expires its lease, one of the
// survivors takes the job over from the newest checkpoint; the result is
// exact, and only one of them took it over.
func TestEtcdCoordinatorKilled(t *testing.T) {
	modes(t, func(t *testing.T) {
		needEtcd(t)
		dir := t.TempDir()
		a, b, c, cfg := etcdCluster(t, endpoints, dir)
		runCounting(t, a, dir)
		a.Kill()
		winner, took := firstLine(t, 30*time.Second, "TOOKOVER", b, c)
		if took[1] != "counting" || took[2] != "a" {
			t.Fatalf("took over %v, want counting from a", took)
		}
		open(b, c)
		if got := winner.JobLine(2*time.Minute, "RESULT"); got[1] != wantCounts(jobRecords) {
			t.Fatalf("result after the coordinator's kill %v, want %s", got, wantCounts(jobRecords))
		}
		checkCommitted(t, cfg("x"), "counting", winner.ID)
		for _, line := range other(winner, b, c).SeenLines() {
			if strings.HasPrefix(line, "TOOKOVER") {
				t.Fatalf("both survivors took the job over: %q", line)
			}
		}
	})
}

// The coordinator is paused (SIGSTOP) for longer than its lease: etcd
// expires it, the others see a leave and one takes the job over. When a
// resumes, its provider finds no renewal confirmed within the lease and
// fences it: a stops its own run of the job (a zombie must not go on) and
// reports Excluded. The survivor's result is exact; a, restarted, joins
// with a new member id.
func TestEtcdPausedCoordinatorFenced(t *testing.T) {
	modes(t, func(t *testing.T) {
		needEtcd(t)
		dir := t.TempDir()
		a, b, c, cfg := etcdCluster(t, endpoints, dir)
		runCounting(t, a, dir)
		a.Pause()
		winner, took := firstLine(t, 30*time.Second, "TOOKOVER", b, c)
		a.Resume()
		t.Logf("%s took the job over at checkpoint %s while a was paused", winner.Cfg.Name, took[3])
		f := a.AwaitLine(30*time.Second, "the old coordinator's run to stop", func(f []string) bool {
			if f[0] == "RESULT" {
				t.Fatalf("the paused coordinator finished its run: %v", f)
			}
			return f[0] == "JOBERROR"
		})
		if !strings.Contains(strings.Join(f, " "), "lease") {
			t.Errorf("a's run stopped for another reason than its lease: %v", f)
		}
		event(a, 10*time.Second, "excluded", a.ID)
		open(b, c)
		if got := winner.JobLine(2*time.Minute, "RESULT"); got[1] != wantCounts(jobRecords) {
			t.Fatalf("result after the takeover %v, want %s", got, wantCounts(jobRecords))
		}
		checkCommitted(t, cfg("x"), "counting", winner.ID)
		// Fenced, a must restart: its id never comes back; the new process
		// joins with a new one.
		a.Stop()
		again := cfg("a")
		again.Store, again.HoldSource = a.Cfg.Store, false
		back := startChild(t, again)
		if back.ID == a.ID {
			t.Fatalf("the restarted a has the fenced id %s", a.ID)
		}
		event(winner, 20*time.Second, "joined", back.ID)
		for _, ch := range []*child{b, c} {
			n := 0
			for _, line := range ch.SeenLines() {
				if line == "EVENT joined a "+a.ID {
					n++
				}
			}
			if n > 1 {
				t.Errorf("%s saw the fenced id %s join again", ch.Cfg.Name, a.ID)
			}
		}
	})
}

// A node hosting counters is killed; the job goes on without it; the node
// restarts (a new member id, its old port and store), rejoins through etcd
// and hosts instances of the next run, whose result is exact too.
func TestEtcdKilledNodeRejoins(t *testing.T) {
	modes(t, func(t *testing.T) {
		needEtcd(t)
		dir := t.TempDir()
		a, b, c, cfg := etcdCluster(t, endpoints, dir)
		where := runCounting(t, a, dir)
		victim := b
		if where[b.Address] == 0 {
			victim = c
		}
		port, store := victim.Port(), victim.Cfg.Store
		victim.Kill()
		event(a, 20*time.Second, "left", victim.ID)
		open(a, other(victim, b, c))
		if got := a.JobLine(2*time.Minute, "RESULT"); got[1] != wantCounts(jobRecords) {
			t.Fatalf("first run %v, want %s", got, wantCounts(jobRecords))
		}
		a.SkipTo(a.LastMatch() + 1)
		again := cfg(victim.Cfg.Name)
		again.Port, again.Store, again.HoldSource = port, store, false
		back := startChild(t, again)
		event(a, 20*time.Second, "joined", back.ID)
		dir2 := t.TempDir()
		a.Send(fmt.Sprintf("run counting %d %s", jobRecords/3, dir2))
		f := a.Expect(30*time.Second, "PLACED")
		got := map[string]int{f[1]: int(atou(f[2]))}
		for len(got) < 3 {
			f, ok := a.Await(200*time.Millisecond, "PLACED")
			if !ok {
				break
			}
			got[f[1]] = int(atou(f[2]))
		}
		if got[back.Address] == 0 {
			t.Fatalf("the restarted node hosts nothing: %v", got)
		}
		if r := a.JobLine(2*time.Minute, "RESULT"); r[1] != wantCounts(jobRecords/3) {
			t.Fatalf("second run %v, want %s", r, wantCounts(jobRecords/3))
		}
	})
}

// modes runs a fault test in both modes: membership through etcd with the
// copies electing coordinators ("membership"), and coordinators elected in
// etcd with their checkpoints committed there ("leadership").
func modes(t *testing.T, test func(t *testing.T)) {
	for _, m := range []string{"membership", "leadership"} {
		t.Run(m, test)
	}
}

// checkCommitted checks, in leadership mode, that etcd holds the job's
// latest committed checkpoint, committed by the member with id leader.
func checkCommitted(t *testing.T, cfg childConfig, job, leader string) {
	t.Helper()
	if !cfg.Leadership {
		return
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key := cfg.BaseKey + "/" + cfg.Cluster + "/jobs/" + job + "/checkpoint"
	resp, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		t.Fatalf("no committed checkpoint in etcd at %s", key)
	}
	cp, by, err := etcd.DecodePointer(key, resp.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	if by != leader || cp == 0 {
		t.Fatalf("etcd's pointer: checkpoint %d committed by %s, want one committed by %s", cp, by, leader)
	}
	t.Logf("etcd: job %s's latest committed checkpoint %d, by %s", job, cp, by)
}
