package replication_test

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cluster/replication"
	"github.com/sluicehq/sluice/supervision"
)

var update = flag.Bool("update", false, "rewrite the golden files of the scenarios")

// TestScenarios runs every testdata/*.txt script through the simulator and
// compares the trace with the .golden file beside it (go test -update
// rewrites them; review the diff).
func TestScenarios(t *testing.T) {
	scripts, _ := filepath.Glob("testdata/*.txt")
	if len(scripts) == 0 {
		t.Fatal("no scenarios in testdata")
	}
	for _, path := range scripts {
		name := strings.TrimSuffix(filepath.Base(path), ".txt")
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			s := newSim()
			for i, line := range strings.Split(string(src), "\n") {
				if err := s.run(strings.TrimSpace(line)); err != nil {
					t.Fatalf("%s:%d: %v", path, i+1, err)
				}
			}
			golden := strings.TrimSuffix(path, ".txt") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(s.out.String()), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got := s.out.String(); got != string(want) {
				t.Errorf("trace differs from %s (run with -update and review the diff):\n%s", golden, lineDiff(string(want), got))
			}
		})
	}
}

// lineDiff shows the first differing lines.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return fmt.Sprintf("line %d:\nwant %q\ngot  %q", i+1, a, b)
		}
	}
	return ""
}

var testBackoff = supervision.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Jitter: supervision.NoJitter}

func twoReplicas(last uint64) replication.State {
	var epochs []replication.EpochStart
	if last > 0 {
		epochs = []replication.EpochStart{{Epoch: 1, Start: 1}}
	}
	return replication.New(replication.Config{Replicas: []string{"a", "b"}, AckTimeout: time.Second, Backoff: testBackoff, MaxAttempts: 3},
		2, replication.LogInfo{First: 1, Last: last, Epochs: epochs})
}

func step(t *testing.T, s replication.State, evs ...replication.Event) (replication.State, []replication.Action) {
	t.Helper()
	var all []replication.Action
	for _, ev := range evs {
		before := fmt.Sprintf("%#v", s)
		next, acts := replication.Step(s, ev)
		if after := fmt.Sprintf("%#v", s); after != before {
			t.Fatalf("Step(%v) modified its input state", ev)
		}
		s = next
		all = append(all, acts...)
	}
	return s, all
}

func sends(acts []replication.Action) []replication.Send {
	var out []replication.Send
	for _, a := range acts {
		if s, ok := a.(replication.Send); ok {
			out = append(out, s)
		}
	}
	return out
}

func phase(t *testing.T, s replication.State, name string) replication.Phase {
	t.Helper()
	r, ok := s.Replica(name)
	if !ok {
		t.Fatalf("no replica %q", name)
	}
	return r.Phase
}

// syncedAt returns a leader whose replicas both hold 1..last.
func syncedAt(t *testing.T, last uint64) replication.State {
	s, acts := step(t, twoReplicas(last), replication.Start{})
	for _, snd := range sends(acts) {
		s, _ = step(t, s, replication.Acked{Replica: snd.Replica, Epoch: 2, Seq: snd.Seq, Match: last})
	}
	if phase(t, s, "a") != replication.InSync || phase(t, s, "b") != replication.InSync {
		t.Fatalf("not in sync: %v", s)
	}
	return s
}

func TestCatchUpSendsExactlyTheMissingSuffix(t *testing.T) {
	// b holds 1..4 and answers the probe at 9 with a mismatch.
	s, acts := step(t, twoReplicas(9), replication.Start{})
	probe := sends(acts)[1]
	if probe.Replica != "b" || probe.Prev != 9 || probe.To >= probe.From {
		t.Fatalf("start sent %v, want a probe of b after 9", probe)
	}
	s, acts = step(t, s, replication.Nacked{Replica: "b", Epoch: 2, Seq: probe.Seq, Prev: 9, Last: 4})
	got := sends(acts)
	if len(got) != 1 || got[0].From != 5 || got[0].To != 9 || got[0].Prev != 4 || got[0].PrevEpoch != 1 {
		t.Fatalf("after the mismatch sent %v, want entries 5..9 after 4/1", got)
	}
	s, _ = step(t, s, replication.Acked{Replica: "b", Epoch: 2, Seq: got[0].Seq, Match: 9})
	if phase(t, s, "b") != replication.InSync {
		t.Fatalf("b is %v after catching up, want in-sync", phase(t, s, "b"))
	}
}

