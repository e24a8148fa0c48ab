package cluster_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/cluster/internal/clustertest"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/operators"
)

// The distributed-job tests: three child processes form a cluster; one
// coordinates a counting topology whose keyed counters are spread over all
// three, and a non-coordinator is SIGKILLed mid-stream.

const jobRecords = 3_000_000

// heldSource is clustertest.HeldSource, held on sourceGate unless it
// names a gate of its own.
func heldSource(n, hold int64, gate <-chan struct{}) clustertest.HeldSource {
	if gate == nil {
		gate = sourceGate
	}
	return clustertest.HeldSource{N: n, Hold: hold, Gate: gate}
}

// openGates opens the named gate in each child and waits until each says
// so.
func openGates(name string, children ...*child) {
	for _, ch := range children {
		ch.Send("open " + name)
	}
	for _, ch := range children {
		ch.Expect(10*time.Second, "OPENED")
	}
}

// jobN and jobDir parameterise the "counting" job in a child process:
// every node builds the same topology; only the coordinator's sink writes.
var (
	jobN   int64 = jobRecords
	jobDir       = os.TempDir()
)

func testJobs() cluster.Jobs {
	return cluster.Jobs{
		"counting":     func() *operators.Topology { return clustertest.CountingJob(jobN, jobDir, sourceGate) },
		"backpressure": func() *operators.Topology { return slowJob(jobN, jobDir) },
		"dropping":     func() *operators.Topology { return droppingJob(jobN, jobDir) },  // policy_test.go
		"poisoned":     func() *operators.Topology { return poisonedJob(jobN, jobDir) },  // poison_test.go
		"switching":    func() *operators.Topology { return switchingJob(jobN, jobDir) }, // livechange_test.go
	}
}

// Gates the test opens in a child (command "open NAME"): sourceGate holds
// the counting job's source half way (see heldSource); slowGate holds the
// slow operators of the "backpressure" and "dropping" jobs: an operator
// that takes no record in until then is slower than any source, at any
// machine speed.
var (
	sourceGate, slowGate, dropGate = make(chan struct{}), make(chan struct{}), make(chan struct{})
	gates                          = map[string]func(){
		"source": sync.OnceFunc(func() { close(sourceGate) }),
		"slow":   sync.OnceFunc(func() { close(slowGate) }),
		"drop":   sync.OnceFunc(func() { close(dropGate) }),   // the dropping job's source (policy_test.go)
		"second": sync.OnceFunc(func() { close(secondGate) }), // the switching job's second hold (livechange_test.go)
	}
)

// slowJob is countingJob with an operator of its own between the source
// and the keys that waits for the gate, small batches and small mailboxes:
// the source runs out of credits while the gate is closed.
func slowJob(n int64, dir string) *operators.Topology {
	t := operators.NewTopology("backpressure", operators.Checkpoints(100*time.Millisecond), operators.BatchSize(16), operators.Capacity(64))
	src := operators.Source(t, "numbers", operators.Generate(n, func(i int64) int64 { return i }))
	keys := operators.Map(src, "slow", func(v int64) string {
		<-slowGate
		return "k" + strconv.Itoa(int(v*7%23))
	}, operators.NoFusion())
	by := operators.KeyBy(keys, "by-key", func(k string) string { return k }, operators.Parallelism(2))
	counts := operators.Count(by, "count", operators.Emit(operators.EmitAtEnd))
	operators.Sink(counts, "out", operators.File(filepath.Join(dir, "counts"), func(kv operators.KV[string, int64]) string {
		return fmt.Sprintf("%s=%d", kv.Key, kv.Value)
	}), operators.Parallelism(1))
	return t
}

// wantCounts is the plain loop's answer.
func wantCounts(n int64) string { return clustertest.WantCounts(n) }

