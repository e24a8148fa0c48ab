package cluster_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// netLab is a set of network namespaces of the test's own, one per node,
// each with a veth pair whose other end is on one bridge: nodes in them
// talk over real sockets, and a cut takes a node's end off the bridge.
type netLab struct {
	t      *testing.T
	ns, ip []string
	ports  []string // the bridge's end of each namespace's veth pair
}

// newNetLab makes n namespaces, or skips the test with the reason when it
// cannot (not root, no iproute2, no namespaces in this container).
func newNetLab(t *testing.T, n int) *netLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("network namespaces need iproute2's ip (apt-get install iproute2)")
	}
	seed := rand.Uint64()
	t.Logf("network lab seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	sfx := fmt.Sprintf("%04x", r.IntN(1<<16))
	subnet := fmt.Sprintf("10.%d.%d", 100+r.IntN(100), r.IntN(256))
	lab := &netLab{t: t}
	bridge := "slbr" + sfx
	run := func(args ...string) error {
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	t.Cleanup(func() {
		for _, p := range lab.ports { // the pair goes with it
			_ = run("link", "del", p)
		}
		_ = run("link", "del", bridge)
		for _, ns := range lab.ns {
			_ = run("netns", "del", ns)
		}
	})
	if err := run("link", "add", bridge, "type", "bridge"); err != nil {
		t.Skipf("network namespaces: %v", err)
	}
	steps := [][]string{{"link", "set", bridge, "up"}}
	for i := range n {
		ns, in, out := fmt.Sprintf("sl%s-%d", sfx, i), fmt.Sprintf("slv%s%d", sfx, i), fmt.Sprintf("slp%s%d", sfx, i)
		ip := fmt.Sprintf("%s.%d", subnet, i+1)
		lab.ns, lab.ip, lab.ports = append(lab.ns, ns), append(lab.ip, ip), append(lab.ports, out)
		steps = append(steps,
			[]string{"netns", "add", ns},
			[]string{"link", "add", in, "type", "veth", "peer", "name", out},
			[]string{"link", "set", in, "netns", ns},
			[]string{"link", "set", out, "master", bridge, "up"},
			[]string{"-n", ns, "addr", "add", ip + "/24", "dev", in},
			[]string{"-n", ns, "link", "set", in, "up"},
			[]string{"-n", ns, "link", "set", "lo", "up"})
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			t.Skipf("network namespaces: %v", err)
		}
	}
	t.Logf("network lab: bridge %s, namespaces %v, addresses %v", bridge, lab.ns, lab.ip)
	return lab
}