// TestWriteDuringFirstProbe: the leader writes an entry while its first
// probe (sent when it took office, before the entry existed) is in
// flight. The probe's answer shows no progress, but it answers the latest
// append: the entry goes at once, not after the ack timeout.
func TestWriteDuringFirstProbe(t *testing.T) {
	s, acts := step(t, twoReplicas(0), replication.Start{})
	probes := sends(acts)
	s, acts = step(t, s, replication.Appended{Last: 1})
	if got := sends(acts); len(got) != 0 {
		t.Fatalf("sent %v to syncing replicas, want them to catch up after their probes", got)
	}
	for _, p := range probes {
		s, acts = step(t, s, replication.Acked{Replica: p.Replica, Epoch: p.Epoch, Seq: p.Seq, Match: 0})
		got := sends(acts)
		if len(got) != 1 || got[0].From != 1 || got[0].To != 1 {
			t.Fatalf("after %s's probe was answered: sent %v, want entry 1", p.Replica, got)
		}
		s, _ = step(t, s, replication.Acked{Replica: p.Replica, Epoch: got[0].Epoch, Seq: got[0].Seq, Match: 1})
		if phase(t, s, p.Replica) != replication.InSync {
			t.Fatalf("%s is %v, want in-sync", p.Replica, phase(t, s, p.Replica))
		}
	}
	if s.Commit != 1 {
		t.Fatalf("commit %d, want 1", s.Commit)
	}
}

func TestDuplicateAndReorderedAcks(t *testing.T) {
	s := syncedAt(t, 4)
	var acts []replication.Action
	// Three appends in flight to both replicas.
	var inflight []replication.Send
	for i := uint64(5); i <= 7; i++ {
		s, acts = step(t, s, replication.Appended{Last: i})
		inflight = append(inflight, sends(acts)...)
	}
	ack := func(snd replication.Send) replication.Event {
		return replication.Acked{Replica: snd.Replica, Epoch: snd.Epoch, Seq: snd.Seq, Match: snd.To}
	}
	// a's acks arrive in reverse order, b's twice each.
	var commits []uint64
	record := func(acts []replication.Action) {
		for _, a := range acts {
			switch a := a.(type) {
			case replication.Commit:
				commits = append(commits, a.Index)
			case replication.Transition, replication.Send:
				t.Errorf("unexpected %v", a)
			}
		}
	}
	for i := len(inflight) - 1; i >= 0; i-- {
		if inflight[i].Replica == "a" {
			s, acts = step(t, s, ack(inflight[i]))
			record(acts)
		}
	}
	if r, _ := s.Replica("a"); r.Match != 7 {
		t.Fatalf("a's match = %d after reordered acks, want 7", r.Match)
	}
	for _, snd := range inflight {
		if snd.Replica == "b" {
			s, acts = step(t, s, ack(snd), ack(snd))
			record(acts)
		}
	}
	if !slices.Equal(commits, []uint64{5, 6, 7}) {
		t.Errorf("commits %v, want 5, 6, 7 once each", commits)
	}
	// An old duplicate after everything changes nothing.
	s2, acts := step(t, s, ack(inflight[0]))
	if len(acts) != 0 || s2.Commit != 7 {
		t.Errorf("a stale duplicate ack gave %v, commit %d", acts, s2.Commit)
	}
	// An ack of another epoch is ignored.
	if _, acts := step(t, s, replication.Acked{Replica: "a", Epoch: 1, Seq: 99, Match: 7}); len(acts) != 0 {
		t.Errorf("an ack of epoch 1 gave %v", acts)
	}
}