// runJob runs a distributed job with this node as coordinator (command
// "run JOB N DIR"): it prints PLACED <address> <instances> for the first
// generation, JOBACTOR <the job actor's id>, CHECKPOINT <id> as checkpoints complete, then RESTARTS <n>
// and RESULT <sorted lines of the output>, or JOBERROR <error>. With a
// fourth argument "off", the coordinator hosts only sources and sinks.
func runJob(n *cluster.Node, args []string, say func(string, ...any)) {
	jobN, _ = strconv.ParseInt(args[1], 10, 64)
	jobDir = args[2]
	ctx := context.Background()
	run, err := cluster.Run(ctx, n, args[0], cluster.RunOptions{OffCoordinator: len(args) > 3 && args[3] == "off"})
	if err != nil {
		say("JOBERROR %v", err)
		return
	}
	if err := serve(run); err != nil { // livechange_test.go
		say("JOBERROR %v", err)
	}
	for addr, count := range engine.PlacementOf(run) {
		say("PLACED %s %d", addr, count)
	}
	if pid := engine.JobActorOf(run); pid != nil {
		say("JOBACTOR %s", pid.Id)
	}
	if at := engine.AddressOf(run, "slow", 0); at != "" {
		say("SLOW-AT %s", at)
	}
	clustertest.Report(run, jobDir, say)
}

// jobCluster starts three child nodes a (the coordinator), b and c; opts
// adjust their configurations.
func jobCluster(t *testing.T, opts ...func(*childConfig)) (a, b, c *child, cfg func(string, ...string) childConfig) {
	cl := "job-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cfg = func(name string, peers ...string) childConfig {
		c := childConfig{Name: name, Cluster: cl, Peers: peers, Store: storeIn(t, name), FailureTimeout: procFailureTimeout, Replicas: -1,
			HoldSource: true}
		for _, o := range opts {
			o(&c)
		}
		return c
	}
	a = startChild(t, cfg("a"))
	b = startChild(t, cfg("b", a.Address))
	c = startChild(t, cfg("c", a.Address))
	a.AwaitAll(10*time.Second, "EVENT joined b", "EVENT joined c")
	b.AwaitAll(10*time.Second, "EVENT joined c")
	return a, b, c, cfg
}

// survivor is the one of b and c that is not the victim.
func survivor(victim, b, c *child) *child {
	if victim == b {
		return c
	}
	return b
}

// placed reads the PLACED lines of a run (one per process, up to three).
func placed(a *child, d time.Duration) map[string]int {
	out := map[string]int{}
	f := a.Expect(d, "PLACED")
	out[f[1]] = int(atou(f[2]))
	for len(out) < 3 {
		f, ok := a.Await(200*time.Millisecond, "PLACED")
		if !ok {
			break
		}
		out[f[1]] = int(atou(f[2]))
	}
	return out
}

// TestDistributedJobSurvivesKill: a counting job runs over three
// processes with checkpoints; a non-coordinator that hosts counters is
// SIGKILLed mid-stream. The job restarts on the survivors from its last
// checkpoint and its result equals the plain loop's exactly.
func TestDistributedJobSurvivesKill(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes")
	}
	a, b, c, _ := jobCluster(t)
	want := wantCounts(jobRecords)
	a.Send(fmt.Sprintf("run counting %d %s", jobRecords, t.TempDir()))
	where := placed(a, 20*time.Second)
	t.Logf("placement: %v", where)
	victim := b
	if where[b.Address] == 0 {
		victim = c
	}
	if where[victim.Address] == 0 {
		t.Fatalf("no instance on b or c: %v", where)
	}
	a.AwaitLine(30*time.Second, "checkpoint 3", func(f []string) bool { return len(f) == 2 && f[0] == "CHECKPOINT" && atou(f[1]) >= 3 })
	victim.Kill()
	t.Logf("killed %s", victim.Cfg.Name)
	openGates("source", a, survivor(victim, b, c))
	f := a.JobLine(2*time.Minute, "RESTARTS")
	if f[1] == "0" {
		t.Fatalf("the job finished before the kill landed (%v): make it longer", f)
	}
	t.Logf("restarts %s, restored from checkpoint %s", f[1], f[2])
	got := a.Expect(10*time.Second, "RESULT")
	if len(got) != 2 || got[1] != want {
		t.Fatalf("result after the kill:\n%v\nwant the plain loop's\n%s", got, want)
	}
}

