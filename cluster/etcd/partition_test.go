package etcd_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// netLab is a set of network namespaces of the test's own, each with a
// veth pair whose other end is on one bridge (as in package cluster's
// partition tests): processes in them talk over real sockets, and nftables
// rules in one cut it from another.
type netLab struct {
	t      *testing.T
	ns, ip []string
	ports  []string
}

// netnsUnavailable skips the test for why, or fails it where partition
// tests are required (SLUICE_REQUIRE_NETNS=1, as .ci/run sets).
func netnsUnavailable(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("SLUICE_REQUIRE_NETNS") == "1" {
		t.Fatal(why + " (required: SLUICE_REQUIRE_NETNS=1)")
	}
	t.Skip(why)
}

func newNetLab(t *testing.T, n int) *netLab {
	t.Helper()
	if os.Geteuid() != 0 {
		netnsUnavailable(t, "network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		netnsUnavailable(t, "network namespaces need iproute2's ip")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		netnsUnavailable(t, "a cut needs nftables' nft")
	}
	r := rand.New(rand.NewPCG(rand.Uint64(), 0))
	sfx := fmt.Sprintf("%04x", r.IntN(1<<16))
	subnet := fmt.Sprintf("10.%d.%d", 100+r.IntN(100), r.IntN(256))
	lab := &netLab{t: t}
	bridge := "sebr" + sfx
	run := func(args ...string) error {
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	t.Cleanup(func() {
		for _, p := range lab.ports {
			_ = run("link", "del", p)
		}
		_ = run("link", "del", bridge)
		for _, ns := range lab.ns {
			_ = run("netns", "del", ns)
		}
	})
	if err := run("link", "add", bridge, "type", "bridge"); err != nil {
		netnsUnavailable(t, fmt.Sprintf("network namespaces: %v", err))
	}
	// The bridge has an address too: this process (the test, in the
	// namespace it started in) reaches the others' (to ask etcd's status).
	steps := [][]string{{"addr", "add", subnet + ".254/24", "dev", bridge}, {"link", "set", bridge, "up"}}
	for i := range n {
		ns, in, out := fmt.Sprintf("se%s-%d", sfx, i), fmt.Sprintf("sev%s%d", sfx, i), fmt.Sprintf("sep%s%d", sfx, i)
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
			netnsUnavailable(t, fmt.Sprintf("network namespaces: %v", err))
		}
	}
	t.Logf("network lab: bridge %s, namespaces %v, addresses %v", bridge, lab.ns, lab.ip)
	return lab
}

// cutBetween drops every packet between namespaces i and j (in i, both
// ways), leaving their links to the others up.
func (l *netLab) cutBetween(i, j int) {
	l.t.Helper()
	for _, cmd := range [][]string{
		{"add", "table", "inet", "secut"},
		{"add", "chain", "inet", "secut", "in", "{ type filter hook input priority 0; }"},
		{"add", "chain", "inet", "secut", "out", "{ type filter hook output priority 0; }"},
		{"add", "rule", "inet", "secut", "in", "ip", "saddr", l.ip[j], "drop"},
		{"add", "rule", "inet", "secut", "out", "ip", "daddr", l.ip[j], "drop"},
	} {
		args := append([]string{"netns", "exec", l.ns[i], "nft"}, cmd...)
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			l.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
}

// TestEtcdPartitionCoordinatorCutOffFromEtcd: nodes a, b, c and a
// 3-member etcd each in a network namespace of their own; a coordinates
// the counting job. a is cut off from etcd only (it still reaches b and
// c). With no renewal of its lease confirmed, a fences itself and stops
// its run (sources and sinks) before etcd expires the lease; then b and c
// see a leave and one takes the job over from the newest checkpoint. a's
// run ended before the new coordinator's began, and the result equals the
// plain loop's.
func TestEtcdPartitionCoordinatorCutOffFromEtcd(t *testing.T) {
	modes(t, func(t *testing.T) {
		lab := newNetLab(t, 4)
		e := startOwnEtcdIn(t, lab.ip[3], lab.ns[3])
		dir := t.TempDir()
		cl := "etcd-part-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		cfg := func(i int, name string) childConfig {
			return childConfig{Name: name, Cluster: cl, Host: lab.ip[i], Insecure: true, Netns: lab.ns[i], Store: t.TempDir() + "/" + name + ".db",
				Endpoints: e.endpoints, BaseKey: "/sluice-test", LeaseTTL: outageLease, FailureTimeout: testFailure,
				JobN: jobRecords, JobDir: dir, HoldSource: true, Leadership: strings.HasSuffix(t.Name(), "/leadership")}
		}
		a := startChild(t, cfg(0, "a"))
		b := startChild(t, cfg(1, "b"))
		c := startChild(t, cfg(2, "c"))
		a.event(20*time.Second, "joined", b.ID)
		a.event(20*time.Second, "joined", c.ID)
		b.event(20*time.Second, "joined", c.ID)
		runCounting(t, a, dir)
		lab.cutBetween(0, 3)
		cutAt := time.Now()
		end := a.awaitLine(30*time.Second, "the end of a's run", func(f []string) bool {
			if f[0] == "RESULT" {
				t.Fatalf("a finished its run cut off from etcd: %v", f)
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
		a.event(10*time.Second, "excluded", a.ID)
		open(b, c)
		if got := winner.jobLine(2*time.Minute, "RESULT"); got[1] != wantCounts(jobRecords) {
			t.Fatalf("result after the partition %v, want %s", got, wantCounts(jobRecords))
		}
	})
}