func TestPartitionFailsAfterBudgetAndHeals(t *testing.T) {
	s := syncedAt(t, 4)
	s, acts := step(t, s, replication.Appended{Last: 5})
	timerOf := func(acts []replication.Action, r string) replication.SetTimer {
		t.Helper()
		for _, a := range acts {
			if st, ok := a.(replication.SetTimer); ok && st.Replica == r {
				return st
			}
		}
		t.Fatalf("no timer for %s in %v", r, acts)
		return replication.SetTimer{}
	}
	tm := timerOf(acts, "b")
	// a acks; b never answers.
	for _, snd := range sends(acts) {
		if snd.Replica == "a" {
			s, _ = step(t, s, replication.Acked{Replica: "a", Epoch: 2, Seq: snd.Seq, Match: 5})
		}
	}
	var path []string
	var unavailable bool
	for i := 0; i < 10 && phase(t, s, "b") != replication.Failed; i++ {
		s, acts = step(t, s, replication.TimerFired{Replica: "b", Timer: tm.Timer})
		path = append(path, phase(t, s, "b").String())
		for _, a := range acts {
			if _, ok := a.(replication.Unavailable); ok {
				unavailable = true
			}
		}
		if phase(t, s, "b") != replication.Failed {
			tm = timerOf(acts, "b")
		}
	}
	want := []string{"lagging", "retrying", "syncing", "failed"}
	if !slices.Equal(path, want) {
		t.Fatalf("b went %v, want %v", path, want)
	}
	if !unavailable || s.Commit != 4 {
		t.Errorf("after b failed: unavailable reported %v, commit %d; want true, 4", unavailable, s.Commit)
	}
	// A write while b is failed is reported unavailable at once.
	s, acts = step(t, s, replication.Appended{Last: 6})
	if !slices.ContainsFunc(acts, func(a replication.Action) bool { _, ok := a.(replication.Unavailable); return ok }) {
		t.Errorf("a write with a failed replica gave %v, want unavailable", acts)
	}
	// b's node comes back: syncing from its acknowledged index, then in sync.
	s, acts = step(t, s, replication.Reachable{Replica: "b"})
	snd := sends(acts)
	if phase(t, s, "b") != replication.Syncing || len(snd) != 1 || snd[0].From != 5 || snd[0].To != 6 {
		t.Fatalf("after reachable: b %v, sends %v; want syncing and entries 5..6", phase(t, s, "b"), snd)
	}
	s, acts = step(t, s, replication.Acked{Replica: "b", Epoch: 2, Seq: snd[0].Seq, Match: 6})
	if phase(t, s, "b") != replication.InSync || s.Commit != 5 {
		t.Errorf("after b caught up: %v, commit %d (a holds only 5)", phase(t, s, "b"), s.Commit)
	}
}

func TestStaleLeader(t *testing.T) {
	// A replica that promised epoch 3 refuses the epoch 2 leader.
	r := &replication.MemoryLog{Promise: 3}
	reply := r.Receive(replication.Append{Epoch: 2, Seq: 1, Entries: []replication.Entry{{Index: 1, Epoch: 2}}})
	if reply.Result != replication.Stale || reply.Epoch != 3 || r.Last() != 0 {
		t.Fatalf("old-epoch append: %v, log last %d; want stale epoch 3, nothing written", reply, r.Last())
	}
	// The leader steps down on hearing of it, stops its timers and ignores
	// everything afterwards.
	s := syncedAt(t, 4)
	s, acts := step(t, s, replication.Appended{Last: 5})
	s, acts = step(t, s, reply.Event("b"))
	var stops int
	var down bool
	for _, a := range acts {
		switch a := a.(type) {
		case replication.StopTimer:
			stops++
		case replication.StepDown:
			down = a.Epoch == 3
		}
	}
	if !down || stops != 2 || s.Role != replication.SteppedDown || s.NewerEpoch != 3 {
		t.Fatalf("after a rejection: %v (%d timers stopped), state %v", acts, stops, s)
	}
	for _, ev := range []replication.Event{replication.Appended{Last: 6}, replication.Acked{Replica: "a", Epoch: 2, Seq: 7, Match: 5}, replication.Start{}} {
		if _, acts := step(t, s, ev); len(acts) != 0 {
			t.Errorf("after stepping down, %v gave %v", ev, acts)
		}
	}
	// A rejection naming an older or equal epoch is stale itself.
	if _, acts := step(t, syncedAt(t, 4), replication.Rejected{Replica: "a", Epoch: 2}); len(acts) != 0 {
		t.Errorf("rejection with the leader's own epoch gave %v", acts)
	}
}

