package cluster

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/cluster/replication"
	"github.com/sluicehq/sluice/persistence"
)

// copyOf is one node's copy of a log, in a bbolt file of its own.
func copyOf(t *testing.T, name string) *logStore {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), name+".db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &logStore{db: db}
}

// replicate applies entries 1..last of epoch to a copy, as a leader's
// append would.
func replicate(t *testing.T, s *logStore, log string, epoch, last uint64) {
	t.Helper()
	a := replication.Append{Epoch: epoch, Seq: 1}
	for i := uint64(1); i <= last; i++ {
		a.Entries = append(a.Entries, replication.Entry{Index: i, Epoch: epoch, Data: []byte{entryClear}})
	}
	if r, err := s.receive(log, a); err != nil || r.Result != replication.OK {
		t.Fatalf("replicate: %v %v", r, err)
	}
}

// TestElectionRules: the promises behind a takeover. Each epoch is
// granted to one candidate at most, never to one whose copy is behind the
// voter's, never below a promise made; the winner takes office only in the
// epoch it won, and not once it promised a later one to another.
func TestElectionRules(t *testing.T) {
	const log = "checkpoints/job"
	b, c := copyOf(t, "b"), copyOf(t, "c")
	replicate(t, b, log, 1, 5) // both hold entries 1..5 of epoch 1 (leader a)
	replicate(t, c, log, 1, 5)

	// b and c stand at once: each promised epoch 2 to itself.
	rb, err := b.stand(log, "b")
	if err != nil || rb.Epoch != 2 || rb.LastIndex != 5 || rb.LastEpoch != 1 {
		t.Fatalf("b stands: %+v %v", rb, err)
	}
	rc, err := c.stand(log, "c")
	if err != nil || rc.Epoch != 2 {
		t.Fatalf("c stands: %+v %v", rc, err)
	}
	// Neither grants the other epoch 2: a split vote, nobody wins.
	if g, _ := c.grant(&rb); g.Granted {
		t.Fatalf("c granted b the epoch it promised itself: %+v", g)
	}
	if g, _ := b.grant(&rc); g.Granted {
		t.Fatalf("b granted c the epoch it promised itself: %+v", g)
	}
	// b stands again (epoch 3) and c grants it: b's copy is as up to date.
	rb, _ = b.stand(log, "b")
	g, err := c.grant(&rb)
	if err != nil || !g.Granted || g.Promised != 3 {
		t.Fatalf("c refused b epoch 3: %+v %v", g, err)
	}
	// The same request again (a retry) is granted again; another
	// candidate's request for epoch 3 is not, nor an older epoch.
	if g, _ := c.grant(&rb); !g.Granted {
		t.Fatalf("a retried request refused: %+v", g)
	}
	other := rb
	other.Candidate = "d"
	if g, _ := c.grant(&other); g.Granted {
		t.Fatalf("epoch 3 granted twice: %+v", g)
	}
	old := rc // epoch 2
	if g, _ := c.grant(&old); g.Granted || g.Promised != 3 {
		t.Fatalf("an older epoch granted: %+v", g)
	}
	if err := b.takeOfficeAt(log, 3, "b"); err != nil {
		t.Fatalf("b takes office in the epoch it won: %v", err)
	}
	if err := c.takeOfficeAt(log, 3, "c"); !errors.Is(err, ErrFenced) {
		t.Fatalf("c took office in epoch 3, promised to b: %v", err)
	}

	// A candidate whose copy is behind is refused, whatever its epoch.
	d := copyOf(t, "d")
	replicate(t, d, log, 1, 3)
	for range 5 { // a high epoch does not make up for missing entries
		if _, err := d.stand(log, "d"); err != nil {
			t.Fatal(err)
		}
	}
	rd, _ := d.stand(log, "d")
	if g, _ := c.grant(&rd); g.Granted {
		t.Fatalf("a copy missing entries 4..5 won c's vote: %+v", g)
	}
	// ... and an up-to-date one with a higher epoch fences b: b promised
	// epoch 3 to itself, and a grant of epoch 4 to another means b can no
	// longer take office in 3.
	rc, _ = c.stand(log, "c") // epoch 4
	if g, _ := b.grant(&rc); !g.Granted {
		t.Fatalf("b refused an up-to-date candidate a newer epoch: %+v", g)
	}
	if err := b.takeOfficeAt(log, 3, "b"); !errors.Is(err, ErrFenced) {
		t.Fatalf("b took office in epoch 3 after promising 4 to c: %v", err)
	}
}

