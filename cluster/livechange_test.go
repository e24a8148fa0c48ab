package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/cluster/internal/clustertest"
	"github.com/sluicehq/sluice/operators"
)

// The runs a child coordinates, by job, for live changes ("input"), each
// served by an admin server of its own (the control plane of the
// coordinator's process).
var (
	runsMu sync.Mutex
	runs   = map[string]*admin.Server{}
)

// serve registers a run a child coordinates.
func serve(run *actors.Run) error {
	srv, err := admin.New(admin.Options{})
	if err != nil {
		return err
	}
	if err := srv.Add(run); err != nil {
		return err
	}
	runsMu.Lock()
	runs[run.Name()] = srv
	runsMu.Unlock()
	return nil
}

// secondGate holds the switching job's source a second time.
var secondGate = make(chan struct{})

// switchingJob is the counting job with a source held twice: at a third
// of its numbers until gate "source" opens, at two thirds until "second"
// does, so that the test switches the counters' input between stretches
// of records however fast the machine.
func switchingJob(n int64, dir string) *operators.Topology {
	t := operators.NewTopology("switching", operators.Checkpoints(100*time.Millisecond), operators.BatchSize(256))
	src := operators.Source(t, "numbers", twiceHeld{n: n, gates: [2]<-chan struct{}{sourceGate, secondGate}})
	keys := operators.Map(src, "key", clustertest.Key)
	by := operators.KeyBy(keys, "by-key", func(k string) string { return k }, operators.Parallelism(6))
	counts := operators.Count(by, "count", operators.Emit(operators.EmitAtEnd))
	clustertest.CountsSink(counts, dir)
	return t
}

// twiceHeld is 0 .. n-1, held at a third until gates[0] closes and at two
// thirds until gates[1] does.
type twiceHeld struct {
	n     int64
	gates [2]<-chan struct{}
}

func (s twiceHeld) Open(ctx context.Context, part, parts int, offset int64) (operators.Reader[int64], error) {
	r, err := operators.Generate(s.n, func(i int64) int64 { return i }).Open(ctx, part, parts, offset)
	if err != nil {
		return nil, err
	}
	per := s.n / int64(parts)
	return &twiceReader{Reader: r, holds: [2]int64{per / 3, 2 * per / 3}, gates: s.gates}, nil
}

type twiceReader struct {
	operators.Reader[int64]
	holds [2]int64
	gates [2]<-chan struct{}
}

// hold is the offset the reader may read up to now, and the gate that
// lifts it (nil: none).
func (r *twiceReader) hold() (int64, <-chan struct{}) {
	for i, g := range r.gates {
		select {
		case <-g:
			continue
		default:
			return r.holds[i], g
		}
	}
	return -1, nil
}

func (r *twiceReader) Read(buf []int64) (int, error) {
	limit, _ := r.hold()
	if limit < 0 {
		return r.Reader.Read(buf)
	}
	left := limit - r.Offset()
	if left <= 0 {
		return 0, nil // dry until the gate opens: Wait
	}
	return r.Reader.Read(buf[:min(int64(len(buf)), left)])
}