func TestDecide(t *testing.T) {
	base := func() *replication.MemoryLog {
		l := &replication.MemoryLog{Promise: 1}
		l.Entries, _ = parseLog([]string{"1..4@1"})
		return l
	}
	ents := func(spec ...string) []replication.Entry { e, _ := parseLog(spec); return e }
	cases := []struct {
		name    string
		app     replication.Append
		reply   replication.Reply
		entries string
	}{
		{"append at the end", replication.Append{Epoch: 1, Prev: 4, PrevEpoch: 1, Entries: ents("5..6@1")},
			replication.Reply{Result: replication.OK, Epoch: 1, Match: 6}, "1@1 2@1 3@1 4@1 5@1 6@1"},
		{"duplicate keeps everything", replication.Append{Epoch: 1, Prev: 1, PrevEpoch: 1, Entries: ents("2@1")},
			replication.Reply{Result: replication.OK, Epoch: 1, Match: 2}, "1@1 2@1 3@1 4@1"},
		{"gap is a mismatch", replication.Append{Epoch: 1, Prev: 6, PrevEpoch: 1, Entries: ents("7@1")},
			replication.Reply{Result: replication.Mismatch, Epoch: 1, Prev: 6, Last: 4}, "1@1 2@1 3@1 4@1"},
		{"wrong previous epoch is a mismatch", replication.Append{Epoch: 2, Prev: 4, PrevEpoch: 2},
			replication.Reply{Result: replication.Mismatch, Epoch: 2, Prev: 4, Last: 4}, "1@1 2@1 3@1 4@1"},
		{"new epoch replaces a divergent suffix", replication.Append{Epoch: 2, Prev: 2, PrevEpoch: 1, Entries: ents("3@2")},
			replication.Reply{Result: replication.OK, Epoch: 2, Match: 3}, "1@1 2@1 3@2"},
		{"reset replaces the log", replication.Append{Epoch: 2, Prev: 7, PrevEpoch: 2, Reset: true, Entries: ents("8@2")},
			replication.Reply{Result: replication.OK, Epoch: 2, Match: 8}, "8@2"},
		{"old epoch is stale", replication.Append{Epoch: 0, Prev: 4, PrevEpoch: 1, Entries: ents("5@0")},
			replication.Reply{Result: replication.Stale, Epoch: 1}, "1@1 2@1 3@1 4@1"},
		{"malformed indexes are a mismatch", replication.Append{Epoch: 1, Prev: 4, PrevEpoch: 1, Entries: ents("6@1")},
			replication.Reply{Result: replication.Mismatch, Epoch: 1, Prev: 4, Last: 4}, "1@1 2@1 3@1 4@1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := base()
			got := l.Receive(c.app)
			if got != c.reply {
				t.Errorf("reply %v, want %v", got, c.reply)
			}
			if d := describe(l); !strings.HasSuffix(d, ": "+c.entries) {
				t.Errorf("log %s, want %s", d, c.entries)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []replication.Config{
		{Replicas: []string{"a", "a"}},
		{Replicas: []string{""}},
		{Replicas: []string{"a"}, Acks: 2},
		{Replicas: []string{"a"}, AckTimeout: -1},
		{Backoff: supervision.Backoff{Multiplier: 0.5}},
	}
	for _, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: valid, want an error", c)
		}
	}
	if err := (replication.Config{Replicas: []string{"a", "b"}, Acks: 1}).Validate(); err != nil {
		t.Errorf("valid config refused: %v", err)
	}
}

// TestAddReplica: a replica added to a leader that is in sync with two
// others is probed at once, catches up on its answer (a mismatch: it holds
// nothing), then gets the new entries like the others; the commit rule
// (Acks) does not change, and adding it twice changes nothing.
func TestAddReplica(t *testing.T) {
	s := syncedAt(t, 4)
	s, acts := step(t, s, replication.AddReplica{Replica: "c"})
	probe := sends(acts)
	if len(probe) != 1 || probe[0].Replica != "c" || probe[0].Prev != 4 || probe[0].To >= probe[0].From {
		t.Fatalf("adding c sent %v, want a probe after 4", probe)
	}
	if phase(t, s, "c") != replication.Syncing {
		t.Fatalf("c is %v, want syncing", phase(t, s, "c"))
	}
	if _, again := step(t, s, replication.AddReplica{Replica: "c"}); len(again) != 0 {
		t.Fatalf("adding c twice gave %v", again)
	}
	s, acts = step(t, s, replication.Nacked{Replica: "c", Epoch: 2, Seq: probe[0].Seq, Prev: 4, Last: 0})
	got := sends(acts)
	if len(got) != 1 || got[0].From != 1 || got[0].To != 4 {
		t.Fatalf("after c's mismatch sent %v, want entries 1..4", got)
	}
	s, _ = step(t, s, replication.Acked{Replica: "c", Epoch: 2, Seq: got[0].Seq, Match: 4})
	if phase(t, s, "c") != replication.InSync {
		t.Fatalf("c is %v after catching up, want in-sync", phase(t, s, "c"))
	}
	s, acts = step(t, s, replication.Appended{Last: 5})
	to := map[string]bool{}
	for _, snd := range sends(acts) {
		to[snd.Replica] = snd.From == 5 && snd.To == 5
	}
	if !to["a"] || !to["b"] || !to["c"] {
		t.Fatalf("entry 5 went to %v, want a, b and c", to)
	}
	if len(s.Config.Replicas) != 3 {
		t.Fatalf("config replicas %v", s.Config.Replicas)
	}
}

func TestNoReplicasCommitsAtOnce(t *testing.T) {
	s := replication.New(replication.Config{}, 1, replication.LogInfo{})
	s, _ = step(t, s, replication.Start{})
	_, acts := step(t, s, replication.Appended{Last: 1})
	if !reflect.DeepEqual(acts, []replication.Action{replication.Commit{Index: 1}}) {
		t.Errorf("append without replicas gave %v, want commit 1", acts)
	}
}

// TestRandomNetworks drives leaders through random interleavings of
// deliveries, drops, duplicates, reorders, timers, partitions and a second
// leader of a newer epoch, and checks the invariants after every step:
// commits never go down; every committed entry is held, with the leader's
// epoch, by at least Acks replicas (or was superseded by a newer leader);
// a replica's entries through its acknowledged Match equal the leader's.
// Replay a failure with SLUICE_REPLICATION_SEED.
func TestRandomNetworks(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("SLUICE_REPLICATION_SEED"); v != "" {
		fmt.Sscan(v, &seed)
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	stats.rounds, stats.takeovers, stats.commits = 0, 0, 0 // of this run (go test -count)
	for round := 0; round < 200; round++ {
		randomRound(t, rng, seed, round)
		if t.Failed() {
			return
		}
	}
	t.Logf("%d rounds settled, %d with a takeover, %d entries committed", stats.rounds, stats.takeovers, stats.commits)
	if stats.rounds != 200 || stats.takeovers == 0 {
		t.Errorf("the random rounds did not exercise takeovers")
	}
}

func randomRound(t *testing.T, rng *rand.Rand, seed uint64, round int) {
	s := newSim()
	for _, r := range []string{"a", "b", "c"} {
		s.replicas[r] = &replication.MemoryLog{}
	}
	acks := 1 + rng.IntN(3)
	must := func(cmd string) {
		if err := s.run(cmd); err != nil {
			t.Fatalf("seed %d round %d: %v", seed, round, err)
		}
	}
	must(fmt.Sprintf("leader L1 epoch=1 replicas=a,b,c acks=%d batch=%d", acks, rng.IntN(3)))
	must("start L1")
	current := "L1"
	lastCommit := map[string]uint64{}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d round %d: %s\ntrace:\n%s", seed, round, fmt.Sprintf(format, args...), s.out.String())
	}
	for i := 0; i < 300; i++ {
		l := s.leaders[current]
		r := []string{"a", "b", "c"}[rng.IntN(3)]
		switch n := rng.IntN(100); {
		case n < 45 && len(s.net) > 0:
			s.deliver("")
		case n < 55:
			s.write(l, 1+rng.IntN(2), "")
		case n < 60 && len(s.net) > 0:
			must("drop")
		case n < 64 && len(s.net) > 0:
			must("dup")
		case n < 67:
			must("reorder")
		case n < 75:
			must("timer " + current + " " + r)
		case n < 79:
			if s.partitioned[r] {
				must("heal " + r)
				must("reachable " + current + " " + r)
			} else {
				must("partition " + r)
			}
		case n < 81:
			must("unreachable " + current + " " + r)
		case n < 82 && current == "L1" && acks == 3:
			// A replica takes over with a newer epoch (safe with acks =
			// all: it holds every committed entry), and the old leader
			// keeps going until it learns of it.
			must("leader L2 epoch=2 replicas=a,b,c log=" + r + " acks=3")
			must("start L2")
			current = "L2"
		}
		// Invariants.
		for name, ld := range s.leaders {
			if ld.state.Commit < lastCommit[name] {
				fail("%s's commit went down from %d to %d", name, lastCommit[name], ld.state.Commit)
			}
			lastCommit[name] = ld.state.Commit
			if ld.state.Role != replication.Leading {
				continue
			}
			for _, rep := range ld.state.Replicas {
				log := s.replicas[rep.Name]
				if log.Promise > ld.state.Epoch {
					continue // a newer leader owns it; this one will learn
				}
				for idx := max(log.BaseIndex+1, ld.log.BaseIndex+1); idx <= rep.Match; idx++ {
					got, ok1 := entry(log, idx)
					want, ok2 := entry(ld.log, idx)
					if !ok1 || !ok2 || got.Epoch != want.Epoch || string(got.Data) != string(want.Data) {
						fail("%s: replica %s entry %d = %v (%v), leader's %v (%v), match %d", name, rep.Name, idx, got, ok1, want, ok2, rep.Match)
					}
				}
			}
			if name != current {
				continue
			}
			// Every committed entry still held by the leader is on acks
			// replicas (compaction may have dropped the older ones).
			for idx := ld.log.BaseIndex + 1; idx <= ld.state.Commit; idx++ {
				want, _ := entry(ld.log, idx)
				held := 0
				for _, rn := range []string{"a", "b", "c"} {
					if got, ok := entry(s.replicas[rn], idx); ok && got.Epoch == want.Epoch {
						held++
					} else if s.replicas[rn].BaseIndex >= idx {
						held++ // compacted after the commit reached it
					}
				}
				if held < acks {
					fail("%s: entry %d committed but held by %d replicas, want %d", name, idx, held, acks)
				}
			}
		}
	}
	// Liveness: once the network heals, the current leader brings every
	// replica in sync and commits everything it wrote.
	l := s.leaders[current]
	s.partitioned = map[string]bool{}
	s.write(l, 1, "")
	for i := 0; i < 50; i++ {
		for len(s.net) > 0 {
			s.deliver("")
		}
		done := l.state.Commit == l.state.Last
		for _, rep := range l.state.Replicas {
			switch {
			case rep.Phase == replication.Retrying || rep.Phase == replication.Failed:
				s.step(l, replication.Reachable{Replica: rep.Name}, "")
				done = false
			case rep.Phase != replication.InSync:
				if t, ok := l.timers[rep.Name]; ok {
					delete(l.timers, rep.Name)
					s.step(l, replication.TimerFired{Replica: rep.Name, Timer: t.Timer}, "")
				}
				done = false
			}
		}
		if done && len(s.net) == 0 {
			stats.rounds++
			stats.commits += l.state.Commit
			if current == "L2" {
				stats.takeovers++
			}
			return
		}
	}
	fail("no progress after the network healed: %v", l.state)
}

var stats struct{ rounds, takeovers, commits uint64 }

// TestValuesNearTheLimit: epochs, indexes, commits and sequence numbers
// at or above 2^63 (up to 2^64-1) are refused by Decide, with
// ErrOutOfRange and nothing to apply, and ignored by Step: a replica's
// copy and a leader's state never wrap.
func TestValuesNearTheLimit(t *testing.T) {
	const top = ^uint64(0)
	l := &replication.MemoryLog{}
	if r := l.Receive(replication.Append{Epoch: 1, Seq: 1, Entries: []replication.Entry{{Index: 1, Epoch: 1}, {Index: 2, Epoch: 1}}}); r.Result != replication.OK || r.Match != 2 {
		t.Fatalf("a plain append: %v", r)
	}
	for _, a := range []replication.Append{
		{Epoch: top, Seq: 1, Prev: 2, PrevEpoch: 1},
		{Epoch: replication.Limit, Seq: 1, Prev: 2, PrevEpoch: 1},
		{Epoch: 2, Seq: top, Prev: 2, PrevEpoch: 1},
		{Epoch: 2, Seq: 1, Prev: top - 1, PrevEpoch: 1, Entries: []replication.Entry{{Index: top, Epoch: 2}}},
		{Epoch: 2, Seq: 1, Prev: replication.Limit - 1, PrevEpoch: 1, Entries: []replication.Entry{{Index: replication.Limit, Epoch: 2}}},
		{Epoch: 2, Seq: 1, Prev: 2, PrevEpoch: top},
		{Epoch: 2, Seq: 1, Prev: 2, PrevEpoch: 1, Commit: top},
		{Epoch: 2, Seq: 1, Prev: 2, PrevEpoch: 1, Reset: true, Commit: replication.Limit},
	} {
		d := replication.Decide(l, a)
		if !errors.Is(d.Err, replication.ErrOutOfRange) || d.Promise != 0 || d.Append != nil || d.Reset || d.Truncate {
			t.Errorf("Decide(%+v) = %+v, want only ErrOutOfRange", a, d)
		}
		l.Receive(a)
	}
	if l.Promise != 1 || l.Last() != 2 {
		t.Fatalf("the copy changed: promised %d, last %d", l.Promise, l.Last())
	}
	// Just below the limit is fine.
	if r := l.Receive(replication.Append{Epoch: replication.Limit - 1, Seq: 2, Prev: 2, PrevEpoch: 1}); r.Result != replication.OK {
		t.Errorf("epoch 2^63-1: %v", r)
	}

	s := replication.New(replication.Config{Replicas: []string{"b"}}, 3, replication.LogInfo{First: 1, Last: 2,
		Epochs: []replication.EpochStart{{Epoch: 1, Start: 1}}})
	s, _ = replication.Step(s, replication.Start{})
	for _, ev := range []replication.Event{
		replication.Acked{Replica: "b", Epoch: 3, Seq: 1, Match: top},
		replication.Acked{Replica: "b", Epoch: top, Seq: 1, Match: 2},
		replication.Nacked{Replica: "b", Epoch: 3, Seq: 1, Prev: 2, Last: top},
		replication.Rejected{Replica: "b", Epoch: top},
		replication.Rejected{Replica: "b", Epoch: replication.Limit},
		replication.Appended{Last: top},
	} {
		next, acts := replication.Step(s, ev)
		if len(acts) != 0 || !reflect.DeepEqual(next, s) {
			t.Errorf("Step(%v) = %v, %v; want no change", ev, next, acts)
		}
	}
	if _, acts := replication.Step(s, replication.Rejected{Replica: "b", Epoch: replication.Limit - 1}); len(acts) == 0 {
		t.Error("a stale answer of epoch 2^63-1 did not step the leader down")
	}
}