// TestDistributedJobKilledNodeRejoins: after a node hosting counters is
// killed and the job has gone on without it, the node restarts on its
// port, rejoins, and the next run of the job places instances on it again;
// that run's result is exact too.
func TestDistributedJobKilledNodeRejoins(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes")
	}
	a, b, c, cfg := jobCluster(t)
	want := wantCounts(jobRecords)
	a.Send(fmt.Sprintf("run counting %d %s", jobRecords, t.TempDir()))
	where := placed(a, 20*time.Second)
	victim := b
	if where[b.Address] == 0 {
		victim = c
	}
	a.AwaitLine(30*time.Second, "checkpoint 2", func(f []string) bool { return len(f) == 2 && f[0] == "CHECKPOINT" && atou(f[1]) >= 2 })
	port, store := victim.Port(), victim.Cfg.Store
	victim.Kill()
	a.AwaitLine(10*time.Second, "the victim's departure", func(f []string) bool {
		return len(f) == 4 && f[0] == "EVENT" && f[1] == "left" && f[3] == victim.ID
	})
	openGates("source", a, survivor(victim, b, c)) // the first run goes on without the victim
	if got := a.Expect(2*time.Minute, "RESULT"); got[1] != want {
		t.Fatalf("first run: %v, want %s", got, want)
	}
	// The first run printed everything before its RESULT: the waits for
	// the second run look only at what comes after.
	a.SkipTo(a.LastMatch() + 1)

	again := cfg(victim.Cfg.Name, a.Address)
	again.Port, again.Store = port, store
	back := startChild(t, again)
	a.AwaitLine(20*time.Second, "the victim's return", func(f []string) bool {
		return len(f) == 4 && f[0] == "EVENT" && f[1] == "joined" && f[3] == back.ID // not its first incarnation's join
	})
	a.Send(fmt.Sprintf("run counting %d %s", jobRecords/3, t.TempDir()))
	where = placed(a, 20*time.Second)
	t.Logf("second run's placement: %v", where)
	if where[back.Address] == 0 {
		t.Fatalf("the restarted node hosts nothing: %v", where)
	}
	r := a.Expect(2*time.Minute, "RESTARTS")
	t.Logf("second run: %s restarts", r[1])
	if got := a.Expect(10*time.Second, "RESULT"); got[1] != wantCounts(jobRecords/3) {
		t.Fatalf("second run: %v, want %s", got, wantCounts(jobRecords/3))
	}
}

// TestDistributedBackPressure: the only consumer of the source runs on
// another node and takes nothing in until the test opens its gate; the
// source must run out of credits (it waits, having sent fewer than all
// its records), and once the gate opens the result is exact.
func TestDistributedBackPressure(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes")
	}
	a, b, c, _ := jobCluster(t)
	const n = 4000
	a.Send(fmt.Sprintf("run backpressure %d %s off", n, t.TempDir()))
	at := a.Expect(20*time.Second, "SLOW-AT")
	if at[1] == a.Address {
		t.Fatalf("the slow operator runs on the coordinator (%s): the test needs it elsewhere", at[1])
	}
	w := a.JobLine(time.Minute, "SOURCE-WAITING")
	if sent := atou(w[1]); sent >= n {
		t.Fatalf("the source sent all %d records before it waited: credits do not hold it back", sent)
	}
	openGates("slow", a, b, c)
	blocked := a.JobLine(time.Minute, "SOURCE-BLOCKED")
	if got := a.Expect(10*time.Second, "RESULT"); got[1] != wantCounts(n) {
		t.Fatalf("result %v, want %s", got, wantCounts(n))
	}
	t.Logf("the slow operator ran on %s; the source waited after %s of %d records, for %v in all",
		at[1], w[1], n, time.Duration(atou(blocked[1])))
}