func (r *twiceReader) Wait(ctx context.Context) error {
	_, g := r.hold()
	if g == nil {
		return nil
	}
	select {
	case <-g:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// liveInput is the child's "input JOB OP POLICY CAPACITY": through the
// admin server, as the API's PUT of an input; it prints the change in
// force per node, as the job's status reports it.
func liveInput(ctx context.Context, args []string) string {
	if len(args) != 4 {
		return "INPUT-REFUSED want JOB OP POLICY CAPACITY"
	}
	runsMu.Lock()
	srv := runs[args[0]]
	runsMu.Unlock()
	if srv == nil {
		return "INPUT-REFUSED no run of " + args[0] + " here"
	}
	capacity, _ := strconv.Atoi(args[3])
	if err := srv.SetInput(ctx, "test", args[0], args[1], admin.Input{Policy: args[2], Capacity: capacity}); err != nil {
		return "INPUT-REFUSED " + strings.ReplaceAll(err.Error(), "\n", " ")
	}
	st, err := srv.Status(args[0])
	if err != nil {
		return "INPUT-REFUSED status: " + err.Error()
	}
	var nodes []string
	for _, n := range st.Nodes {
		nodes = append(nodes, fmt.Sprintf("%s=%d", n.Address, n.Change))
	}
	return "INPUT-OK " + args[0] + " " + args[1] + " " + strings.Join(nodes, ",")
}

// livePause is the child's "pause JOB OP true|false".
func livePause(ctx context.Context, args []string) string {
	if len(args) != 3 {
		return "PAUSE-REFUSED want JOB OP true|false"
	}
	runsMu.Lock()
	srv := runs[args[0]]
	runsMu.Unlock()
	if srv == nil {
		return "PAUSE-REFUSED no run of " + args[0] + " here"
	}
	if err := srv.Pause(ctx, "test", args[0], args[1], args[2] == "true"); err != nil {
		return "PAUSE-REFUSED " + err.Error()
	}
	return "PAUSE-OK " + strings.Join(args, " ")
}

// TestDistributedLiveInputChange: a counting job runs over three node
// processes, its keyed counters (6 instances) on all three. While it runs,
// the counters' input is switched Block → DropOldest → Block from the
// coordinator: each change is in force on every node (each prints it), a
// Spill (no store in common) is refused whole, the job never restarts,
// and at the end the accounting is exact: the records the source produced
// = those the counters delivered + those their inputs dropped (nothing is
// queued at the end), the counts sum to the delivered records, each key's
// count is at most the plain loop's, and equal to it when nothing was
// dropped.
func TestDistributedLiveInputChange(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes")
	}
	const n = 600_000
	a, b, c, _ := jobCluster(t)
	nodes := []*child{a, b, c}
	a.Send(fmt.Sprintf("run switching %d %s", n, t.TempDir()))
	where := placed(a, 20*time.Second)
	t.Logf("placement: %v", where)
	for _, ch := range nodes {
		if where[ch.Address] == 0 {
			t.Fatalf("node %s hosts no instance: %v", ch.Cfg.Name, where)
		}
	}
	change := 0
	// switchTo changes the counters' input and waits for every node to
	// report the change in force.
	switchTo := func(policy string, capacity int) {
		t.Helper()
		start := time.Now()
		a.Send(fmt.Sprintf("input switching count %s %d", policy, capacity))
		f := a.Expect(30*time.Second, "INPUT-")
		if f[0] != "INPUT-OK" || len(f) != 4 {
			t.Fatalf("%s: %v", policy, f)
		}
		took := time.Since(start)
		change++
		// The status names the change in force on each node.
		var want []string
		for _, ch := range nodes {
			want = append(want, fmt.Sprintf("%s=%d", ch.Address, change))
		}
		got := strings.Split(f[3], ",")
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: the status says %v, want %v", policy, got, want)
		}
		for _, ch := range nodes {
			f := ch.AwaitLine(10*time.Second, "change "+strconv.Itoa(change)+" in force", func(f []string) bool {
				return len(f) == 6 && f[0] == "CHANGED" && f[1] == "switching" && f[2] == "count" && f[3] == strconv.Itoa(change)
			})
			t.Logf("%s %d: in force on %s %v after the request (the change returned after %v)", policy, capacity, ch.Cfg.Name,
				time.Unix(0, int64(atou(f[5]))).Sub(start), took)
		}
	}
	switchTo("drop-oldest", 64)
	// A change that no node can make is refused whole and changes nothing.
	a.Send("input switching count spill 64")
	if f := a.Expect(30*time.Second, "INPUT-"); f[0] != "INPUT-REFUSED" || !strings.Contains(strings.Join(f, " "), "spill") {
		t.Fatalf("spill: %v", f)
	}
	// Sources run in the coordinator's process: pausing one is local.
	for _, cmd := range []string{"pause switching numbers true", "pause switching numbers false"} {
		a.Send(cmd)
		if f := a.Expect(30*time.Second, "PAUSE-"); f[0] != "PAUSE-OK" {
			t.Fatalf("%s: %v", cmd, f)
		}
	}
	openGates("source", a) // the second third flows under DropOldest
	switchTo("block", 1024)
	openGates("second", a) // the last third under Block
	a.Expect(120*time.Second, "RUNEND")
	var in, dropped, produced int64 = -1, -1, -1
	for range 8 { // one STAT line per operator
		f, ok := a.Await(10*time.Second, "STAT ")
		if !ok {
			break
		}
		switch f[1] {
		case "count":
			in, dropped = int64(atou(f[2])), int64(atou(f[4]))
		case "key": // what the counters were sent
			produced = int64(atou(f[3]))
		}
	}
	restarts := a.Expect(10*time.Second, "RESTARTS")
	if restarts[1] != "0" {
		t.Errorf("the job restarted: %v", restarts)
	}
	result := a.Expect(10*time.Second, "RESULT")
	t.Logf("produced %d, counted %d, dropped %d", produced, in, dropped)
	if produced != n || in+dropped != produced {
		t.Fatalf("produced %d, counted %d + dropped %d = %d", produced, in, dropped, in+dropped)
	}
	want := map[string]int64{}
	for _, kv := range strings.Split(clustertest.WantCounts(n), ",") {
		k, v, _ := strings.Cut(kv, "=")
		want[k] = int64(atou(v))
	}
	var sum int64
	for _, kv := range strings.Split(result[1], ",") {
		k, v, _ := strings.Cut(kv, "=")
		got := int64(atou(v))
		sum += got
		if got > want[k] {
			t.Errorf("key %s counted %d, more than the %d it has", k, got, want[k])
		}
	}
	if sum != in {
		t.Errorf("the counts sum to %d, the counters delivered %d", sum, in)
	}
	if dropped == 0 && result[1] != clustertest.WantCounts(n) {
		t.Errorf("nothing dropped, yet the result is not the plain loop's")
	}
}