// cutBetween drops every packet between namespaces i and j (in i, both
// ways, with nftables), leaving their links to the others up: a partition
// that is not transitive. It skips the test when nft is missing.
func (l *netLab) cutBetween(i, j int) {
	l.t.Helper()
	if _, err := exec.LookPath("nft"); err != nil {
		l.t.Skip("a cut between two nodes needs nftables' nft (apt-get install nftables)")
	}
	for _, cmd := range [][]string{
		{"add", "table", "inet", "slcut"},
		{"add", "chain", "inet", "slcut", "in", "{ type filter hook input priority 0; }"},
		{"add", "chain", "inet", "slcut", "out", "{ type filter hook output priority 0; }"},
		{"add", "rule", "inet", "slcut", "in", "ip", "saddr", l.ip[j], "drop"},
		{"add", "rule", "inet", "slcut", "out", "ip", "daddr", l.ip[j], "drop"},
	} {
		args := append([]string{"netns", "exec", l.ns[i], "nft"}, cmd...)
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			l.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
}

// cut takes namespace i off the bridge (both directions); heal puts it
// back.
func (l *netLab) cut(i int)  { l.link(i, "down") }
func (l *netLab) heal(i int) { l.link(i, "up") }

func (l *netLab) link(i int, state string) {
	l.t.Helper()
	if out, err := exec.Command("ip", "link", "set", l.ports[i], state).CombinedOutput(); err != nil {
		l.t.Fatalf("ip link set %s %s: %v: %s", l.ports[i], state, err, out)
	}
}

// TestPartitionCoordinatorCutOff: three nodes in network namespaces run
// the counting job, coordinated by a, with checkpoints; a's link is cut
// mid-stream. a has not heard from a majority of the job's copies within
// its lease: it stops the job (sources and sinks) and does not restart it.
// One of b and c is elected, waits out the lease, and takes the job over
// from the newest checkpoint; the result equals the plain loop's, and a's
// run ended before the new coordinator's began: no two coordinators ran
// the job (its sources and sinks) at the same time.
func TestPartitionCoordinatorCutOff(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes")
	}
	lab := newNetLab(t, 3)
	dir := t.TempDir()
	cl := "part-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cfg := func(i int, name string, peers ...string) childConfig {
		return childConfig{Name: name, Cluster: cl, Host: lab.ip[i], Insecure: true, Netns: lab.ns[i], Peers: peers,
			Store: storeIn(t, name), FailureTimeout: procFailureTimeout, Replicas: -1, JobN: jobRecords, JobDir: dir}
	}
	a := startChild(t, cfg(0, "a"))
	b := startChild(t, cfg(1, "b", a.Address))
	c := startChild(t, cfg(2, "c", a.Address))
	a.awaitAll(15*time.Second, "EVENT joined b", "EVENT joined c")
	b.awaitAll(15*time.Second, "EVENT joined c")
	want := wantCounts(jobRecords)
	a.send(fmt.Sprintf("run counting %d %s", jobRecords, dir))
	a.awaitLine(30*time.Second, "checkpoint 3", func(f []string) bool { return len(f) == 2 && f[0] == "CHECKPOINT" && atou(f[1]) >= 3 })
	lab.cut(0)
	cutAt := time.Now()
	t.Logf("cut a off")

	end := a.awaitLine(30*time.Second, "the end of a's run", func(f []string) bool {
		if f[0] == "RESULT" {
			t.Fatalf("a finished its run alone: %v", f)
		}
		return f[0] == "RUNEND"
	})
	aEnd := time.Unix(0, int64(atou(end[1])))
	why := a.expect(10*time.Second, "JOBERROR")
	if !strings.Contains(strings.Join(why, " "), "lease") {
		t.Errorf("a's run ended with %v, want its lease", why)
	}
	winner, took := firstLine(t, 30*time.Second, "TOOKOVER", b, c)
	tookAt := time.Unix(0, int64(atou(took[4])))
	t.Logf("a stopped its run %v after the cut; %s took the job over at checkpoint %s, %v after the cut (%v after a stopped)",
		aEnd.Sub(cutAt), winner.cfg.Name, took[3], tookAt.Sub(cutAt), tookAt.Sub(aEnd))
	if !aEnd.Before(tookAt) {
		t.Errorf("two coordinators at once: a ran until %v, %s began at %v", aEnd.Format(time.RFC3339Nano), winner.cfg.Name, tookAt.Format(time.RFC3339Nano))
	}
	got := winner.jobLine(2*time.Minute, "RESULT")
	if len(got) != 2 || got[1] != want {
		t.Fatalf("result after the partition:\n%v\nwant the plain loop's\n%s", got, want)
	}
	for _, l := range a.seenLines() {
		if strings.HasPrefix(l, "TOOKOVER") || strings.HasPrefix(l, "RESTARTS") {
			t.Errorf("a, cut off: %s", l)
		}
	}
	// The partition heals: a learns that the others declared it lost.
	lab.heal(0)
	a.expect(15*time.Second, "EVENT excluded")
}