// TestDistributedJobCoordinatorKilled: the coordinator of a counting job
// (its job actor, source and sink) is SIGKILLed mid-stream. One of the two
// survivors, elected by the copies of the job's log, takes the job over
// from the newest checkpoint, which is at least the last one the
// coordinator reported; the other does not; the result (written by the new
// coordinator's sink into the shared folder) equals the plain loop's.
func TestDistributedJobCoordinatorKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes")
	}
	a, b, c, f := countingOnThree(t)
	want := wantCounts(jobRecords)
	a.Kill()
	// a may have completed a later checkpoint than it reported.
	reported := atou(f[1])
	for _, line := range a.SeenLines() {
		if g := strings.Fields(line); len(g) == 2 && g[0] == "CHECKPOINT" {
			reported = max(reported, atou(g[1]))
		}
	}
	winner, took := firstLine(t, 20*time.Second, "TOOKOVER", b, c)
	loser := b
	if winner == b {
		loser = c
	}
	openGates("source", b, c)
	t.Logf("%s took the job over from %s at checkpoint %s (a reported %d)", winner.Cfg.Name, took[2], took[3], reported)
	if took[1] != "counting" || took[2] != "a" {
		t.Fatalf("took over %v, want counting from a", took)
	}
	if cp := atou(took[3]); cp < reported {
		t.Fatalf("resumed from checkpoint %d, older than checkpoint %d the coordinator completed", cp, reported)
	}
	r := winner.JobLine(2*time.Minute, "RESTARTS")
	t.Logf("after the takeover: %s restarts", r[1])
	if got := winner.Expect(10*time.Second, "RESULT"); len(got) != 2 || got[1] != want {
		t.Fatalf("result after the coordinator's kill:\n%v\nwant the plain loop's\n%s", got, want)
	}
	for _, line := range loser.SeenLines() {
		if strings.HasPrefix(line, "TOOKOVER") {
			t.Fatalf("both survivors took the job over: %s said %q", loser.Cfg.Name, line)
		}
	}
}

// countingOnThree starts three nodes that can all run the counting job
// (its sink writes into one shared folder) and runs it with a as the
// coordinator until checkpoint 3 has completed; it returns a's CHECKPOINT
// line.
func countingOnThree(t *testing.T) (a, b, c *child, cp []string) {
	dir := t.TempDir()
	a, b, c, _ = jobCluster(t, func(c *childConfig) { c.JobN, c.JobDir = jobRecords, dir })
	a.Send(fmt.Sprintf("run counting %d %s", jobRecords, dir))
	t.Logf("placement: %v", placed(a, 20*time.Second))
	cp = a.AwaitLine(30*time.Second, "checkpoint 3", func(f []string) bool { return len(f) == 2 && f[0] == "CHECKPOINT" && atou(f[1]) >= 3 })
	return a, b, c, cp
}

// firstLine waits for the first of the children to print a line starting
// with prefix, and returns it with the line's fields.
func firstLine(t *testing.T, d time.Duration, prefix string, children ...*child) (*child, []string) {
	t.Helper()
	return clustertest.First(t, d, prefix, children...)
}

