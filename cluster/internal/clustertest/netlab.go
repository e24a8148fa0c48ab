package clustertest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// NetLab is a set of network namespaces of the test's own, one per node,
// each with a veth pair whose other end is on one bridge: nodes in them
// talk over real sockets, and a cut takes a node's end off the bridge. The
// bridge has an address of its own (.254), so the test process, in the
// namespace it started in, reaches every namespace too.
type NetLab struct {
	// NS and IP are each namespace's name and address.
	NS, IP []string

	t     testing.TB
	ports []string // the bridge's end of each namespace's veth pair
}

// NetnsUnavailable skips the test for why, or fails it where partition
// tests are required (SLUICE_REQUIRE_NETNS=1, as .ci/run sets).
func NetnsUnavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("SLUICE_REQUIRE_NETNS") == "1" {
		t.Fatal(why + " (required: SLUICE_REQUIRE_NETNS=1)")
	}
	t.Skip(why)
}

// NewNetLab makes n namespaces, or skips the test with the reason when it
// cannot (not root, no iproute2, no namespaces in this container). The
// test's cleanup removes them. It logs the seed of its names and subnet.
func NewNetLab(t testing.TB, n int) *NetLab {
	t.Helper()
	if os.Geteuid() != 0 {
		NetnsUnavailable(t, "network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		NetnsUnavailable(t, "network namespaces need iproute2's ip (apt-get install iproute2)")
	}
	seed := rand.Uint64()
	t.Logf("network lab seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	sfx := fmt.Sprintf("%04x", r.IntN(1<<16))
	subnet := fmt.Sprintf("10.%d.%d", 100+r.IntN(100), r.IntN(256))
	lab := &NetLab{t: t}
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
		for _, ns := range lab.NS {
			_ = run("netns", "del", ns)
		}
	})
	if err := run("link", "add", bridge, "type", "bridge"); err != nil {
		NetnsUnavailable(t, fmt.Sprintf("network namespaces: %v", err))
	}
	steps := [][]string{{"addr", "add", subnet + ".254/24", "dev", bridge}, {"link", "set", bridge, "up"}}
	for i := range n {
		ns, in, out := fmt.Sprintf("sl%s-%d", sfx, i), fmt.Sprintf("slv%s%d", sfx, i), fmt.Sprintf("slp%s%d", sfx, i)
		ip := fmt.Sprintf("%s.%d", subnet, i+1)
		lab.NS, lab.IP, lab.ports = append(lab.NS, ns), append(lab.IP, ip), append(lab.ports, out)
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
			NetnsUnavailable(t, fmt.Sprintf("network namespaces: %v", err))
		}
	}
	t.Logf("network lab: bridge %s, namespaces %v, addresses %v", bridge, lab.NS, lab.IP)
	return lab
}

// CutBetween drops every packet between namespaces i and j (in i, both
// ways, with nftables), leaving their links to the others up: a partition
// that is not transitive. It skips the test when nft is missing.
func (l *NetLab) CutBetween(i, j int) {
	l.t.Helper()
	if _, err := exec.LookPath("nft"); err != nil {
		NetnsUnavailable(l.t, "a cut between two nodes needs nftables' nft (apt-get install nftables)")
	}
	for _, cmd := range [][]string{
		{"add", "table", "inet", "slcut"},
		{"add", "chain", "inet", "slcut", "in", "{ type filter hook input priority 0; }"},
		{"add", "chain", "inet", "slcut", "out", "{ type filter hook output priority 0; }"},
		{"add", "rule", "inet", "slcut", "in", "ip", "saddr", l.IP[j], "drop"},
		{"add", "rule", "inet", "slcut", "out", "ip", "daddr", l.IP[j], "drop"},
	} {
		args := append([]string{"netns", "exec", l.NS[i], "nft"}, cmd...)
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			l.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
}

// Cut takes namespace i off the bridge (both directions); Heal puts it
// back.
func (l *NetLab) Cut(i int) { l.link(i, "down") }

// Heal puts namespace i back on the bridge.
func (l *NetLab) Heal(i int) { l.link(i, "up") }

func (l *NetLab) link(i int, state string) {
	l.t.Helper()
	if out, err := exec.Command("ip", "link", "set", l.ports[i], state).CombinedOutput(); err != nil {
		l.t.Fatalf("ip link set %s %s: %v: %s", l.ports[i], state, err, out)
	}
}
