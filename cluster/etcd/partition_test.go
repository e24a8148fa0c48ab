package etcd_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cluster/internal/clustertest"
)

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
		lab := clustertest.NewNetLab(t, 4)
		e := startOwnEtcdIn(t, lab.IP[3], lab.NS[3])
		dir := t.TempDir()
		cl := "etcd-part-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		cfg := func(i int, name string) childConfig {
			return childConfig{Name: name, Cluster: cl, Host: lab.IP[i], Insecure: true, Netns: lab.NS[i], Store: t.TempDir() + "/" + name + ".db",
				Endpoints: e.endpoints, BaseKey: "/sluice-test", LeaseTTL: outageLease, FailureTimeout: testFailure,
				JobN: jobRecords, JobDir: dir, HoldSource: true, Leadership: strings.HasSuffix(t.Name(), "/leadership")}
		}
		a := startChild(t, cfg(0, "a"))
		b := startChild(t, cfg(1, "b"))
		c := startChild(t, cfg(2, "c"))
		event(a, 20*time.Second, "joined", b.ID)
		event(a, 20*time.Second, "joined", c.ID)
		event(b, 20*time.Second, "joined", c.ID)
		runCounting(t, a, dir)
		lab.CutBetween(0, 3)
		cutAt := time.Now()
		end := a.AwaitLine(30*time.Second, "the end of a's run", func(f []string) bool {
			if f[0] == "RESULT" {
				t.Fatalf("a finished its run cut off from etcd: %v", f)
			}
			return f[0] == "RUNEND"
		})
		aEnd := time.Unix(0, int64(atou(end[1])))
		why := a.Expect(10*time.Second, "JOBERROR")
		if !strings.Contains(strings.Join(why, " "), "lease") {
			t.Errorf("a's run ended with %v, want its lease", why)
		}
		winner, took := firstLine(t, 30*time.Second, "TOOKOVER", b, c)
		tookAt := time.Unix(0, int64(atou(took[4])))
		t.Logf("a stopped its run %v after the cut; %s took the job over at checkpoint %s, %v after the cut (%v after a stopped)",
			aEnd.Sub(cutAt), winner.Cfg.Name, took[3], tookAt.Sub(cutAt), tookAt.Sub(aEnd))
		if !aEnd.Before(tookAt) {
			t.Errorf("two coordinators at once: a ran until %v, %s began at %v", aEnd.Format(time.RFC3339Nano), winner.Cfg.Name, tookAt.Format(time.RFC3339Nano))
		}
		event(a, 10*time.Second, "excluded", a.ID)
		open(b, c)
		if got := winner.JobLine(2*time.Minute, "RESULT"); got[1] != wantCounts(jobRecords) {
			t.Fatalf("result after the partition %v, want %s", got, wantCounts(jobRecords))
		}
	})
}