// TestDistributedJobPausedCoordinatorFenced: the coordinator is paused
// (SIGSTOP) long enough for the others to declare it lost; a survivor
// takes the job over. When the old coordinator resumes, it learns it was
// excluded and stops its own run of the job (a zombie must not go on);
// the survivor's result equals the plain loop's.
func TestDistributedJobPausedCoordinatorFenced(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes")
	}
	a, b, c, _ := countingOnThree(t)
	want := wantCounts(jobRecords)
	a.Pause()
	winner, took := firstLine(t, 20*time.Second, "TOOKOVER", b, c)
	a.Resume()
	t.Logf("%s took the job over at checkpoint %s while a was paused", winner.Cfg.Name, took[3])
	f := a.AwaitLine(30*time.Second, "the old coordinator's run to stop", func(f []string) bool {
		if f[0] == "RESULT" {
			t.Fatalf("the paused coordinator finished its run: %v", f)
		}
		return f[0] == "JOBERROR"
	})
	t.Logf("a: %s", strings.Join(f, " "))
	openGates("source", b, c)
	got := winner.JobLine(2*time.Minute, "RESULT")
	if len(got) != 2 || got[1] != want {
		t.Fatalf("result after the takeover:\n%v\nwant the plain loop's\n%s", got, want)
	}
	// a may have stopped its run on its own lease before the others'
	// answers told it it was excluded: the exclusion comes, in either order.
	if _, err := a.Find(30*time.Second, func(f []string) bool { return len(f) >= 2 && f[0] == "EVENT" && f[1] == "excluded" }); err != nil {
		t.Errorf("a was never told it was excluded (%v):\n%s", err, strings.Join(a.SeenLines(), "\n"))
	}
}

// TestDistributedJobTwoFailovers: the coordinator is killed and a survivor
// takes the job over; the killed node restarts (a new member id and port,
// its old store) and the new coordinator makes it a copy of the job's log again;
// then the new coordinator is killed too, and one of the two others takes
// the job over in turn. The result equals the plain loop's.
func TestDistributedJobTwoFailovers(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes")
	}
	const n = 2 * jobRecords
	dir := t.TempDir()
	a, b, c, cfg := jobCluster(t, func(c *childConfig) { c.JobN, c.JobDir = n, dir })
	a.Send(fmt.Sprintf("run counting %d %s", n, dir))
	placed(a, 20*time.Second)
	a.AwaitLine(30*time.Second, "checkpoint 3", func(f []string) bool { return len(f) == 2 && f[0] == "CHECKPOINT" && atou(f[1]) >= 3 })
	store := a.Cfg.Store
	a.Kill()
	first, took := firstLine(t, 20*time.Second, "TOOKOVER", b, c)
	other := b
	if first == b {
		other = c
	}
	t.Logf("%s took the job over from a at checkpoint %s", first.Cfg.Name, took[3])

	// On another port: protoactor's connections to the old address can
	// fail the new one's for a while (see the package doc).
	again := cfg("a", first.Address)
	again.Store = store
	back := startChild(t, again)
	first.AwaitLine(20*time.Second, "a's return", func(f []string) bool {
		return len(f) == 4 && f[0] == "EVENT" && f[1] == "joined" && f[3] == back.ID // not the first a's join
	})
	first.SkipTo(first.LastMatch() + 1)
	checkpoints := 0 // two more: entries that name a as a copy, replicated to it
	f := first.AwaitLine(30*time.Second, "two checkpoints after a's return", func(f []string) bool {
		if f[0] == "RESULT" || f[0] == "JOBERROR" {
			t.Fatalf("the job ended before the second kill (%v): make it longer", f)
		}
		if f[0] == "CHECKPOINT" {
			checkpoints++
		}
		return checkpoints >= 2
	})
	first.Kill()
	t.Logf("killed %s after checkpoint %s", first.Cfg.Name, f[1])
	second, took := firstLine(t, 30*time.Second, "TOOKOVER", other, back)
	if took[2] != first.Cfg.Name {
		t.Fatalf("%s took the job over from %s, want from %s", second.Cfg.Name, took[2], first.Cfg.Name)
	}
	if cp := atou(took[3]); cp < atou(f[1]) {
		t.Fatalf("resumed from checkpoint %d, older than checkpoint %s the second coordinator completed", cp, f[1])
	}
	t.Logf("%s took the job over from %s at checkpoint %s", second.Cfg.Name, first.Cfg.Name, took[3])
	openGates("source", other, back)
	got := second.JobLine(2*time.Minute, "RESULT")
	if want := wantCounts(n); len(got) != 2 || got[1] != want {
		t.Fatalf("result after two failovers:\n%v\nwant the plain loop's\n%s", got, want)
	}
}