// TestElectionCatchesUp: a copy that is up to date but promised less
// than a copy that is behind wins once it adopts the epoch it was refused
// for (claim's observe), and the one behind learns that it is (Behind)
// without raising the other's promise. Before, the two kept asking for
// epochs the other had promised, the one behind could never win, and the
// job stayed orphaned until both gave up.
func TestElectionCatchesUp(t *testing.T) {
	const log = "checkpoints/job"
	a, b := copyOf(t, "a"), copyOf(t, "b")
	replicate(t, a, log, 1, 5) // a holds the coordinator's last entry, b not
	replicate(t, b, log, 1, 4)
	var rb claimRequest
	for range 3 { // b, ranked first, stood three times: epoch 4 promised to itself
		var err error
		if rb, err = b.stand(log, "b"); err != nil {
			t.Fatal(err)
		}
	}
	g, err := a.grant(&rb)
	if err != nil || g.Granted || !g.Behind {
		t.Fatalf("a's answer to b, whose copy is behind: %+v %v (want refused, Behind)", g, err)
	}
	if g.Promised != 1 {
		t.Fatalf("a refusing a copy behind raised its promise to %d: a live leader's replica would be fenced", g.Promised)
	}
	ra, _ := a.stand(log, "a") // epoch 2: below b's promise
	g, _ = b.grant(&ra)
	if g.Granted || g.Behind || g.Promised != 4 {
		t.Fatalf("b's answer to a's epoch 2: %+v (want refused for its promise 4)", g)
	}
	if err := a.observe(log, g.Promised); err != nil {
		t.Fatal(err)
	}
	ra, _ = a.stand(log, "a")
	if ra.Epoch != 5 {
		t.Fatalf("a stands at epoch %d after hearing of 4, want 5", ra.Epoch)
	}
	if g, _ = b.grant(&ra); !g.Granted {
		t.Fatalf("b refused a, up to date, a newer epoch: %+v", g)
	}
	if err := a.takeOfficeAt(log, 5, "a"); err != nil {
		t.Fatalf("a takes office in the epoch it won: %v", err)
	}
	// observe never lowers a promise, and a raised promise alone is no
	// vote: a candidate asking for exactly that epoch is refused.
	if err := b.observe(log, 2); err != nil {
		t.Fatal(err)
	}
	if err := b.observe(log, 7); err != nil {
		t.Fatal(err)
	}
	c := claimRequest{Log: log, Epoch: 7, Candidate: "c", LastIndex: 5, LastEpoch: 1}
	if g, _ = b.grant(&c); g.Granted || g.Promised != 7 {
		t.Fatalf("an epoch raised by observe was granted as if promised: %+v", g)
	}
}

// TestLogRecords: every entry stands on its own: a run record keeps the
// newest checkpoint when it is rewritten, entries of the older kinds still
// decode, and damaged ones are errors.
func TestLogRecords(t *testing.T) {
	cp := &persistence.Checkpoint{ID: 7, Time: time.Unix(7, 0).UTC(), States: map[string][]byte{"s": {1}}, Offsets: map[string]int64{"o": 9}}
	run := &runRecord{Coordinator: "a", CoordinatorID: "a.1", Copies: []string{"a", "b", "c"}, Running: true,
		Options: runOptionsRecord{Initial: time.Second, MaxRestarts: 3}}
	data, err := encodeRecord(cp, run)
	if err != nil {
		t.Fatal(err)
	}
	ended := *run
	ended.Running = false
	again, err := carry(data, &ended) // the run ends: the checkpoint stays
	if err != nil {
		t.Fatal(err)
	}
	got, gotRun, err := decodeEntry(again)
	if err != nil || got == nil || got.ID != 7 || got.Offsets["o"] != 9 || gotRun == nil || gotRun.Running || gotRun.Options.MaxRestarts != 3 || len(gotRun.Copies) != 3 {
		t.Fatalf("carried: %+v %+v %v", got, gotRun, err)
	}
	if got, run, err := decodeEntry([]byte{entryClear}); got != nil || run != nil || err != nil {
		t.Fatalf("a clear: %v %v %v", got, run, err)
	}
	for _, bad := range [][]byte{nil, {9}, {entryRecord, 0xc1}, append([]byte{entryRecord}, data[1:len(data)/2]...)} {
		if _, _, err := decodeEntry(bad); err == nil {
			t.Errorf("entry %x decoded", bad)
		}
	}
}