// TestPartitionMinorityCutOffHeals: a node that hosts instances of the
// counting job (not its coordinator) is cut off mid-stream. The
// coordinator still hears from a majority of the job's copies: it keeps
// the job, which restarts on the two nodes left from its last checkpoint;
// the cut-off node, alone, cannot win the job's log (it stands, but gets
// no votes). When the partition heals, it learns that it was declared
// lost. The result equals the plain loop's.
func TestPartitionMinorityCutOffHeals(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes")
	}
	lab := newNetLab(t, 3)
	dir := t.TempDir()
	cl := "minority-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cfg := func(i int, name string, peers ...string) childConfig {
		return childConfig{Name: name, Cluster: cl, Host: lab.ip[i], Insecure: true, Netns: lab.ns[i], Peers: peers,
			Store: storeIn(t, name), FailureTimeout: procFailureTimeout, Replicas: -1, JobN: jobRecords, JobDir: dir}
	}
	a := startChild(t, cfg(0, "a"))
	b := startChild(t, cfg(1, "b", a.Address))
	c := startChild(t, cfg(2, "c", a.Address))
	a.awaitAll(15*time.Second, "EVENT joined b", "EVENT joined c")
	b.awaitAll(15*time.Second, "EVENT joined c")
	want := wantCounts(jobRecords)
	a.send(fmt.Sprintf("run counting %d %s", jobRecords, dir))
	where := placed(a, 20*time.Second)
	if where[c.Address] == 0 {
		t.Fatalf("no instance on c: %v", where)
	}
	a.awaitLine(30*time.Second, "checkpoint 3", func(f []string) bool { return len(f) == 2 && f[0] == "CHECKPOINT" && atou(f[1]) >= 3 })
	lab.cut(2)
	t.Logf("cut c off")
	a.awaitLine(15*time.Second, "c leaving", func(f []string) bool { return len(f) >= 3 && f[0] == "EVENT" && f[1] == "left" && f[2] == "c" })
	// c has stood (it is a copy of the job's log) once it stopped hearing
	// from a for two FailureTimeouts; give it that and more before healing.
	c.awaitLine(15*time.Second, "a leaving, in c's view", func(f []string) bool { return len(f) >= 3 && f[0] == "EVENT" && f[1] == "left" && f[2] == "a" })
	<-time.After(3 * procFailureTimeout)
	lab.heal(2)
	c.expect(15*time.Second, "EVENT excluded")
	r := a.jobLine(2*time.Minute, "RESTARTS")
	if r[1] == "0" {
		t.Errorf("the job did not restart without c: %v", r)
	}
	if got := a.expect(10*time.Second, "RESULT"); len(got) != 2 || got[1] != want {
		t.Fatalf("result after the partition:\n%v\nwant the plain loop's\n%s", got, want)
	}
	for _, n := range []*child{b, c} {
		for _, l := range n.seenLines() {
			if strings.HasPrefix(l, "TOOKOVER") {
				t.Errorf("%s took the job over: %s", n.cfg.Name, l)
			}
		}
	}
}

// TestPartitionNotTransitive: the coordinator a and c can no longer reach
// each other, while b reaches both. a still hears from b, a majority of
// the job's copies with itself: it keeps the job, which restarts without
// c. c stops hearing from a and stands, but b, which still has a as a
// member, refuses its claim: nobody takes the job over, and the result
// equals the plain loop's.
func TestPartitionNotTransitive(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes")
	}
	lab := newNetLab(t, 3)
	dir := t.TempDir()
	cl := "nontransitive-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cfg := func(i int, name string, peers ...string) childConfig {
		return childConfig{Name: name, Cluster: cl, Host: lab.ip[i], Insecure: true, Netns: lab.ns[i], Peers: peers,
			Store: storeIn(t, name), FailureTimeout: procFailureTimeout, Replicas: -1, JobN: jobRecords, JobDir: dir}
	}
	a := startChild(t, cfg(0, "a"))
	b := startChild(t, cfg(1, "b", a.Address))
	c := startChild(t, cfg(2, "c", a.Address))
	a.awaitAll(15*time.Second, "EVENT joined b", "EVENT joined c")
	b.awaitAll(15*time.Second, "EVENT joined c")
	want := wantCounts(jobRecords)
	a.send(fmt.Sprintf("run counting %d %s", jobRecords, dir))
	a.awaitLine(30*time.Second, "checkpoint 3", func(f []string) bool { return len(f) == 2 && f[0] == "CHECKPOINT" && atou(f[1]) >= 3 })
	lab.cutBetween(0, 2)
	t.Logf("cut a and c apart")
	r := a.jobLine(2*time.Minute, "RESTARTS")
	t.Logf("a: %s restarts", r[1])
	if got := a.expect(10*time.Second, "RESULT"); len(got) != 2 || got[1] != want {
		t.Fatalf("result after the partition:\n%v\nwant the plain loop's\n%s", got, want)
	}
	for _, n := range []*child{b, c} {
		for _, l := range n.seenLines() {
			if strings.HasPrefix(l, "TOOKOVER") {
				t.Errorf("%s took the job over: %s", n.cfg.Name, l)
			}
		}
	}
	if !slices.ContainsFunc(c.seenLines(), func(l string) bool { return strings.HasPrefix(l, "EVENT left a") }) {
		t.Errorf("c never lost a: the cut did not work:\n%s", strings.Join(c.seenLines(), "\n"))
	}
}
